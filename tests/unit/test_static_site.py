"""The static files at / (the web UI, or --path): gzip, ETags, public while loading, routes win."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from app.config.settings import SettingsError, parse_settings
from app.http import StaticSite, create_app
from app.protocol.api import ApiReply, Route, guard
from app.ui import BUILTIN_UI_DIRECTORY

ROUTES = [
    Route("GET", "/health", "get_health", guard(lambda r: ApiReply(body={"status": "ok"})), public=True),
    Route("GET", "/props", "get_props", guard(lambda r: ApiReply(body={"props": True}))),
]


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>t</title>" + "x" * 2000)
    (tmp_path / "js").mkdir()
    (tmp_path / "js" / "app.js").write_text("export const a = 1;\n" * 100)
    (tmp_path / "props").write_text("a file named like a route")
    (tmp_path / ".secret").write_text("hidden")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return tmp_path


def client(site: StaticSite, ready: bool = True, keys: tuple[str, ...] = (), prefix: str = "") -> FlaskClient:
    return create_app(ROUTES, lambda: ready, keys, prefix, site=site).test_client()


def test_index_is_served_at_the_root_gzip_compressed_with_an_etag(site_dir: Path) -> None:
    web = client(StaticSite.from_directory(site_dir))
    plain = web.get("/")
    assert plain.status_code == 200
    assert plain.headers["Content-Type"] == "text/html; charset=utf-8"
    assert plain.data == (site_dir / "index.html").read_bytes()
    assert "Content-Encoding" not in plain.headers
    packed = web.get("/", headers={"Accept-Encoding": "gzip, deflate"})
    assert packed.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(packed.data) == plain.data
    assert len(packed.data) < len(plain.data)
    assert "Accept-Encoding" in packed.headers["Vary"]
    assert packed.headers["Cache-Control"] == "no-cache"
    assert packed.headers["ETag"] != plain.headers["ETag"]  # one strong tag per encoding
    assert web.get("/index.html").data == plain.data


def test_a_current_copy_is_answered_304(site_dir: Path) -> None:
    web = client(StaticSite.from_directory(site_dir))
    first = web.get("/js/app.js", headers={"Accept-Encoding": "gzip"})
    assert first.headers["Content-Type"] == "text/javascript; charset=utf-8"
    again = web.get("/js/app.js", headers={"Accept-Encoding": "gzip", "If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304 and again.data == b""
    (site_dir / "js" / "app.js").write_text("changed")  # files are read at start-up: a new site sees the change
    changed = client(StaticSite.from_directory(site_dir)).get(
        "/js/app.js", headers={"Accept-Encoding": "gzip", "If-None-Match": first.headers["ETag"]})
    assert changed.status_code == 200


def test_pages_are_public_and_served_while_the_model_loads(site_dir: Path) -> None:
    web = client(StaticSite.from_directory(site_dir), ready=False, keys=("secret",))
    assert web.get("/").status_code == 200
    assert web.get("/js/app.js").status_code == 200
    assert web.get("/health").status_code == 503  # the API still waits for the model
    keyed = client(StaticSite.from_directory(site_dir), keys=("secret",))
    assert keyed.get("/").status_code == 200
    assert keyed.get("/props").status_code == 401


def test_routes_win_over_files_and_hidden_files_are_not_served(site_dir: Path) -> None:
    web = client(StaticSite.from_directory(site_dir))
    assert web.get("/props").get_json() == {"props": True}
    assert web.get("/.secret").status_code == 404
    missing = web.get("/nothing.js")
    assert missing.status_code == 404 and missing.get_json()["error"]["type"] == "not_found_error"
    assert web.post("/").status_code == 405


def test_compressed_formats_are_sent_as_they_are(site_dir: Path) -> None:
    response = client(StaticSite.from_directory(site_dir)).get("/logo.png", headers={"Accept-Encoding": "gzip"})
    assert response.headers["Content-Type"] == "image/png"
    assert "Content-Encoding" not in response.headers
    assert response.data == (site_dir / "logo.png").read_bytes()


def test_the_site_follows_the_api_prefix(site_dir: Path) -> None:
    web = client(StaticSite.from_directory(site_dir), prefix="/api")
    assert web.get("/api/").status_code == 200
    assert web.get("/api/js/app.js").status_code == 200
    assert web.get("/js/app.js").status_code == 404


def test_the_builtin_ui_has_its_page_and_every_module_it_imports() -> None:
    site = StaticSite.from_directory(BUILTIN_UI_DIRECTORY)
    assert {"/", "/index.html", "/ui.css", "/favicon.svg", "/js/main.js"} <= set(site.paths)
    web = client(site)
    for path in site.paths:
        assert web.get(path).status_code == 200, path
    sources = [(BUILTIN_UI_DIRECTORY / path.lstrip("/")).read_text() for path in site.paths if path.endswith(".js")]
    imported = {line.split('"./')[1].split('"')[0] for source in sources for line in source.splitlines()
                if line.startswith("import ") and '"./' in line}
    assert imported and {f"/js/{name}" for name in imported} <= set(site.paths)


def test_ui_flags(tmp_path: Path) -> None:
    assert parse_settings([], {}).ui_directory == str(BUILTIN_UI_DIRECTORY)
    assert parse_settings(["--no-ui"], {}).ui_directory is None
    assert parse_settings(["--no-webui"], {}).ui_directory is None
    assert parse_settings([], {"LLAMA_ARG_UI": "off"}).ui_directory is None
    assert parse_settings(["--path", str(tmp_path)], {}).ui_directory == str(tmp_path)
    assert parse_settings([], {"LLAMA_ARG_STATIC_PATH": str(tmp_path)}).ui_directory == str(tmp_path)
    assert parse_settings(["--path", str(tmp_path), "--no-ui"], {}).ui_directory is None
    messages: list[str] = []
    with pytest.raises(SettingsError):
        parse_settings(["--path", str(tmp_path / "missing")], {}, error=messages.append)
    assert messages == [f"--path: {str(tmp_path / 'missing')!r} is not a directory"]


def test_the_package_data_ships_every_ui_file() -> None:
    """`pip install .` (the image) carries only the package-data globs: a new folder under
    app/ui/static needs its glob, or the image serves a page without its scripts."""
    import fnmatch
    import tomllib

    root = BUILTIN_UI_DIRECTORY.parent
    pyproject = tomllib.loads((root.parents[1] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["app.ui"]
    files = [path.relative_to(root).as_posix() for path in BUILTIN_UI_DIRECTORY.rglob("*") if path.is_file()]
    assert files and all(any(fnmatch.fnmatch(name, glob) and name.count("/") == glob.count("/") for glob in globs)
                         for name in files), files
