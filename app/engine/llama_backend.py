"""llama.cpp through llama-cpp-python's low-level bindings. The only module that imports llama_cpp.

One model, one context with ``n_seq`` sequences and per-sequence KV cells (``kv_unified`` off, so a
sequence decoded beside others gives the same logits as alone), one reusable ``llama_batch`` of
``n_batch`` tokens, and a sampler chain per sequence. Every batch is checked before it reaches
``llama_decode``: a batch over ``n_batch`` tokens aborts the process inside llama.cpp.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as lc
import numpy as np
from llama_cpp.llama_grammar import json_schema_to_gbnf

from app.engine.backend import BatchToken, ModelInfo
from app.engine.errors import DecodeError, InvalidJobError, ModelLoadError, UnsupportedError
from app.engine.types import Sampled, SamplingParams, TokenProbs

log = logging.getLogger(__name__)
llama_log = logging.getLogger("llama.cpp")

_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
_POOLING = {"unspecified": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
POOLING_NAMES = {value: name for name, value in _POOLING.items()}


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


_log_callback_ref: Any = None


def _install_log_callback(verbose: bool) -> None:
    """Route llama.cpp's log lines to Python logging (debug level unless ``verbose``)."""
    global _log_callback_ref
    if _log_callback_ref is not None:
        return

    @lc.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, _user: Any) -> None:
        message = text.decode("utf-8", errors="replace").rstrip()
        if not message:
            return
        if level == 4:  # GGML_LOG_LEVEL_ERROR
            llama_log.error(message)
        elif level == 3:  # GGML_LOG_LEVEL_WARN
            llama_log.warning(message) if verbose else llama_log.debug(message)
        elif verbose and level != 5:  # 5 = continuation of the previous line (progress dots)
            llama_log.info(message)
        else:
            llama_log.debug(message)

    _log_callback_ref = callback
    lc.llama_log_set(callback, ctypes.c_void_p(0))


GGML_DEVICE_CPU = 0  # GGML_BACKEND_DEVICE_TYPE_CPU


def _lib_dir() -> Path:
    return Path(lc.__file__).resolve().parent / "lib"


def _mapped_files() -> list[str]:
    """The files mapped into this process (Linux); empty where that cannot be read."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return [line.split(maxsplit=5)[5] for line in maps.splitlines() if len(line.split(maxsplit=5)) == 6]


def _open_ggml(lib_dir: Path) -> ctypes.CDLL | None:
    """The libggml that libllama was linked against. The wheel holds libggml.so and libggml.so.0
    as two copies, and opening the other one would load a second ggml with a registry of its own,
    so the file already mapped is the one opened (the same path gives the same handle)."""
    mapped = [path for path in _mapped_files() if re.fullmatch(r"libggml\.so(\.\d+)*", Path(path).name)]
    candidates = [Path(path) for path in mapped] + [lib_dir / "libggml.dylib"]
    for path in candidates:
        if path.exists():
            ggml = ctypes.CDLL(str(path))
            ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
            ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
            ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
            ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
            return ggml
    return None


def load_ggml_backends() -> None:
    """Register ggml's backends before llama.cpp starts.

    A build with runtime CPU dispatch (app/llama_build.py) ships each CPU variant, and any GPU
    backend, as a loadable library beside libggml; ggml itself looks for them only beside the
    Python executable and in the working directory, so they are loaded from the wheel's own
    directory here: ggml scores every CPU variant against this CPU and keeps the best. A build
    with a built-in backend has its backends registered already, and nothing happens."""
    lib_dir = _lib_dir()
    ggml = _open_ggml(lib_dir)
    if ggml is not None and ggml.ggml_backend_reg_count() == 0:
        ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())
        if not ggml.ggml_backend_dev_by_type(GGML_DEVICE_CPU):
            raise ModelLoadError(f"none of the CPU backends in {lib_dir} runs on this CPU; rebuild "
                                 "llama-cpp-python (bash scripts/dev.sh install)")
    log.info("llama.cpp CPU backend %s: %s", loaded_cpu_variant() or "built-in",
             lc.llama_print_system_info().decode(errors="replace").strip())


def loaded_cpu_variant() -> str | None:
    """The CPU variant library ggml kept (``libggml-cpu-zen4.so``, say), read from the process's
    mappings; None where that cannot be read or the backend is built in."""
    names = [Path(path).name for path in _mapped_files()]
    return next((name for name in names if name.startswith("libggml-cpu")), None)


class LlamaVocabulary:
    """Tokenizer functions over the model's vocabulary (read-only, callable from any thread)."""

    def __init__(self, model: Any, vocab: Any) -> None:
        self._model = model
        self._vocab = vocab
        self.handle = vocab
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self._eog = tuple(t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(vocab, t))
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

    def grammar_error(self, grammar: str) -> str | None:
        sampler = lc.llama_sampler_init_grammar(self._vocab, grammar.encode(), b"root")
        if not sampler:
            return "llama.cpp could not parse the grammar (check the rule syntax and that 'root' is defined)"
        lc.llama_sampler_free(sampler)
        return None

    def json_schema_grammar(self, schema: object) -> str:
        try:
            return str(json_schema_to_gbnf(json.dumps(schema)))
        except Exception as exc:  # the converter signals a bad schema in many ways (asserts included)
            raise ValueError(f"{type(exc).__name__}: {exc}") from None

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


class LlamaSampler:
    """A llama.cpp sampler chain bound to one context (one per sequence: chains keep state)."""

    def __init__(self, chain: Any, ctx: Any, n_vocab: int, n_probs: int, post_sampling: bool) -> None:
        self._chain = chain
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._n_probs = n_probs
        self._post_sampling = post_sampling

    def _logits(self, batch_index: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        pointer = lc.llama_get_logits_ith(self._ctx, batch_index)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).copy()

    def sample(self, batch_index: int) -> Sampled:
        if self._n_probs <= 0:
            return Sampled(int(lc.llama_sampler_sample(self._chain, self._ctx, batch_index)))
        logits = self._logits(batch_index)
        if not self._post_sampling:
            token = int(lc.llama_sampler_sample(self._chain, self._ctx, batch_index))
            return Sampled(token, _top_logprobs(logits, token, self._n_probs))
        return self._sample_post(logits)

    def _sample_post(self, logits: np.ndarray[Any, np.dtype[np.float32]]) -> Sampled:
        """Apply the chain by hand to see the candidates it leaves, then pick and accept."""
        data = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(self._n_vocab, dtype=np.int32)
        data["logit"] = logits
        candidates = lc.llama_token_data_array(
            data=data.ctypes.data_as(lc.llama_token_data_p), size=self._n_vocab, selected=-1, sorted=False
        )
        lc.llama_sampler_apply(self._chain, ctypes.byref(candidates))
        raw = ctypes.cast(candidates.data, ctypes.POINTER(ctypes.c_byte))
        kept = np.ctypeslib.as_array(raw, shape=(candidates.size * _TOKEN_DATA.itemsize,)).view(_TOKEN_DATA).copy()
        token = int(kept[candidates.selected]["id"])
        lc.llama_sampler_accept(self._chain, token)
        finite = kept[np.isfinite(kept["logit"])]
        shifted = finite["logit"] - finite["logit"].max()
        probs = np.exp(shifted) / np.exp(shifted).sum()
        order = np.argsort(-probs, kind="stable")[: self._n_probs]
        top = tuple((int(finite[i]["id"]), float(probs[i])) for i in order)
        chosen = probs[finite["id"] == token]
        return Sampled(token, TokenProbs(token, float(chosen[0]) if chosen.size else 0.0, top))

    def free(self) -> None:
        if self._chain is not None:
            lc.llama_sampler_free(self._chain)
            self._chain = None


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
_LOWEST = float(np.finfo(np.float32).min)


def _top_logprobs(logits: np.ndarray[Any, np.dtype[np.float32]], token: int, n: int) -> TokenProbs:
    """Log-softmax of the raw logits: the sampled token's log-probability and the top ``n``."""
    shifted = logits.astype(np.float64) - float(logits.max())
    logprobs = shifted - np.log(np.exp(shifted).sum())
    top = np.argpartition(-logprobs, min(n, len(logprobs) - 1))[:n]
    top = top[np.argsort(-logprobs[top], kind="stable")]

    def value(index: int) -> float:
        v = float(logprobs[index])
        return v if np.isfinite(v) else _LOWEST

    return TokenProbs(token, value(token), tuple((int(i), value(int(i))) for i in top))


def _add(chain: Any, sampler: Any) -> None:
    lc.llama_sampler_chain_add(chain, sampler)


def _meta(model: Any, key: str) -> str | None:
    buffer = ctypes.create_string_buffer(4096)
    size = lc.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer))
    if size < 0:
        return None
    return buffer.value.decode("utf-8", errors="replace")


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


class LlamaBackend:
    """A loaded model and its context. Used by the engine thread only (the vocabulary aside)."""

    def __init__(self, config: LlamaConfig) -> None:
        _install_log_callback(config.verbose)
        load_ggml_backends()
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        model_params.n_gpu_layers = config.n_gpu_layers
        self._model = lc.llama_model_load_from_file(config.model_path.encode(), model_params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load the model: {config.model_path}")
        vocab = lc.llama_model_get_vocab(self._model)
        n_ctx_train = int(lc.llama_model_n_ctx_train(self._model))
        per_seq = (config.n_ctx or n_ctx_train) // config.n_seq
        per_seq = min(per_seq, n_ctx_train)
        if per_seq < 8:
            lc.llama_model_free(self._model)
            raise ModelLoadError(f"--ctx-size gives {per_seq} tokens per slot; give each slot at least 8")
        ctx_params = lc.llama_context_default_params()
        ctx_params.n_ctx = per_seq * config.n_seq
        ctx_params.n_batch = config.n_batch
        ctx_params.n_ubatch = min(config.n_ubatch, config.n_batch)
        ctx_params.n_seq_max = config.n_seq
        ctx_params.n_threads = config.n_threads
        ctx_params.n_threads_batch = config.n_threads_batch
        ctx_params.kv_unified = False
        ctx_params.flash_attn_type = _FLASH_ATTN[config.flash_attn]
        ctx_params.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ModelLoadError("llama.cpp could not create a context (out of memory?)")
        self._memory = lc.llama_get_memory(self._ctx)
        self.n_seq = int(lc.llama_n_seq_max(self._ctx))
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(self._ctx))
        self.n_batch = int(lc.llama_n_batch(self._ctx))  # llama.cpp may lower it: read it back
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self._config = config
        self._adapters: list[Any] = []
        for path in config.loras:
            adapter = lc.llama_adapter_lora_init(self._model, path.encode())
            if not adapter:
                self.close()
                raise ModelLoadError(f"llama.cpp could not load the LoRA adapter {path}")
            self._adapters.append(adapter)
        self._lora: tuple[float, ...] = ()
        self._embedder: LlamaEmbedder | None = None
        self.vocab = LlamaVocabulary(self._model, vocab)
        self.info = self._read_info(config.model_path, vocab)
        self._warm_up(vocab)

    def _warm_up(self, vocab: Any) -> None:
        """One throw-away decode, as llama-server does, so the first request does not pay for the
        first graph build and weight paging."""
        token = lc.llama_vocab_bos(vocab)
        self.decode([BatchToken(token if token >= 0 else 0, 0, 0, True)])
        lc.llama_memory_clear(self._memory, True)

    def _declared_pooling(self) -> str:
        """The pooling the model's metadata declares (rank for rerankers), or "unspecified"."""
        arch = _meta(self._model, "general.architecture") or ""
        value = _meta(self._model, f"{arch}.pooling_type")
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
        return ModelInfo(
            path=path,
            name=_meta(self._model, "general.name") or os.path.basename(path),
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
            build_info=f"b{lc.__version__}-llama-cpp-python",
            pooling=self._declared_pooling(),
        )

    def decode(self, batch: Sequence[BatchToken]) -> None:
        if not 0 < len(batch) <= self.n_batch:
            raise DecodeError(-1)
        raw = self._batch
        for index, entry in enumerate(batch):
            raw.token[index] = entry.token
            raw.pos[index] = entry.pos
            raw.n_seq_id[index] = 1
            raw.seq_id[index][0] = entry.seq
            raw.logits[index] = entry.logits
        raw.n_tokens = len(batch)
        code = lc.llama_decode(self._ctx, raw)
        if code != 0:
            raise DecodeError(int(code))

    def new_sampler(self, params: SamplingParams) -> LlamaSampler:
        chain_params = lc.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        chain = lc.llama_sampler_chain_init(chain_params)
        n_vocab = self.vocab.n_vocab
        if params.logit_bias:
            entries = [(tok, bias) for tok, bias in params.logit_bias if 0 <= tok < n_vocab]
            array = (lc.llama_logit_bias * max(1, len(entries)))()
            for index, (token, bias) in enumerate(entries):
                array[index].token = token  # type: ignore[assignment]
                array[index].bias = bias
            _add(chain, lc.llama_sampler_init_logit_bias(n_vocab, len(entries), array))
        if params.grammar:
            grammar = lc.llama_sampler_init_grammar(self.vocab.handle, params.grammar.encode(), b"root")
            if not grammar:
                lc.llama_sampler_free(chain)
                raise InvalidJobError("Failed to initialize samplers: the grammar does not parse")
            _add(chain, grammar)
        min_keep = max(1, params.min_keep)
        greedy = params.temperature <= 0.0
        if params.mirostat and not greedy:
            _add(chain, lc.llama_sampler_init_temp(params.temperature))
            if params.mirostat == 1:
                _add(chain, lc.llama_sampler_init_mirostat(n_vocab, params.seed, params.mirostat_tau,
                                                           params.mirostat_eta, 100))
            else:
                _add(chain, lc.llama_sampler_init_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta))
            return LlamaSampler(chain, self._ctx, n_vocab, params.n_probs, params.post_sampling_probs)
        for name in params.samplers:
            sampler = self._sampler(name, params, min_keep, greedy)
            if sampler is not None:
                _add(chain, sampler)
        _add(chain, lc.llama_sampler_init_greedy() if greedy else lc.llama_sampler_init_dist(params.seed))
        return LlamaSampler(chain, self._ctx, n_vocab, params.n_probs, params.post_sampling_probs)

    def _sampler(self, name: str, params: SamplingParams, min_keep: int, greedy: bool) -> Any:
        """One stage of the chain by llama-server's name; None where it would do nothing. Greedy
        picking keeps only the stages that change which token is best (penalties, DRY)."""
        if name == "penalties":
            last_n = self.n_ctx_seq if params.repeat_last_n == -1 else min(params.repeat_last_n, self.n_ctx_seq)
            if last_n == 0 or (params.repeat_penalty == 1.0 and params.frequency_penalty == 0.0
                               and params.presence_penalty == 0.0):
                return None
            return lc.llama_sampler_init_penalties(self.vocab.n_vocab, last_n, params.repeat_penalty,
                                                   params.frequency_penalty, params.presence_penalty)
        if name == "dry":
            if params.dry_multiplier <= 0.0:
                return None
            last_n = self.n_ctx_seq if params.dry_penalty_last_n == -1 else min(params.dry_penalty_last_n,
                                                                                 self.n_ctx_seq)
            breakers = [b.encode() for b in params.dry_sequence_breakers]
            array = (ctypes.c_char_p * max(1, len(breakers)))(*breakers)
            return lc.llama_sampler_init_dry(self.vocab.handle, params.dry_multiplier, params.dry_base,
                                             params.dry_allowed_length, last_n, array, len(breakers))
        if greedy:
            return None
        if name == "top_n_sigma":
            return lc.llama_sampler_init_top_n_sigma(params.top_n_sigma) if params.top_n_sigma > 0 else None
        if name == "top_k":
            return lc.llama_sampler_init_top_k(params.top_k) if params.top_k > 0 else None
        if name == "typ_p":
            return lc.llama_sampler_init_typical(params.typical_p, min_keep) if params.typical_p < 1.0 else None
        if name == "top_p":
            return lc.llama_sampler_init_top_p(params.top_p, min_keep) if params.top_p < 1.0 else None
        if name == "min_p":
            return lc.llama_sampler_init_min_p(params.min_p, min_keep) if params.min_p > 0.0 else None
        if name == "xtc":
            if params.xtc_probability <= 0.0:
                return None
            return lc.llama_sampler_init_xtc(params.xtc_probability, params.xtc_threshold, min_keep, params.seed)
        if name == "temperature":
            return lc.llama_sampler_init_temp_ext(params.temperature, params.dynatemp_range,
                                                  params.dynatemp_exponent)
        raise InvalidJobError(f"unknown sampler {name!r}")

    def copy_sequence(self, source: int, target: int) -> None:
        lc.llama_memory_seq_rm(self._memory, target, -1, -1)
        lc.llama_memory_seq_cp(self._memory, source, target, -1, -1)

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
