"""--fit's estimate: only what is unset moves (the context with -c 0, the layers with -ngl auto),
the context in whole steps and never below --fit-ctx, --fit-target MiB kept free."""

from __future__ import annotations

from app.engine.memory_fit import MIB, FitRequest, ModelShape, compute_bytes, fit

# A 128k-context model: 8 GiB of weights, 128 KiB of KV a token (16 GiB at its full context).
SHAPE = ModelShape(n_layer=31, n_ctx_train=131072, n_embd=4096, n_vocab=128000, weight_bytes=8192 * MIB,
                   kv_bytes_per_token=128 * 1024)
GIB = 1024 * MIB


def request(**fields: object) -> FitRequest:
    return FitRequest(**{"n_ctx": 0, "n_gpu_layers": None, "n_ubatch": 512, "n_seq": 4, **fields})  # type: ignore[arg-type]


def test_a_context_that_fits_is_kept() -> None:
    assert fit(SHAPE, [], 64 * GIB, request()).n_ctx == 131072
    assert fit(SHAPE, [80 * GIB], None, request()).n_gpu_layers == -1


def test_on_the_cpu_the_context_shrinks_to_what_the_host_holds() -> None:
    host = 16 * GIB
    fitted = fit(SHAPE, [], host, request())
    room = host - 1024 * MIB - SHAPE.weight_bytes - compute_bytes(SHAPE, 512)
    assert fitted.n_ctx % (256 * 4) == 0 and fitted.n_ctx * SHAPE.kv_bytes_per_token <= room
    assert (fitted.n_ctx + 1024) * SHAPE.kv_bytes_per_token > room  # the most that fits, in steps
    assert "context 131072 ->" in fitted.notes[0]
    reserved = fit(SHAPE, [], host, request(host_reserved_bytes=2 * GIB))  # the prompt cache's share
    assert reserved.n_ctx < fitted.n_ctx


def test_never_below_the_smallest_context_and_a_given_context_stays() -> None:
    assert fit(SHAPE, [], 9 * GIB, request(min_ctx=8192)).n_ctx == 8192
    given = fit(SHAPE, [], 9 * GIB, request(n_ctx=65536))
    assert given.n_ctx == 65536 and "may not fit" in given.notes[0]


def test_on_a_gpu_the_context_shrinks_before_the_layers_move() -> None:
    l4 = [22 * GIB]  # an L4's free memory
    fitted = fit(SHAPE, l4, 64 * GIB, request())
    assert fitted.n_gpu_layers == -1 and 4096 <= fitted.n_ctx < 131072


def test_layers_move_when_even_the_smallest_context_does_not_fit() -> None:
    small = [6 * GIB]
    fitted = fit(SHAPE, small, 64 * GIB, request())
    assert fitted.n_ctx == 4096 and 0 < fitted.n_gpu_layers < 32
    assert any("GPU layers 32 ->" in note for note in fitted.notes)
    fixed = fit(SHAPE, small, 64 * GIB, request(n_gpu_layers=-1))  # -ngl all: the layers stay
    assert fixed.n_gpu_layers == -1 and any("may not fit" in note for note in fixed.notes)


def test_the_margin_is_kept_free() -> None:
    assert fit(SHAPE, [], 64 * GIB, request(margin_bytes=40 * GIB)).n_ctx < 131072
