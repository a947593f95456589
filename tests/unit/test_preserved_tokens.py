"""Which special tokens a chat keeps in its text (app/handlers/preserved_tokens.py): the special tokens of the
template's call markup and of the thinking tags, and a request's own ``preserved_tokens`` that are one token."""

from __future__ import annotations

from collections.abc import Sequence

from app.handlers.preserved_tokens import requested_tokens, template_tokens
from app.handlers.tools import format_markup
from app.templating.declared_formats import LFM2
from app.templating.template_caps import THINK


class SpecialVocabulary:
    """Words as tokens; ``<|...|>`` words and the thinking tags are special (no text without ``special``)."""

    SPECIAL = {"<|tool_call_start|>": 1, "<|tool_call_end|>": 2, "<think>": 3, "</think>": 4, "<tool_call>": 5}

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        tokens = []
        for word in text.replace("[", " [ ").replace("]", " ] ").split():
            tokens.append(self.SPECIAL.get(word, 100 + len(word)) if parse_special else 100 + len(word))
        return tokens

    def piece(self, token: int, special: bool) -> bytes:
        names = {value: key for key, value in self.SPECIAL.items()}
        if token in names:
            return names[token].encode() if special else b""
        return b"x" * (token - 100)

    def texts(self, tokens: Sequence[int]) -> list[bytes]:
        return [self.piece(token, True) for token in tokens]


def test_the_special_tokens_of_a_formats_markup_and_the_thinking_tags_are_kept() -> None:
    vocab = SpecialVocabulary()
    kept = template_tokens(vocab, (*LFM2.markup, THINK.open, THINK.close))  # type: ignore[arg-type]
    assert sorted(vocab.texts(sorted(kept))) == sorted([b"<|tool_call_start|>", b"<|tool_call_end|>", b"<think>",
                                                       b"</think>"])  # "[", "(", "=" are text anyway


def test_a_named_formats_markup_is_its_tags() -> None:
    assert format_markup("{{ '<tool_call>' }}", None) == ("<tool_call>", "</tool_call>")
    assert format_markup("{{ messages }}", None) == ()  # the generic format writes only JSON
    assert format_markup("{{ '<|tool_list_start|>' }}", LFM2) == LFM2.markup


def test_a_requests_preserved_tokens_are_those_that_are_one_token() -> None:
    vocab = SpecialVocabulary()
    assert requested_tokens(vocab, ["<think>", "two words", "<tool_call>"]) == {3, 5}  # type: ignore[arg-type]
