"""A draft model's pick at one output, as llama.cpp's draft sampler makes it: the most likely token, and
its probability among the ten most likely (top-k 10, then the softmax over them), which
``--spec-draft-p-min`` is compared with.

With ``--spec-draft-backend-sampling`` (on by default, as in llama-server) the top-k runs in the draft
model's graph: a top-k chain is attached to each of its sequences for as long as the model is loaded
(llama.cpp's backend sampling), and only those ten logits and ids come back, not the whole row. Without
it, or where llama.cpp cannot attach the chain (it logs why), they are taken from the row."""

from __future__ import annotations

import logging
from typing import Any

from app.engine.llama.bindings import lc

log = logging.getLogger("app.engine.llama")

TOP_K = 10  # llama.cpp's draft sampler's top-k


class DraftPicker:
    """The picks of one draft model's context; ``close`` before the context is freed."""

    def __init__(self, ctx: Any, n_seq: int, n_vocab: int, offload: bool) -> None:
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._chains: list[tuple[int, Any]] = []
        for seq in range(n_seq if offload else 0):
            chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(TOP_K))
            if not lc.llama_set_sampler(ctx, seq, chain):
                lc.llama_sampler_free(chain)
                break
            self._chains.append((seq, chain))
        if offload:
            log.info("draft model: its top-%d %s", TOP_K, "is taken in its graph (--spec-draft-backend-sampling)"
                     if self.offloaded else "is taken on the CPU (llama.cpp could not put it in the graph)")

    @property
    def offloaded(self) -> bool:
        return bool(self._chains)

    def pick(self, batch_index: int) -> tuple[int, float]:
        from app.engine.llama import logits  # numpy: imported by the worker once ready

        if self._chains:
            count = int(lc.llama_get_sampled_logits_count_ith(self._ctx, batch_index))
            values = lc.llama_get_sampled_logits_ith(self._ctx, batch_index)
            ids = lc.llama_get_sampled_candidates_ith(self._ctx, batch_index)
            if count > 0 and values and ids:
                return logits.sampled_pick(values, ids, count)
        return logits.draft_pick(self._ctx, batch_index, self._n_vocab, TOP_K)

    def close(self) -> None:
        for seq, chain in self._chains:
            lc.llama_set_sampler(self._ctx, seq, None)
            lc.llama_sampler_free(chain)
        self._chains = []
