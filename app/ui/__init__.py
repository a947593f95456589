"""The built-in web UI: static files only (HTML, CSS and JavaScript modules, no build step, no CDN).

Rule: nothing here runs on the server. The pages speak to the server through its public API (the
same routes every client uses, plus ``GET /vertex/aliases`` in Vertex AI mode); the HTTP layer
serves the files (app/http/static_site.py).
"""

from __future__ import annotations

from pathlib import Path

BUILTIN_UI_DIRECTORY = Path(__file__).resolve().parent / "static"
