"""The embedding context: a second context on the loaded model, pooled vectors or rank scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.errors import DecodeError, ModelLoadError
from app.engine.llama.bindings import lc

_POOLING = {"unspecified": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
POOLING_NAMES = {value: name for name, value in _POOLING.items()}


class LlamaEmbedder:
    """A second context on the loaded model with embeddings on: several inputs per decode, one
    sequence each (unified KV, cleared after every batch)."""

    def __init__(self, model: Any, pooling: str, n_ctx: int, n_seq: int, n_threads: int) -> None:
        params = lc.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = _POOLING[pooling]
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_ubatch = n_ctx
        params.n_seq_max = n_seq
        params.kv_unified = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        self._ctx = lc.llama_init_from_model(model, params)
        if not self._ctx:
            raise ModelLoadError("llama.cpp could not create the embedding context")
        self._memory = lc.llama_get_memory(self._ctx)
        self.pooling = POOLING_NAMES.get(int(lc.llama_pooling_type(self._ctx)), "none")
        self.n_ctx = int(lc.llama_n_batch(self._ctx))
        self.n_seq = int(lc.llama_n_seq_max(self._ctx))
        self.n_embd = int(lc.llama_model_n_embd(model))
        self.n_cls_out = max(1, int(lc.llama_model_n_cls_out(model)))
        self._batch = lc.llama_batch_init(self.n_ctx, 0, 1)

    @property
    def context(self) -> Any:
        return self._ctx

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        """One vector per input (pooled), one per token (pooling none), or the rank scores."""
        total = sum(len(tokens) for tokens in inputs)
        if not inputs or total > self.n_ctx or len(inputs) > self.n_seq or any(not t for t in inputs):
            raise DecodeError(-1)
        raw = self._batch
        index = 0
        spans = []
        for seq, tokens in enumerate(inputs):
            spans.append((index, len(tokens)))
            for pos, token in enumerate(tokens):
                raw.token[index] = token
                raw.pos[index] = pos
                raw.n_seq_id[index] = 1
                raw.seq_id[index][0] = seq
                raw.logits[index] = True
                index += 1
        raw.n_tokens = total
        lc.llama_memory_clear(self._memory, True)
        code = lc.llama_decode(self._ctx, raw)
        try:
            if code != 0:
                raise DecodeError(int(code))
            width = self.n_cls_out if self.pooling == "rank" else self.n_embd
            results: list[list[list[float]]] = []
            for seq, (start, length) in enumerate(spans):
                if self.pooling == "none":
                    rows = [lc.llama_get_embeddings_ith(self._ctx, start + i)[: self.n_embd] for i in range(length)]
                else:
                    rows = [lc.llama_get_embeddings_seq(self._ctx, seq)[:width]]
                results.append([list(map(float, row)) for row in rows])
            return results
        finally:
            lc.llama_memory_clear(self._memory, True)

    def close(self) -> None:
        if self._ctx:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            self._ctx = None
