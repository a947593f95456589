"""Special tokens written in the generated text (llama-server's ``preserved_tokens``): without ``--special``
a special token's text is left out of what the model generates, so a model that opens its tool calls or its
thinking with one (LFM2's ``<|tool_call_start|>``, Kimi K2's ``<|tool_calls_section_begin|>``) would have
its calls and thinking read as plain text. The chat template's own (its call format's markup and the
thinking tags) are found once, at load (``ServerContext.preserved_tokens``); a request may name more.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.engine import Vocabulary


def requested_tokens(vocab: Vocabulary, texts: Iterable[str]) -> frozenset[int]:
    """A request's ``preserved_tokens``: each text that is one token, as llama-server takes them (others are
    left out there too)."""
    found = set()
    for text in texts:
        tokens = vocab.tokenize(text, False, True)
        if len(tokens) == 1:
            found.add(tokens[0])
    return frozenset(found)


def template_tokens(vocab: Vocabulary, markup: Iterable[str]) -> frozenset[int]:
    """The special tokens in the template's markup (its call format's and its thinking tags): every token of
    that text that is written only as a special token."""
    found = set()
    for text in markup:
        for token in vocab.tokenize(text.strip(), False, True):
            if not vocab.piece(token, False) and vocab.piece(token, True):
                found.add(token)
    return frozenset(found)
