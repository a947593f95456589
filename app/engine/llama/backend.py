"""The loaded model and its context (the Backend of app/engine/backend.py).

One model, one context with ``n_seq`` sequences and per-sequence KV cells (``kv_unified`` off, so a
sequence decoded beside others gives the same logits as alone), one reusable ``llama_batch`` of
``n_batch`` tokens, and a sampler chain per sequence. Every batch is checked before it reaches
``llama_decode``: a batch over ``n_batch`` tokens aborts the process inside llama.cpp.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from app.engine.backend import BatchEntry, BatchMedia, BatchToken, SequenceState
from app.engine.errors import DecodeError, MediaError, ModelLoadError, UnsupportedError
from app.engine.llama.bindings import lc
from app.engine.llama.config import LlamaConfig
from app.engine.llama.control_vectors import apply_control_vectors
from app.engine.llama.draft_pick import DraftPicker
from app.engine.llama.embedder import LlamaEmbedder
from app.engine.llama.ggml import gpu_free_bytes, set_up_llama_cpp
from app.engine.llama.loading import fit_to_memory, load_model
from app.engine.llama.media import LlamaMedia
from app.engine.llama.model_info import read_model_info
from app.engine.llama.params import NUMA_NUMBERS, capped_slot_context, context_params
from app.engine.llama.rpc import add_rpc_servers
from app.engine.llama.sampler import LlamaSampler, new_sampler
from app.engine.llama.threadpool import ThreadPools
from app.engine.llama.vocab import LlamaVocabulary
from app.engine.types import (
    SamplingParams,
)

log = logging.getLogger(__name__)



_DRAFT_VOCAB_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE: a draft vocabulary may be this much smaller


class LlamaBackend:
    """A loaded model and its context. Used by the engine thread only (the vocabulary aside)."""

    def __init__(self, config: LlamaConfig) -> None:
        set_up_llama_cpp(config.verbose)
        add_rpc_servers(config.loading.rpc_servers)  # their devices before any is counted or offloaded to
        if config.loading.numa is not None:
            lc.llama_numa_init(NUMA_NUMBERS[config.loading.numa])
        n_ctx, n_gpu_layers = config.n_ctx, config.n_gpu_layers
        gpus = gpu_free_bytes() if config.fit.enabled else []  # read before any weights go there
        layers_first = bool(gpus) and config.fit.gpu_layers_auto
        if layers_first:  # the layers are chosen before the weights load: measure the model without them
            probe = load_model(config, n_gpu_layers, metadata_only=True)
            n_ctx, n_gpu_layers = fit_to_memory(config, probe, gpus)
            lc.llama_model_free(probe)
        self._model = load_model(config, n_gpu_layers)
        if config.fit.enabled and not layers_first:
            n_ctx, _ = fit_to_memory(config, self._model, gpus)
        vocab = lc.llama_model_get_vocab(self._model)
        n_ctx_train = int(lc.llama_model_n_ctx_train(self._model))
        shares = 1 if config.kv_unified else config.n_seq  # -kvu: every slot may take the whole context
        per_seq = min((n_ctx or n_ctx_train) // shares, n_ctx_train)
        if per_seq < 8:
            lc.llama_model_free(self._model)
            raise ModelLoadError(f"--ctx-size gives {per_seq} tokens per slot; give each slot at least 8")
        ctx_params = context_params(config, per_seq * shares)
        self._ctx = lc.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ModelLoadError("llama.cpp could not create a context (out of memory? a quantized V cache without "
                                 "flash attention?)")
        try:
            self._pools: ThreadPools | None = ThreadPools.attach(self._ctx, config)
        except ModelLoadError:
            lc.llama_free(self._ctx)
            lc.llama_model_free(self._model)
            raise
        self._memory = lc.llama_get_memory(self._ctx)
        self.n_seq = int(lc.llama_n_seq_max(self._ctx))
        self.n_ctx_seq = capped_slot_context(int(lc.llama_n_ctx_seq(self._ctx)), config.slot_ctx_cap)
        self.kv_unified = config.kv_unified
        self.n_batch = int(lc.llama_n_batch(self._ctx))  # llama.cpp may lower it: read it back
        self.n_ubatch = int(lc.llama_n_ubatch(self._ctx))
        self.n_swa = 0 if config.swa_full else int(lc.llama_model_n_swa(self._model))  # 0: every cell kept
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._config = config
        self.draft: LlamaBackend | None = None
        self._picker: DraftPicker | None = None  # a draft model's picks (top_token)
        self._embedder: LlamaEmbedder | None = None
        self.media: LlamaMedia | None = None
        self._mixed: Any = None  # the llama_batch_ext for decodes that carry media rows
        self._adapters: list[Any] = []
        self._lora: tuple[float, ...] = ()
        self._attach(config)
        self.vocab = LlamaVocabulary(self._model, vocab)
        self.info = read_model_info(self._model, config.model_path, vocab, self.vocab)
        self.can_rewind = not (lc.llama_model_is_recurrent(self._model) or lc.llama_model_is_hybrid(self._model))
        on_gpu = n_gpu_layers != 0 and bool(gpus or gpu_free_bytes())
        self.decode_fills_cpu = not on_gpu and 0 < config.n_cores <= config.n_threads
        if config.warmup:
            self._warm_up(vocab)
        self.draft = self._load_draft(config.draft, shares) if config.draft is not None else None

    def _attach(self, config: LlamaConfig) -> None:
        """The LoRA adapters and the multimodal projector of ``config``; a failure frees what was loaded."""
        for path in config.loras:
            adapter = lc.llama_adapter_lora_init(self._model, path.encode())
            if not adapter:
                self.close()
                raise ModelLoadError(f"llama.cpp could not load the LoRA adapter {path}")
            self._adapters.append(adapter)
        if config.control_vectors:
            try:
                apply_control_vectors(self._ctx, self._model, config.control_vectors, config.control_layers)
            except ModelLoadError:
                self.close()
                raise
        if config.mmproj:
            try:
                self.media = LlamaMedia(self._model, config.mmproj, config.n_threads_batch,
                                        config.mmproj_offload and config.n_gpu_layers != 0,
                                        config.image_min_tokens, config.image_max_tokens, config.media_marker,
                                        config.mtmd_batch_max_tokens, config.video)
            except ModelLoadError:
                self.close()
                raise
            self._mixed = lc.llama_batch_ext_init(self._ctx)

    def _load_draft(self, config: LlamaConfig, shares: int) -> LlamaBackend:
        """The draft model, with a sequence per slot and this context's length; refused when its
        vocabulary is not this model's (llama.cpp's check: type, BOS/EOS, the same pieces). This
        model is closed when the draft cannot be had."""
        try:
            draft = LlamaBackend(replace(config, n_seq=self.n_seq, n_ctx=self.n_ctx_seq * shares,
                                         kv_unified=self.kv_unified))
        except ModelLoadError:
            self.close()
            raise
        ours, theirs = self.info, draft.info
        mismatch = ""
        if (ours.vocab_type, ours.bos_token, ours.eos_token) != (theirs.vocab_type, theirs.bos_token,
                                                                 theirs.eos_token):
            mismatch = "its tokenizer type or BOS/EOS tokens differ"
        elif abs(ours.n_vocab - theirs.n_vocab) > _DRAFT_VOCAB_SLACK:
            mismatch = f"its vocabulary has {theirs.n_vocab} tokens, this model {ours.n_vocab}"
        else:
            different = next((token for token in range(5, min(ours.n_vocab, theirs.n_vocab))
                              if self.vocab.piece(token, True) != draft.vocab.piece(token, True)), None)
            if different is not None:
                mismatch = f"token {different} differs"
        if mismatch:
            draft.close()
            self.close()
            raise ModelLoadError(f"the draft model {config.model_path} cannot draft for this model: {mismatch}")
        log.info("draft model loaded: %s (%s slots of %s tokens)", theirs.name, draft.n_seq, draft.n_ctx_seq)
        draft._picker = DraftPicker(draft._ctx, draft.n_seq, draft.vocab.n_vocab, config.pick_in_graph)
        return draft

    def top_token(self, batch_index: int) -> tuple[int, float]:
        if self._picker is None:  # a model that is not the draft model (tests ask it too)
            self._picker = DraftPicker(self._ctx, self.n_seq, self.vocab.n_vocab, offload=False)
        return self._picker.pick(batch_index)

    def _warm_up(self, vocab: Any) -> None:
        """One throw-away decode, as llama-server does, so the first request does not pay for the
        first graph build and weight paging."""
        token = lc.llama_vocab_bos(vocab)
        self.decode([BatchToken(token if token >= 0 else 0, 0, 0, True)])
        lc.llama_memory_clear(self._memory, True)
        log.info("warm-up: one throw-away decode done (--no-warmup skips it)")

    def decode(self, batch: Sequence[BatchEntry]) -> None:
        if any(isinstance(entry, BatchMedia) for entry in batch):
            self._decode_mixed(batch)
            return
        tokens = cast(Sequence[BatchToken], batch)
        if not 0 < len(tokens) <= self.n_batch:
            raise DecodeError(-1)
        raw = self._batch
        for index, entry in enumerate(tokens):
            raw.token[index] = entry.token
            raw.pos[index] = entry.pos
            raw.n_seq_id[index] = 1
            raw.seq_id[index][0] = entry.seq
            raw.logits[index] = entry.logits
        raw.n_tokens = len(batch)
        code = lc.llama_decode(self._ctx, raw)
        if code != 0:
            raise DecodeError(int(code))

    def _decode_mixed(self, batch: Sequence[BatchEntry]) -> None:
        """Media rows through llama.cpp's extended batch. Its entries must all be of one kind (this
        llama.cpp refuses tokens beside embeddings), so the scheduler decodes a step's media rows
        apart from its tokens; a chunk that needs non-causal attention comes alone."""
        assert self.media is not None
        if not all(isinstance(entry, BatchMedia) for entry in batch):
            raise DecodeError(-1)
        rows = sum(entry.count for entry in batch if isinstance(entry, BatchMedia))
        if not 0 < rows <= self.n_batch:
            raise DecodeError(-1)
        first = batch[0]
        if len(batch) == 1 and isinstance(first, BatchMedia) and self.media.whole(first.chunk):
            lc.llama_set_causal_attn(self._ctx, False)
            try:
                self._process(batch)
            finally:
                lc.llama_set_causal_attn(self._ctx, True)
            return
        self._process(batch)

    def _process(self, batch: Sequence[BatchEntry]) -> None:
        assert self.media is not None
        ext = self._mixed
        lc.llama_batch_ext_clear(ext)
        pos = (lc.llama_pos * 4)()
        row_bytes = self.media.n_embd * ctypes.sizeof(ctypes.c_float)
        for entry in batch:
            assert isinstance(entry, BatchMedia)
            try:
                base = ctypes.addressof(self.media.embeddings(entry.chunk))
            except MediaError:  # the projector failed on it: that decode fails, and with it only its job
                raise DecodeError(-1) from None
            places = self.media.positions(entry.chunk, entry.pos0)
            index = -1
            for row in range(entry.first, entry.first + entry.count):
                data = ctypes.cast(base + row * row_bytes, ctypes.POINTER(ctypes.c_float))
                index = lc.llama_batch_ext_add_embd(ext, entry.seq, lc.llama_embd(data, 1, self.media.n_embd))
                if index < 0:
                    raise DecodeError(-1)
                for axis, value in enumerate(places[row]):
                    pos[axis] = value
                lc.llama_batch_ext_set_pos(ext, index, pos)
            if entry.logits:
                lc.llama_batch_ext_set_output_logits(ext, index, True)
        code = lc.llama_process(self._ctx, lc.LLAMA_PROCESS_TYPE_DECODE, ext)
        if code != 0:
            raise DecodeError(int(code))

    def new_sampler(self, params: SamplingParams, seq: int | None = None) -> LlamaSampler:
        sampler = new_sampler(params, self._ctx, self.vocab, self.n_ctx_seq, self._config.perf)
        if seq is not None:
            sampler.offload(seq, self._config.outputs_per_seq - 1)
        return sampler

    def copy_sequence(self, source: int, target: int) -> None:
        lc.llama_memory_seq_rm(self._memory, target, -1, -1)
        lc.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def shift_sequence(self, seq: int, keep: int, discard: int) -> bool:
        if not lc.llama_memory_can_shift(self._memory):
            return False
        lc.llama_memory_seq_rm(self._memory, seq, keep, keep + discard)
        lc.llama_memory_seq_add(self._memory, seq, keep + discard, -1, -discard)
        return True

    def move_cells(self, seq: int, source: int, target: int, count: int) -> bool:
        if not lc.llama_memory_can_shift(self._memory):
            return False
        lc.llama_memory_seq_rm(self._memory, seq, target, source)
        lc.llama_memory_seq_add(self._memory, seq, source, source + count, target - source)
        return True

    def forget(self, seq: int, from_pos: int) -> bool:
        if lc.llama_memory_seq_rm(self._memory, seq, from_pos, -1):
            return True
        lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
        return False

    def pos_min(self, seq: int) -> int:
        return int(lc.llama_memory_seq_pos_min(self._memory, seq))

    def pos_max(self, seq: int) -> int:
        return int(lc.llama_memory_seq_pos_max(self._memory, seq))

    def read_window(self, seq: int) -> SequenceState:
        return self._read_state(seq, lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)

    def write_window(self, seq: int, state: SequenceState) -> bool:
        return self._write_state(seq, state, lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)

    def set_lora(self, scales: tuple[float, ...]) -> None:
        """Scales for the loaded adapters, for the next decodes (a no-op when unchanged)."""
        if scales == self._lora or not self._adapters:
            return
        pairs = [(adapter, scale) for adapter, scale in zip(self._adapters, scales, strict=False) if scale != 0.0]
        adapters = (lc.llama_adapter_lora_p_ctypes * max(1, len(pairs)))(*[a for a, _ in pairs])
        values = (ctypes.c_float * max(1, len(pairs)))(*[v for _, v in pairs])
        if lc.llama_set_adapters_lora(self._ctx, adapters, len(pairs), values) != 0:
            raise DecodeError(-2)
        self._lora = scales

    def read_sequence(self, seq: int) -> SequenceState:
        return self._read_state(seq, lc.LLAMA_STATE_SEQ_FLAGS_NONE)

    def write_sequence(self, seq: int, state: SequenceState) -> bool:
        lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
        if not self._write_state(seq, state, lc.LLAMA_STATE_SEQ_FLAGS_NONE):
            lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
            return False
        return True

    def _read_state(self, seq: int, flags: int) -> SequenceState:
        """``seq``'s state (whole, or its partial part: the window cells), copied to host memory."""
        size = int(lc.llama_state_seq_get_size_ext(self._ctx, seq, flags))
        buffer = (ctypes.c_uint8 * max(1, size))()
        return SequenceState(buffer, int(lc.llama_state_seq_get_data_ext(self._ctx, buffer, size, seq, flags)))

    def _write_state(self, seq: int, state: SequenceState, flags: int) -> bool:
        """Whether all of a state ``_read_state`` gave was taken back into ``seq``."""
        return int(lc.llama_state_seq_set_data_ext(self._ctx, state.data, state.nbytes, seq, flags)) == state.nbytes

    def save_sequence(self, seq: int, path: str, tokens: Sequence[int]) -> int:
        array = (lc.llama_token * max(1, len(tokens)))(*tokens)
        return int(lc.llama_state_seq_save_file(self._ctx, path.encode(), seq, array, len(tokens)))

    def load_sequence(self, seq: int, path: str) -> tuple[list[int], int] | None:
        """The tokens restored into ``seq`` and the bytes read, or None if the file is unusable."""
        capacity = self.n_ctx_seq
        array = (lc.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        read = lc.llama_state_seq_load_file(self._ctx, path.encode(), seq, array, capacity, ctypes.byref(count))
        if read == 0:
            lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
            return None
        return list(array[: count.value]), int(read)

    def embedder(self) -> LlamaEmbedder:
        """The embedding context on the same model, made on first use."""
        if self._embedder is None:
            config = self._config
            if config.embed_pooling == "rank" and self.info.pooling != "rank":
                raise UnsupportedError("this model has no classification head for reranking (its GGUF does not "
                                       "declare rank pooling); serve a reranker model")
            self._embedder = LlamaEmbedder(self._model, config.embed_pooling, config.embed_n_ctx,
                                           config.embed_n_seq, config.n_threads_batch)
            if self._pools is not None:
                self._pools.attach_batch_only(self._embedder.context)
        return self._embedder

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        if self._picker is not None:
            self._picker.close()
            self._picker = None
        if self.media is not None:
            self.media.close()
            self.media = None
        if self._mixed:
            lc.llama_batch_ext_free(self._mixed)
            self._mixed = None
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
        for adapter in self._adapters:
            lc.llama_adapter_lora_free(adapter)
        self._adapters = []
        if self._ctx:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._pools is not None:  # after every context that uses them
            self._pools.close()
            self._pools = None
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None
