"""Context checkpoints (app/engine/checkpoints.py) on the fake backend with a sliding window: where a prompt's
prefill stops for one, which are kept, and a later prompt that shares an earlier one decoded from the latest
checkpoint that still holds the window (or whole), never from cells whose window was pruned."""

from __future__ import annotations

from app.engine import EngineOptions, GenerationRequest, SamplingParams
from app.engine.backend import SequenceState
from app.engine.checkpoints import Checkpoint, SlotCheckpoints, stops
from tests.fakes import FakeBackend, completion_of, running_engine


def checkpoint(n_tokens: int, job_id: int = 0) -> Checkpoint:
    return Checkpoint(n_tokens, max(0, n_tokens - 10), n_tokens - 1, SequenceState(b"", 0), job_id)


def test_a_prompt_stops_4_and_4_plus_n_ubatch_tokens_before_its_end() -> None:
    assert stops(400, 64, 256) == (332, 396)
    assert stops(400, 512, 256) == (144, 396)  # at most n_batch before the end
    assert stops(30, 64, 256) == (26,) and stops(4, 64, 256) == ()


def test_a_slot_keeps_its_latest_checkpoints_and_drops_close_ones_first_when_full() -> None:
    kept = SlotCheckpoints()
    for n_tokens in (100, 200, 300):
        kept.add(checkpoint(n_tokens, job_id=1), limit=3, min_step=0)
    kept.add(checkpoint(400, job_id=2), limit=3, min_step=0)
    assert [item.n_tokens for item in kept.items] == [200, 300, 400]  # the oldest went
    spaced = SlotCheckpoints()
    for n_tokens in (100, 5000, 5050):
        spaced.add(checkpoint(n_tokens, job_id=1), limit=3, min_step=1000)
    spaced.add(checkpoint(9000, job_id=2), limit=3, min_step=1000)
    assert [item.n_tokens for item in spaced.items] == [100, 5000, 9000]  # 5050 was within 1000 of 5000
    spaced.add(checkpoint(5000, job_id=3), limit=3, min_step=1000)
    assert [item.n_tokens for item in spaced.items] == [100, 9000, 5000]  # taken again: replaced
    assert spaced.usable(6000, 5500) is not None and spaced.usable(6000, 5500).n_tokens == 5000  # type: ignore
    spaced.drop_after(4000)
    assert [item.n_tokens for item in spaced.items] == [100]


def conversation(backend: FakeBackend, checkpoints: int) -> tuple[int, int]:
    """A long prompt answered at length, then the same prompt with more after it: (cache_n, prompt_n)."""
    first = tuple(range(10, 110))
    with running_engine(backend, EngineOptions(ctx_checkpoints=checkpoints)) as engine:
        completion_of(engine.submit(GenerationRequest(prompt=first, n_predict=60, sampling=SamplingParams(
            temperature=0, ignore_eos=True))))
        again = completion_of(engine.submit(GenerationRequest(prompt=first + tuple(range(200, 210)), n_predict=2,
                                                              sampling=SamplingParams(temperature=0))))
    return again.timings.cache_n, again.timings.prompt_n


def test_a_prompt_whose_window_was_pruned_is_decoded_from_a_checkpoint_or_whole() -> None:
    backend = FakeBackend(n_seq=1, n_ctx_seq=512, n_batch=64, n_swa=8, n_ubatch=4)
    cache_n, prompt_n = conversation(backend, 32)
    assert (cache_n, prompt_n) == (95, 15)  # the checkpoint 4 before the old prompt's end: its cells up to 95
    assert backend.window_writes == 1
    whole = FakeBackend(n_seq=1, n_ctx_seq=512, n_batch=64, n_swa=8, n_ubatch=4)
    assert conversation(whole, 0) == (0, 110)
    plain = FakeBackend(n_seq=1, n_ctx_seq=512, n_batch=64)  # no window: the cells serve the whole prefix
    assert conversation(plain, 32)[0] >= 100 and plain.window_writes == 0
