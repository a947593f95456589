"""The disconnect probe tells a gone client from a present one, on any descriptor number: select()
refused those of 1,024 and above, and every generation of a busy server was cancelled as 'client gone'."""

from __future__ import annotations

import os
import resource
import socket
import threading
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


def test_many_threads_may_ask_at_once() -> None:
    """The instances of one predict share their request's check from a pool of threads."""
    server, client = socket.socketpair()
    gone = disconnect_probe({"gunicorn.socket": server})
    answers: list[bool] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            answers.extend(gone() for _ in range(300))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(answers) == 16 * 300 and not any(answers)
    client.close()
    server.close()
