"""What is read from a row of logits with numpy: log-probabilities, the chain's candidates with
their probabilities, a draft's pick (the likeliest token and its probability among the top ten).

The only module of the backend that imports numpy (0.05-0.1 s): the sampler and the backend import it
when a request first asks for probabilities or a draft, and the worker imports it on a thread of its
own once the model is ready (app/server/wiring.py), so neither the load nor the HTTP side waits for it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from app.engine.errors import DecodeError
from app.engine.llama.bindings import lc
from app.engine.types import Sampled, TokenProbs

Logits = np.ndarray[Any, np.dtype[np.float32]]

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
_LOWEST = float(np.finfo(np.float32).min)


def _row_view(ctx: Any, batch_index: int, n_vocab: int) -> Logits:
    pointer = lc.llama_get_logits_ith(ctx, batch_index)
    if not pointer:
        raise DecodeError(-1)
    return np.ctypeslib.as_array(pointer, shape=(n_vocab,))


def logits_row(ctx: Any, batch_index: int, n_vocab: int) -> Logits:
    """A copy of the logits of the batch's row ``batch_index`` (the sampler overwrites the original)."""
    return _row_view(ctx, batch_index, n_vocab).copy()


def draft_pick(ctx: Any, batch_index: int, n_vocab: int, top_k: int) -> tuple[int, float]:
    """A draft's pick from a whole row: the most likely token and its probability among the ``top_k`` most
    likely (llama.cpp's draft sampler: top-k, then the softmax over what is left)."""
    row = _row_view(ctx, batch_index, n_vocab)
    k = min(top_k, n_vocab)
    ids = np.argpartition(-row, k - 1)[:k] if k < n_vocab else np.arange(n_vocab)
    return _best_of(row[ids], ids)


def sampled_pick(logits: Any, ids: Any, count: int) -> tuple[int, float]:
    """A draft's pick from the candidates a top-k chain left in the graph (backend sampling): their
    logits and token ids, ``count`` of each."""
    return _best_of(np.ctypeslib.as_array(logits, shape=(count,)), np.ctypeslib.as_array(ids, shape=(count,)))


def _best_of(logits: Logits, ids: Any) -> tuple[int, float]:
    best = int(logits.argmax())
    return int(ids[best]), float(1.0 / np.exp(logits.astype(np.float64) - float(logits[best])).sum())


def top_logprobs(logits: Logits, token: int, n: int) -> TokenProbs:
    """Log-softmax of the raw logits: the sampled token's log-probability and the top ``n``."""
    shifted = logits.astype(np.float64) - float(logits.max())
    logprobs = shifted - np.log(np.exp(shifted).sum())
    top = np.argpartition(-logprobs, min(n, len(logprobs) - 1))[:n]
    top = top[np.argsort(-logprobs[top], kind="stable")]

    def value(index: int) -> float:
        v = float(logprobs[index])
        return v if np.isfinite(v) else _LOWEST

    return TokenProbs(token, value(token), tuple((int(i), value(int(i))) for i in top))


def sample_post_chain(chain: Any, logits: Logits, n_probs: int) -> Sampled:
    """Apply the chain by hand to see the candidates it leaves, then pick and accept: the token with
    the probabilities of the top ``n_probs`` candidates after the chain."""
    n_vocab = len(logits)
    data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
    data["id"] = np.arange(n_vocab, dtype=np.int32)
    data["logit"] = logits
    candidates = lc.llama_token_data_array(
        data=data.ctypes.data_as(lc.llama_token_data_p), size=n_vocab, selected=-1, sorted=False
    )
    lc.llama_sampler_apply(chain, ctypes.byref(candidates))
    raw = ctypes.cast(candidates.data, ctypes.POINTER(ctypes.c_byte))
    kept = np.ctypeslib.as_array(raw, shape=(candidates.size * _TOKEN_DATA.itemsize,)).view(_TOKEN_DATA).copy()
    token = int(kept[candidates.selected]["id"])
    lc.llama_sampler_accept(chain, token)
    finite = kept[np.isfinite(kept["logit"])]
    shifted = finite["logit"] - finite["logit"].max()
    probs = np.exp(shifted) / np.exp(shifted).sum()
    order = np.argsort(-probs, kind="stable")[:n_probs]
    top = tuple((int(finite[i]["id"]), float(probs[i])) for i in order)
    chosen = probs[finite["id"] == token]
    return Sampled(token, TokenProbs(token, float(chosen[0]) if chosen.size else 0.0, top))
