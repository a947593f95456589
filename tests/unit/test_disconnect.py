"""The disconnect probe tells a gone client from a present one, on any descriptor number: select()
refused those of 1,024 and above, and every generation of a busy server was cancelled as 'client gone'."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from app.http.disconnect import disconnect_probe

HIGH = 1500  # past select()'s FD_SETSIZE


@pytest.fixture
def pair_at_high_descriptor() -> Iterator[tuple[socket.socket, socket.socket]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, HIGH + 100), hard))
    server, client = socket.socketpair()
    os.dup2(server.fileno(), HIGH)
    server.close()
    high = socket.socket(fileno=HIGH)
    try:
        yield high, client
    finally:
        high.close()
        client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("number", ["low", "high"])
def test_the_probe_sees_a_present_client_then_a_gone_one(number: str,
                                                         pair_at_high_descriptor: tuple[socket.socket, socket.socket]
                                                         ) -> None:
    server, client = pair_at_high_descriptor if number == "high" else socket.socketpair()
    assert (server.fileno() >= 1024) == (number == "high")
    gone = disconnect_probe({"gunicorn.socket": server})
    assert not gone()  # connected, nothing sent
    client.send(b"GET / HTTP/1.1\r\n")  # a pipelined request: still there
    assert not gone()
    server.recv(64)  # read, as the worker reads the next request
    client.close()
    assert gone()
    server.close()
