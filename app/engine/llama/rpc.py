"""ggml's RPC backend (``--rpc HOST:PORT,...``): the devices of llama.cpp's ``rpc-server`` on other
machines, registered with ggml before the model loads, as llama-server's ``add_rpc_devices`` does. They
are offload devices like a GPU: ``-ngl`` puts layers on them, ``--list-devices`` lists them (``RPC0``,
``RPC1``, ... in the order given), ``--device`` and ``--override-tensor`` name them.

ggml's client aborts the process when a server cannot be reached, so each endpoint is first connected
to here and refused by name when nothing answers there."""

from __future__ import annotations

import ctypes
import logging
import socket
import threading

from app.engine.errors import ModelLoadError
from app.engine.llama.config import split_endpoint
from app.engine.llama.ggml import backend_function, ggml_library

log = logging.getLogger("app.engine.llama")

CONNECT_SECONDS = 10.0
_added: set[str] = set()  # endpoints registered in this process (ggml keeps them for its lifetime)
_lock = threading.Lock()


def _reachable(endpoint: str) -> None:
    host, port = split_endpoint(endpoint)
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ModelLoadError(f"--rpc {endpoint}: no rpc-server answers there ({exc.strerror or exc})") from None


def add_rpc_servers(endpoints: tuple[str, ...]) -> None:
    """Register each server's devices with ggml (once a process); ModelLoadError naming the one that
    cannot be used, or a build without the RPC backend."""
    if not endpoints:
        return
    with _lock:
        try:
            add_server = backend_function("RPC", "ggml_backend_rpc_add_server", ctypes.c_void_p, [ctypes.c_char_p])
        except ModelLoadError:
            raise ModelLoadError("--rpc: this llama.cpp build has no RPC backend (build llama-cpp-python with "
                                 "-DGGML_RPC=ON: bash scripts/dev.sh install does)") from None
        ggml = ggml_library()
        for endpoint in endpoints:
            if endpoint in _added:
                continue
            _reachable(endpoint)
            server = add_server(endpoint.encode())
            if not server:
                raise ModelLoadError(f"--rpc {endpoint}: the rpc-server there offers no device")
            ggml.ggml_backend_register(server)
            _added.add(endpoint)
            log.info("--rpc %s: %d device(s) registered", endpoint, ggml.ggml_backend_reg_dev_count(server))
