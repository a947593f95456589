"""What the llama.cpp backend is built from: the model file, its context, how it loads and fits.
Plain values, without llama_cpp: the settings make them (``app/config/``) before anything is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.types import KvOverride, TensorOverride


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
class ThreadPlacement:
    """One of llama.cpp's thread pools (ggml's ``ggml_threadpool_params``): the CPUs its threads run on,
    each bound to one of them (strict), their priority (ggml's -1 low ... 3 realtime) and how long they
    poll for work (0-100)."""

    cpus: frozenset[int] = frozenset()  # empty: wherever the process may run
    strict: bool = False
    prio: int = 0
    poll: int = 50


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """An RPC server's HOST:PORT (an IPv6 host in brackets) as a host and a port; ValueError when it is not
    one (--rpc's one rule)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{endpoint!r} is not HOST:PORT")
    return host.removeprefix("[").removesuffix("]"), int(port)


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
    tensor_overrides: tuple[TensorOverride, ...] = ()  # the first that matches a tensor places it
    devices: tuple[str, ...] | None = None  # ggml's device names to offload to; None: every one, (): none
    rpc_servers: tuple[str, ...] = ()  # HOST:PORT of rpc-servers whose devices are registered first (--rpc)


@dataclass(frozen=True)
class VideoConfig:
    """How a video in a prompt becomes frames (libmtmd's video helper, through ffmpeg) and the most it
    may decode to. A video is decoded whole before its tokens are known, so it is bounded by the
    pixels of its frames together (``max_pixels``) and its length (``max_seconds``); 0: no bound."""

    fps: float = 4.0  # <= 0: the video's own
    timestamp_interval_ms: int = 5000  # <= 0: no timestamps among the frames
    ffmpeg_dir: str | None = None  # None: ffmpeg and ffprobe from PATH
    max_pixels: int = 0
    max_seconds: float = 0.0


@dataclass(frozen=True)
class FitConfig:
    """--fit: what the fit to free memory may change and the memory it counts on."""

    enabled: bool = False
    gpu_layers_auto: bool = False  # -ngl auto: the fit chooses the layers
    min_ctx: int = 4096  # --fit-ctx
    margin_mib: int = 1024  # --fit-target
    host_free_bytes: int | None = None  # memory available at start (None: unknown, the context is kept)
    host_reserved_bytes: int = 0  # promised to the prompt cache


@dataclass(frozen=True)
class LlamaConfig:
    model_path: str
    n_ctx: int = 0
    slot_ctx_cap: int = 0  # --kv-unified-per-slot: most tokens a slot's context holds (0: its share)
    n_seq: int = 4
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 2
    n_threads_batch: int = 2
    n_cores: int = 0  # the cores this process may use: a CPU decode with as many threads fills them
    placement: ThreadPlacement = field(default_factory=ThreadPlacement)  # generation's thread pool
    placement_batch: ThreadPlacement = field(default_factory=ThreadPlacement)  # prompt processing's
    n_gpu_layers: int = -1
    flash_attn: str = "auto"
    verbose: bool = False
    loras: tuple[str, ...] = ()
    control_vectors: tuple[tuple[str, float], ...] = ()  # (file, scale), summed into one vector a layer
    control_layers: tuple[int, int] | None = None  # the first and last layer they apply to; None: every layer
    embed_pooling: str = "unspecified"  # none, mean, cls, last, rank, or the model's own
    embed_n_ctx: int = 512
    embed_n_seq: int = 64
    mmproj: str | None = None  # the multimodal projector file
    mmproj_offload: bool = True
    image_min_tokens: int = -1  # -1: the projector's own
    image_max_tokens: int = -1
    mtmd_batch_max_tokens: int = 1024  # image tokens libmtmd encodes a batch
    media_marker: str = "<__media__>"  # what stands for a media item in a prompt's text
    video: VideoConfig = field(default_factory=VideoConfig)
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    rope: RopeConfig = field(default_factory=RopeConfig)
    loading: LoadConfig = field(default_factory=LoadConfig)
    kv_offload: bool = True
    kv_unified: bool = False  # one KV cache for every slot (-kvu)
    op_offload: bool = True
    swa_full: bool = False
    warmup: bool = True
    perf: bool = True  # libllama's performance timings (no_perf off)
    fit: FitConfig = field(default_factory=FitConfig)
    outputs_per_seq: int = 1  # a sequence's most outputs in one decode with its sampler in the graph: 1 + longest draft
    pick_in_graph: bool = False  # as a draft model: its top-k runs in its graph (--spec-draft-backend-sampling)
    draft: LlamaConfig | None = None  # the draft model (-md); its slots and context follow this one's
