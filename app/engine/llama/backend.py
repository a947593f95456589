"""The loaded model and its context (the Backend of app/engine/backend.py).

One model, one context with ``n_seq`` sequences and per-sequence KV cells (``kv_unified`` off, so a
sequence decoded beside others gives the same logits as alone), one reusable ``llama_batch`` of
``n_batch`` tokens, and a sampler chain per sequence. Every batch is checked before it reaches
``llama_decode``: a batch over ``n_batch`` tokens aborts the process inside llama.cpp.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from app.engine.backend import BatchEntry, BatchMedia, BatchToken, ModelInfo, SequenceState
from app.engine.errors import DecodeError, MediaError, ModelLoadError, UnsupportedError
from app.engine.llama.bindings import bindings_version, lc
from app.engine.llama.embedder import POOLING_NAMES, LlamaEmbedder
from app.engine.llama.ggml import gpu_free_bytes, set_up_llama_cpp
from app.engine.llama.media import LlamaMedia
from app.engine.llama.sampler import LlamaSampler, new_sampler
from app.engine.llama.vocab import LlamaVocabulary, model_meta
from app.engine.memory_fit import MIB, FitRequest, ModelShape, fit
from app.engine.types import (
    KV_CACHE_TYPES,
    LAZY_MODES,
    LOAD_MODES,
    NUMA_STRATEGIES,
    SPLIT_MODES,
    KvOverride,
    SamplingParams,
)

log = logging.getLogger(__name__)

_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
# ggml's type numbers of the KV cache types llama-server takes (ggml.h's enum ggml_type)
_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
assert set(_GGML_TYPES) == set(KV_CACHE_TYPES)
_ROPE_SCALING = {"unspecified": -1, "none": 0, "linear": 1, "yarn": 2}
# llama.h's enum llama_load_mode, llama_lazy_mode, llama_split_mode; ggml-cpu.h's ggml_numa_strategy
_LOAD_MODE = {"auto": -1, "none": 0, "mmap": 1, "mlock": 2, "mmap+mlock": 3, "dio": 4}
_LAZY_MODE = {"off": 0, "auto": 1, "on": 2}
_SPLIT_MODE = {"none": 0, "layer": 1, "row": 2, "tensor": 3}
_NUMA = {"distribute": 1, "isolate": 2, "numactl": 3}
assert (set(_LOAD_MODE), set(_LAZY_MODE), set(_SPLIT_MODE), set(_NUMA)) == (
    set(LOAD_MODES), set(LAZY_MODES), set(SPLIT_MODES), set(NUMA_STRATEGIES))


@dataclass(frozen=True)
class RopeConfig:
    """RoPE and YaRN overrides; llama.cpp's "from the model" values by default."""

    scaling: str = "unspecified"  # none, linear, yarn
    freq_base: float = 0.0
    freq_scale: float = 0.0
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_fast: float = -1.0
    yarn_beta_slow: float = -1.0


@dataclass(frozen=True)
class LoadConfig:
    """How the model file is read and placed; llama.cpp's defaults by default."""

    load_mode: str = "auto"  # LOAD_MODES
    lazy_mode: str = "auto"
    check_tensors: bool = False
    kv_overrides: tuple[KvOverride, ...] = ()
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()  # a fraction per GPU; () lets llama.cpp split by free memory
    main_gpu: int = 0
    repack: bool = True  # llama.cpp's extra buffer types (repacked CPU weights)
    no_host: bool = False
    numa: str | None = None  # NUMA_STRATEGIES; None: no NUMA initialisation


def _model_params(config: LoadConfig, n_gpu_layers: int) -> tuple[Any, list[Any]]:
    """llama_model_params for ``config``, and the ctypes arrays they point at (keep them alive until
    the model is loaded)."""
    params = lc.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.load_mode = _LOAD_MODE[config.load_mode]
    params.lazy_mode = _LAZY_MODE[config.lazy_mode]
    params.check_tensors = config.check_tensors
    params.split_mode = _SPLIT_MODE[config.split_mode]
    params.main_gpu = config.main_gpu
    params.use_extra_bufts = config.repack
    params.no_host = config.no_host
    keep: list[Any] = []
    if config.tensor_split:
        devices = int(lc.llama_max_devices())
        if len(config.tensor_split) > devices:
            raise ModelLoadError(f"--tensor-split gives {len(config.tensor_split)} fractions; this build takes at "
                                 f"most {devices} devices")
        split = (ctypes.c_float * devices)(*config.tensor_split)
        params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
        keep.append(split)
    if config.kv_overrides:
        overrides = (lc.llama_model_kv_override * (len(config.kv_overrides) + 1))()  # an empty key ends the list
        for slot, override in zip(overrides, config.kv_overrides, strict=False):
            slot.key = override.key.encode()
            value = override.value
            if isinstance(value, bool):
                slot.tag, slot.value.val_bool = lc.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
            elif isinstance(value, int):
                slot.tag, slot.value.val_i64 = lc.LLAMA_KV_OVERRIDE_TYPE_INT, value
            elif isinstance(value, float):
                slot.tag, slot.value.val_f64 = lc.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
            else:
                slot.tag, slot.value.val_str = lc.LLAMA_KV_OVERRIDE_TYPE_STR, value.encode()
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(lc.llama_model_kv_override))
        keep.append(overrides)
    return params, keep


@dataclass(frozen=True)
class FitConfig:
    """--fit: what the fit to free memory may change and the memory it counts on."""

    enabled: bool = False
    gpu_layers_auto: bool = False  # -ngl auto: the fit chooses the layers
    min_ctx: int = 4096  # --fit-ctx
    margin_mib: int = 1024  # --fit-target
    host_free_bytes: int | None = None  # memory available at start (None: unknown, the context is kept)
    host_reserved_bytes: int = 0  # promised to the prompt cache


_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
               "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}  # per element, ggml's block sizes
assert set(_TYPE_BYTES) == set(KV_CACHE_TYPES)
_DRAFT_VOCAB_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE: a draft vocabulary may be this much smaller


def model_shape(model: Any, type_k: str, type_v: str) -> ModelShape:
    """What the fit needs of a loaded model (or of one loaded with its metadata only)."""
    arch = model_meta(model, "general.architecture") or ""
    n_embd, n_head = int(lc.llama_model_n_embd(model)), max(1, int(lc.llama_model_n_head(model)))
    n_head_kv = max(1, int(lc.llama_model_n_head_kv(model)))

    def head_dim(key: str) -> int:
        value = model_meta(model, f"{arch}.attention.{key}")
        return int(value) if value and value.isdigit() else n_embd // n_head

    per_layer = n_head_kv * (head_dim("key_length") * _TYPE_BYTES[type_k] + head_dim("value_length") *
                             _TYPE_BYTES[type_v])
    n_layer = int(lc.llama_model_n_layer(model))
    return ModelShape(n_layer=n_layer, n_ctx_train=int(lc.llama_model_n_ctx_train(model)), n_embd=n_embd,
                      n_vocab=int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))),
                      weight_bytes=int(lc.llama_model_size(model)), kv_bytes_per_token=int(per_layer * n_layer))


@dataclass(frozen=True)
class LlamaConfig:
    model_path: str
    n_ctx: int = 0
    n_seq: int = 4
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 2
    n_threads_batch: int = 2
    n_gpu_layers: int = -1
    flash_attn: str = "auto"
    verbose: bool = False
    loras: tuple[str, ...] = ()
    embed_pooling: str = "unspecified"  # none, mean, cls, last, rank, or the model's own
    embed_n_ctx: int = 512
    embed_n_seq: int = 64
    mmproj: str | None = None  # the multimodal projector file
    mmproj_offload: bool = True
    image_min_tokens: int = -1  # -1: the projector's own
    image_max_tokens: int = -1
    media_marker: str = "<__media__>"  # what stands for a media item in a prompt's text
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    rope: RopeConfig = field(default_factory=RopeConfig)
    loading: LoadConfig = field(default_factory=LoadConfig)
    kv_offload: bool = True
    kv_unified: bool = False  # one KV cache for every slot (-kvu)
    op_offload: bool = True
    swa_full: bool = False
    warmup: bool = True
    fit: FitConfig = field(default_factory=FitConfig)
    draft: LlamaConfig | None = None  # the draft model (-md); its slots and context follow this one's


def context_params(config: LlamaConfig, n_ctx: int) -> Any:
    """llama_context_params for the generation context of ``config``, ``n_ctx`` tokens in all."""
    params = lc.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = config.n_batch
    params.n_ubatch = min(config.n_ubatch, config.n_batch)
    params.n_seq_max = config.n_seq
    params.n_threads = config.n_threads
    params.n_threads_batch = config.n_threads_batch
    params.kv_unified = config.kv_unified
    params.offload_kqv = config.kv_offload
    params.op_offload = config.op_offload
    params.swa_full = config.swa_full
    params.flash_attn_type = _FLASH_ATTN[config.flash_attn]
    params.type_k = _GGML_TYPES[config.cache_type_k]
    params.type_v = _GGML_TYPES[config.cache_type_v]
    rope = config.rope
    params.rope_scaling_type = _ROPE_SCALING[rope.scaling]
    params.rope_freq_base = rope.freq_base
    params.rope_freq_scale = rope.freq_scale
    params.yarn_orig_ctx = rope.yarn_orig_ctx
    params.yarn_ext_factor = rope.yarn_ext_factor
    params.yarn_attn_factor = rope.yarn_attn_factor
    params.yarn_beta_fast = rope.yarn_beta_fast
    params.yarn_beta_slow = rope.yarn_beta_slow
    params.no_perf = True
    return params


class LlamaBackend:
    """A loaded model and its context. Used by the engine thread only (the vocabulary aside)."""

    def __init__(self, config: LlamaConfig) -> None:
        set_up_llama_cpp(config.verbose)
        if config.loading.numa is not None:
            lc.llama_numa_init(_NUMA[config.loading.numa])
        n_ctx, n_gpu_layers = config.n_ctx, config.n_gpu_layers
        gpus = gpu_free_bytes() if config.fit.enabled else []  # read before any weights go there
        layers_first = bool(gpus) and config.fit.gpu_layers_auto
        if layers_first:  # the layers are chosen before the weights load: measure the model without them
            probe = self._load(config, n_gpu_layers, metadata_only=True)
            n_ctx, n_gpu_layers = self._fit(config, probe, gpus)
            lc.llama_model_free(probe)
        self._model = self._load(config, n_gpu_layers)
        if config.fit.enabled and not layers_first:
            n_ctx, _ = self._fit(config, self._model, gpus)
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
        self._memory = lc.llama_get_memory(self._ctx)
        self.n_seq = int(lc.llama_n_seq_max(self._ctx))
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(self._ctx))
        self.kv_unified = config.kv_unified
        self.n_batch = int(lc.llama_n_batch(self._ctx))  # llama.cpp may lower it: read it back
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._config = config
        self.draft: LlamaBackend | None = None
        self._embedder: LlamaEmbedder | None = None
        self.media: LlamaMedia | None = None
        self._mixed: Any = None  # the llama_batch_ext for decodes that carry media rows
        self._adapters: list[Any] = []
        for path in config.loras:
            adapter = lc.llama_adapter_lora_init(self._model, path.encode())
            if not adapter:
                self.close()
                raise ModelLoadError(f"llama.cpp could not load the LoRA adapter {path}")
            self._adapters.append(adapter)
        self._lora: tuple[float, ...] = ()
        if config.mmproj:
            try:
                self.media = LlamaMedia(self._model, config.mmproj, config.n_threads_batch,
                                        config.mmproj_offload and config.n_gpu_layers != 0,
                                        config.image_min_tokens, config.image_max_tokens, config.media_marker)
            except ModelLoadError:
                self.close()
                raise
            self._mixed = lc.llama_batch_ext_init(self._ctx)
        self.vocab = LlamaVocabulary(self._model, vocab)
        self.info = self._read_info(config.model_path, vocab)
        self.can_rewind = not (lc.llama_model_is_recurrent(self._model) or lc.llama_model_is_hybrid(self._model))
        if config.warmup:
            self._warm_up(vocab)
        if config.draft is not None:
            try:
                self.draft = self._load_draft(config.draft, shares)
            except ModelLoadError:
                self.close()
                raise

    def _load_draft(self, config: LlamaConfig, shares: int) -> LlamaBackend:
        """The draft model, with a sequence per slot and this context's length; refused when its
        vocabulary is not this model's (llama.cpp's check: type, BOS/EOS, the same pieces)."""
        draft = LlamaBackend(replace(config, n_seq=self.n_seq, n_ctx=self.n_ctx_seq * shares,
                                     kv_unified=self.kv_unified))
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
            raise ModelLoadError(f"the draft model {config.model_path} cannot draft for this model: {mismatch}")
        log.info("draft model loaded: %s (%s slots of %s tokens)", theirs.name, draft.n_seq, draft.n_ctx_seq)
        return draft

    def top_token(self, batch_index: int) -> tuple[int, float]:
        from app.engine.llama.logits import greedy_token  # numpy: imported by the worker once ready

        return greedy_token(self._ctx, batch_index, self.vocab.n_vocab)

    @staticmethod
    def _load(config: LlamaConfig, n_gpu_layers: int, metadata_only: bool = False) -> Any:
        model_params, keep = _model_params(config.loading, n_gpu_layers)
        model_params.no_alloc = metadata_only
        model = lc.llama_model_load_from_file(config.model_path.encode(), model_params)
        del keep
        if not model:
            checked = " (--check-tensors: a tensor may hold invalid values; the log says)" if (
                config.loading.check_tensors) else ""
            raise ModelLoadError(f"llama.cpp could not load the model: {config.model_path}{checked}")
        return model

    @staticmethod
    def _fit(config: LlamaConfig, model: Any, gpus: list[int]) -> tuple[int, int]:
        """The context and GPU layers that fit (app/engine/memory_fit.py), the choice logged."""
        shape = model_shape(model, config.cache_type_k, config.cache_type_v)
        fitted = fit(shape, gpus, config.fit.host_free_bytes, FitRequest(
            n_ctx=config.n_ctx, n_gpu_layers=None if config.fit.gpu_layers_auto else config.n_gpu_layers,
            n_ubatch=min(config.n_ubatch, config.n_batch), n_seq=config.n_seq, min_ctx=config.fit.min_ctx,
            margin_bytes=config.fit.margin_mib * MIB, kv_offload=config.kv_offload,
            host_reserved_bytes=config.fit.host_reserved_bytes))
        for note in fitted.notes:
            log.warning("--fit: %s (set --ctx-size / --n-gpu-layers, or --fit off)", note)
        return fitted.n_ctx if config.n_ctx == 0 else config.n_ctx, fitted.n_gpu_layers

    def _warm_up(self, vocab: Any) -> None:
        """One throw-away decode, as llama-server does, so the first request does not pay for the
        first graph build and weight paging."""
        token = lc.llama_vocab_bos(vocab)
        self.decode([BatchToken(token if token >= 0 else 0, 0, 0, True)])
        lc.llama_memory_clear(self._memory, True)
        log.info("warm-up: one throw-away decode done (--no-warmup skips it)")

    def _declared_pooling(self) -> str:
        """The pooling the model's metadata declares (rank for rerankers), or "unspecified"."""
        arch = model_meta(self._model, "general.architecture") or ""
        value = model_meta(self._model, f"{arch}.pooling_type")
        try:
            return POOLING_NAMES.get(int(value), "unspecified") if value is not None else "unspecified"
        except ValueError:
            return "unspecified"

    def _read_info(self, path: str, vocab: Any) -> ModelInfo:
        desc = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self._model, desc, len(desc))
        bos = lc.llama_vocab_bos(vocab)
        eos = lc.llama_vocab_eos(vocab)
        template = lc.llama_model_chat_template(self._model, None)
        rerank = lc.llama_model_chat_template(self._model, b"rerank")
        return ModelInfo(
            path=path,
            name=model_meta(self._model, "general.name") or os.path.basename(path),
            vocab_type=int(lc.llama_vocab_type(vocab)),
            n_vocab=self.vocab.n_vocab,
            n_ctx_train=int(lc.llama_model_n_ctx_train(self._model)),
            n_embd=int(lc.llama_model_n_embd(self._model)),
            n_params=int(lc.llama_model_n_params(self._model)),
            size=int(lc.llama_model_size(self._model)),
            bos_token=self.vocab.piece(bos, True).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self.vocab.piece(eos, True).decode("utf-8", "replace") if eos >= 0 else "",
            add_bos=bool(lc.llama_vocab_get_add_bos(vocab)),
            chat_template=template.decode("utf-8", "replace") if template else None,
            description=desc.value.decode("utf-8", "replace"),
            build_info=f"b{bindings_version()}-llama-cpp-python",
            pooling=self._declared_pooling(),
            ftype=(lc.llama_ftype_name(lc.llama_model_ftype(self._model)) or b"").decode("utf-8", "replace"),
            add_eos=bool(lc.llama_vocab_get_add_eos(vocab)),
            add_sep=bool(lc.llama_vocab_get_add_sep(vocab)),
            rerank_template=rerank.decode("utf-8", "replace") if rerank else None,
        )

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

    def new_sampler(self, params: SamplingParams) -> LlamaSampler:
        return new_sampler(params, self._ctx, self.vocab, self.n_ctx_seq)

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
        size = int(lc.llama_state_seq_get_size(self._ctx, seq))
        buffer = (ctypes.c_uint8 * max(1, size))()
        written = int(lc.llama_state_seq_get_data(self._ctx, buffer, size, seq))
        return SequenceState(buffer, written)

    def write_sequence(self, seq: int, state: SequenceState) -> bool:
        lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
        read = int(lc.llama_state_seq_set_data(self._ctx, state.data, state.nbytes, seq))
        if read != state.nbytes:
            lc.llama_memory_seq_rm(self._memory, seq, -1, -1)
            return False
        return True

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
        return self._embedder

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
            self.draft = None
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
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None
