"""llama.cpp's RPC server, as its rpc-server program runs it (ggml's own ggml_backend_rpc_start_server, on
this machine's CPU device), for the --rpc tests: ``python -m tests.rpc_server HOST:PORT [THREADS]``. It
serves until it is killed."""

from __future__ import annotations

import ctypes
import sys

from app.engine.llama.ggml import GGML_DEVICE_CPU, backend_function, ggml_library, load_ggml_backends

START_SERVER_ARGS = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                     ctypes.POINTER(ctypes.c_void_p)]


def main(endpoint: str, threads: int) -> None:
    load_ggml_backends()
    start_server = backend_function("RPC", "ggml_backend_rpc_start_server", None, START_SERVER_ARGS)
    devices = (ctypes.c_void_p * 1)(ggml_library().ggml_backend_dev_by_type(GGML_DEVICE_CPU))
    print(f"rpc-server on {endpoint}", flush=True)
    start_server(endpoint.encode(), None, threads, 1, devices)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
