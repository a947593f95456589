"""The text side of one job: sampled tokens into UTF-8 text, stop strings, llama-server's line
limits, and what may be streamed so far. Pure (no llama.cpp): the scheduler feeds it the piece of
each sampled token and acts on the outcome. Engine thread only."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.text import Utf8Stream, scan_for_stop
from app.engine.types import FinishReason, GenerationRequest, TokenChunk, TokenProbs


@dataclass(frozen=True)
class Outcome:
    """After a token: why generation ends here (None: it goes on), and the stop string hit."""

    finish: FinishReason | None = None
    stop_word: str | None = None


def indentation_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


class Generation:
    """One job's generated tokens and text. The text is cut at a stop string when one is hit; while
    streaming, a trailing partial match of a stop string is held back."""

    def __init__(self, request: GenerationRequest) -> None:
        self.request = request
        self.text = ""
        self.tokens: list[int] = []
        self.probs: list[TokenProbs] = []
        self._utf8 = Utf8Stream()
        self._stop_searched = 0
        self._safe_end = 0  # text before it cannot become part of a stop string
        self._sent = 0
        self._unsent_tokens: list[int] = []
        self._probs_sent = 0

    def add(self, token: int, piece: bytes, probs: TokenProbs | None, elapsed_ms: float) -> Outcome:
        """A sampled token (not an end of generation): its text, then the stop conditions in
        llama-server's order: stop string, line limits, token limit."""
        self.tokens.append(token)
        self._unsent_tokens.append(token)
        if probs is not None:
            self.probs.append(probs)
        before = len(self.text)
        self.text += self._utf8.feed(piece)
        scan = scan_for_stop(self.text, self._stop_searched, self.request.stop)
        self._stop_searched = len(self.text)
        self._safe_end = scan.safe_end
        if scan.stop_word is not None:
            self.text = self.text[: scan.safe_end]
            return Outcome(FinishReason.WORD, scan.stop_word)
        if self._line_limit(before, elapsed_ms):
            return Outcome(FinishReason.LIMIT)
        if 0 <= self.request.n_predict <= len(self.tokens):
            return Outcome(FinishReason.LIMIT)
        return Outcome()

    def _line_limit(self, before: int, elapsed_ms: float) -> bool:
        """``t_max_predict_ms`` (stop at a new line once the time is up) and ``n_indent`` (stop at
        a line indented less than it), checked when a line ends, as llama-server does."""
        if "\n" not in self.text[before:]:
            return False
        if 0 < self.request.t_max_predict_ms < elapsed_ms:
            return True
        if self.request.n_indent > 0:
            lines = self.text.split("\n")
            for number, line in enumerate(lines[1:-1], start=1):
                if line.strip() and indentation_of(line) < self.request.n_indent:
                    self.text = "\n".join(lines[:number])
                    return True
        return False

    def chunk(self, id_slot: int, final: bool = False) -> TokenChunk | None:
        """What may go out now: the text up to the stop-string holdback (all of it when ``final``)
        with the tokens and probabilities since the last chunk; None when there is nothing new (a
        token without text waits for the next chunk)."""
        self._sent = min(self._sent, len(self.text))
        end = len(self.text) if final else self._safe_end
        if end <= self._sent and not (final and self._unsent_tokens):
            return None
        chunk = TokenChunk(self.text[self._sent:end], tuple(self._unsent_tokens), len(self.tokens), id_slot,
                           tuple(self.probs[self._probs_sent:]))
        self._sent = end
        self._probs_sent = len(self.probs)
        self._unsent_tokens = []
        return chunk
