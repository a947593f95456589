"""Noticing that a client went away, so that its job can be cancelled."""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Mapping
from typing import Any


def _never() -> bool:
    return False


def disconnect_probe(environ: Mapping[str, Any]) -> Callable[[], bool]:
    """A check that is true once the peer has closed the connection (gunicorn exposes the socket,
    or the worker's wrapper of it: anything with ``fileno`` and ``recv``).

    A readable socket with nothing to read is a closed one; pipelined bytes mean the client is still
    there. Readiness comes from poll(), which takes any descriptor: select() refuses those of 1,024
    and above, and a busy server that reached them took every client for gone.
    """
    sock: Any = environ.get("gunicorn.socket")
    if not (callable(getattr(sock, "fileno", None)) and callable(getattr(sock, "recv", None))):
        return _never

    def closed() -> bool:
        try:
            # a poll object of its own each time: the instances of one predict share this check from
            # several threads, and one poll object refuses concurrent calls
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            if not poller.poll(0):
                return False
            return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    return closed
