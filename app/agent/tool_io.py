"""Where a tool's files and commands are: the host (confined to the tools root), or an isolate that a command
line reaches (a running container through ``docker``/``podman exec``, a host through ``ssh``).

An isolate must offer a POSIX shell with ``cat``, ``wc``, ``mkdir``, ``dirname``, ``find`` and ``timeout``, as
llama-server's. The tools root bounds the host only: an isolate is its own boundary."""

from __future__ import annotations

import os
import re
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.agent.processes import ExecResult, run_process

LIST_TIMEOUT = 15  # seconds for one listing, as llama-server's
AUX_TIMEOUT = 15  # seconds for an isolate's small helper commands
LIST_MAX_OUTPUT = 8 * 1024 * 1024
ISOLATE_READ_MAX = 64 * 1024 * 1024
# Listed but never walked into: they can be enormous (llama-server's list).
JUNK_DIRS = frozenset({".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build",
                       "target", ".cache", ".idea", ".vscode"})
_SSH_TARGET = re.compile(r"[A-Za-z0-9._@-]+")
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ENGINES = ("docker", "podman")


class ToolError(Exception):
    """A tool call that cannot run (a bad runtime, a path outside the root): the caller's mistake."""


class OutsideRoot(ToolError):
    """A path that is (once links are followed) outside the tools root."""


@dataclass(frozen=True)
class Entry:
    rel: str  # '/'-separated, relative to the listed directory
    is_dir: bool = False


@dataclass
class Listing:
    entries: list[Entry] = field(default_factory=list)
    error: str = ""
    truncated: bool = False


class ToolIO(ABC):
    """The file and command operations every built-in tool is written against."""

    def __init__(self, cwd: str = "") -> None:
        self.cwd = cwd

    @abstractmethod
    def resolve(self, path: str) -> str: ...

    @abstractmethod
    def is_directory(self, path: str) -> bool: ...

    @abstractmethod
    def is_regular_file(self, path: str) -> bool: ...

    @abstractmethod
    def file_size(self, path: str) -> int | None: ...

    @abstractmethod
    def read_file(self, path: str) -> bytes | None: ...

    @abstractmethod
    def write_file(self, path: str, content: bytes) -> bool: ...

    @abstractmethod
    def list_entries(self, base: str, max_depth: int, kind: str) -> Listing: ...

    @abstractmethod
    def run(self, argv: Sequence[str], max_output: int, timeout: float,
            on_chunk: Callable[[str], bool] | None = None) -> ExecResult: ...


def _git_files(output: str, max_depth: int) -> list[str]:
    names = [line.rstrip("\r").replace("\\", "/") for line in output.splitlines()]
    return [name for name in names if name and (max_depth <= 0 or name.count("/") + 1 <= max_depth)]


class HostIO(ToolIO):
    """This machine's files, every path held inside ``root`` (symbolic links followed before the check)."""

    def __init__(self, cwd: str = "", root: str = "/") -> None:
        super().__init__(cwd)
        self.root = os.path.realpath(root)
        if cwd:
            self._inside(os.path.realpath(self.base), cwd)

    @property
    def base(self) -> str:
        """Where relative paths start and commands run: x-tool-cwd (a relative one from the root), else the
        root (the working directory when the root is ``/``, as llama-server's)."""
        start = self.root if self.root != "/" else os.getcwd()
        return self._joined(start, self.cwd) if self.cwd else start

    @staticmethod
    def _joined(start: str, path: str) -> str:
        expanded = os.path.expanduser(path) if path.startswith("~") else path
        return os.path.normpath(expanded if os.path.isabs(expanded) else os.path.join(start, expanded))

    def _absolute(self, path: str) -> str:
        return self._joined(self.base, path)

    def _inside(self, real: str, given: str) -> str:
        if self.root != "/" and os.path.commonpath([self.root, real]) != self.root:
            raise OutsideRoot(f"path is outside the tools root ({self.root}): {given}")
        return real

    def resolve(self, path: str) -> str:
        """The absolute path, checked to be (once links are followed) inside the root."""
        absolute = self._absolute(path)
        self._inside(os.path.realpath(absolute), path)
        return absolute

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(self.resolve(path))

    def is_regular_file(self, path: str) -> bool:
        return os.path.isfile(self.resolve(path))

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(self.resolve(path)).st_size
        except OSError:
            return None

    def read_file(self, path: str) -> bytes | None:
        try:
            with open(self.resolve(path), "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def write_file(self, path: str, content: bytes) -> bool:
        target = self.resolve(path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(content)
        except OSError:
            return False
        return True

    def list_entries(self, base: str, max_depth: int, kind: str) -> Listing:
        top = self.resolve(base)
        if not os.path.isdir(top):
            return Listing(error="path does not exist or is not a directory")
        if kind == "file":
            found = run_process(["git", "-C", top, "ls-files", "--cached", "--others", "--exclude-standard"],
                                LIST_MAX_OUTPUT, LIST_TIMEOUT)
            if found.exit_code == 0 and not found.timed_out:
                files = _git_files(found.output, max_depth)
                return Listing([Entry(name) for name in files if os.path.isfile(os.path.join(top, name))])
        return self._walk(top, max_depth, kind)

    def _walk(self, top: str, max_depth: int, kind: str) -> Listing:
        listing = Listing()
        deadline = time.monotonic() + LIST_TIMEOUT
        stack: list[tuple[str, str, int]] = [(top, "", 0)]
        while stack:
            directory, rel_dir, depth = stack.pop()
            try:
                children = list(os.scandir(directory))
            except OSError:
                listing.truncated = True
                continue
            for child in children:
                if time.monotonic() >= deadline:
                    listing.truncated = True
                    return listing
                rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
                if child.is_dir(follow_symlinks=False) or (child.is_symlink() and child.is_dir()):
                    if kind in ("dir", "all"):
                        listing.entries.append(Entry(rel, True))
                    walkable = not child.is_symlink() and child.name.lower() not in JUNK_DIRS
                    if walkable and (max_depth <= 0 or depth + 1 < max_depth):
                        stack.append((child.path, rel, depth + 1))
                elif kind in ("file", "all") and child.is_file():
                    listing.entries.append(Entry(rel))
        return listing

    def run(self, argv: Sequence[str], max_output: int, timeout: float,
            on_chunk: Callable[[str], bool] | None = None) -> ExecResult:
        return run_process(argv, max_output, timeout, cwd=self.resolve(self.base), on_chunk=on_chunk)


class IsolateIO(ToolIO):
    """Every operation a command in the isolate; ``command`` wraps a POSIX argv into the host's command line."""

    def resolve(self, path: str) -> str:
        if not self.cwd or path.startswith("/"):
            return path
        return f"{self.cwd}/{path}"

    @abstractmethod
    def command(self, inner: Sequence[str], needs_stdin: bool) -> list[str]: ...

    def _exec(self, inner: Sequence[str], max_output: int = 4096, combine_stderr: bool = True) -> ExecResult:
        return run_process(self.command(inner, False), max_output, AUX_TIMEOUT, combine_stderr=combine_stderr)

    def _test(self, flag: str, path: str) -> bool:
        result = self._exec(["sh", "-c", f'[ {flag} "$1" ]', "_", self.resolve(path)])
        return result.exit_code == 0 and not result.timed_out

    def is_directory(self, path: str) -> bool:
        return self._test("-d", path)

    def is_regular_file(self, path: str) -> bool:
        return self._test("-f", path)

    def file_size(self, path: str) -> int | None:
        result = self._exec(["sh", "-c", 'wc -c < "$1"', "_", self.resolve(path)], 64)
        if result.exit_code != 0 or result.timed_out:
            return None
        try:
            return int(result.output.strip())
        except ValueError:
            return None

    def read_file(self, path: str) -> bytes | None:
        argv = self.command(["cat", "--", self.resolve(path)], False)
        result = run_process(argv, ISOLATE_READ_MAX, AUX_TIMEOUT, combine_stderr=False)
        if result.exit_code != 0 or result.timed_out:
            return None
        return result.raw

    def write_file(self, path: str, content: bytes) -> bool:
        inner = ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "_", self.resolve(path)]
        result = run_process(self.command(inner, True), 4096, AUX_TIMEOUT, stdin=content)
        return result.exit_code == 0 and not result.timed_out

    def list_entries(self, base: str, max_depth: int, kind: str) -> Listing:
        top = self.resolve(base)
        if not self.is_directory(base):
            return Listing(error="path does not exist or is not a directory")
        if kind == "file":
            found = self._exec(["sh", "-c", 'cd "$1" && git ls-files --cached --others --exclude-standard', "_",
                                top], LIST_MAX_OUTPUT)
            if found.exit_code == 0 and not found.timed_out:
                return Listing([Entry(name) for name in _git_files(found.output, max_depth)])
        listing = Listing()
        for dirs in ((True, False) if kind == "all" else (kind == "dir",)):
            names, timed_out = self._find(top, max_depth, dirs)
            listing.entries += [Entry(name, dirs) for name in names]
            listing.truncated = listing.truncated or timed_out
        return listing

    def _find(self, top: str, max_depth: int, dirs: bool) -> tuple[list[str], bool]:
        prune = " -o ".join(f"-name {name}" for name in sorted(JUNK_DIRS))
        depth = f" -maxdepth {max_depth}" if max_depth > 0 else ""
        select = " -print -o -type d -print" if dirs else " -o -type f -print"
        script = f'cd "$1" && find . -mindepth 1{depth} \\( {prune} \\) -prune{select}'
        result = self._exec(["sh", "-c", script, "_", top], LIST_MAX_OUTPUT)
        names = [line.removeprefix("./") for line in result.output.splitlines() if line.strip()]
        return names, result.timed_out

    def run(self, argv: Sequence[str], max_output: int, timeout: float,
            on_chunk: Callable[[str], bool] | None = None) -> ExecResult:
        """``timeout`` runs inside the isolate too: killing the host's client leaves the isolate's processes."""
        inner = ["timeout", f"{int(timeout)}s", *argv]
        if self.cwd:
            inner = ["sh", "-c", 'cd "$1" || exit 127; shift; exec "$@"', "_", self.cwd, *inner]
        return run_process(self.command(inner, True), max_output, timeout + 5, on_chunk=on_chunk)


class ContainerIO(IsolateIO):
    """A running container, through ``<engine> exec``."""

    def __init__(self, engine: str, container: str, cwd: str = "") -> None:
        super().__init__(cwd)
        self.engine, self.container = engine, container

    def command(self, inner: Sequence[str], needs_stdin: bool) -> list[str]:
        return [self.engine, "exec", *(["-i"] if needs_stdin else []), self.container, *inner]


SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
               "-o", "StrictHostKeyChecking=yes")


class SshIO(IsolateIO):
    """A remote host over ``ssh``: key-based only, its host key already trusted. Remoting, not isolation."""

    def __init__(self, target: str, cwd: str = "", ssh: Sequence[str] = ("ssh",)) -> None:
        super().__init__(cwd)
        self.target, self.ssh = target, tuple(ssh)

    def command(self, inner: Sequence[str], needs_stdin: bool) -> list[str]:
        return [*self.ssh, *SSH_OPTIONS, *([] if needs_stdin else ["-n"]), self.target, shlex.join(inner)]


def parse_container(spec: str) -> tuple[str, str, bool] | None:
    """``(engine, image or id, attach)`` for ``docker:IMG``, ``podman-container:ID``, ...; None otherwise."""
    for engine in ENGINES:
        if spec.startswith(f"{engine}-container:"):
            return engine, spec.removeprefix(f"{engine}-container:"), True
        if spec.startswith(f"{engine}:"):
            return engine, spec.removeprefix(f"{engine}:"), False
    return None


def make_io(runtime: str, cwd: str, root: str, ssh: Sequence[str] = ("ssh",)) -> ToolIO:
    """The IO a call runs through: the host when ``runtime`` is empty, else the isolate it names. A name that
    would become an option of ``ssh`` or the engine (a leading ``-``) is refused, as llama-server."""
    if not runtime:
        return HostIO(cwd, root)
    container = parse_container(runtime)
    if container is not None:
        engine, name, attach = container
        if not attach:
            raise ToolError(f"tool runtime must name a running container: {runtime}")
        if not _CONTAINER_ID.fullmatch(name):
            raise ToolError(f"invalid container id: {name}")
        return ContainerIO(engine, name, cwd)
    if runtime.startswith("ssh:"):
        target = runtime.removeprefix("ssh:")
        if not _SSH_TARGET.fullmatch(target) or target.startswith("-"):
            raise ToolError(f"invalid ssh target: {target}")
        return SshIO(target, cwd, ssh)
    raise ToolError(f"unknown tool runtime: {runtime}")
