"""ServerContext: what the handlers share (settings, the engine, the chat template, start time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.api import Route
from app.chat_template import ChatTemplate, choose_template
from app.engine import Engine
from app.metrics import MetricsExporter
from app.settings import Settings


@dataclass
class ServerContext:
    settings: Settings
    engine: Engine
    api_keys: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    _template: ChatTemplate | None = None
    _template_lock: threading.Lock = field(default_factory=threading.Lock)
    metrics: MetricsExporter = field(init=False)
    routes: tuple[Route, ...] = ()  # the whole table as served (Vertex routes included)

    def __post_init__(self) -> None:
        self.metrics = MetricsExporter(self.engine.stats)

    @property
    def model_path(self) -> str:
        """The file the engine loaded (a gs:// model's local copy), once it is loaded."""
        return self.engine.info.path

    @property
    def model_aliases(self) -> list[str]:
        if self.settings.alias:
            return sorted({name.strip() for name in self.settings.alias.split(",") if name.strip()})
        return []

    @property
    def model_name(self) -> str:
        """The served model id: the alphabetically first alias, else the file name."""
        aliases = self.model_aliases
        if aliases:
            return aliases[0]
        return self.model_path.rsplit("/", 1)[-1]

    @property
    def chat_template(self) -> ChatTemplate:
        """Built once the model is loaded (it needs the model's template and special tokens)."""
        with self._template_lock:
            if self._template is None:
                info = self.engine.info
                choice = choose_template(
                    self.settings.chat_template,
                    self.settings.chat_template_file,
                    info.chat_template,
                    self.settings.jinja,
                )
                self._template = ChatTemplate(choice, info.bos_token, info.eos_token, self._render_builtin)
            return self._template

    def _render_builtin(self, template: str | None, messages: Sequence[tuple[str, str]], add_assistant: bool) -> str:
        """Through the vocabulary of the model loaded now: after an idle sleep the one the template
        was made with is freed (and llama.cpp reads the model's own template from it)."""
        return self.engine.vocab.apply_builtin_template(template, messages, add_assistant)
