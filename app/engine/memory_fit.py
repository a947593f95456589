"""Fitting the context and the GPU layers to free memory, as llama-server's ``--fit`` does (on by
default there, in ``common/fit.cpp``, a library the wheel does not ship): an estimate of our own.

What a loaded model needs: its weights (the file's size), the KV cache (bytes a token times the
context), and compute buffers (the logits and activations of one micro-batch). Only what the user
left unset moves: the context when ``-c 0`` (down to ``--fit-ctx``, never below), the GPU layers
when ``-ngl auto``. ``--fit-target`` MiB stay free on every device. Pure: the numbers come in
(app/engine/llama/backend.py reads them from the model and the devices)."""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1 << 20
CONTEXT_STEP = 256  # a fitted context is a multiple of this


@dataclass(frozen=True)
class ModelShape:
    n_layer: int
    n_ctx_train: int
    n_embd: int
    n_vocab: int
    weight_bytes: int
    kv_bytes_per_token: int  # every layer's K and V for one token, in the cache's types


@dataclass(frozen=True)
class FitRequest:
    n_ctx: int  # 0: unset, the model's training context unless it does not fit
    n_gpu_layers: int | None  # None: auto
    n_ubatch: int
    n_seq: int
    min_ctx: int = 4096  # --fit-ctx
    margin_bytes: int = 1024 * MIB  # --fit-target, on each device
    kv_offload: bool = True
    host_reserved_bytes: int = 0  # host memory promised to others (the prompt cache)


@dataclass(frozen=True)
class Fit:
    n_ctx: int  # the total context (all slots)
    n_gpu_layers: int  # -1: all
    notes: tuple[str, ...] = field(default=())


def compute_bytes(shape: ModelShape, n_ubatch: int) -> int:
    """A micro-batch's logits and activations, rounded up generously (llama.cpp's compute buffers)."""
    return n_ubatch * (shape.n_vocab + 8 * shape.n_embd) * 4 + 64 * MIB


def _floor_ctx(tokens: int, request: FitRequest) -> int:
    step = CONTEXT_STEP * request.n_seq
    return max(request.min_ctx, tokens // step * step)


def fit(shape: ModelShape, gpu_free: list[int], host_free: int | None, request: FitRequest) -> Fit:
    """The context and the GPU layers to load with; ``gpu_free``: each GPU's free bytes."""
    wanted_ctx = request.n_ctx or shape.n_ctx_train
    all_layers = shape.n_layer + 1  # the output layer counts as one
    use_gpu = bool(gpu_free) and request.n_gpu_layers != 0
    if not use_gpu:
        return _fit_host(shape, host_free, request, wanted_ctx)
    free = sum(gpu_free) - request.margin_bytes * len(gpu_free)
    compute = compute_bytes(shape, request.n_ubatch)
    kv_on_gpu = shape.kv_bytes_per_token if request.kv_offload else 0

    def needs(layers: int, ctx: int) -> int:
        share = min(layers, all_layers) / all_layers
        return int(shape.weight_bytes * share + kv_on_gpu * ctx * share) + compute

    layers = all_layers if request.n_gpu_layers is None or request.n_gpu_layers < 0 else request.n_gpu_layers
    notes: list[str] = []
    ctx = wanted_ctx
    if needs(layers, ctx) > free and request.n_ctx == 0 and kv_on_gpu:
        room = (free - compute - int(shape.weight_bytes * min(layers, all_layers) / all_layers))
        fitted = _floor_ctx(max(0, int(room / (kv_on_gpu * min(layers, all_layers) / all_layers))), request)
        if fitted < ctx:
            ctx = fitted
            notes.append(f"context {wanted_ctx} -> {ctx} tokens to fit the GPU's free memory")
    if needs(layers, ctx) > free and request.n_gpu_layers is None:
        fitted_layers = max(0, min(all_layers, next((n for n in range(all_layers, -1, -1) if needs(n, ctx) <= free),
                                                    0)))
        notes.append(f"GPU layers {all_layers} -> {fitted_layers} of {all_layers} to fit the GPU's free memory")
        layers = fitted_layers
    if needs(layers, ctx) > free:
        notes.append(f"the model may not fit: it needs about {needs(layers, ctx) // MIB} MiB on the GPUs, "
                     f"{max(free, 0) // MIB} MiB are free beyond --fit-target")
    return Fit(ctx, -1 if layers >= all_layers else layers, tuple(notes))


def _fit_host(shape: ModelShape, host_free: int | None, request: FitRequest, wanted_ctx: int) -> Fit:
    layers = -1 if request.n_gpu_layers is None else request.n_gpu_layers
    if host_free is None:
        return Fit(wanted_ctx, layers)
    room = (host_free - request.margin_bytes - request.host_reserved_bytes - shape.weight_bytes
            - compute_bytes(shape, request.n_ubatch))
    need = shape.kv_bytes_per_token * wanted_ctx
    if need <= room:
        return Fit(wanted_ctx, layers)
    if request.n_ctx != 0:
        return Fit(wanted_ctx, layers, (f"the context of {wanted_ctx} tokens may not fit: its KV cache takes "
                                        f"{need // MIB} MiB, {max(room, 0) // MIB} MiB are free for it",))
    ctx = min(wanted_ctx, _floor_ctx(max(0, room) // max(1, shape.kv_bytes_per_token), request))
    return Fit(ctx, layers, (f"context {wanted_ctx} -> {ctx} tokens to fit the free memory "
                             f"({max(room, 0) // MIB} MiB for the KV cache)",))
