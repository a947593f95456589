"""The documentation site: it builds in MkDocs' strict mode (a broken link, a missing anchor or a page
left out of the navigation fails it), its generated pages are what the settings declaration makes,
docs/ARCHITECTURE.md renders whole, and no page cites a file that is not in the repository."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

from app.config.reference import CONFIGURATION_PAGE, OPTIONS_PAGE, options_page, with_upstream_section
from app.config.settings import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CITED_PATH = re.compile(r"(?<![\w./-])((?:app|gcp|tests|scripts|bench|docs|docker)/[\w./-]*[\w/])")
CITED_PAGE = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b")


def build_site(site: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, env=environment, timeout=240)


def test_the_site_builds_in_strict_mode_and_renders_the_architecture_table_whole(tmp_path: Path) -> None:
    result = build_site(tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    markdown = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table_rows = [line for line in markdown.splitlines()
                  if line.startswith("|") and not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line)]
    rendered = (tmp_path / "site" / "ARCHITECTURE" / "index.html").read_text()
    assert rendered.count("<tr>") == len(table_rows)  # a row that fell out of its table renders as text
    options = (tmp_path / "site" / "reference" / "options" / "index.html").read_text()
    assert all(html.escape(option.flags[-1]) in options for option in OPTIONS)
    contributing = (tmp_path / "site" / "contributing" / "index.html").read_text()
    assert "Vertex route" in contributing  # the README's trace of a request, included (one owner: the README)


def test_the_generated_pages_are_current() -> None:
    """python scripts/docs.py writes them; edit app/config/settings.py, then run it."""
    assert (ROOT / OPTIONS_PAGE).read_text() == options_page()
    configuration = (ROOT / CONFIGURATION_PAGE).read_text()
    assert with_upstream_section(configuration) == configuration


def test_no_page_cites_a_file_that_is_not_in_the_repository() -> None:
    missing = []
    for page in PAGES:
        text = page.read_text()
        missing += [(page.name, path) for path in CITED_PATH.findall(text) if not (ROOT / path).exists()]
        missing += [(page.name, name) for name in CITED_PAGE.findall(text)
                    if not any(found.name == name for found in PAGES)]
    assert not missing
