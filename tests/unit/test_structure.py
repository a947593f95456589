"""The layer rules of docs/ARCHITECTURE.md ("Layers"), checked by scanning imports; and the route table's shape."""

from __future__ import annotations

import ast
from pathlib import Path

from app.handlers.routes import ROUTES

ROOT = Path(__file__).resolve().parents[2]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def importers_of(package: str) -> list[str]:
    return [
        path.relative_to(ROOT).as_posix()
        for top in ("app", "gcp")
        for path in modules(top)
        if any(name == package or name.startswith(package + ".") for name in imports_of(path))
    ]


def test_only_the_bindings_module_imports_llama_cpp_and_only_logits_imports_numpy() -> None:
    """llama_cpp through app/engine/llama/bindings.py alone (it skips the package's heavy __init__);
    numpy in app/engine/llama/logits.py (imported beside the model's load, not before it) and in
    control_vectors.py's functions (only when control vectors are given; the next test checks that the
    backend's import loads no numpy)."""
    assert importers_of("llama_cpp") == ["app/engine/llama/bindings.py"]
    assert importers_of("numpy") == ["app/engine/llama/control_vectors.py", "app/engine/llama/logits.py"]


def test_the_bindings_load_without_llama_cpp_python_s_high_level_package() -> None:
    """The backend's import runs neither llama_cpp's __init__ nor numpy; other code that asks the
    package for its high-level names (llama_cpp.Llama) still gets them."""
    import subprocess
    import sys

    probe = ("import sys, app.engine.llama.backend; "
             "print(sorted(m for m in ('llama_cpp.llama', 'numpy', 'jinja2') if m in sys.modules)); "
             "import llama_cpp; from app.engine.llama import bindings; "
             "print(llama_cpp.Llama.__name__, llama_cpp.__version__ == bindings.bindings_version(), "
             "llama_cpp.llama_decode is bindings.lc.llama_decode)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[:2] == ["[]", "Llama True True"], result.stdout + result.stderr


# The packages of app/, floor by floor (docs/ARCHITECTURE.md, "Layers"): a module imports its own
# package and the floors below it, never one above or beside it.
FLOORS: dict[str, int] = {
    "app.host": 0, "app.engine": 0, "app.ui": 0,
    "app.model_sources": 1, "app.protocol": 1, "app.agent": 1,
    "app.templating": 2, "app.config": 2,
    "app.handlers": 3, "app.vertex": 3, "app.router": 3,
    "app.http": 4, "app.rpc": 4,
    "app.server": 5,
}


def package_of(module: str) -> str | None:
    return next((package for package in FLOORS if module == package or module.startswith(package + ".")), None)


def test_every_module_of_app_lives_in_a_package_with_a_floor() -> None:
    for path in modules("app"):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if dotted in ("app.__init__", "app.__main__"):
            continue
        assert package_of(dotted) is not None, path


def test_no_import_runs_up_or_sideways_between_the_packages_of_app() -> None:
    for path in modules("app"):
        own = package_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if own is None:
            continue
        for name in imports_of(path):
            target = package_of(name)
            if name.startswith("app") and target != own:
                assert target is not None and FLOORS[target] < FLOORS[own], (path, name)


def test_the_engine_and_the_host_know_no_web_framework_and_nothing_above_them() -> None:
    for package in ("app/engine", "app/host"):
        for path in modules(package):
            for name in imports_of(path):
                assert not name.startswith(("flask", "werkzeug", "gunicorn", "pydantic")), (path, name)
                assert not name.startswith("app.") or name.startswith(package.replace("/", ".")), (path, name)


def test_only_the_grpc_door_imports_grpc() -> None:
    """app/rpc/ is the one package that imports grpc (the gunicorn master never loads it: see app/rpc)."""
    for path in modules("app"):
        if "rpc" in path.relative_to(ROOT).parts:
            continue
        for name in imports_of(path):
            assert not name.startswith(("grpc", "grpc_health", "grpc_reflection")), (path, name)


def test_the_router_never_imports_the_engine_or_the_handlers() -> None:
    """The router loads no model: its children do (docs/ARCHITECTURE.md, Layers)."""
    for path in modules("app/router"):
        for name in imports_of(path):
            assert not name.startswith(("app.engine", "app.handlers", "llama_cpp")), (path, name)


def test_only_the_http_layer_imports_flask() -> None:
    for package in ("app", "gcp"):
        for path in modules(package):
            if "app/http" in path.as_posix() or path.name in ("wiring.py", "router_wiring.py", "http_side.py"):
                continue
            for name in imports_of(path):
                assert not name.startswith(("flask", "werkzeug")), (path, name)


def test_the_vertex_side_sees_only_the_api_types() -> None:
    for path in modules("app/vertex"):
        for name in imports_of(path):
            if name.startswith("app") and not name.startswith("app.vertex"):
                assert name == "app.protocol.api", (path, name)


def test_the_container_never_imports_the_deploy_tool() -> None:
    """gcp/ is the operator's CLI (with the deploy extra's libraries); the container is app/ alone."""
    for path in modules("app"):
        for name in imports_of(path):
            assert name != "gcp" and not name.startswith(("gcp.", "google.cloud.aiplatform", "google.cloud.logging")), (
                path, name)


def test_handlers_never_import_the_http_layer_or_llama_cpp_s_side() -> None:
    for path in modules("app/handlers"):
        for name in imports_of(path):
            assert not name.startswith(("app.http", "app.vertex", "app.engine.llama")), (path, name)


def test_nothing_reads_the_environment_at_import_time() -> None:
    for package in ("app", "gcp"):
        for path in modules(package):
            tree = ast.parse(path.read_text())
            for node in tree.body:
                source = ast.unparse(node)
                if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                    continue
                assert "os.environ" not in source and "getenv" not in source, (path, source)


def test_the_route_table() -> None:
    keys = [(spec.method, spec.path) for spec in ROUTES]
    assert len(keys) == len(set(keys))
    expected = {
        ("GET", "/health"), ("GET", "/v1/health"), ("GET", "/props"), ("POST", "/props"),
        ("GET", "/models"), ("GET", "/v1/models"), ("GET", "/slots"), ("GET", "/metrics"),
        ("POST", "/completion"), ("POST", "/completions"), ("POST", "/v1/completions"),
        ("POST", "/chat/completions"), ("POST", "/v1/chat/completions"),
        ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/apply-template"),
    }
    assert expected <= set(keys)
    public = {spec.path for spec in ROUTES if spec.public}
    assert public == {"/health", "/v1/health", "/live", "/models", "/v1/models", "/openapi.json"}
    polled = {(spec.method, spec.path) for spec in ROUTES if spec.polled}  # llama-server's unlogged requests
    assert polled == {("GET", "/health"), ("GET", "/v1/health"), ("GET", "/live"), ("GET", "/models"),
                      ("GET", "/v1/models"), ("GET", "/props"), ("GET", "/metrics")}
    for spec in ROUTES:
        assert spec.handler.__name__.startswith(spec.method.lower() + "_"), spec


BACKEND_ONLY = {"new_sampler", "copy_sequence", "forget", "embedder", "set_lora", "save_sequence",
                "load_sequence"}


def test_http_threads_reach_llama_cpp_only_through_the_engines_doors() -> None:
    """Outside the engine, nothing calls a Backend method or an Engine internal: llama.cpp is
    reached through Engine.submit/submit_embeddings/control/save_slot... (on the engine thread) or
    Engine.vocab (read-only, documented as safe from any thread)."""
    for package in ("app", "gcp"):
        for path in modules(package):
            if "app/engine" in path.as_posix():
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute):
                    assert node.attr not in BACKEND_ONLY, (path, node.lineno, node.attr)
                    assert node.attr not in ("_backend", "_current", "_slots", "_inbox", "backend"), (
                        path, node.lineno, node.attr)


def test_the_master_process_imports_no_http_side_and_no_engine() -> None:
    """Start-up: the gunicorn master imports neither Flask, pydantic nor the handlers, nor the engine,
    llama_cpp or numpy; the worker imports the engine and the bindings, starts the model's load, and
    imports the rest while it loads (app/server/wiring.py), so their import time overlaps the load."""
    import subprocess
    import sys

    heavy = ("flask", "pydantic", "app.handlers.routes", "app.handlers", "app.handlers.context", "app.vertex.predict",
             "app.server.wiring", "app.engine.engine", "app.engine.scheduler", "llama_cpp", "numpy")
    probe = ("import sys, app.server.cli, app.server.gunicorn_server; "
             f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_the_worker_imports_numpy_after_the_load_not_beside_it() -> None:
    """The HTTP side, imported while the model loads, leaves numpy out (60 ms it would add to start-up);
    once the model is ready a thread imports it, so the first request asking for probabilities
    finds it there."""
    import subprocess
    import sys

    probe = """
import sys, threading, time
from app.config.settings import parse_settings
from app.server.wiring import build_application
from tests.fakes import FakeBackend
loading = threading.Event()
def make(config):
    loading.wait()  # the model 'loads' until the HTTP side is built
    return FakeBackend(reply_for=lambda prompt: "x", n_seq=config.n_seq, n_ctx_seq=64, n_batch=64)
built = build_application(parse_settings(["-np", "1"], {}), "/models/fake.gguf", None, print, make)
print("numpy" in sys.modules)
loading.set()
assert built.context.engine.wait_ready(30)
deadline = time.monotonic() + 30
while "app.engine.llama.logits" not in sys.modules and time.monotonic() < deadline:
    time.sleep(0.01)
print("app.engine.llama.logits" in sys.modules)
built.shutdown()
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stdout + result.stderr


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_module_over_400_lines_and_no_function_over_60_in_the_shipped_code() -> None:
    """app/ and gcp/: a module that outgrows its job is split along a real seam (docs/ARCHITECTURE.md)."""
    too_long = []
    for package in ("app", "gcp"):
        for path in modules(package):
            source = path.read_text()
            if source.count("\n") > MAX_MODULE_LINES:
                too_long.append((path.relative_to(ROOT).as_posix(), source.count("\n")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        too_long.append((f"{path.relative_to(ROOT).as_posix()}:{node.name}", length))
    assert not too_long
