"""Real isolates for agent mode's runtimes: a podman image built here (busybox, from Debian's busybox-static)
in a storage of its own, and an sshd on 127.0.0.1 with keys of its own. Both run as podman and sshd run
anywhere: vfs storage, and runc with the rlimits this machine allows (its sandbox refuses crun's raises)."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

BUSYBOX_COMMANDS = ("sh", "cat", "wc", "mkdir", "dirname", "find", "timeout", "uname", "pwd", "echo", "ls", "sleep",
                    "ps", "grep")
IMAGE = "localhost/vertex-llama-tools-test:latest"


def busybox() -> str:
    for path in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(path):
            return path
    raise AssertionError("the runtime tests need busybox-static (apt-get install busybox-static; "
                         "bash scripts/dev.sh test does)")


def podman_environment(home: Path) -> dict[str, str]:
    """CONTAINERS_STORAGE_CONF / CONTAINERS_CONF for a storage under ``home`` and rlimits this machine allows."""
    (home / "storage").mkdir(parents=True, exist_ok=True)
    storage = home / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{home}/storage"\nrunroot = "{home}/run"\n')
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    limits = [f"nofile={min(nofile, 4096)}:{min(nofile, 4096)}"]
    if nproc != resource.RLIM_INFINITY:
        limits.append(f"nproc={min(nproc, 4096)}:{min(nproc, 4096)}")
    engine = '[engine]\nruntime = "runc"\n' if shutil.which("runc") else ""
    conf = home / "containers.conf"
    conf.write_text(f"[containers]\ndefault_ulimits = {limits!r}\n".replace("'", '"') + engine)
    return {"CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(conf)}


def build_image(home: Path) -> dict[str, str]:
    """The busybox image in ``home``'s storage; the environment that finds it."""
    env = podman_environment(home)
    context = home / "context"
    (context / "root" / "bin").mkdir(parents=True, exist_ok=True)
    (context / "root" / "work").mkdir(exist_ok=True)
    shutil.copy(busybox(), context / "root" / "bin" / "busybox")
    for name in BUSYBOX_COMMANDS:
        link = context / "root" / "bin" / name
        if not link.exists():
            link.symlink_to("busybox")
    (context / "Containerfile").write_text("FROM scratch\nCOPY root/ /\nENV PATH=/bin\nWORKDIR /work\n")
    subprocess.run(["podman", "build", "-q", "-t", IMAGE, str(context)], check=True, env={**os.environ, **env},
                   capture_output=True, timeout=300)
    return env


def containers(env: dict[str, str]) -> list[str]:
    listed = subprocess.run(["podman", "ps", "-a", "-q"], check=True, capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=60)
    return listed.stdout.split()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def sshd(home: Path) -> Iterator[Path]:
    """An sshd on 127.0.0.1 for this user, key-based; yields an ssh_config naming it ``toolbox``."""
    home.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / name)], check=True)
    (home / "authorized_keys").write_text((home / "client_key.pub").read_text())
    port = free_port()
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home}/host_key\nAuthorizedKeysFile {home}/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PermitRootLogin prohibit-password\nPidFile {home}/sshd.pid\n")
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {(home / 'host_key.pub').read_text()}")
    user = subprocess.run(["id", "-un"], check=True, capture_output=True, text=True).stdout.strip()
    config = home / "ssh_config"
    config.write_text(f"Host toolbox\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n"
                      f"  IdentityFile {home}/client_key\n  UserKnownHostsFile {home}/known_hosts\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)
    daemon = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-f", str(home / "sshd_config"),
                               "-E", str(home / "sshd.log")])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.05)
    try:
        yield config
    finally:
        daemon.terminate()
        daemon.wait(10)
