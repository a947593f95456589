"""The model: where it comes from, how it loads and fits, its KV cache, RoPE, adapters and projector."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.config.options import FALSE, TRUE, SettingsError, kv_override, option, parse_gpu_layers
from app.engine.types import (
    KV_CACHE_TYPES,
    LAZY_MODES,
    LOAD_MODES,
    NUMA_STRATEGIES,
    SPLIT_MODES,
    UNQUANTIZED_KV,
    KvOverride,
)
from app.model_sources.docker import DockerModelError, DockerRef
from app.model_sources.hub import HubError, split_repo_tag


@dataclass(frozen=True)
class ModelSettings:
    """The model: where it comes from, how it loads and fits, its KV cache, RoPE, adapters and projector."""

    model: str | None = option(("-m", "--model"), "str", None,
        "GGUF model path (default: the embedded SmolLM2-135M-Instruct)", env="LLAMA_ARG_MODEL",
        metavar="FNAME")
    model_url: str | None = option(("-mu", "--model-url"), "str", None,
        "a model to download from a URL into --model-cache-dir (resumed where a start left it; checked against a "
        "#sha256=HEX fragment or a SHA-256 ETag)", env="LLAMA_ARG_MODEL_URL", metavar="URL")
    mmproj_url: str | None = option(("-mmu", "--mmproj-url"), "str", None,
        "a multimodal projector to download from a URL, as --model-url", env="LLAMA_ARG_MMPROJ_URL", metavar="URL")
    hf_repo: str | None = option(("-hf", "-hfr", "--hf-repo"), "str", None,
        "a model from the Hugging Face Hub, USER/REPO[:QUANT] (default quant Q4_K_M, then Q8_0, then the first "
        "GGUF); its mmproj file too. Downloaded into --model-cache-dir", env="LLAMA_ARG_HF_REPO",
        metavar="USER/REPO[:QUANT]")
    hf_file: str | None = option(("-hff", "--hf-file"), "str", None,
        "the GGUF file of the --hf-repo repository (default: chosen by the quant)", env="LLAMA_ARG_HF_FILE",
        metavar="FILE")
    hf_token: str | None = option(("-hft", "--hf-token"), "str", None,
        "Hugging Face access token (gated or private repositories)", env="HF_TOKEN", metavar="TOKEN", secret=True)
    docker_repo: str | None = option(("-dr", "--docker-repo"), "str", None,
        "a model image from Docker Hub (or --docker-registry), [REPO/]MODEL[:TAG] (REPO default ai, TAG latest): "
        "its GGUF layer, downloaded into --model-cache-dir and checked against its digest",
        env="LLAMA_ARG_DOCKER_REPO", metavar="[REPO/]MODEL[:TAG]")
    docker_registry: str = option(("--docker-registry",), "str", "https://registry-1.docker.io",
        "the OCI registry --docker-repo models come from (its token service is found from its 401s)",
        env="LLAMA_ARG_DOCKER_REGISTRY", metavar="URL")
    offline: bool = option(("--offline",), "bool", False,
        "download nothing: --hf-repo and --docker-repo models come from the cache", env="LLAMA_ARG_OFFLINE")
    alias: str | None = option(("-a", "--alias"), "str", None,
        "comma-separated served model name(s); the id is the alphabetically first",
        env="LLAMA_ARG_ALIAS", metavar="NAME")
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
    perf: bool = option(("--perf",), "bool", True,
        "libllama's internal performance timings (llama_perf_context, llama_perf_sampler), as llama-server keeps "
        "them", env="LLAMA_ARG_PERF", negative_flags=("--no-perf",))
    tags: tuple[str, ...] = option(("--tags",), "keys", (),
        "model tags for /v1/models, comma-separated (informational)", env="LLAMA_ARG_TAGS", metavar="TAGS")
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
    control_vector: tuple[str, ...] = option(("--control-vector",), "paths", (),
        "a control vector file (GGUF direction.N tensors) added at scale 1; comma-separated or repeatable",
        metavar="FNAME")
    control_vector_scaled: tuple[tuple[str, float], ...] = option(("--control-vector-scaled",), "scaled", (),
        "control vectors with their scales, FNAME:SCALE,...; repeatable", metavar="FNAME:SCALE")
    control_vector_layer_range: tuple[int, int] | None = option(("--control-vector-layer-range",), "range", None,
        "the layers the control vectors apply to, START and END inclusive (default: every layer)",
        metavar=("START", "END"))
    lora_init_without_apply: bool = option(("--lora-init-without-apply",), "bool", False,
        "load the LoRA adapters at scale 0 (apply them later with POST /lora-adapters or a request's lora)")
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
    mtmd_batch_max_tokens: int = option(("--mtmd-batch-max-tokens",), "int", 1024,
        "most image tokens libmtmd encodes in one batch", env="LLAMA_ARG_MTMD_BATCH_MAX_TOKENS", minimum=1,
        metavar="N")
    video_fps: float = option(("--video-fps",), "float", 4.0,
        "frames a second taken from a video in a prompt (each frame is an image to the projector; 0: the "
        "video's own rate, as is any value below 0)", env="LLAMA_ARG_VIDEO_FPS", metavar="N")
    video_timestamp_interval: int = option(("--video-timestamp-interval",), "int", 5000,
        "milliseconds between the text timestamps put among a video's frames (0 or below: none)",
        env="LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL", metavar="N")
    video_ffmpeg_dir: str | None = option(("--video-ffmpeg-dir",), "str", None,
        "the directory holding ffmpeg and ffprobe, which decode videos (default: found on PATH; without them "
        "videos are refused)", env="LLAMA_ARG_VIDEO_FFMPEG_DIR", metavar="DIR")

    @property
    def gpu_layers(self) -> int:
        """``--n-gpu-layers`` as llama.cpp's number: ``auto``/``all`` offload every layer."""
        return parse_gpu_layers("--n-gpu-layers/-ngl", self.n_gpu_layers)

    @property
    def flash_attn_mode(self) -> str:
        """``--flash-attn`` as on, off or auto (llama-server's truthy and falsy spellings taken)."""
        value = self.flash_attn.strip().lower()
        if value in TRUE:
            return "on"
        if value in FALSE:
            return "off"
        return "auto" if value in ("auto", "-1") else value

    @property
    def fit_enabled(self) -> bool:
        return self.fit.strip().lower() in TRUE

    @property
    def fit_margin_mib(self) -> int:
        """--fit-target: the largest of the per-device margins (one margin for every device here)."""
        try:
            return max(int(part) for part in re.split(r"[,/]+", self.fit_target) if part.strip())
        except ValueError:
            raise SettingsError(f"--fit-target/-fitt: {self.fit_target!r} is not a list of MiB, e.g. 1024") from None

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
        return tuple(kv_override(item) for item in self.override_kv)

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
    def control_vectors(self) -> tuple[tuple[str, float], ...]:
        """Every control vector with its scale: ``--control-vector`` ones at 1, then ``--control-vector-scaled``."""
        return tuple((path, 1.0) for path in self.control_vector) + self.control_vector_scaled

    @property
    def lora_adapters(self) -> tuple[tuple[str, float], ...]:
        """Every adapter with its starting scale: ``--lora`` ones at 1, then ``--lora-scaled``; every one at 0
        with --lora-init-without-apply."""
        given = tuple((path, 1.0) for path in self.lora) + self.lora_scaled
        return tuple((path, 0.0) for path, _ in given) if self.lora_init_without_apply else given

    @property
    def rope_frequency_scale(self) -> float:
        """llama.cpp's rope_freq_scale: --rope-freq-scale, else 1 / --rope-scale, else 0 (the model's)."""
        if self.rope_freq_scale is not None:
            return self.rope_freq_scale
        return 1.0 / self.rope_scale if self.rope_scale else 0.0

    def check(self) -> None:
        """The model section's checks; a SettingsError names the option."""
        # each names its bad value
        _ = self.gpu_layers, self.kv_overrides, self.tensor_split_fractions, self.fit_margin_mib
        if self.flash_attn_mode not in ("on", "off", "auto"):
            raise SettingsError(f"--flash-attn/-fa: invalid value {self.flash_attn!r} (expected on, off or auto)")
        if self.cache_type_v not in UNQUANTIZED_KV and self.flash_attn_mode == "off":
            raise SettingsError(f"--cache-type-v {self.cache_type_v}: a quantized V cache needs flash attention "
                                "(-fa on or auto)")
        if self.fit.strip().lower() not in TRUE | FALSE:
            raise SettingsError(f"--fit: invalid value {self.fit!r} (expected on or off)")
        sources = [name for name, value in (("--model", self.model), ("--hf-repo", self.hf_repo),
                                             ("--docker-repo", self.docker_repo)) if value is not None]
        if len(sources) > 1:
            raise SettingsError(f"{' and '.join(sources)}: give one")
        if self.docker_repo is not None:
            try:
                DockerRef.parse(self.docker_repo)  # the form's one owner
            except DockerModelError as exc:
                raise SettingsError(str(exc)) from None
        if self.hf_repo is not None:
            try:
                split_repo_tag(self.hf_repo)  # the form's one owner
            except HubError as exc:
                raise SettingsError(str(exc)) from None
        elif self.hf_file is not None:
            raise SettingsError("--hf-file names a file of --hf-repo; give --hf-repo too")
