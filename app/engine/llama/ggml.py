"""llama.cpp's logs into Python logging, and ggml's loadable backends (the CPU variants of a
runtime-dispatch build, a GPU backend) registered from the wheel's own directory."""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from pathlib import Path
from typing import Any

from app.engine.errors import ModelLoadError
from app.engine.llama import gpu_driver
from app.engine.llama.bindings import lc, mt
from app.engine.llama.native import filtered_log_callback

log = logging.getLogger("app.engine.llama")
llama_log = logging.getLogger("llama.cpp")


_log_callback_ref: Any = None  # ctypes callbacks llama.cpp holds must stay alive: kept here

GGML_LOG_LEVELS = (0, 1, 2, 3, 4)  # NONE (llama.cpp's plain LLAMA_LOG), DEBUG, INFO, WARN, ERROR
# and 5, CONT: the continuation of the previous line (progress dots)
GGML_LOG_ERROR, GGML_LOG_WARN, GGML_LOG_CONT = 4, 3, 5


def python_log_level(level: int, verbose: bool) -> int:
    """The Python level a llama.cpp log line of ggml ``level`` is logged at: errors always as errors;
    with ``verbose``, warnings and information as such; the rest (and progress dots) at debug."""
    if level == GGML_LOG_ERROR:
        return logging.ERROR
    if verbose and level == GGML_LOG_WARN:
        return logging.WARNING
    if verbose and level != GGML_LOG_CONT:
        return logging.INFO
    return logging.DEBUG


def lowest_logged_level(verbose: bool) -> int:
    """The lowest ggml level whose lines ``llama_log`` would write (app/server/logs.py sets its level): lines
    below it are dropped before they reach Python (native.c)."""
    return next((level for level in GGML_LOG_LEVELS if llama_log.isEnabledFor(python_log_level(level, verbose))),
                GGML_LOG_CONT)


def install_log_callback(verbose: bool) -> None:
    """Route llama.cpp's log lines to Python logging (debug level unless ``verbose``). Only the lines
    that would be logged reach Python, where the C filter was built (native.py): the others would
    each wait for the GIL while the worker imports its HTTP side beside the model's load."""
    global _log_callback_ref
    if _log_callback_ref is not None:
        return

    @lc.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, _user: Any) -> None:
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            llama_log.log(python_log_level(level, verbose), message)

    _log_callback_ref = callback
    filtered = filtered_log_callback(callback, lowest_logged_level(verbose))
    installed = callback if filtered is None else ctypes.cast(filtered, lc.llama_log_callback)
    lc.llama_log_set(installed, ctypes.c_void_p(0))
    mt.mtmd_helper_log_set(installed, ctypes.c_void_p(0))  # libmtmd (the projector) logs the same way


GGML_DEVICE_CPU = 0  # GGML_BACKEND_DEVICE_TYPE_CPU


def _lib_dir() -> Path:
    return Path(lc.__file__).resolve().parent / "lib"


def _mapped_files() -> list[str]:
    """The files mapped into this process (Linux); empty where that cannot be read."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    fields = (line.split(maxsplit=5) for line in maps.splitlines())
    return [parts[5] for parts in fields if len(parts) == 6]


_ggml: ctypes.CDLL | None = None  # libggml, once found (_open_ggml)


def _open_ggml(lib_dir: Path) -> ctypes.CDLL | None:
    """The libggml that libllama was linked against. The wheel holds libggml.so and libggml.so.0
    as two copies, and opening the other one would load a second ggml with a registry of its own,
    so the file already mapped is the one opened (the same path gives the same handle). Found once:
    reading the process's mappings takes milliseconds, just before the model's load."""
    global _ggml
    if _ggml is not None:
        return _ggml
    mapped = [path for path in _mapped_files() if re.fullmatch(r"libggml\.so(\.\d+)*", Path(path).name)]
    candidates = [Path(path) for path in mapped] + [lib_dir / "libggml.dylib"]
    for path in candidates:
        if path.exists():
            ggml = ctypes.CDLL(str(path))
            ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
            ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
            ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
            ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
            ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
            ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
            ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
            ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_dev_type.restype = ctypes.c_int
            ggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                                     ctypes.POINTER(ctypes.c_size_t)]
            for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
                getattr(ggml, name).argtypes = [ctypes.c_void_p]
                getattr(ggml, name).restype = ctypes.c_char_p
            ggml.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
            ggml.ggml_backend_dev_by_name.restype = ctypes.c_void_p
            ggml.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
            ggml.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_buft_name.restype = ctypes.c_char_p
            ggml.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
            ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
            ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
            ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
            ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
            ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
            _ggml = ggml
            return ggml
    return None


def load_ggml_backends() -> None:
    """Register ggml's backends before llama.cpp starts.

    A build with runtime CPU dispatch (app/host/llama_build.py) ships each CPU variant, and any GPU
    backend, as a loadable library beside libggml; ggml itself looks for them only beside the
    Python executable and in the working directory, so they are loaded from the wheel's own
    directory here: ggml scores every CPU variant against this CPU and keeps the best. A build
    with a built-in backend has its backends registered already, and nothing happens."""
    lib_dir = _lib_dir()
    ggml = _open_ggml(lib_dir)
    if ggml is not None and ggml.ggml_backend_reg_count() == 0:
        ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())
        if not ggml.ggml_backend_dev_by_type(GGML_DEVICE_CPU):
            raise ModelLoadError(f"none of the CPU backends in {lib_dir} runs on this CPU; rebuild "
                                 "llama-cpp-python (bash scripts/dev.sh install)")
    log.info("llama.cpp CPU backend %s: %s", loaded_cpu_variant() or "built-in",
             lc.llama_print_system_info().decode(errors="replace").strip())
    verdict = gpu_driver.judge(lib_dir, len(gpu_free_bytes()))
    if verdict is not None:
        log.log(logging.INFO if verdict.usable else logging.WARNING, "%s", verdict.message)


_set_up_lock = threading.Lock()
_set_up = False


def set_up_llama_cpp(verbose: bool) -> None:
    """llama.cpp's process-wide set-up, done once: the log bridge, ggml's backends, the backend's init.

    The worker starts it on a thread of its own before it imports the engine (app/server/gunicorn_server.py),
    so that ggml's scan of its CPU variants (dlopen and score each: 30 ms) runs beside those imports;
    each ``LlamaBackend`` calls it too, and waits here for a set-up under way. One that failed is not
    marked done: the next call tries again and raises, on the engine thread, where a load reports it."""
    global _set_up
    with _set_up_lock:
        if _set_up:
            return
        install_log_callback(verbose)
        load_ggml_backends()
        lc.llama_backend_init()
        _set_up = True


def loaded_cpu_variant() -> str | None:
    """The CPU variant library ggml kept (``libggml-cpu-zen4.so``, say), read from the process's
    mappings; None where that cannot be read or the backend is built in."""
    names = [Path(path).name for path in _mapped_files()]
    return next((name for name in names if name.startswith("libggml-cpu")), None)


GGML_DEVICE_GPU = 1  # GGML_BACKEND_DEVICE_TYPE_GPU (an integrated GPU shares host memory)


def gpu_free_bytes() -> list[int]:
    """Each discrete GPU's free memory, as its ggml backend reports it; [] without one."""
    ggml = _open_ggml(_lib_dir())
    if ggml is None:
        return []
    free: list[int] = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        if ggml.ggml_backend_dev_type(device) == GGML_DEVICE_GPU:
            available, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            ggml.ggml_backend_dev_memory(device, ctypes.byref(available), ctypes.byref(total))
            free.append(int(available.value))
    return free


def ggml_library() -> ctypes.CDLL:
    ggml = _open_ggml(_lib_dir())
    if ggml is None:
        raise ModelLoadError("ggml's library was not found: device lists and tensor overrides cannot be resolved")
    return ggml


def cpu_backend_function(name: str, restype: Any, argtypes: list[Any]) -> Any:
    """A function of ggml's CPU backend (``ggml_threadpool_new``, ...), found through its registry, as
    llama.cpp's own programs find it (a runtime-dispatch build loads the backend as a library)."""
    ggml = ggml_library()
    device = ggml.ggml_backend_dev_by_type(GGML_DEVICE_CPU)
    return _registry_function(ggml.ggml_backend_dev_backend_reg(device) if device else None, "ggml's CPU backend",
                              name, restype, argtypes)


def backend_function(registry: str, name: str, restype: Any, argtypes: list[Any]) -> Any:
    """A function of the ggml backend registered as ``registry`` (``RPC``: ``ggml_backend_rpc_add_server``,
    ...), found through that registry; ModelLoadError where the build has no such backend or function."""
    return _registry_function(ggml_library().ggml_backend_reg_by_name(registry.encode()),
                              f"ggml's {registry} backend", name, restype, argtypes)


def _registry_function(registry: int | None, what: str, name: str, restype: Any, argtypes: list[Any]) -> Any:
    address = ggml_library().ggml_backend_reg_get_proc_address(registry, name.encode()) if registry else None
    if not address:
        raise ModelLoadError(f"{what} has no {name}")
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def buffer_types() -> dict[str, int]:
    """Every device's buffer type by its name (``CPU``, ``CUDA0``, ...), as --override-tensor names them."""
    ggml = ggml_library()
    types: dict[str, int] = {}
    for index in range(ggml.ggml_backend_dev_count()):
        buft = ggml.ggml_backend_dev_buffer_type(ggml.ggml_backend_dev_get(index))
        if buft:
            types[ggml.ggml_backend_buft_name(buft).decode()] = int(buft)
    return types


def offload_device(name: str) -> int:
    """The device --device names (a GPU or another accelerator, never the CPU); ModelLoadError otherwise."""
    ggml = ggml_library()
    device = ggml.ggml_backend_dev_by_name(name.encode())
    if not device or ggml.ggml_backend_dev_type(device) == GGML_DEVICE_CPU:
        known = ", ".join(line.split(":")[0].strip() for line in describe_devices()) or "none"
        raise ModelLoadError(f"--device: invalid device: {name} (devices: {known})")
    return int(device)


def describe_devices() -> list[str]:
    """The devices a model can be offloaded to, one line each, as llama-server's --list-devices prints them."""
    ggml = ggml_library()
    lines = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        if ggml.ggml_backend_dev_type(device) == GGML_DEVICE_CPU:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        ggml.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        lines.append(f"{ggml.ggml_backend_dev_name(device).decode()}: "
                     f"{ggml.ggml_backend_dev_description(device).decode()} "
                     f"({total.value >> 20} MiB, {free.value >> 20} MiB free)")
    return lines
