"""``python -m gcp.probe``: exit 0 once the container's health route answers 200 (Vertex AI's
startup probe runs it inside the container, so the endpoint waits for the model to load)."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def healthy(port: str, route: str, timeout: float = 4.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def main() -> int:
    port = os.environ.get("AIP_HTTP_PORT") or "8080"
    route = os.environ.get("AIP_HEALTH_ROUTE") or "/health"
    return 0 if healthy(port, route if route.startswith("/") else "/" + route) else 1


if __name__ == "__main__":
    sys.exit(main())
