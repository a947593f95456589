"""Slots and batching, the caches, the queue, speculative decoding, request defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

from app.config.options import SettingsError, option, parse_gpu_layers
from app.engine.speculative import SPEC_TYPES, UPSTREAM_ONLY_SPEC_TYPES, SpeculationOptions
from app.engine.synthetic import SyntheticAcceptanceError
from app.engine.types import (
    KV_CACHE_TYPES,
)

DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's


@dataclass(frozen=True)
class ServingSettings:
    """Slots and batching, the caches, the queue, speculative decoding, request defaults."""

    ctx_size: int = option(("-c", "--ctx-size"), "int", 0,
        "total context size in tokens (0 = from the model); each slot gets ctx-size / parallel",
        env="LLAMA_ARG_CTX_SIZE", minimum=0)
    n_parallel: int = option(("-np", "--parallel"), "int", -1,
        "number of slots, i.e. sequences decoded together (-1 = auto: 4 sharing one KV cache, as -kvu)",
        env="LLAMA_ARG_N_PARALLEL", minimum=-1)
    batch_size: int = option(("-b", "--batch-size"), "int", 2048,
        "logical batch size: most tokens in one decode step", env="LLAMA_ARG_BATCH", minimum=1)
    ubatch_size: int = option(("-ub", "--ubatch-size"), "int", 512,
        "physical batch size", env="LLAMA_ARG_UBATCH", minimum=1)
    kv_unified: bool = option(("-kvu", "--kv-unified"), "bool", False,
        "one KV cache that every slot shares: a slot may take the whole --ctx-size while the others leave "
        "room (default: on when --parallel is auto, as llama-server, whatever -no-kvu says; with --parallel N, "
        "per-slot cells of ctx-size / parallel, so batched output equals solo output)",
        env="LLAMA_ARG_KV_UNIFIED", negative_flags=("-no-kvu", "--no-kv-unified"))
    kv_unified_per_slot: int = option(("--kv-unified-per-slot",), "int", 0,
        "most tokens one slot's context holds (0: unset); without --ctx-size the context is --parallel x N (with "
        "-kvu, one shared pool of that size)", env="LLAMA_ARG_KV_UNIFIED_PER_SLOT", minimum=0, metavar="N")
    cache_idle_slots: bool = option(("--cache-idle-slots",), "bool", True,
        "when a request starts, idle slots' prompts go to the prompt cache (--cache-ram), and with -kvu their "
        "cells are freed", env="LLAMA_ARG_CACHE_IDLE_SLOTS", negative_flags=("--no-cache-idle-slots",))
    ctx_checkpoints: int = option(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "int", 32,
        "most context checkpoints a slot keeps, for a model with sliding-window attention: copies of its window "
        "cells taken near each prompt's end, from which a later prompt sharing that prefix is decoded when the "
        "window before the prefix's end was pruned (0: none; that prompt is decoded whole)",
        env="LLAMA_ARG_CTX_CHECKPOINTS", minimum=0, metavar="N")
    checkpoint_min_step: int = option(("-cms", "--checkpoint-min-step"), "int", 8192,
        "once a slot's checkpoints are full, those within this many tokens of an earlier one go first "
        "(0: the oldest go)", env="LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", minimum=0, metavar="N")
    context_shift: bool = option(("--context-shift",), "bool", False,
        "when a generation fills its slot's context, drop the oldest tokens after --keep and go on (off: it ends, "
        "truncated)", env="LLAMA_ARG_CONTEXT_SHIFT", negative_flags=("--no-context-shift",))
    keep: int = option(("--keep",), "int", 0,
        "prompt tokens a context shift keeps (-1: the whole prompt); a request's n_keep wins", minimum=-1)
    n_predict: int = option(("-n", "--n-predict", "--predict"), "int", -1,
        "most tokens to generate for a request that sets no budget (-1 = until the context is full); a "
        "request's own n_predict or max_tokens wins, as in llama-server",
        env="LLAMA_ARG_N_PREDICT", minimum=-1)
    liveness_seconds: float = option(("--liveness-seconds",), "float", 600.0,
        "GET /live answers 503 once one engine step (a decode, a prompt's batch) has run this long: a wedged "
        "llama.cpp call, for a liveness probe to restart the container (0: never)", env="LLAMA_ARG_LIVENESS_SECONDS",
        minimum=0, metavar="SECONDS")
    special: bool = option(("-sp", "--special"), "bool", False,
        "write special tokens (<|im_start|>, <think>, ...) in the generated text instead of leaving them out")
    spm_infill: bool = option(("--spm-infill",), "bool", False,
        "lay out /infill prompts suffix first (<FIM_SUF>suffix<FIM_PRE>prefix), for models trained that way")
    embd_normalize: int = option(("--embd-normalize",), "int", 2,
        "default normalization of native embeddings (-1: none, 0: max absolute int16, 1: taxicab, 2: Euclidean, "
        ">2: p-norm)", minimum=-1)
    cont_batching: bool = option(("-cb", "--cont-batching"), "bool", True,
        "continuous batching: admit new requests while others generate",
        env="LLAMA_ARG_CONT_BATCHING", negative_flags=("-nocb", "--no-cont-batching"))
    cache_prompt: bool = option(("--cache-prompt",), "bool", True,
        "reuse each slot's KV prefix across requests (the per-request default)",
        env="LLAMA_ARG_CACHE_PROMPT", negative_flags=("--no-cache-prompt",))
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
        "history), ngram-mod (drafts from an n-gram table every slot feeds), ngram-map-k, ngram-map-k4v (n-gram "
        "maps of the slot's history), ngram-cache (lookup decoding: the slot's n-gram counts and those of "
        "--lookup-cache-static/-dynamic), draft-simple (a draft model; the default when --spec-draft-model is "
        "given), none",
        env="LLAMA_ARG_SPEC_TYPE", metavar="TYPES")
    spec_synth_len: float | None = option(("--spec-synth-len",), "float", None,
        "benchmarking only: keep draft tokens at random for this mean acceptance length (the model's token "
        "included) instead of verifying them; the output is not the model's", env="LLAMA_ARG_SPEC_SYNTH_LEN",
        metavar="L")
    spec_synth_rates: str | None = option(("--spec-synth-rates",), "str", None,
        "benchmarking only: the probability of keeping each draft position, comma-separated and never rising "
        "(one per position of the longest draft)", env="LLAMA_ARG_SPEC_SYNTH_RATES", metavar="P0,P1,...")
    lookup_cache_static: str | None = option(("-lcs", "--lookup-cache-static"), "str", None,
        "ngram-cache's static lookup cache: a file of n-gram counts (llama.cpp's llama-lookup-create writes one), "
        "read at start, never updated", metavar="FNAME")
    lookup_cache_dynamic: str | None = option(("-lcd", "--lookup-cache-dynamic"), "str", None,
        "ngram-cache's dynamic lookup cache (llama-lookup's), read at start; the server does not write it, as "
        "llama-server", metavar="FNAME")
    spec_draft_model: str | None = option(("-md", "--model-draft", "--spec-draft-model"), "str", None,
        "draft model for speculative decoding (same vocabulary; a path or a gs:// URI)",
        env="LLAMA_ARG_SPEC_DRAFT_MODEL", metavar="FNAME")
    spec_draft_hf: str | None = option(("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf"), "str", None,
        "the draft model from the Hugging Face Hub, as --hf-repo takes it (USER/REPO[:QUANT]; --hf-token, --offline "
        "and --model-cache-dir apply); --spec-draft-model wins", env="LLAMA_ARG_SPEC_DRAFT_HF_REPO", metavar="REPO")
    spec_draft_n_max: int = option(("--spec-draft-n-max",), "int", 3,
        "most tokens the draft model drafts per step (a request's speculative.n_max wins)",
        env="LLAMA_ARG_SPEC_DRAFT_N_MAX", minimum=0, metavar="N")
    spec_draft_n_min: int = option(("--spec-draft-n-min",), "int", 0,
        "a shorter draft-model draft is not verified (a request's speculative.n_min wins)",
        env="LLAMA_ARG_SPEC_DRAFT_N_MIN", minimum=0, metavar="N")
    spec_draft_p_min: float = option(("--spec-draft-p-min", "--draft-p-min"), "float", 0.0,
        "a draft ends at a token the draft model gives less than this probability (a request's speculative.p_min "
        "wins)", env="LLAMA_ARG_SPEC_DRAFT_P_MIN", minimum=0, maximum=1, metavar="P")
    spec_draft_backend_sampling: bool = option(("--spec-draft-backend-sampling",), "bool", True,
        "the draft model's top-10 (its pick and that pick's probability among them) is taken in its graph, on its "
        "device, not from the whole logits row", env="LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
        negative_flags=("--no-spec-draft-backend-sampling",))
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
    spec_ngram_mod_n_match: int = option(("--spec-ngram-mod-n-match",), "int", 24,
        "ngram-mod: tokens an n-gram of the table holds", minimum=1, maximum=1024, metavar="N")
    spec_ngram_mod_n_min: int = option(("--spec-ngram-mod-n-min",), "int", 48,
        "ngram-mod: a shorter draft is not verified", minimum=0, maximum=1024, metavar="N")
    spec_ngram_mod_n_max: int = option(("--spec-ngram-mod-n-max",), "int", 64,
        "ngram-mod: most tokens drafted a step (a request's speculative.n_max bounds it too)", minimum=0,
        maximum=1024, metavar="N")
    spec_ngram_map_k_size_n: int = option(("--spec-ngram-map-k-size-n",), "int", 12,
        "ngram-map-k: tokens of the key looked up in the slot's history", minimum=1, maximum=1024, metavar="N")
    spec_ngram_map_k_size_m: int = option(("--spec-ngram-map-k-size-m",), "int", 48,
        "ngram-map-k: most tokens drafted after the key", minimum=1, maximum=1024, metavar="N")
    spec_ngram_map_k_min_hits: int = option(("--spec-ngram-map-k-min-hits",), "int", 1,
        "ngram-map-k: not read (llama.cpp's key-only map drafts at the first hit; taken for its command lines)",
        minimum=1, metavar="N")
    spec_ngram_map_k4v_size_n: int = option(("--spec-ngram-map-k4v-size-n",), "int", 12,
        "ngram-map-k4v: tokens of the key looked up in the slot's history", minimum=1, maximum=1024, metavar="N")
    spec_ngram_map_k4v_size_m: int = option(("--spec-ngram-map-k4v-size-m",), "int", 48,
        "ngram-map-k4v: tokens of each continuation counted, and most drafted", minimum=1, maximum=1024, metavar="N")
    spec_ngram_map_k4v_min_hits: int = option(("--spec-ngram-map-k4v-min-hits",), "int", 1,
        "ngram-map-k4v: times the key must have been met before it drafts", minimum=1, metavar="N")
    slot_save_path: str | None = option(("--slot-save-path",), "str", None,
        "directory for POST /slots/{id}?action=save|restore files", env="LLAMA_ARG_SLOT_SAVE_PATH",
        metavar="PATH")
    sleep_idle_seconds: int = option(("--sleep-idle-seconds",), "int", -1,
        "free the model after this many idle seconds and load it again on the next request (-1: never)",
        env="LLAMA_ARG_SLEEP_IDLE_SECONDS", minimum=-1)
    max_queue: int = option(("--max-queue",), "int", 64,
        "requests that may wait for a free slot; more are answered 503 at once", env="LLAMA_ARG_MAX_QUEUE",
        minimum=0)

    @property
    def context_size(self) -> int:
        """--ctx-size, or (unset, with --kv-unified-per-slot) --parallel x the per-slot limit, as llama-server."""
        if self.ctx_size == 0 and self.kv_unified_per_slot > 0:
            return self.slot_count * self.kv_unified_per_slot
        return self.ctx_size

    @property
    def shared_kv(self) -> bool:
        """Whether the slots share one KV cache: -kvu, or --parallel auto (llama-server sets kv_unified there)."""
        return self.kv_unified or self.n_parallel == -1

    @property
    def slot_count(self) -> int:
        """``--parallel`` with ``-1`` (auto) resolved to llama-server's 4."""
        return 4 if self.n_parallel == -1 else self.n_parallel

    def prompt_cache_bytes(self, available: int | None) -> int | None:
        """The prompt cache's limit in bytes (0: off, None: no limit). llama-server's default is 8192
        MiB; here a container shares its memory with the weights (on CPU) and a Vertex AI machine may
        be small, so the default is also held to a quarter of the memory ``available`` at start."""
        if self.cache_ram is not None:
            return None if self.cache_ram < 0 else self.cache_ram << 20
        default = DEFAULT_CACHE_RAM_MIB << 20
        return default if available is None else min(default, available // 4)

    @property
    def spec_type_names(self) -> tuple[str, ...]:
        """--spec-type's comma-separated names, as given."""
        return tuple(kind.strip() for kind in self.spec_type.split(",") if kind.strip())

    @property
    def speculation(self) -> SpeculationOptions:
        """--spec-type and the --spec-* settings; a draft model alone means draft-simple, as upstream."""
        types = tuple(kind for kind in self.spec_type_names if kind != "none")
        if not types and self.has_draft_model:
            types = ("draft-simple",)
        return SpeculationOptions(types=types, draft_n_max=self.spec_draft_n_max, draft_n_min=self.spec_draft_n_min,
                                  draft_p_min=self.spec_draft_p_min, ngram_size_n=self.spec_ngram_simple_size_n,
                                  ngram_size_m=self.spec_ngram_simple_size_m,
                                  ngram_mod_n_match=self.spec_ngram_mod_n_match,
                                  ngram_mod_n_min=self.spec_ngram_mod_n_min, ngram_mod_n_max=self.spec_ngram_mod_n_max,
                                  ngram_map={
                                      "ngram-map-k": (self.spec_ngram_map_k_size_n, self.spec_ngram_map_k_size_m,
                                                      self.spec_ngram_map_k_min_hits),
                                      "ngram-map-k4v": (self.spec_ngram_map_k4v_size_n, self.spec_ngram_map_k4v_size_m,
                                                        self.spec_ngram_map_k4v_min_hits)},
                                  lookup_cache_static=self.lookup_cache_static,
                                  lookup_cache_dynamic=self.lookup_cache_dynamic,
                                  synth_len=self.spec_synth_len, synth_rates=self.synth_rates)

    @property
    def synth_rates(self) -> tuple[float, ...]:
        """--spec-synth-rates' numbers."""
        if not self.spec_synth_rates:
            return ()
        try:
            return tuple(float(part) for part in self.spec_synth_rates.split(","))
        except ValueError:
            raise SettingsError(f"--spec-synth-rates: {self.spec_synth_rates!r} is not comma-separated "
                                "numbers") from None

    @property
    def has_draft_model(self) -> bool:
        """A draft model is given: a path or gs:// URI (-md), or a Hub repository (-hfd)."""
        return self.spec_draft_model is not None or self.spec_draft_hf is not None

    @property
    def draft_gpu_layers(self) -> int:
        """``-ngld`` as llama.cpp's number (``auto``/``all``: every layer)."""
        return parse_gpu_layers("--spec-draft-ngl/-ngld", self.spec_draft_ngl)

    def check(self) -> None:
        """--parallel, the draft model's layers and the speculative types; a SettingsError names the option."""
        if self.n_parallel == 0:
            raise SettingsError("--parallel/-np: must be -1 (auto) or at least 1")
        _ = self.draft_gpu_layers
        for kind in self.spec_type_names:
            if kind in UPSTREAM_ONLY_SPEC_TYPES:
                raise SettingsError(f"--spec-type {kind}: not implemented here (implemented: {', '.join(SPEC_TYPES)})")
            if kind not in SPEC_TYPES:
                raise SettingsError(f"--spec-type: unknown type {kind!r} (implemented: {', '.join(SPEC_TYPES)})")
        try:
            _ = self.speculation.synthetic_acceptance
        except SyntheticAcceptanceError as exc:
            raise SettingsError(str(exc)) from None
        for flag, path in (("--lookup-cache-static", self.lookup_cache_static),
                           ("--lookup-cache-dynamic", self.lookup_cache_dynamic)):
            if path is not None and not os.access(path, os.R_OK):
                raise SettingsError(f"{flag}: cannot read {path}")
        if "draft-simple" in self.speculation.types and not self.has_draft_model:
            raise SettingsError("--spec-type draft-simple: give the draft model with --spec-draft-model/-md")
