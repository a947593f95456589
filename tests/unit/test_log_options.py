"""llama-server's --log-* flags: verbosity, prefix, timestamps, colors, JSON lines, a file, off."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config.settings import parse_settings
from app.server.cli import log_options
from app.server.logs import LogOptions, configure_logging


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    logging.disable(logging.NOTSET)
    root.handlers[:] = handlers
    root.setLevel(level)


def emit(options: LogOptions, capsys: pytest.CaptureFixture[str]) -> list[str]:
    configure_logging(options)
    log = logging.getLogger("app.test")
    log.info("hello %s", "there")
    log.warning("careful")
    return capsys.readouterr().err.splitlines()


def test_prefix_and_timestamps(capsys: pytest.CaptureFixture[str]) -> None:
    assert emit(LogOptions(prefix=False, timestamps=False), capsys) == ["hello there", "careful"]
    lines = emit(LogOptions(timestamps=False), capsys)
    assert lines == ["INFO app.test: hello there", "WARNING app.test: careful"]
    stamped = emit(LogOptions(), capsys)
    assert stamped[0].endswith("INFO app.test: hello there") and stamped[0][:4].isdigit()


def test_verbosity_colors_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert emit(LogOptions(verbosity=2, timestamps=False), capsys) == ["WARNING app.test: careful"]
    colored = emit(LogOptions(colors="on", timestamps=False), capsys)
    assert colored[0] == "\033[32mINFO\033[0m app.test: hello there"
    entry = json.loads(emit(LogOptions(json_lines=True), capsys)[0])
    assert entry["severity"] == "INFO" and entry["message"] == "hello there" and entry["logger"] == "app.test"


def test_a_file_and_no_log_at_all(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    assert len(emit(LogOptions(file=str(path), timestamps=False), capsys)) == 2
    assert path.read_text().splitlines() == ["INFO app.test: hello there", "WARNING app.test: careful"]
    assert emit(LogOptions(disable=True), capsys) == []


def test_the_flags_make_the_options() -> None:
    settings = parse_settings(["-lv", "2", "--no-log-prefix", "--log-colors", "off", "--log-file", "/tmp/x.log"], {})
    assert log_options(settings, {}) == LogOptions(verbosity=2, prefix=False, colors="off", file="/tmp/x.log")
    assert log_options(parse_settings(["-v"], {}), {}).verbosity == 4
    assert log_options(parse_settings([], {}), {"AIP_MODE": "PREDICTION"}).json_lines
