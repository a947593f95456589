"""The model's vocabulary: tokenizing, pieces, llama.cpp's built-in chat templates, grammar checks
and JSON schema to grammar (read-only, callable from any thread)."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Sequence
from typing import Any

from app.engine.errors import InvalidJobError
from app.engine.llama.bindings import json_schema_to_gbnf, lc
from app.engine.llama.native import tokens_where


class LlamaVocabulary:
    """Tokenizer functions over the model's vocabulary (read-only, callable from any thread)."""

    def __init__(self, model: Any, vocab: Any) -> None:
        self._model = model
        self._vocab = vocab
        self.handle = vocab
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        scanned = tokens_where(lc.llama_vocab_is_eog, vocab, self.n_vocab)  # a C loop (native.py), else
        # one ctypes call per token: 30 ms for this 49k vocabulary, more while the HTTP side imports
        self._eog = scanned if scanned is not None else tuple(
            t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(vocab, t))
        self._eog_set = frozenset(self._eog)

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (lc.llama_token * capacity)()
        count = lc.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special, parse_special)
        if count < 0:
            capacity = -count
            buffer = (lc.llama_token * capacity)()
            count = lc.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special,
                                      parse_special)
        return list(buffer[:count])

    def piece(self, token: int, special: bool) -> bytes:
        if token < 0 or token >= self.n_vocab:
            raise InvalidJobError(f"token id {token} is outside the vocabulary (0..{self.n_vocab - 1})")
        buffer = ctypes.create_string_buffer(64)
        size = lc.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = lc.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, special)
        return bytes(buffer.raw[:size])

    def is_eog(self, token: int) -> bool:
        return token in self._eog_set

    def eog_tokens(self) -> tuple[int, ...]:
        return self._eog

    def apply_builtin_template(
        self, template: str | None, messages: Sequence[tuple[str, str]], add_assistant: bool
    ) -> str:
        """llama.cpp's own (non-Jinja) chat formatting, by template name or the model's template."""
        source = template.encode() if template else lc.llama_model_chat_template(self._model, None)
        keep = [(role.encode(), content.encode()) for role, content in messages]
        chat = (lc.llama_chat_message * max(1, len(keep)))()
        for index, (role, content) in enumerate(keep):
            chat[index].role = role
            chat[index].content = content
        size = sum(len(c) + len(r) for r, c in keep) * 2 + 256
        for _ in range(2):
            buffer = ctypes.create_string_buffer(size)
            written = lc.llama_chat_apply_template(source, chat, len(keep), add_assistant, buffer, size)
            if written < 0:
                raise InvalidJobError("this chat template is not supported by llama.cpp's built-in templates")
            if written <= size:
                return buffer.raw[:written].decode("utf-8", errors="replace")
            size = written
        raise InvalidJobError("the chat template output did not fit")

    def json_schema_grammar(self, schema: object) -> str:
        try:
            grammar = str(json_schema_to_gbnf(json.dumps(schema)))
        except Exception as exc:  # the converter signals a bad schema in many ways (asserts included)
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        return strict_json_strings(grammar)

    def special_tokens(self) -> dict[str, int]:
        found = {}
        for name, function in _SPECIAL_TOKENS.items():
            token = int(getattr(lc, function)(self._vocab))
            if token >= 0:
                found[name] = token
        return found


_SPECIAL_TOKENS = {
    "fim_pre": "llama_vocab_fim_pre",
    "fim_suf": "llama_vocab_fim_suf",
    "fim_mid": "llama_vocab_fim_mid",
    "fim_rep": "llama_vocab_fim_rep",
    "fim_sep": "llama_vocab_fim_sep",
    "fim_pad": "llama_vocab_fim_pad",
    "bos": "llama_vocab_bos",
    "eos": "llama_vocab_eos",
    "eot": "llama_vocab_eot",
    "sep": "llama_vocab_sep",
}


def model_meta(model: Any, key: str) -> str | None:
    buffer = ctypes.create_string_buffer(4096)
    size = lc.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer))
    if size < 0:
        return None
    return buffer.value.decode("utf-8", errors="replace")


# llama-cpp-python's converter lets a JSON string hold raw control characters (``[^"\\]``), so a
# grammar-valid answer could fail to parse (a raw newline inside a string); JSON forbids them, and
# llama.cpp's own converter leaves them out as here.
_LAX_CHAR = 'char ::= [^"\\\\]'
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F]'


def strict_json_strings(grammar: str) -> str:
    """The grammar with JSON strings that hold no control characters."""
    return grammar.replace(_LAX_CHAR, _STRICT_CHAR)
