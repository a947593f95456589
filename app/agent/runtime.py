"""``--tools-runtime``: where every tool call runs unless a call's ``x-tool-runtime`` says otherwise.

``docker:IMAGE`` / ``podman:IMAGE`` start a container here (``run --rm -i IMAGE sh``: its shell waits on
stdin, so closing that stops it and ``--rm`` removes it), started again if it dies; ``*-container:ID`` and
``ssh:HOST`` name a target that exists already and are only checked at start-up."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from app.agent.tool_io import make_io, parse_container

log = logging.getLogger(__name__)

START_SECONDS = 60.0  # a container's start (an image pull included)


class RuntimeError_(Exception):
    """A runtime that cannot be started: the start stops, naming it."""


class Runtime:
    """A target that needs no lifecycle: its spec is passed through."""

    def __init__(self, spec: str) -> None:
        self._spec = spec

    def spec(self) -> str:
        return self._spec

    def close(self) -> None:
        return None


class ContainerRuntime(Runtime):
    """A container of our own, started from an image."""

    def __init__(self, engine: str, image: str) -> None:
        super().__init__("")
        if not image:
            raise RuntimeError_(f"--tools-runtime {engine}:<image> requires an image name")
        self.engine, self.image = engine, image
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._container = ""
        self._start()

    def _start(self) -> None:
        cidfile = os.path.join(tempfile.mkdtemp(prefix="tools-runtime-"), "cid")
        argv = [self.engine, "run", "--rm", "-i", "--cidfile", cidfile, self.image, "sh"]
        try:
            self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE)
        except OSError as exc:
            raise RuntimeError_(f"failed to spawn {self.engine} container for tools runtime (image: {self.image}): "
                                f"{exc}") from None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and self._process.poll() is None:
            if os.path.exists(cidfile) and (cid := Path(cidfile).read_text(encoding="utf-8").strip()):
                self._container = cid
                log.info("tools runtime: %s container %s (image %s)", self.engine, cid[:12], self.image)
                return
            time.sleep(0.1)
        self.close()
        raise RuntimeError_(f"timed out waiting for {self.engine} container to start (image: {self.image})")

    def spec(self) -> str:
        """A running container's spec (started again if it died)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                log.warning("%s tools runtime container %s died, respawning", self.engine, self._container[:12])
                self._start()
            return f"{self.engine}-container:{self._container}"

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()


def make_runtime(spec: str, root: str) -> Runtime | None:
    """The runtime ``--tools-runtime`` names; None for the host. A bad spec stops the start."""
    if not spec:
        return None
    container = parse_container(spec)
    if container is not None and not container[2]:
        return ContainerRuntime(container[0], container[1])
    try:
        make_io(spec, "", root)
    except Exception as exc:
        raise RuntimeError_(f"--tools-runtime: {exc}") from None
    return Runtime(spec)
