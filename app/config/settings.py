"""Server settings: one declaration per option, parsed once at start-up.

Each option is declared exactly once, as a field of ``Settings`` (type, default, flags, environment
variable, help); ``OPTIONS`` is derived from the fields. The command-line parser, the environment
lookup and ``--help`` are all generated from those declarations. Precedence, highest first:
command-line flag, ``LLAMA_ARG_*`` environment variable, default. Names and defaults follow
llama.cpp's ``llama-server`` so that its users' configuration carries over. Nothing here reads the
environment at import time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from app.config.upstream_flags import extensions, treatment, unimplemented
from app.engine.speculative import SPEC_TYPES, UPSTREAM_ONLY_SPEC_TYPES, SpeculationOptions
from app.engine.types import (
    KV_CACHE_TYPES,
    KV_OVERRIDE_TYPES,
    LAZY_MODES,
    LOAD_MODES,
    NUMA_STRATEGIES,
    RANDOM_SEED,
    SAMPLER_LETTERS,
    SAMPLER_NAMES,
    SPLIT_MODES,
    UNQUANTIZED_KV,
    KvOverride,
    SamplingParams,
    sampler_names,
)
from app.host.cpu_placement import NICE, PlacementError, compute_cpus
from app.host.cpus import usable_cpus
from app.model_sources.hub import HubError, split_repo_tag
from app.ui import BUILTIN_UI_DIRECTORY

Kind = Literal["str", "int", "float", "bool", "keys", "choice", "paths", "scaled", "texts"]

DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's
_SAMPLING = SamplingParams()  # the sampling defaults' owner
_TRUE = frozenset({"true", "1", "on", "enabled", "yes"})
_FALSE = frozenset({"false", "0", "off", "disabled", "no"})


@dataclass(frozen=True)
class Option:
    """One setting: its flags, environment name, kind, default and help text."""

    dest: str
    flags: tuple[str, ...]
    kind: Kind
    default: Any
    help: str
    env: str | None = None
    negative_flags: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    metavar: str | tuple[str, ...] | None = None
    env_aliases: tuple[str, ...] = ()  # older names of the environment variable, still read
    secret: bool = False  # never written to a log (app/server/cli.py's public_settings); keys of it fail closed


def option(flags: tuple[str, ...], kind: Kind, default: Any, help: str, **extra: Any) -> Any:
    """A Settings field and its declaration: the field's name is the option's ``dest``, its default
    the option's default; the rest (flags, kind, help, env, ...) rides in the field's metadata."""
    return field(default=default, metadata={"option": {"flags": flags, "kind": kind, "help": help, **extra}})


@dataclass(frozen=True)
class Settings:
    """Every option, declared once: a field, its type and default, and its flags, environment
    variable and help (``OPTIONS`` is derived from these fields). Build with :func:`parse_settings`."""

    model: str | None = option(("-m", "--model"), "str", None,
        "GGUF model path (default: the embedded SmolLM2-135M-Instruct)", env="LLAMA_ARG_MODEL",
        metavar="FNAME")
    hf_repo: str | None = option(("-hf", "-hfr", "--hf-repo"), "str", None,
        "a model from the Hugging Face Hub, USER/REPO[:QUANT] (default quant Q4_K_M, then Q8_0, then the first "
        "GGUF); its mmproj file too. Downloaded into --model-cache-dir", env="LLAMA_ARG_HF_REPO",
        metavar="USER/REPO[:QUANT]")
    hf_file: str | None = option(("-hff", "--hf-file"), "str", None,
        "the GGUF file of the --hf-repo repository (default: chosen by the quant)", env="LLAMA_ARG_HF_FILE",
        metavar="FILE")
    hf_token: str | None = option(("-hft", "--hf-token"), "str", None,
        "Hugging Face access token (gated or private repositories)", env="HF_TOKEN", metavar="TOKEN", secret=True)
    offline: bool = option(("--offline",), "bool", False,
        "download nothing: --hf-repo models come from the cache", env="LLAMA_ARG_OFFLINE")
    alias: str | None = option(("-a", "--alias"), "str", None,
        "comma-separated served model name(s); the id is the alphabetically first",
        env="LLAMA_ARG_ALIAS", metavar="NAME")
    host: str = option(("--host",), "str", "127.0.0.1",
        "addresses to listen on, comma-separated: IP addresses, or UNIX socket paths ending in .sock",
        env="LLAMA_ARG_HOST")
    port: int = option(("--port",), "int", 8080, "port to listen on", env="LLAMA_ARG_PORT", minimum=0)
    ctx_size: int = option(("-c", "--ctx-size"), "int", 0,
        "total context size in tokens (0 = from the model); each slot gets ctx-size / parallel",
        env="LLAMA_ARG_CTX_SIZE", minimum=0)
    n_parallel: int = option(("-np", "--parallel"), "int", -1,
        "number of slots, i.e. sequences decoded together (-1 = auto: 4)",
        env="LLAMA_ARG_N_PARALLEL", minimum=-1)
    batch_size: int = option(("-b", "--batch-size"), "int", 2048,
        "logical batch size: most tokens in one decode step", env="LLAMA_ARG_BATCH", minimum=1)
    ubatch_size: int = option(("-ub", "--ubatch-size"), "int", 512,
        "physical batch size", env="LLAMA_ARG_UBATCH", minimum=1)
    threads: int = option(("-t", "--threads"), "int", -1,
        "CPU threads for generation (-1 = the CPUs this container may use: its CPU set, held to its CPU quota)",
        env="LLAMA_ARG_THREADS", minimum=-1)
    threads_batch: int = option(("-tb", "--threads-batch"), "int", -1,
        "CPU threads for prompt processing (-1 = same as --threads)",
        env="LLAMA_ARG_THREADS_BATCH", minimum=-1)
    cpu_mask: str | None = option(("-C", "--cpu-mask"), "str", None,
        "CPUs for llama.cpp's threads, a hexadecimal mask (bit i: CPU i); with --cpu-range, both", metavar="M")
    cpu_range: str | None = option(("-Cr", "--cpu-range"), "str", None, "CPUs for llama.cpp's threads, lo-hi",
        metavar="lo-hi")
    cpu_strict: int = option(("--cpu-strict",), "int", 0,
        "1: each of llama.cpp's threads bound to one CPU of --cpu-mask/--cpu-range", minimum=0, metavar="<0|1>")
    prio: int = option(("--prio",), "int", 0,
        "process priority: low(-1), normal(0), medium(1), high(2), realtime(3); above normal needs CAP_SYS_NICE",
        minimum=-1, metavar="N")
    poll: int = option(("--poll",), "int", 50,
        "how long llama.cpp's threads spin waiting for work, 0 to 100 (0: they sleep at once, kinder to a shared "
        "core)", minimum=0, metavar="<0...100>")
    n_gpu_layers: str = option(("-ngl", "--gpu-layers", "--n-gpu-layers"), "str", "auto",
        "layers to offload to the GPU: a number, 'auto' or 'all'", env="LLAMA_ARG_N_GPU_LAYERS",
        metavar="N")
    fit: str = option(("-fit", "--fit"), "str", "on",
        "fit what is left unset to free memory: the context (-c 0) and the GPU layers (-ngl auto)",
        env="LLAMA_ARG_FIT", metavar="[on|off]")
    fit_ctx: int = option(("-fitc", "--fit-ctx"), "int", 4096, "the smallest context --fit may choose",
        env="LLAMA_ARG_FIT_CTX", minimum=1, metavar="N")
    fit_target: str = option(("-fitt", "--fit-target"), "str", "1024",
        "MiB --fit leaves free on each device (comma-separated per device: the largest counts here)",
        env="LLAMA_ARG_FIT_TARGET", metavar="MiB0,MiB1,...")
    flash_attn: str = option(("-fa", "--flash-attn"), "str", "auto",
        "flash attention: on, off or auto (also 1/true/enabled, 0/false/disabled, -1)", env="LLAMA_ARG_FLASH_ATTN",
        metavar="[on|off|auto]")
    cache_type_k: str = option(("-ctk", "--cache-type-k"), "choice", "f16", "KV cache data type for K",
        env="LLAMA_ARG_CACHE_TYPE_K", choices=KV_CACHE_TYPES, metavar="TYPE")
    cache_type_v: str = option(("-ctv", "--cache-type-v"), "choice", "f16",
        "KV cache data type for V (quantized types need flash attention)", env="LLAMA_ARG_CACHE_TYPE_V",
        choices=KV_CACHE_TYPES, metavar="TYPE")
    rope_scaling: str | None = option(("--rope-scaling",), "choice", None,
        "RoPE frequency scaling method (default: the model's)", env="LLAMA_ARG_ROPE_SCALING_TYPE",
        choices=("none", "linear", "yarn"))
    rope_scale: float | None = option(("--rope-scale",), "float", None,
        "RoPE context scaling factor: expands the context by this factor", env="LLAMA_ARG_ROPE_SCALE",
        metavar="N")
    rope_freq_base: float | None = option(("--rope-freq-base",), "float", None,
        "RoPE base frequency (default: the model's)", env="LLAMA_ARG_ROPE_FREQ_BASE", metavar="N")
    rope_freq_scale: float | None = option(("--rope-freq-scale",), "float", None,
        "RoPE frequency scaling factor: expands the context by 1/N (default: the model's)",
        env="LLAMA_ARG_ROPE_FREQ_SCALE", metavar="N")
    yarn_orig_ctx: int = option(("--yarn-orig-ctx",), "int", 0,
        "YaRN: the model's original context (0: its training context)", env="LLAMA_ARG_YARN_ORIG_CTX", minimum=0)
    yarn_ext_factor: float = option(("--yarn-ext-factor",), "float", -1.0,
        "YaRN: extrapolation mix factor (-1: the model's, 0: full interpolation)", env="LLAMA_ARG_YARN_EXT_FACTOR")
    yarn_attn_factor: float = option(("--yarn-attn-factor",), "float", -1.0,
        "YaRN: attention magnitude scale (-1: the model's)", env="LLAMA_ARG_YARN_ATTN_FACTOR")
    yarn_beta_slow: float = option(("--yarn-beta-slow",), "float", -1.0,
        "YaRN: high correction dim or alpha (-1: the model's)", env="LLAMA_ARG_YARN_BETA_SLOW")
    yarn_beta_fast: float = option(("--yarn-beta-fast",), "float", -1.0,
        "YaRN: low correction dim or beta (-1: the model's)", env="LLAMA_ARG_YARN_BETA_FAST")
    kv_offload: bool = option(("-kvo", "--kv-offload"), "bool", True,
        "keep the KV cache on the GPU with the offloaded layers (--no-kv-offload: in host memory)",
        env="LLAMA_ARG_KV_OFFLOAD", negative_flags=("-nkvo", "--no-kv-offload"))
    kv_unified: bool = option(("-kvu", "--kv-unified"), "bool", False,
        "one KV cache that every slot shares: a slot may take the whole --ctx-size while the others leave "
        "room (default: per-slot cells of ctx-size / parallel, so batched output equals solo output)",
        env="LLAMA_ARG_KV_UNIFIED", negative_flags=("-no-kvu", "--no-kv-unified"))
    cache_idle_slots: bool = option(("--cache-idle-slots",), "bool", True,
        "when a request starts, idle slots' prompts go to the prompt cache (--cache-ram), and with -kvu their "
        "cells are freed", env="LLAMA_ARG_CACHE_IDLE_SLOTS", negative_flags=("--no-cache-idle-slots",))
    swa_full: bool = option(("--swa-full",), "bool", False,
        "a full-size cache for sliding-window attention layers (more memory; llama.cpp's default is the window)",
        env="LLAMA_ARG_SWA_FULL")
    load_mode: str | None = option(("-lm", "--load-mode"), "choice", None,
        "how the model file is loaded: auto (mmap unless a device cannot), none (read into memory), mmap, mlock, "
        "mmap+mlock, dio (direct I/O) (default: auto)", env="LLAMA_ARG_LOAD_MODE", choices=tuple(LOAD_MODES),
        metavar="MODE")
    mlock: bool = option(("--mlock",), "bool", False,
        "older llama.cpp's flag: keep the model in RAM (taken as --load-mode mlock or mmap+mlock, with a warning)",
        env="LLAMA_ARG_MLOCK")
    mmap: bool = option(("--mmap",), "bool", True,
        "older llama.cpp's flag: --no-mmap reads the model into memory (taken as --load-mode none or mlock, "
        "with a warning)", env="LLAMA_ARG_MMAP", negative_flags=("--no-mmap",))
    lazy_mode: str = option(("-lzm", "--lazy-mode"), "choice", "auto",
        "on-demand reading of the tensors an architecture marks (per-layer embeddings): on, auto (above 4 GiB), "
        "off", env="LLAMA_ARG_LAZY_MODE", choices=tuple(LAZY_MODES), metavar="MODE")
    numa: str | None = option(("--numa",), "choice", None,
        "NUMA optimizations: distribute (threads over all nodes), isolate (the starting node's CPUs), numactl "
        "(numactl's CPU map) (default: none)", env="LLAMA_ARG_NUMA", choices=tuple(NUMA_STRATEGIES), metavar="TYPE")
    check_tensors: bool = option(("--check-tensors",), "bool", False,
        "check the model's tensor data for invalid values (NaN, infinity) at load; a bad model fails to load")
    override_kv: tuple[str, ...] = option(("--override-kv",), "keys", (),
        "override model metadata: KEY=TYPE:VALUE with TYPE int, float, bool or str; comma-separated, repeatable",
        metavar="KEY=TYPE:VALUE,...")
    split_mode: str = option(("-sm", "--split-mode"), "choice", "layer",
        "how a model is split over several GPUs: none (one GPU), layer, row, tensor", env="LLAMA_ARG_SPLIT_MODE",
        choices=tuple(SPLIT_MODES))
    tensor_split: str | None = option(("-ts", "--tensor-split"), "str", None,
        "the fraction of the model for each GPU, e.g. 3,1", env="LLAMA_ARG_TENSOR_SPLIT", metavar="N0,N1,...")
    main_gpu: int = option(("-mg", "--main-gpu"), "int", 0,
        "the GPU for the whole model (split mode none) or for intermediate results and KV (row)",
        env="LLAMA_ARG_MAIN_GPU", minimum=0, metavar="INDEX")
    repack: bool = option(("--repack",), "bool", True,
        "repack weights into the CPU's faster layouts at load (--no-repack: keep the file's)",
        env="LLAMA_ARG_REPACK", negative_flags=("-nr", "--no-repack"))
    op_offload: bool = option(("--op-offload",), "bool", True,
        "run host tensors' operations on the GPU when that is faster", negative_flags=("--no-op-offload",))
    no_host: bool = option(("--no-host",), "bool", False,
        "bypass the host buffer, so that extra buffer types can be used", env="LLAMA_ARG_NO_HOST")
    warmup: bool = option(("--warmup",), "bool", True,
        "one throw-away decode at load, so the first request does not pay for it", negative_flags=("--no-warmup",))
    context_shift: bool = option(("--context-shift",), "bool", False,
        "when a generation fills its slot's context, drop the oldest tokens after --keep and go on (off: it ends, "
        "truncated)", env="LLAMA_ARG_CONTEXT_SHIFT", negative_flags=("--no-context-shift",))
    keep: int = option(("--keep",), "int", 0,
        "prompt tokens a context shift keeps (-1: the whole prompt); a request's n_keep wins", minimum=-1)
    n_predict: int = option(("-n", "--n-predict", "--predict"), "int", -1,
        "most tokens to generate for a request that sets no budget (-1 = until the context is full); a "
        "request's own n_predict or max_tokens wins, as in llama-server",
        env="LLAMA_ARG_N_PREDICT", minimum=-1)
    seed: int = option(("-s", "--seed"), "int", -1, "default sampling seed (-1 = random)",
        env="LLAMA_ARG_SEED", minimum=-1)
    temp: float = option(("--temp", "--temperature"), "float", 0.8, "default temperature",
        env="LLAMA_ARG_TEMPERATURE", env_aliases=("LLAMA_ARG_TEMP",), minimum=0)
    top_k: int = option(("--top-k",), "int", 40, "default top-k", env="LLAMA_ARG_TOP_K", minimum=0)
    top_p: float = option(("--top-p",), "float", 0.95, "default top-p", env="LLAMA_ARG_TOP_P", minimum=0)
    min_p: float = option(("--min-p",), "float", 0.05, "default min-p", env="LLAMA_ARG_MIN_P", minimum=0)
    repeat_penalty: float = option(("--repeat-penalty",), "float", 1.0, "default repeat penalty",
        env="LLAMA_ARG_REPEAT_PENALTY", minimum=0)
    repeat_last_n: int = option(("--repeat-last-n",), "int", 64,
        "default window of the repeat penalties (-1 = slot context)",
        env="LLAMA_ARG_REPEAT_LAST_N", minimum=-1)
    top_nsigma: float = option(("--top-nsigma", "--top-n-sigma"), "float", _SAMPLING.top_n_sigma,
        "default top-n-sigma (-1: off)")
    xtc_probability: float = option(("--xtc-probability",), "float", _SAMPLING.xtc_probability,
        "default XTC probability (0: off)", minimum=0)
    xtc_threshold: float = option(("--xtc-threshold",), "float", _SAMPLING.xtc_threshold, "default XTC threshold",
        minimum=0)
    typical_p: float = option(("--typical", "--typical-p"), "float", _SAMPLING.typical_p,
        "default locally typical sampling p (1: off)", minimum=0)
    presence_penalty: float = option(("--presence-penalty",), "float", _SAMPLING.presence_penalty,
        "default presence penalty (0: off)", env="LLAMA_ARG_PRESENCE_PENALTY")
    frequency_penalty: float = option(("--frequency-penalty",), "float", _SAMPLING.frequency_penalty,
        "default frequency penalty (0: off)", env="LLAMA_ARG_FREQUENCY_PENALTY")
    dry_multiplier: float = option(("--dry-multiplier",), "float", _SAMPLING.dry_multiplier,
        "default DRY multiplier (0: off)", minimum=0)
    dry_base: float = option(("--dry-base",), "float", _SAMPLING.dry_base, "default DRY base", minimum=0)
    dry_allowed_length: int = option(("--dry-allowed-length",), "int", _SAMPLING.dry_allowed_length,
        "default DRY allowed length", minimum=0)
    dry_penalty_last_n: int = option(("--dry-penalty-last-n",), "int", _SAMPLING.dry_penalty_last_n,
        "default DRY window (-1: slot context, 0: off)", minimum=-1)
    dry_sequence_breaker: tuple[str, ...] = option(("--dry-sequence-breaker",), "texts", (),
        "a default DRY sequence breaker, replacing the built-in ones (\\n : \" *); repeatable; 'none': no breakers",
        metavar="STRING")
    dynatemp_range: float = option(("--dynatemp-range",), "float", _SAMPLING.dynatemp_range,
        "default dynamic temperature range (0: off)", minimum=0)
    dynatemp_exponent: float = option(("--dynatemp-exp",), "float", _SAMPLING.dynatemp_exponent,
        "default dynamic temperature exponent", minimum=0)
    mirostat: str = option(("--mirostat",), "choice", str(_SAMPLING.mirostat),
        "default Mirostat (0: off, 1: Mirostat, 2: Mirostat 2.0)", choices=("0", "1", "2"))
    mirostat_eta: float = option(("--mirostat-lr",), "float", _SAMPLING.mirostat_eta,
        "default Mirostat learning rate (eta)", minimum=0)
    mirostat_tau: float = option(("--mirostat-ent",), "float", _SAMPLING.mirostat_tau,
        "default Mirostat target entropy (tau)", minimum=0)
    ignore_eos: bool = option(("--ignore-eos",), "bool", _SAMPLING.ignore_eos,
        "by default, generate past end-of-generation tokens (until the token limit)")
    samplers: str | None = option(("--samplers",), "str", None,
        "default sampler order, names separated by ';' (default: " + ";".join(_SAMPLING.samplers) + ")",
        metavar="SAMPLERS")
    sampler_seq: str | None = option(("--sampler-seq", "--sampling-seq"), "str", None,
        "default sampler order, one letter a sampler (" + "".join(SAMPLER_LETTERS) + "); --samplers wins",
        metavar="SEQUENCE")
    logit_bias: tuple[str, ...] = option(("-l", "--logit-bias"), "texts", (),
        "a default logit bias, TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1); repeatable; a request's own "
        "logit_bias replaces them", metavar="TOKEN_ID(+/-)BIAS")
    grammar: str | None = option(("--grammar",), "str", None,
        "a default GBNF grammar, for requests that give no grammar or JSON schema", metavar="GRAMMAR")
    grammar_file: str | None = option(("--grammar-file",), "str", None, "a file holding the default grammar",
        metavar="FNAME")
    json_schema: str | None = option(("-j", "--json-schema"), "str", None,
        "a default JSON schema (its grammar), for requests that give no grammar or JSON schema", metavar="SCHEMA")
    json_schema_file: str | None = option(("-jf", "--json-schema-file"), "str", None,
        "a file holding the default JSON schema", metavar="FILE")
    reverse_prompt: tuple[str, ...] = option(("-r", "--reverse-prompt"), "texts", (),
        "a default stop string, for requests that give none; repeatable", metavar="PROMPT")
    spm_infill: bool = option(("--spm-infill",), "bool", False,
        "lay out /infill prompts suffix first (<FIM_SUF>suffix<FIM_PRE>prefix), for models trained that way")
    embd_normalize: int = option(("--embd-normalize",), "int", 2,
        "default normalization of native embeddings (-1: none, 0: max absolute int16, 1: taxicab, 2: Euclidean, "
        ">2: p-norm)", minimum=-1)
    chat_template_kwargs: str | None = option(("--chat-template-kwargs",), "str", None,
        "default arguments of the chat template, a JSON object (a request's own chat_template_kwargs add to "
        "them and win)", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", metavar="JSON")
    tags: tuple[str, ...] = option(("--tags",), "keys", (),
        "model tags for /v1/models, comma-separated (informational)", env="LLAMA_ARG_TAGS", metavar="TAGS")
    api_keys: tuple[str, ...] = option(("--api-key",), "keys", (),
        "API key(s), comma-separated; repeatable", env="LLAMA_API_KEY", metavar="KEY", secret=True)
    api_key_file: str | None = option(("--api-key-file",), "str", None,
        "file with one API key per line", env="LLAMA_ARG_API_KEY_FILE", metavar="FNAME")
    metrics: bool = option(("--metrics",), "bool", False, "enable GET /metrics (Prometheus)",
        env="LLAMA_ARG_ENDPOINT_METRICS")
    slots: bool = option(("--slots",), "bool", True, "enable GET /slots", env="LLAMA_ARG_ENDPOINT_SLOTS",
        negative_flags=("--no-slots",))
    slots_debug: bool = option(("--slots-debug",), "bool", False,
        "GET /slots shows each slot's whole request (grammar, stop strings, logit bias, prompt and text): "
        "other users' requests; by default only its sampling numbers, as llama-server",
        env="LLAMA_SERVER_SLOTS_DEBUG")
    props: bool = option(("--props",), "bool", False, "enable POST /props",
        env="LLAMA_ARG_ENDPOINT_PROPS")
    jinja: bool = option(("--jinja",), "bool", True,
        "render chat with the model's Jinja template (--no-jinja: llama.cpp's built-in templates)",
        env="LLAMA_ARG_JINJA", negative_flags=("--no-jinja",))
    chat_template: str | None = option(("--chat-template",), "str", None,
        "chat template: a built-in name (chatml) or Jinja source", env="LLAMA_ARG_CHAT_TEMPLATE",
        metavar="JINJA")
    chat_template_file: str | None = option(("--chat-template-file",), "str", None,
        "file holding a Jinja chat template", env="LLAMA_ARG_CHAT_TEMPLATE_FILE", metavar="FNAME")
    reasoning_format: str = option(("--reasoning-format",), "choice", "auto",
        "how <think> text is returned: auto/deepseek (split into reasoning_content), deepseek-legacy "
        "(split and kept in the content), none (left in the content)", env="LLAMA_ARG_THINK",
        choices=("auto", "none", "deepseek", "deepseek-legacy"))
    reuse_port: bool = option(("--reuse-port",), "bool", False,
        "let several sockets bind the same port (SO_REUSEPORT)", env="LLAMA_ARG_REUSE_PORT")
    ssl_key_file: str | None = option(("--ssl-key-file",), "str", None,
        "serve HTTPS: the PEM private key (with --ssl-cert-file)", env="LLAMA_ARG_SSL_KEY_FILE", metavar="FNAME")
    ssl_cert_file: str | None = option(("--ssl-cert-file",), "str", None,
        "serve HTTPS: the PEM certificate (with --ssl-key-file)", env="LLAMA_ARG_SSL_CERT_FILE", metavar="FNAME")
    sse_ping_interval: int = option(("--sse-ping-interval",), "int", 30,
        "seconds a stream may stay silent before an SSE comment is sent to keep it alive (-1: never); a "
        "request's sse_ping_interval wins", env="LLAMA_ARG_SSE_PING_INTERVAL", minimum=-1, metavar="SECONDS")
    reasoning: str = option(("-rea", "--reasoning"), "str", "auto",
        "thinking in chats: on, off (the template's enable_thinking) or auto (the template's default)",
        env="LLAMA_ARG_REASONING", metavar="[on|off|auto]")
    reasoning_effort: str | None = option(("--reasoning-effort",), "str", None,
        "the default reasoning_effort of chats (a template argument, e.g. low, medium, high; none: no thinking)",
        env="LLAMA_ARG_REASONING_EFFORT", metavar="EFFORT")
    reasoning_budget: int = option(("--reasoning-budget",), "int", -1,
        "tokens a chat may think before its end of thinking is forced in (-1: no limit, 0: none); a request's "
        "reasoning_budget_tokens wins", env="LLAMA_ARG_THINK_BUDGET", minimum=-1, metavar="N")
    reasoning_budget_message: str | None = option(("--reasoning-budget-message",), "str", None,
        "text put before the forced end of thinking", env="LLAMA_ARG_THINK_BUDGET_MESSAGE", metavar="MESSAGE")
    threads_http: int = option(("--threads-http",), "int", -1,
        "HTTP threads (-1 = max(parallel + 4, cores - 1))", env="LLAMA_ARG_THREADS_HTTP",
        minimum=-1)
    timeout: int = option(("-to", "--timeout"), "int", 600,
        "HTTP read/write timeout in seconds: a connection that sends or takes nothing for this long is closed",
        env="LLAMA_ARG_TIMEOUT", minimum=1)
    api_prefix: str = option(("--api-prefix",), "str", "", "prefix every route with this path",
        env="LLAMA_ARG_API_PREFIX", metavar="PREFIX")
    cont_batching: bool = option(("-cb", "--cont-batching"), "bool", True,
        "continuous batching: admit new requests while others generate",
        env="LLAMA_ARG_CONT_BATCHING", negative_flags=("-nocb", "--no-cont-batching"))
    cache_prompt: bool = option(("--cache-prompt",), "bool", True,
        "reuse each slot's KV prefix across requests (the per-request default)",
        env="LLAMA_ARG_CACHE_PROMPT", negative_flags=("--no-cache-prompt",))
    predict_default_route: str = option(("--predict-default-route",), "str", "/v1/chat/completions",
        "on Vertex AI, the route that answers a predict body that is not an instances envelope "
        "(:rawPredict, :streamRawPredict)", env="LLAMA_ARG_PREDICT_DEFAULT_ROUTE", metavar="PATH")
    predict_deadline: float = option(("--predict-deadline",), "float", 0.0,
        "end every generation this many seconds after it was submitted, returning what it has "
        "(finish_reason length): set it below the endpoint's time limit (0: no deadline)",
        env="LLAMA_ARG_PREDICT_DEADLINE", minimum=0, metavar="SECONDS")
    max_response_bytes: int = option(("--max-response-bytes",), "int", 0,
        "largest /predict answer (an error naming the limit above it): a shared Vertex AI endpoint takes "
        "1.5 MB (0: no limit)", env="LLAMA_ARG_MAX_RESPONSE_BYTES", minimum=0, metavar="BYTES")
    max_body_bytes: int = option(("--max-body-bytes",), "int", 10 * 1024 * 1024,
        "largest request body accepted (413 above it); the default matches a dedicated Vertex AI endpoint",
        env="LLAMA_ARG_MAX_BODY_BYTES", minimum=1)
    model_cache_dir: str | None = option(("--model-cache-dir",), "str", None,
        "where models from gs:// are downloaded (default: ~/.cache/vertex-llama/models)",
        env="LLAMA_ARG_MODEL_CACHE_DIR", metavar="DIR")
    embeddings: bool = option(("--embedding", "--embeddings"), "bool", False,
        "llama-server's embedding-only mode: generation endpoints answer 501 (embeddings are always "
        "served, from a second context on the model)", env="LLAMA_ARG_EMBEDDINGS")
    reranking: bool = option(("--rerank", "--reranking"), "bool", False,
        "enable the rerank endpoints (rank pooling; needs a model with a classification head)",
        env="LLAMA_ARG_RERANKING")
    pooling: str = option(("--pooling",), "choice", "unspecified",
        "pooling of the embedding context (default: the model's)", env="LLAMA_ARG_POOLING",
        choices=("unspecified", "none", "mean", "cls", "last", "rank"))
    lora: tuple[str, ...] = option(("--lora",), "paths", (), "LoRA adapter file (scale 1); repeatable",
        env="LLAMA_ARG_LORA", metavar="FNAME")
    lora_scaled: tuple[tuple[str, float], ...] = option(("--lora-scaled",), "scaled", (),
        "LoRA adapters with their scales, llama-server's FNAME:SCALE,... (or FNAME SCALE); repeatable",
        metavar="FNAME:SCALE")
    mmproj: str | None = option(("-mm", "--mmproj"), "str", None,
        "multimodal projector file (a path or gs://): images and audio in prompts (default: an mmproj-*.gguf "
        "beside a gs:// model)", env="LLAMA_ARG_MMPROJ", metavar="FILE")
    mmproj_auto: bool = option(("--mmproj-auto",), "bool", True,
        "use an mmproj-*.gguf found beside a gs:// model when --mmproj is not given", env="LLAMA_ARG_MMPROJ_AUTO",
        negative_flags=("--no-mmproj", "--no-mmproj-auto"))
    mmproj_offload: bool = option(("--mmproj-offload",), "bool", True,
        "run the projector on the GPU (when layers are offloaded)", env="LLAMA_ARG_MMPROJ_OFFLOAD",
        negative_flags=("--no-mmproj-offload",))
    image_min_tokens: int = option(("--image-min-tokens",), "int", -1,
        "fewest tokens an image becomes, for projectors with dynamic resolution (-1: the projector's own)",
        env="LLAMA_ARG_IMAGE_MIN_TOKENS", minimum=-1)
    image_max_tokens: int = option(("--image-max-tokens",), "int", -1,
        "most tokens an image becomes, for projectors with dynamic resolution (-1: the projector's own)",
        env="LLAMA_ARG_IMAGE_MAX_TOKENS", minimum=-1)
    media_path: str | None = option(("--media-path",), "str", None,
        "the directory file:// media in requests may come from (default: file:// is refused)",
        env="LLAMA_ARG_MEDIA_PATH", metavar="DIR")
    media_urls: bool = option(("--media-urls",), "bool", False,
        "fetch http(s) image and audio URLs given in requests (default: only data: URIs and --media-path files)",
        env="LLAMA_ARG_MEDIA_URLS", negative_flags=("--no-media-urls",))
    media_max_bytes: int = option(("--media-max-bytes",), "int", 20 * 1024 * 1024,
        "largest media item a request may give or a URL may return", env="LLAMA_ARG_MEDIA_MAX_BYTES", minimum=1)
    cache_reuse: int = option(("--cache-reuse",), "int", 0,
        "reuse cached chunks of at least this many tokens that follow the common prefix, by moving their KV "
        "cells (0: off); a request's n_cache_reuse wins", env="LLAMA_ARG_CACHE_REUSE", minimum=0, metavar="N")
    slot_prompt_similarity: float = option(("-sps", "--slot-prompt-similarity"), "float", 0.1,
        "a request goes to the idle slot whose cache holds the largest share of its prompt when that share is over "
        "this; else to the least recently used slot (0: always)", minimum=0, metavar="SIMILARITY")
    cache_ram: int | None = option(("-cram", "--cache-ram"), "int", None,
        "prompt cache in host RAM, MiB: prompt states that leave their slot are kept and restored into any slot "
        "whose request shares their prefix (default: the smaller of 8192 and a quarter of the memory available "
        "at start; -1: no limit; 0: off)", env="LLAMA_ARG_CACHE_RAM", minimum=-1, metavar="MIB")
    spec_type: str = option(("--spec-type",), "str", "none",
        "comma-separated speculative decoding types, tried in order: ngram-simple (drafts from the slot's own "
        "history), draft-simple (a draft model; the default when --spec-draft-model is given), none",
        env="LLAMA_ARG_SPEC_TYPE", metavar="TYPES")
    spec_draft_model: str | None = option(("-md", "--model-draft", "--spec-draft-model"), "str", None,
        "draft model for speculative decoding (same vocabulary; a path or a gs:// URI)",
        env="LLAMA_ARG_SPEC_DRAFT_MODEL", metavar="FNAME")
    spec_draft_n_max: int = option(("--spec-draft-n-max",), "int", 3,
        "most tokens the draft model drafts per step (a request's speculative.n_max wins)",
        env="LLAMA_ARG_SPEC_DRAFT_N_MAX", minimum=0, metavar="N")
    spec_draft_n_min: int = option(("--spec-draft-n-min",), "int", 0,
        "a shorter draft-model draft is not verified (a request's speculative.n_min wins)",
        env="LLAMA_ARG_SPEC_DRAFT_N_MIN", minimum=0, metavar="N")
    spec_draft_p_min: float = option(("--spec-draft-p-min", "--draft-p-min"), "float", 0.0,
        "a draft ends at a token the draft model gives less than this probability (a request's speculative.p_min "
        "wins)", env="LLAMA_ARG_SPEC_DRAFT_P_MIN", minimum=0, metavar="P")
    spec_draft_ngl: str = option(("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"), "str",
        "auto", "draft model layers to offload to the GPU: a number, 'auto' or 'all'",
        env="LLAMA_ARG_N_GPU_LAYERS_DRAFT", metavar="N")
    spec_draft_threads: int = option(("-td", "--threads-draft", "--spec-draft-threads"), "int", -1,
        "CPU threads of the draft model (-1: --threads)", minimum=-1, metavar="N")
    spec_draft_threads_batch: int = option(("-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"), "int", -1,
        "CPU threads of the draft model's prompt processing (-1: --threads-draft)", minimum=-1, metavar="N")
    spec_draft_type_k: str = option(("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), "choice", "f16",
        "the draft model's KV cache data type for K", choices=KV_CACHE_TYPES, metavar="TYPE")
    spec_draft_type_v: str = option(("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), "choice", "f16",
        "the draft model's KV cache data type for V", choices=KV_CACHE_TYPES, metavar="TYPE")
    spec_ngram_simple_size_n: int = option(("--spec-ngram-simple-size-n",), "int", 12,
        "ngram-simple: tokens looked up in the history (the last sampled one included)", minimum=1, metavar="N")
    spec_ngram_simple_size_m: int = option(("--spec-ngram-simple-size-m",), "int", 48,
        "ngram-simple: most tokens drafted after a match", minimum=1, metavar="N")
    media_marker: str | None = option(("--media-marker",), "str", None,
        "the text that stands for a media item in prompts and prompt_string (default: random per start, as "
        "llama-server's; /props reports it)", env="LLAMA_MEDIA_MARKER", metavar="TEXT")
    slot_save_path: str | None = option(("--slot-save-path",), "str", None,
        "directory for POST /slots/{id}?action=save|restore files", env="LLAMA_ARG_SLOT_SAVE_PATH",
        metavar="PATH")
    sleep_idle_seconds: int = option(("--sleep-idle-seconds",), "int", -1,
        "free the model after this many idle seconds and load it again on the next request (-1: never)",
        env="LLAMA_ARG_SLEEP_IDLE_SECONDS", minimum=-1)
    max_queue: int = option(("--max-queue",), "int", 64,
        "requests that may wait for a free slot; more are answered 503 at once", env="LLAMA_ARG_MAX_QUEUE",
        minimum=0)
    cors_origins: str = option(("--cors-origins",), "str", "*",
        "comma-separated origins allowed by CORS ('*': any origin; 'localhost': origins on this machine)",
        env="LLAMA_ARG_CORS_ORIGINS", metavar="ORIGINS")
    cors_methods: str = option(("--cors-methods",), "str", "GET, POST, DELETE, OPTIONS",
        "comma-separated methods allowed by CORS", env="LLAMA_ARG_CORS_METHODS", metavar="METHODS")
    cors_headers: str = option(("--cors-headers",), "str", "*", "comma-separated headers allowed by CORS",
        env="LLAMA_ARG_CORS_HEADERS", metavar="HEADERS")
    cors_credentials: bool = option(("--cors-credentials",), "bool", True,
        "allow credentials in CORS requests (with --cors-origins '*' the origin is echoed)",
        env="LLAMA_ARG_CORS_CREDENTIALS", negative_flags=("--no-cors-credentials",))
    ui: bool = option(("--ui", "--webui"), "bool", True,
        "serve the web UI at / (chat, the Vertex AI predict console, live slots); public, served while the "
        "model loads", env="LLAMA_ARG_UI", negative_flags=("--no-ui", "--no-webui"))
    static_path: str | None = option(("--path",), "str", None,
        "serve the static files of this directory at / instead of the built-in web UI",
        env="LLAMA_ARG_STATIC_PATH", metavar="PATH")
    version: bool = option(("--version",), "bool", False,
        "print the versions (this server, llama-cpp-python, the llama.cpp it vendors) and exit")
    verbose: bool = option(("-v", "--verbose", "--log-verbose"), "bool", False, "verbose logging (llama.cpp logs too)",
        env="LLAMA_ARG_VERBOSE")
    log_verbosity: int = option(("-lv", "--verbosity", "--log-verbosity"), "int", 3,
        "log threshold: 0 generic, 1 errors, 2 warnings, 3 info, 4 debug (llama.cpp's too, as -v)",
        env="LLAMA_ARG_LOG_VERBOSITY", minimum=0, metavar="N")
    log_disable: bool = option(("--log-disable",), "bool", False, "no log output")
    log_file: str | None = option(("--log-file",), "str", None, "also write the log to this file",
        env="LLAMA_ARG_LOG_FILE", metavar="FNAME")
    log_colors: str = option(("--log-colors",), "str", "auto",
        "colored levels in the text log: on, off or auto (a terminal)", env="LLAMA_ARG_LOG_COLORS",
        metavar="[on|off|auto]")
    log_prefix: bool = option(("--log-prefix",), "bool", True, "each text log line names its level and logger",
        env="LLAMA_ARG_LOG_PREFIX", negative_flags=("--no-log-prefix",))
    log_timestamps: bool = option(("--log-timestamps",), "bool", True, "each text log line starts with its time",
        env="LLAMA_ARG_LOG_TIMESTAMPS", negative_flags=("--no-log-timestamps",))
    log_jsonl: bool = option(("--log-jsonl",), "bool", False,
        "the log as JSON lines (Cloud Logging's fields; always so with AIP_MODE=PREDICTION)",
        env="LLAMA_ARG_LOG_JSONL", negative_flags=("--no-log-jsonl",))
    # Not an option: the start-up warnings for llama-server flags given that have no effect here.
    notes: tuple[str, ...] = field(default=())

    @property
    def sampling_defaults(self) -> SamplingParams:
        """The sampling a request gets for every field it does not set: SamplingParams' defaults,
        with the server's own (--temp, --top-k, ...) in their place."""
        return replace(SamplingParams(), temperature=self.temp, top_k=self.top_k, top_p=self.top_p,
                       min_p=self.min_p, repeat_penalty=self.repeat_penalty, repeat_last_n=self.repeat_last_n,
                       seed=RANDOM_SEED if self.seed < 0 else self.seed, top_n_sigma=self.top_nsigma,
                       xtc_probability=self.xtc_probability, xtc_threshold=self.xtc_threshold,
                       typical_p=self.typical_p, presence_penalty=self.presence_penalty,
                       frequency_penalty=self.frequency_penalty, dry_multiplier=self.dry_multiplier,
                       dry_base=self.dry_base, dry_allowed_length=self.dry_allowed_length,
                       dry_penalty_last_n=self.dry_penalty_last_n, dynatemp_range=self.dynatemp_range,
                       dynatemp_exponent=self.dynatemp_exponent, mirostat=int(self.mirostat),
                       mirostat_eta=self.mirostat_eta, mirostat_tau=self.mirostat_tau, ignore_eos=self.ignore_eos,
                       samplers=self.sampler_order or _SAMPLING.samplers, logit_bias=self.default_logit_bias,
                       dry_sequence_breakers=self.dry_breakers)

    @property
    def dry_breakers(self) -> tuple[str, ...]:
        """--dry-sequence-breaker as llama-server takes it: the first replaces the built-in breakers,
        ``none`` clears those given before it."""
        if not self.dry_sequence_breaker:
            return _SAMPLING.dry_sequence_breakers
        breakers: list[str] = []
        for value in self.dry_sequence_breaker:
            breakers = [] if value == "none" else [*breakers, value]
        return tuple(breakers)

    @property
    def default_logit_bias(self) -> tuple[tuple[int, float], ...]:
        """``--logit-bias`` as (token, bias) pairs; a SettingsError names a bad one."""
        pairs = []
        for item in self.logit_bias:
            match = re.fullmatch(r"\s*(-?\d+)\s*([+-])\s*(\S+)\s*", item)
            try:
                if match is None:
                    raise ValueError(item)
                bias = float(match[3])
            except ValueError:
                raise SettingsError(f"--logit-bias/-l: {item!r} is not TOKEN_ID+BIAS or TOKEN_ID-BIAS") from None
            pairs.append((int(match[1]), -bias if match[2] == "-" else bias))
        return tuple(pairs)

    def default_grammar_source(self) -> tuple[Literal["grammar", "schema"], Any] | None:
        """The default constraint of requests that give none: (``grammar``, GBNF) from --grammar or
        --grammar-file, (``schema``, a JSON schema) from --json-schema or --json-schema-file, None
        without them. Reads the file; a SettingsError names a file or schema that cannot be used."""
        given = [(name, value) for name, value in (("--grammar", self.grammar), ("--grammar-file", self.grammar_file),
                                                   ("--json-schema", self.json_schema),
                                                   ("--json-schema-file", self.json_schema_file)) if value is not None]
        if not given:
            return None
        if len(given) > 1:
            raise SettingsError(f"{' and '.join(name for name, _ in given)}: give one default grammar or schema")
        name, value = given[0]
        if name.endswith("-file"):
            try:
                with open(value, encoding="utf-8") as handle:
                    value = handle.read()
            except OSError as exc:
                raise SettingsError(f"{name}: cannot read {value!r}: {exc.strerror}") from None
        if name.startswith("--grammar"):
            return "grammar", value
        try:
            schema = json.loads(value)
        except ValueError as exc:
            raise SettingsError(f"{name}: not JSON: {exc}") from None
        if not isinstance(schema, dict | bool):
            raise SettingsError(f"{name}: a JSON schema must be an object")
        return "schema", schema

    @property
    def sampler_order(self) -> tuple[str, ...] | None:
        """--samplers (names) or --sampler-seq (letters); None when neither is given or one is unknown."""
        if self.samplers is not None:
            return sampler_names([name.strip() for name in self.samplers.split(";") if name.strip()])
        return sampler_names(self.sampler_seq) if self.sampler_seq is not None else None

    def prompt_cache_bytes(self, available: int | None) -> int | None:
        """The prompt cache's limit in bytes (0: off, None: no limit). llama-server's default is 8192
        MiB; here a container shares its memory with the weights (on CPU) and a Vertex AI machine may
        be small, so the default is also held to a quarter of the memory ``available`` at start."""
        if self.cache_ram is not None:
            return None if self.cache_ram < 0 else self.cache_ram << 20
        default = DEFAULT_CACHE_RAM_MIB << 20
        return default if available is None else min(default, available // 4)

    @property
    def listen_hosts(self) -> tuple[str, ...]:
        """``--host`` as llama-server splits it: comma-separated, blanks dropped."""
        return tuple(host.strip() for host in self.host.split(",") if host.strip())

    @property
    def ui_directory(self) -> str | None:
        """The directory served at ``/``: ``--path``, else the built-in UI; None with ``--no-ui``."""
        if not self.ui:
            return None
        return self.static_path or str(BUILTIN_UI_DIRECTORY)

    @property
    def slot_count(self) -> int:
        """``--parallel`` with ``-1`` (auto) resolved to llama-server's 4."""
        return 4 if self.n_parallel == -1 else self.n_parallel

    @functools.cached_property
    def compute_cpus(self) -> frozenset[int] | None:
        """The CPUs --cpu-mask and --cpu-range give llama.cpp's threads (None: not placed), of those the
        process may use when first asked (at validation): read once, so the engine thread, whose own
        affinity is this set once placed, gets the same answer without reading it again."""
        try:
            return compute_cpus(self.cpu_mask, self.cpu_range, frozenset(os.sched_getaffinity(0)))
        except PlacementError as exc:
            raise SettingsError(str(exc)) from None

    @property
    def cpu_threads(self) -> int:
        """--threads; by default the CPUs --cpu-mask/--cpu-range give, else those the container may use."""
        if self.threads > 0:
            return self.threads
        placed = self.compute_cpus
        return len(placed) if placed else usable_cpus()

    @property
    def cpu_threads_batch(self) -> int:
        return self.threads_batch if self.threads_batch > 0 else self.cpu_threads

    @property
    def http_threads(self) -> int:
        if self.threads_http > 0:
            return max(self.threads_http, self.slot_count + 4)
        return max(self.slot_count + 4, usable_cpus() - 1)

    @property
    def spec_type_names(self) -> tuple[str, ...]:
        """--spec-type's comma-separated names, as given."""
        return tuple(kind.strip() for kind in self.spec_type.split(",") if kind.strip())

    @property
    def speculation(self) -> SpeculationOptions:
        """--spec-type and the --spec-* settings; a draft model alone means draft-simple, as upstream."""
        types = tuple(kind for kind in self.spec_type_names if kind != "none")
        if not types and self.spec_draft_model is not None:
            types = ("draft-simple",)
        return SpeculationOptions(types=types, draft_n_max=self.spec_draft_n_max, draft_n_min=self.spec_draft_n_min,
                                  draft_p_min=self.spec_draft_p_min, ngram_size_n=self.spec_ngram_simple_size_n,
                                  ngram_size_m=self.spec_ngram_simple_size_m)

    @property
    def draft_gpu_layers(self) -> int:
        """``-ngld`` as llama.cpp's number (``auto``/``all``: every layer)."""
        return _gpu_layers("--spec-draft-ngl/-ngld", self.spec_draft_ngl)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """The template's default arguments: --reasoning on/off as enable_thinking, then
        --chat-template-kwargs (checked to be a JSON object at start-up)."""
        thinking = self.reasoning.strip().lower()
        kwargs: dict[str, Any] = {"enable_thinking": thinking in _TRUE} if thinking in _TRUE | _FALSE else {}
        return kwargs | (dict(json.loads(self.chat_template_kwargs)) if self.chat_template_kwargs else {})

    @property
    def rope_frequency_scale(self) -> float:
        """llama.cpp's rope_freq_scale: --rope-freq-scale, else 1 / --rope-scale, else 0 (the model's)."""
        if self.rope_freq_scale is not None:
            return self.rope_freq_scale
        return 1.0 / self.rope_scale if self.rope_scale else 0.0

    @property
    def flash_attn_mode(self) -> str:
        """``--flash-attn`` as on, off or auto (llama-server's truthy and falsy spellings taken)."""
        value = self.flash_attn.strip().lower()
        if value in _TRUE:
            return "on"
        if value in _FALSE:
            return "off"
        return "auto" if value in ("auto", "-1") else value

    @property
    def debug_logs(self) -> bool:
        """-v, or -lv 4 and above: debug lines, llama.cpp's own included."""
        return self.verbose or self.log_verbosity >= 4

    @property
    def fit_enabled(self) -> bool:
        return self.fit.strip().lower() in _TRUE

    @property
    def fit_margin_mib(self) -> int:
        """--fit-target: the largest of the per-device margins (one margin for every device here)."""
        try:
            return max(int(part) for part in re.split(r"[,/]+", self.fit_target) if part.strip())
        except ValueError:
            raise SettingsError(f"--fit-target/-fitt: {self.fit_target!r} is not a list of MiB, e.g. 1024") from None

    @property
    def gpu_layers(self) -> int:
        """``--n-gpu-layers`` as llama.cpp's number: ``auto``/``all`` offload every layer."""
        return _gpu_layers("--n-gpu-layers/-ngl", self.n_gpu_layers)

    @property
    def model_load_mode(self) -> str:
        """``--load-mode``, else the older ``--mlock`` / ``--no-mmap`` as llama.cpp maps them, else auto."""
        if self.load_mode is not None:
            return self.load_mode
        if self.mlock:
            return "mmap+mlock" if self.mmap else "mlock"
        return "auto" if self.mmap else "none"

    @property
    def kv_overrides(self) -> tuple[KvOverride, ...]:
        """``--override-kv`` as typed overrides (llama-server's KEY=TYPE:VALUE); a SettingsError names a bad one."""
        return tuple(_kv_override(item) for item in self.override_kv)

    @property
    def tensor_split_fractions(self) -> tuple[float, ...]:
        """``--tensor-split`` as numbers (llama-server splits at ',' and '/'); () when not given."""
        if not self.tensor_split:
            return ()
        try:
            return tuple(float(part) for part in re.split(r"[,/]+", self.tensor_split) if part)
        except ValueError:
            raise SettingsError(f"--tensor-split/-ts: {self.tensor_split!r} is not a list of numbers, e.g. 3,1"
                                ) from None

    @property
    def lora_adapters(self) -> tuple[tuple[str, float], ...]:
        """Every adapter with its starting scale: ``--lora`` ones at 1, then ``--lora-scaled``."""
        return tuple((path, 1.0) for path in self.lora) + self.lora_scaled

    @property
    def route_prefix(self) -> str:
        prefix = self.api_prefix.rstrip("/")
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        return prefix

    def all_api_keys(self) -> tuple[str, ...]:
        """Keys from ``--api-key`` and from ``--api-key-file`` (read at start-up)."""
        keys = list(self.api_keys)
        if self.api_key_file:
            with open(self.api_key_file, encoding="utf-8") as handle:  # one a line; # starts a comment line
                found = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
            if not found:  # fail closed: a file meant to hold keys turns nothing off by being empty
                raise SettingsError(f"--api-key-file {self.api_key_file}: the file holds no key")
            keys.extend(found)
        return tuple(keys)


OPTIONS: tuple[Option, ...] = tuple(
    Option(dest=item.name, default=item.default, **item.metadata["option"]) for item in fields(Settings)
    if "option" in item.metadata
)
HELP_FLAGS = ("-h", "--help", "--usage")  # llama-server's
_OWN_FLAGS = frozenset([*HELP_FLAGS, *(flag for option in OPTIONS for flag in (*option.flags, *option.negative_flags))])
UNIMPLEMENTED = unimplemented(_OWN_FLAGS)
EXTENSIONS = extensions((option.flags, option.negative_flags, option.env) for option in OPTIONS)
_UPSTREAM_DEST = "upstream:"


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


def _convert(option: Option, raw: str, where: str) -> Any:
    if option.secret and option.kind == "keys" and any(not key.strip() for key in raw.split(",")):
        # a blank key must not turn authentication off (fail closed)
        raise SettingsError(f"{where}: an empty or blank key (keys are comma-separated, and none may be empty)")
    try:
        if option.kind == "int":
            value: Any = int(raw)
        elif option.kind == "float":
            value = float(raw)
        elif option.kind == "bool":
            lowered = raw.strip().lower()
            if lowered not in _TRUE | _FALSE:
                raise ValueError(raw)
            value = lowered in _TRUE
        elif option.kind in ("keys", "paths"):
            value = tuple(key.strip() for key in raw.split(",") if key.strip())
        elif option.kind == "texts":
            value = (raw,) if raw else ()
        elif option.kind == "choice":
            if raw not in option.choices:
                raise ValueError(raw)
            value = raw
        else:
            value = raw
    except ValueError:
        expected = f"one of {', '.join(option.choices)}" if option.choices else f"a {option.kind}"
        raise SettingsError(f"{where}: invalid value {raw!r} (expected {expected})") from None
    if option.minimum is not None and isinstance(value, int | float) and value < option.minimum:
        raise SettingsError(f"{where}: {value} is below the minimum {option.minimum:g}")
    return value


def _scaled(given: list[str], where: str) -> list[tuple[str, float]]:
    """``--lora-scaled``'s values: llama-server's ``FNAME:SCALE,...``, or ``FNAME SCALE``."""
    if len(given) == 2 and ":" not in given[0]:
        items = [given[0] + ":" + given[1]]
    else:
        items = [item for value in given for item in value.split(",") if item]
    pairs = []
    for item in items:
        path, sep, scale = item.rpartition(":")
        try:
            if not sep or not path:
                raise ValueError(item)
            pairs.append((path, float(scale)))
        except ValueError:
            raise SettingsError(f"{where}: {item!r} is not FNAME:SCALE (a file and a number)") from None
    return pairs


def _kv_override(item: str) -> KvOverride:
    """One ``--override-kv`` item, parsed as llama.cpp's ``string_parse_kv_override`` does."""
    key, sep, typed = item.partition("=")
    kind, colon, raw = typed.partition(":")
    problem = None
    if not sep or not colon or not key:
        problem = "is not KEY=TYPE:VALUE"
    elif len(key.encode()) >= 128:
        problem = "has a key of 128 bytes or more"
    elif kind not in KV_OVERRIDE_TYPES:
        problem = f"has type {kind!r} (expected {', '.join(KV_OVERRIDE_TYPES)})"
    else:
        try:
            if kind == "int":
                return KvOverride(key, int(raw))
            if kind == "float":
                return KvOverride(key, float(raw))
            if kind == "bool":
                if raw not in ("true", "false"):
                    raise ValueError(raw)
                return KvOverride(key, raw == "true")
            if len(raw.encode()) >= 128:
                raise ValueError(raw)
            return KvOverride(key, raw)
        except ValueError:
            problem = f"has a value that is not a {kind}" + (" (true or false)" if kind == "bool" else
                                                             " under 128 bytes" if kind == "str" else "")
    raise SettingsError(f"--override-kv: {item!r} {problem}")


def _flag_name(option: Option) -> str:
    return "/".join(option.flags)


def _validate(settings: Settings) -> None:
    if settings.n_parallel == 0:
        raise SettingsError("--parallel/-np: must be -1 (auto) or at least 1")
    _ = settings.gpu_layers, settings.draft_gpu_layers  # each names a bad value
    if settings.flash_attn_mode not in ("on", "off", "auto"):
        raise SettingsError(f"--flash-attn/-fa: invalid value {settings.flash_attn!r} (expected on, off or auto)")
    if settings.cache_type_v not in UNQUANTIZED_KV and settings.flash_attn_mode == "off":
        raise SettingsError(f"--cache-type-v {settings.cache_type_v}: a quantized V cache needs flash attention "
                            "(-fa on or auto)")
    if settings.chat_template_kwargs is not None:
        try:
            parsed = json.loads(settings.chat_template_kwargs)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise SettingsError("--chat-template-kwargs: must be a JSON object, e.g. '{\"enable_thinking\": false}'")
    if settings.log_colors.strip().lower() not in _TRUE | _FALSE | {"auto"}:
        raise SettingsError(f"--log-colors: invalid value {settings.log_colors!r} (expected on, off or auto)")
    if settings.fit.strip().lower() not in _TRUE | _FALSE:
        raise SettingsError(f"--fit: invalid value {settings.fit!r} (expected on or off)")
    _ = settings.fit_margin_mib
    if settings.reasoning.strip().lower() not in _TRUE | _FALSE | {"auto", "-1"}:
        raise SettingsError(f"--reasoning: invalid value {settings.reasoning!r} (expected on, off or auto)")
    if settings.port > 65535:
        raise SettingsError(f"--port: {settings.port} is not a valid port")
    if settings.static_path is not None and not os.path.isdir(settings.static_path):
        raise SettingsError(f"--path: {settings.static_path!r} is not a directory")
    if (settings.samplers is not None or settings.sampler_seq is not None) and settings.sampler_order is None:
        raise SettingsError(f"--samplers/--sampler-seq: unknown sampler (known: {', '.join(sorted(SAMPLER_NAMES))}; "
                            f"letters {''.join(SAMPLER_LETTERS)})")
    _ = settings.kv_overrides, settings.tensor_split_fractions, settings.default_logit_bias  # each names a bad item
    settings.default_grammar_source()
    if not settings.listen_hosts:
        raise SettingsError("--host: give at least one address")
    if settings.port == 0 and sum(not host.endswith(".sock") for host in settings.listen_hosts) > 1:
        raise SettingsError("--port 0 is not supported with several TCP addresses in --host")
    if (settings.ssl_key_file is None) != (settings.ssl_cert_file is None):
        raise SettingsError("--ssl-key-file and --ssl-cert-file: give both to serve HTTPS")
    for name, path in (("--ssl-key-file", settings.ssl_key_file), ("--ssl-cert-file", settings.ssl_cert_file)):
        if path is not None and not os.access(path, os.R_OK):
            raise SettingsError(f"{name}: cannot read {path!r}")
    if settings.hf_repo is not None:
        if settings.model is not None:
            raise SettingsError("--model and --hf-repo: give one")
        try:
            split_repo_tag(settings.hf_repo)  # the form's one owner
        except HubError as exc:
            raise SettingsError(str(exc)) from None
    elif settings.hf_file is not None:
        raise SettingsError("--hf-file names a file of --hf-repo; give --hf-repo too")
    _validate_speculation(settings)
    _validate_placement(settings)
    if settings.chat_template and settings.chat_template_file:
        raise SettingsError("--chat-template and --chat-template-file cannot be used together")


def _gpu_layers(flag: str, value: str) -> int:
    """A layer count as llama.cpp takes it (``auto``/``all``: every layer, -1); a SettingsError names ``flag``."""
    if value in ("auto", "all"):
        return -1
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{flag}: invalid value {value!r} (expected a number, auto or all)") from None


def _validate_placement(settings: Settings) -> None:
    _ = settings.compute_cpus  # a bad mask or range is named
    if settings.cpu_strict not in (0, 1):
        raise SettingsError("--cpu-strict: 0 or 1")
    if settings.prio not in NICE:
        raise SettingsError(f"--prio: {settings.prio} (expected -1 to 3)")
    if settings.poll > 100:
        raise SettingsError(f"--poll: {settings.poll} (expected 0 to 100)")


def _validate_speculation(settings: Settings) -> None:
    for kind in settings.spec_type_names:
        if kind in UPSTREAM_ONLY_SPEC_TYPES:
            raise SettingsError(f"--spec-type {kind}: not implemented here (implemented: {', '.join(SPEC_TYPES)})")
        if kind not in SPEC_TYPES:
            raise SettingsError(f"--spec-type: unknown type {kind!r} (implemented: {', '.join(SPEC_TYPES)})")
    if "draft-simple" in settings.speculation.types and settings.spec_draft_model is None:
        raise SettingsError("--spec-type draft-simple: give the draft model with --spec-draft-model/-md")
    if settings.spec_draft_p_min > 1:
        raise SettingsError("--spec-draft-p-min: a probability, 0 to 1")


def build_parser(prog: str = "python -m app") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        add_help=False,
        description="vertex-llama: llama-server's HTTP API and Vertex AI's prediction protocol "
        "for a GGUF model, served through llama.cpp.",
        epilog="Every option can also be set by the environment variable in brackets; a flag wins. "
        "llama-server's other flags are accepted with a warning, or refused where ignoring them would "
        "change results (docs/configuration.md).",
    )
    parser.add_argument(*HELP_FLAGS, action="help", help="show this help message and exit")
    for option in OPTIONS:
        env_note = f" [env: {option.env}]" if option.env else ""
        default_note = f" (default: {option.default})" if option.default not in (None, "", ()) else ""
        help_text = f"{option.help}{default_note}{env_note}"
        if option.kind == "bool":
            parser.add_argument(*option.flags, dest=option.dest, action="store_const", const="1",
                                default=argparse.SUPPRESS, help=help_text)
            if option.negative_flags:
                parser.add_argument(*option.negative_flags, dest=option.dest, action="store_const",
                                    const="0", default=argparse.SUPPRESS,
                                    help=f"disable {option.flags[-1]}")
        elif option.kind in ("keys", "paths", "texts"):
            parser.add_argument(*option.flags, dest=option.dest, action="append",
                                default=argparse.SUPPRESS, metavar=option.metavar, help=help_text)
        elif option.kind == "scaled":
            parser.add_argument(*option.flags, dest=option.dest, action="append", nargs="+",
                                default=argparse.SUPPRESS, metavar=option.metavar, help=help_text)
        else:
            parser.add_argument(*option.flags, dest=option.dest, default=argparse.SUPPRESS,
                                metavar=option.metavar or option.dest.upper(),
                                choices=option.choices or None, help=help_text)
    for index, flag in enumerate(UNIMPLEMENTED):  # accepted, then warned about or refused by parse_settings
        dest = f"{_UPSTREAM_DEST}{index}"
        if flag.values == 0:
            parser.add_argument(*flag.flags, *flag.negative, dest=dest, action="store_const", const="",
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*flag.flags, dest=dest, nargs=None if flag.values == 1 else flag.values,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _upstream_notes(namespace: dict[str, Any], environ: Mapping[str, str]) -> tuple[str, ...]:
    """Warnings for the llama-server flags given (or their environment variables) that have no
    effect here; a SettingsError for one that is refused."""
    notes = []
    for index, flag in enumerate(UNIMPLEMENTED):
        given = f"{_UPSTREAM_DEST}{index}" in namespace
        where = flag.name if given else f"environment {flag.env}"
        if not given and not (flag.env and environ.get(flag.env, "") != ""):
            continue
        how = treatment(flag)
        assert how is not None, f"no treatment for llama-server's {flag.name}"
        if how.action == "refuse":
            raise SettingsError(f"{where}: {how.reason}")
        notes.append(f"{where}: accepted, no effect here: {how.reason}")
    return tuple(notes)


def _load_flag_notes(settings: Settings) -> tuple[str, ...]:
    """The pinned llama.cpp replaced --mlock and --no-mmap by --load-mode: say how they were taken."""
    if not settings.mlock and settings.mmap:
        return ()
    given = " and ".join(name for name, on in (("--mlock", settings.mlock), ("--no-mmap", not settings.mmap)) if on)
    if settings.load_mode is not None:
        return (f"{given}: replaced by --load-mode in llama.cpp; ignored, --load-mode {settings.load_mode} wins",)
    return (f"{given}: replaced by --load-mode in llama.cpp; taken as --load-mode {settings.model_load_mode}",)


_KNOWN_FLAGS = _OWN_FLAGS | {name for flag in UNIMPLEMENTED for name in (*flag.flags, *flag.negative)}


def llama_spelling(argv: Sequence[str]) -> list[str]:
    """``argv`` with llama-server's spelling rule applied: a long flag may use ``_`` for ``-``
    (common/arg.cpp replaces them in every ``--`` argument), so ``--backend_sampling`` is
    ``--backend-sampling``. Only a word that then names a flag is changed, never a value."""
    spelled = []
    for word in argv:
        name, equals, value = word.partition("=")
        if word.startswith("--") and "_" in name and name not in _KNOWN_FLAGS:
            candidate = name.replace("_", "-")
            if candidate in _KNOWN_FLAGS:
                word = candidate + equals + value
        spelled.append(word)
    return spelled


def parse_settings(
    argv: Sequence[str],
    environ: Mapping[str, str],
    error: Callable[[str], Any] | None = None,
) -> Settings:
    """Resolve every option from ``argv``, then ``environ``, then its default.

    A bad flag or value calls ``error`` (argparse's, by default, which exits with status 2).
    """
    parser = build_parser()
    report = error or parser.error
    namespace = vars(parser.parse_args(llama_spelling(argv)))
    values: dict[str, Any] = {}
    try:
        for option in OPTIONS:
            if option.dest in namespace:
                raw = namespace[option.dest]
                if option.kind == "texts":
                    values[option.dest] = tuple(text for text in raw if text)
                elif option.kind in ("keys", "paths"):
                    values[option.dest] = tuple(
                        key for chunk in raw for key in _convert(option, chunk, _flag_name(option))
                    )
                elif option.kind == "scaled":
                    values[option.dest] = tuple(pair for given in raw for pair in _scaled(given, _flag_name(option)))
                else:
                    values[option.dest] = _convert(option, raw, _flag_name(option))
            elif option.secret and option.kind == "keys" and option.env and environ.get(option.env) == "":
                raise SettingsError(f"environment {option.env}: set but empty (unset it to serve without keys)")
            elif (name := next((n for n in (option.env, *option.env_aliases) if n and environ.get(n, "") != ""),
                               None)) is not None:
                values[option.dest] = _convert(option, environ[name], f"environment {name}")
            else:
                values[option.dest] = option.default
        values["notes"] = _upstream_notes(namespace, environ)
        settings = Settings(**values)
        _validate(settings)
        settings = replace(settings, notes=settings.notes + _load_flag_notes(settings))
    except SettingsError as exc:
        report(str(exc))
        raise
    return settings


def settings_fields() -> tuple[str, ...]:
    return tuple(item.name for item in fields(Settings) if "option" in item.metadata)
