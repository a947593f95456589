"""Run a built image the way a container platform runs it, with whichever tool this machine has
(``scripts/image.sh tool``): docker or podman (``run --network host``), or buildah, which runs the
image's own ENTRYPOINT, environment, user and working directory with ``buildah run --isolation
chroot`` on the host's network. Signals go to the container's first process, as a platform sends
SIGTERM to stop it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "VERTEX_LLAMA_CONTAINER"  # set in each container's environment, to find its processes


def container_tool() -> str:
    tool = os.environ.get("CONTAINER_TOOL")
    if tool:
        return tool
    done = subprocess.run(["bash", str(ROOT / "scripts/image.sh"), "tool"], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def image_config(tool: str, image: str) -> dict[str, object]:
    """The image's OCI config (Entrypoint, Env, User, WorkingDir, Labels)."""
    if tool == "buildah":  # its templates have no json function: the whole description, then its config
        done = subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True, text=True,
                              check=True)
        config: dict[str, object] = json.loads(done.stdout)["OCIv1"]["config"]
        return config
    done = subprocess.run([tool, "image", "inspect", image], capture_output=True, text=True, check=True)
    described = json.loads(done.stdout)
    config = (described[0] if isinstance(described, list) else described)["Config"]
    return config


@dataclass
class Container:
    tool: str
    image: str
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def main_pid(self) -> int:
        """The host pid of the container's first process (its ENTRYPOINT)."""
        if self.tool != "buildah":
            done = subprocess.run([self.tool, "inspect", "--format", "{{.State.Pid}}", self.name],
                                  capture_output=True, text=True, check=True)
            return int(done.stdout.strip())
        marked = {pid for pid in _pids() if _has_marker(pid, self.name)}
        tops = [pid for pid in marked if _parent(pid) not in marked]
        if len(tops) != 1:
            raise LookupError(f"expected one first process in container {self.name}, found {sorted(tops)}")
        return tops[0]

    def signal(self, number: int = signal.SIGTERM) -> None:
        os.kill(self.main_pid(), number)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def remove(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(LookupError, ProcessLookupError, subprocess.CalledProcessError):
                self.signal(signal.SIGKILL)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if self.tool == "buildah":
            subprocess.run(["buildah", "rm", self.name], capture_output=True, check=False)
        else:
            subprocess.run([self.tool, "rm", "-f", self.name], capture_output=True, check=False)


def run_container(tool: str, image: str, env: dict[str, str], log_path: Path) -> Container:
    """Start ``image`` as its platform would: its ENTRYPOINT as its USER, with ``env`` added."""
    name = f"vertex-llama-test-{uuid.uuid4().hex[:12]}"
    env = {**env, MARKER: name}
    if tool == "buildah":
        config = image_config(tool, image)
        entrypoint = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])  # type: ignore[call-overload]
        subprocess.run(["buildah", "from", "--name", name, "--pull-never", image], capture_output=True, check=True)
        command = ["buildah", "run", "--isolation", "chroot"]
        for key, value in env.items():
            command += ["--env", f"{key}={value}"]
        command += [name, "--", *entrypoint]
    else:
        command = [tool, "run", "--name", name, "--network", "host"]
        for key, value in env.items():
            command += ["--env", f"{key}={value}"]
        command.append(image)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Container(tool, image, name, process, log_path, env)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _has_marker(pid: int, name: str) -> bool:
    try:
        return f"{MARKER}={name}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[1])


def process_uid(pid: int) -> int:
    """The real user id of a host process (the container's user, seen from the host)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise LookupError(pid)
