"""The engine's configs, made from the settings: the backend's (``LlamaConfig``: the model, its context,
how it loads and fits; the draft model's) and the engine's (``EngineOptions``). The one place an option
becomes a field of the engine; the worker's wiring (``app/server/wiring.py``) only calls these."""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace

from app.config.settings import Settings
from app.engine.llama.config import FitConfig, LlamaConfig, LoadConfig, RopeConfig, ThreadPlacement, VideoConfig
from app.engine.options import EngineOptions
from app.host.cpu_placement import thread_priority_allowed
from app.host.cpus import usable_cpus
from app.host.memory import available_memory_bytes

log = logging.getLogger(__name__)


def _placement(cpus: frozenset[int] | None, strict: int, prio: int, poll: int, prio_flag: str) -> ThreadPlacement:
    if not thread_priority_allowed(prio):
        log.warning("%s %s: this process may not give threads a real-time priority (it needs CAP_SYS_NICE); "
                    "llama.cpp's threads run at the normal one", prio_flag, prio)
        prio = 0
    return ThreadPlacement(cpus=cpus or frozenset(), strict=strict == 1, prio=prio, poll=poll)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def thread_placements(settings: Settings) -> tuple[ThreadPlacement, ThreadPlacement, ThreadPlacement,
                                                   ThreadPlacement]:
    """llama.cpp's four thread pools, as llama-server sets them up: generation (--cpu-mask, --cpu-range,
    --cpu-strict, --prio, --poll), prompt processing (their -batch forms, each defaulting to the former),
    and the draft model's two (--spec-draft-cpu-*, defaulting to the target's)."""
    strict_batch = _or(settings.cpu_strict_batch, settings.cpu_strict)
    prio_batch, poll_batch = _or(settings.prio_batch, settings.prio), _or(settings.poll_batch, settings.poll)
    return (
        _placement(settings.compute_cpus, settings.cpu_strict, settings.prio, settings.poll, "--prio"),
        _placement(settings.compute_cpus_batch, strict_batch, prio_batch, poll_batch, "--prio-batch"),
        _placement(settings.draft_cpus, _or(settings.spec_draft_cpu_strict, settings.cpu_strict),
                   _or(settings.spec_draft_prio, settings.prio), _or(settings.spec_draft_poll, settings.poll),
                   "--spec-draft-prio"),
        _placement(settings.draft_cpus_batch, _or(settings.spec_draft_cpu_strict_batch, strict_batch),
                   _or(settings.spec_draft_prio_batch, prio_batch), _or(settings.spec_draft_poll_batch, poll_batch),
                   "--spec-draft-prio-batch"),
    )


def draft_config(settings: Settings, target: LlamaConfig, draft_path: str,
                 placements: tuple[ThreadPlacement, ThreadPlacement]) -> LlamaConfig:
    """The draft model's config (-md): the target's, with the --spec-draft-* settings; its slots and
    context length are the target's (set when the target has loaded)."""
    threads = settings.spec_draft_threads if settings.spec_draft_threads > 0 else target.n_threads
    loading = replace(target.loading, kv_overrides=(), tensor_overrides=settings.draft_tensor_overrides,
                      devices=settings.draft_devices)
    return replace(target, model_path=draft_path, n_gpu_layers=settings.draft_gpu_layers, n_threads=threads,
                   n_threads_batch=settings.spec_draft_threads_batch if settings.spec_draft_threads_batch > 0
                   else threads, placement=placements[0], placement_batch=placements[1], loras=(), control_vectors=(),
                   mmproj=None, cache_type_k=settings.spec_draft_type_k,
                   cache_type_v=settings.spec_draft_type_v, loading=loading, fit=FitConfig(), draft=None,
                   pick_in_graph=settings.spec_draft_backend_sampling)


def llama_config(settings: Settings, model_path: str, mmproj_path: str | None = None,
                   prompt_cache_bytes: int | None = 0, draft_path: str | None = None) -> LlamaConfig:
    placement, placement_batch, *draft_placements = thread_placements(settings)
    config = LlamaConfig(
        model_path=model_path,
        n_ctx=settings.context_size,
        slot_ctx_cap=settings.kv_unified_per_slot,
        n_seq=settings.slot_count,
        n_batch=settings.batch_size,
        n_ubatch=settings.ubatch_size,
        n_threads=settings.cpu_threads,
        n_threads_batch=settings.cpu_threads_batch,
        n_cores=usable_cpus(),
        placement=placement,
        placement_batch=placement_batch,
        n_gpu_layers=settings.gpu_layers,
        flash_attn=settings.flash_attn_mode,
        verbose=settings.debug_logs,
        loras=tuple(path for path, _ in settings.lora_adapters),
        control_vectors=settings.control_vectors,
        control_layers=settings.control_vector_layer_range,
        embed_pooling="rank" if settings.reranking else settings.pooling,
        embed_n_ctx=settings.ubatch_size,
        mmproj=mmproj_path,
        mmproj_offload=settings.mmproj_offload,
        image_min_tokens=settings.image_min_tokens,
        image_max_tokens=settings.image_max_tokens,
        mtmd_batch_max_tokens=settings.mtmd_batch_max_tokens,
        media_marker=settings.media_marker or f"<__media_{secrets.token_hex(8)}__>",
        outputs_per_seq=1 + settings.speculation.longest_draft,
        video=VideoConfig(fps=settings.video_fps, timestamp_interval_ms=settings.video_timestamp_interval,
                          ffmpeg_dir=settings.video_ffmpeg_dir, max_pixels=settings.media_max_pixels,
                          max_seconds=settings.media_max_seconds),
        cache_type_k=settings.cache_type_k,
        cache_type_v=settings.cache_type_v,
        rope=RopeConfig(scaling=settings.rope_scaling or "unspecified", freq_base=settings.rope_freq_base or 0.0,
                        freq_scale=settings.rope_frequency_scale, yarn_orig_ctx=settings.yarn_orig_ctx,
                        yarn_ext_factor=settings.yarn_ext_factor, yarn_attn_factor=settings.yarn_attn_factor,
                        yarn_beta_fast=settings.yarn_beta_fast, yarn_beta_slow=settings.yarn_beta_slow),
        loading=LoadConfig(load_mode=settings.model_load_mode, lazy_mode=settings.lazy_mode,
                           check_tensors=settings.check_tensors, kv_overrides=settings.kv_overrides,
                           split_mode=settings.split_mode, tensor_split=settings.tensor_split_fractions,
                           main_gpu=settings.main_gpu, repack=settings.repack, no_host=settings.no_host,
                           numa=settings.numa, tensor_overrides=settings.tensor_overrides,
                           devices=settings.devices, rpc_servers=settings.rpc_servers),
        kv_offload=settings.kv_offload,
        kv_unified=settings.shared_kv,
        op_offload=settings.op_offload,
        swa_full=settings.swa_full,
        warmup=settings.warmup,
        perf=settings.perf,
        fit=FitConfig(enabled=settings.fit_enabled, gpu_layers_auto=settings.n_gpu_layers == "auto",
                      min_ctx=settings.fit_ctx, margin_mib=settings.fit_margin_mib,
                      host_free_bytes=available_memory_bytes(), host_reserved_bytes=prompt_cache_bytes or 0),
    )
    return config if draft_path is None else replace(config, draft=draft_config(
        settings, config, draft_path, (draft_placements[0], draft_placements[1])))


def engine_options(settings: Settings, prompt_cache_bytes: int | None) -> EngineOptions:
    """The engine's and the scheduler's options; ``prompt_cache_bytes`` is the cache's limit, sized
    to the memory available at start (``Settings.prompt_cache_bytes``)."""
    return EngineOptions(
        cont_batching=settings.cont_batching,
        n_predict_default=settings.n_predict,
        sleep_idle_seconds=settings.sleep_idle_seconds,
        lora_scales=tuple(scale for _, scale in settings.lora_adapters),
        max_queue=settings.max_queue,
        deadline_seconds=settings.predict_deadline,
        prompt_cache_bytes=prompt_cache_bytes,
        context_shift=settings.context_shift,
        slot_similarity=settings.slot_prompt_similarity,
        kv_unified=settings.shared_kv,
        cache_idle_slots=settings.cache_idle_slots,
        special_output=settings.special,
        speculation=settings.speculation,
        ctx_checkpoints=settings.ctx_checkpoints,
        checkpoint_min_step=settings.checkpoint_min_step,
    )
