"""``--log-prompts-dir``: each generation's prompt in a file of its own, as llama-server writes it: the
rendered text (a chat's prompt after its template), or the prompt's JSON when it is not text (token ids,
several prompts), in ``<milliseconds>.txt``: the milliseconds since the server started, twelve digits, as
llama-server's ``ggml_time_ms``. A file that cannot be written is logged, never the request's
failure."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
STARTED = time.monotonic()  # imported in the worker as it starts


def log_prompt(folder: str | None, prompt: Any) -> None:
    if not folder:
        return
    path = Path(folder) / f"{int((time.monotonic() - STARTED) * 1000):012d}.txt"
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, indent=2, ensure_ascii=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        log.error("failed to create %s: %s", path, exc)
