"""Bounds on what one request can make the engine thread pay at every token it samples.

The engine thread decodes every slot together, so a cost one request brings to each of its steps
(probabilities of the top ``n_probs`` tokens, a scan for each stop string, a bias applied per entry)
stalls every other stream too: an ``n_probs`` of 150,000 took 0.84 s a token, 600,000 stop strings
1.2 s. Each field past its bound is a 400 naming the field and the limit, on every route and dialect
(``generation_request`` in params.py calls ``check_costs`` for all of them). The limits sit far above
what clients send: OpenAI takes at most 20 ``top_logprobs``, 4 stop sequences and 300 biased tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.protocol.errors import InvalidRequestError

MAX_N_PROBS = 100  # n_probs (and OpenAI logprobs / top_logprobs, which become it)
MAX_STOP_STRINGS = 64  # stop (Anthropic stop_sequences)
MAX_STOP_CHARACTERS = 1024  # each stop string
MAX_LOGIT_BIAS = 2048  # logit_bias entries, and the tokens their string keys become
MAX_MEDIA_ITEMS = 64  # images and audio files in one prompt (each may be a URL to fetch)


def check_costs(n_probs: int, stop: Sequence[str]) -> None:
    if n_probs > MAX_N_PROBS:
        raise InvalidRequestError(f"Field 'n_probs': {n_probs} is above the limit of {MAX_N_PROBS}")
    if len(stop) > MAX_STOP_STRINGS:
        raise InvalidRequestError(f"Field 'stop': {len(stop)} stop strings; the limit is {MAX_STOP_STRINGS}")
    longest = max((len(text) for text in stop), default=0)
    if longest > MAX_STOP_CHARACTERS:
        raise InvalidRequestError(f"Field 'stop': a stop string of {longest} characters; the limit is "
                                  f"{MAX_STOP_CHARACTERS}")


def check_logit_bias(entries: int) -> None:
    if entries > MAX_LOGIT_BIAS:
        raise InvalidRequestError(f"Field 'logit_bias': {entries} entries; the limit is {MAX_LOGIT_BIAS}")


def check_media_count(count: int, field: str) -> None:
    """Media items are decoded (and URLs fetched) on the request's thread, but each one's rows are
    decoded on the engine thread: bounded like the costs above."""
    if count > MAX_MEDIA_ITEMS:
        raise InvalidRequestError(f"Field '{field}': more than {MAX_MEDIA_ITEMS} images and audio files in one "
                                  f"request; the limit is {MAX_MEDIA_ITEMS}")
