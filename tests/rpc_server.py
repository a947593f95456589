"""llama.cpp's RPC server, as its rpc-server program runs it (ggml's own ggml_backend_rpc_start_server, on
this machine's CPU device), for the --rpc tests: ``python -m tests.rpc_server HOST:PORT [THREADS]``. It
serves until it is killed."""

from __future__ import annotations

import ctypes
import sys

from app.engine.llama.ggml import GGML_DEVICE_CPU, ggml_library, load_ggml_backends

StartServer = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.POINTER(ctypes.c_void_p))


def main(endpoint: str, threads: int) -> None:
    load_ggml_backends()
    ggml = ggml_library()
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    registry = ggml.ggml_backend_reg_by_name(b"RPC")
    address = ggml.ggml_backend_reg_get_proc_address(registry, b"ggml_backend_rpc_start_server") if registry else 0
    if not address:
        sys.exit("this llama.cpp build has no RPC backend")
    devices = (ctypes.c_void_p * 1)(ggml.ggml_backend_dev_by_type(GGML_DEVICE_CPU))
    print(f"rpc-server on {endpoint}", flush=True)
    StartServer(address)(endpoint.encode(), None, threads, 1, devices)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
