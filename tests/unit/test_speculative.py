"""Speculative decoding on the fake backend (app/engine/speculative.py, app/engine/scheduler.py): drafts
ride in the step's one batch after the slot's token, the model's own picks are kept, the cells of
rejected draft tokens are dropped, and the output is the output without speculation."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine import BatchToken, Completion, Engine, EngineOptions, GenerationRequest, SamplingParams
from app.engine.ngram_map import NgramMap
from app.engine.ngram_mod import NgramMod
from app.engine.speculative import DraftWant, SpeculationOptions, Speculator, ngram_simple_draft
from app.engine.types import SpeculativeParams
from app.protocol.metrics import MetricsExporter
from tests.fakes import EOS, FakeBackend, completion_of, encode, running_engine

TEXT = "the quick brown fox jumps over the lazy dog; "
PROMPT = f"copy this: {TEXT * 2}>"
NGRAM = SpeculationOptions(types=("ngram-simple",), ngram_size_n=3, ngram_size_m=8)


def finish(engine: Engine, prompt: str = PROMPT, **fields: object) -> Completion:
    request = GenerationRequest(prompt=tuple(encode(prompt)), sampling=SamplingParams(temperature=0),
                                **fields)  # type: ignore[arg-type]
    return completion_of(engine.submit(request))


def run(backend: FakeBackend, speculation: SpeculationOptions, prompt: str = PROMPT, **fields: object) -> Completion:
    with running_engine(backend, EngineOptions(speculation=speculation)) as engine:
        return finish(engine, prompt, **fields)


def longest_in(batch: list[BatchToken], seq: int) -> int:
    """The entries of sequence ``seq`` with logits in ``batch``: its token and its draft."""
    return sum(entry.seq == seq and entry.logits for entry in batch)


def longest_run(backend: FakeBackend, seq: int = 0) -> int:
    """The most tokens of sequence ``seq`` one decode verified."""
    return max(longest_in(batch, seq) for batch in backend.batches)


def test_ngram_simple_never_takes_the_current_occurrence_or_one_at_the_start() -> None:
    history = [1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 7, 8, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2]
    assert ngram_simple_draft(history, 3, size_n=3, size_m=4) == []  # (1, 2, 3) occurs only at 0
    assert ngram_simple_draft([0, *history], 3, size_n=3, size_m=4) == [4, 5, 6, 9]  # at 1 it counts


def test_ngram_simple_takes_the_latest_match_and_needs_size_n_tokens_after_it() -> None:
    tokens = [0, 5, 6, 7, 1, 1, 1, 1, 5, 6, 7, 2, 2, 2, 2, 3, 3, 3, 3, 3, 5, 6]
    assert ngram_simple_draft(tokens, 7, size_n=3, size_m=4) == [2, 2, 2, 2]  # the later (5, 6, 7) wins
    assert ngram_simple_draft(tokens[:8], 7, size_n=3, size_m=4) == []  # history too short
    assert ngram_simple_draft([0, *[9] * 12, 5, 6, 7, 1, 5, 6], 7, size_n=3, size_m=1) == []  # 1 < size_n after it


def test_ngram_simple_never_matches_across_token_boundaries() -> None:
    """The search runs over the tokens' bytes: a byte match that straddles two tokens is skipped."""
    straddle = [0x01000000, 0x02000000, 0]  # bytes ... 01 | 02 00 00 00 00 ... hold (1, 2) off by 3 bytes
    tokens = [0, 1, 2, 4, 4, 4, *straddle, *[9] * 10, 1]
    assert ngram_simple_draft(tokens, 2, size_n=2, size_m=3) == [4, 4, 4]


def test_greedy_output_with_ngram_speculation_equals_the_output_without() -> None:
    reply = lambda prompt: TEXT * 2  # noqa: E731 - the answer repeats the prompt's text
    plain = run(FakeBackend(reply_for=reply, n_seq=1), SpeculationOptions())
    backend = FakeBackend(reply_for=reply, n_seq=1)
    fast = run(backend, NGRAM)
    assert fast.text == plain.text == TEXT * 2
    assert fast.timings.draft_n > 0 and fast.timings.draft_n_accepted > 0
    assert longest_run(backend) > 1  # several tokens of the slot verified in one decode
    assert len(backend.batches) < len(plain.tokens)  # fewer decodes than tokens
    assert backend.kv[0] == [*encode(PROMPT), *fast.tokens]  # the cells: the prompt and the answer, no more


def test_rejected_draft_tokens_leave_the_cells() -> None:
    """The answer follows the prompt's text, then leaves it: the draft after the turn is rejected,
    its cells dropped (the fake checks that every decode continues its sequence's cells)."""
    answer = TEXT[:20] + "SOMETHING ELSE ENTIRELY"
    backend = FakeBackend(reply_for=lambda prompt: answer, n_seq=1)
    result = run(backend, NGRAM)
    assert result.text == answer
    assert result.timings.draft_n > result.timings.draft_n_accepted
    assert backend.forgets, "a rejected draft's cells are dropped"
    generated = backend.kv[0][len(encode(PROMPT)):]
    assert generated == encode(answer)[: len(generated)]  # the cells hold the answer, no rejected token


def test_a_request_can_turn_speculation_off_or_bound_its_drafts() -> None:
    reply = lambda prompt: TEXT * 2  # noqa: E731
    off = FakeBackend(reply_for=reply, n_seq=1)
    assert run(off, NGRAM, speculative=SpeculativeParams(n_max=0)).timings.draft_n == 0
    assert longest_run(off) == 1
    bounded = FakeBackend(reply_for=reply, n_seq=1)
    assert run(bounded, NGRAM, speculative=SpeculativeParams(n_max=2)).timings.draft_n > 0
    assert longest_run(bounded) == 3  # the token and two drafted


def test_drafts_stop_at_n_predict_and_the_context() -> None:
    reply = lambda prompt: TEXT * 4  # noqa: E731
    backend = FakeBackend(reply_for=reply, n_seq=1, n_ctx_seq=160)
    result = run(backend, NGRAM, n_predict=30)
    assert len(result.tokens) == 30
    assert len(backend.kv[0]) <= len(encode(PROMPT)) + 30
    tight = FakeBackend(reply_for=reply, n_seq=1, n_ctx_seq=len(encode(PROMPT)) + 20)
    assert run(tight, NGRAM).truncated  # never a position beyond the context (the fake asserts it)


def test_several_slots_speculate_in_one_decode() -> None:
    backend = FakeBackend(reply_for=lambda prompt: TEXT * 2, n_seq=2)
    with running_engine(backend, EngineOptions(speculation=NGRAM)) as engine:
        jobs = [engine.submit(GenerationRequest(prompt=tuple(encode(PROMPT)), sampling=SamplingParams(temperature=0)))
                for _ in range(2)]
        for job in jobs:
            completion_of(job)
    assert any(longest_in(batch, 0) > 1 and longest_in(batch, 1) > 1 for batch in backend.batches)


def draft_backend(reply: Callable[[str], str], confidence: float = 1.0) -> FakeBackend:
    return FakeBackend(reply_for=reply, n_seq=1, confidence=confidence)


def test_a_draft_model_drafts_and_the_target_keeps_what_it_agrees_with() -> None:
    answer = "a short answer, then more words"
    options = SpeculationOptions(types=("draft-simple",), draft_n_max=4)
    agreeing = FakeBackend(reply_for=lambda prompt: answer, n_seq=1, draft=draft_backend(lambda prompt: answer))
    result = run(agreeing, options, prompt="question>")
    assert result.text == answer
    assert result.timings.draft_n_accepted == result.timings.draft_n > 0
    assert longest_run(agreeing) == 5
    wrong = FakeBackend(reply_for=lambda prompt: answer, n_seq=1,
                        draft=draft_backend(lambda prompt: "a wrong guess all along"))
    result = run(wrong, options, prompt="question>")
    assert result.text == answer  # the target's own tokens, whatever the draft said
    assert result.timings.draft_n_accepted < result.timings.draft_n
    unsure = FakeBackend(reply_for=lambda prompt: answer, n_seq=1,
                         draft=draft_backend(lambda prompt: answer, confidence=0.3))
    assert run(unsure, options, prompt="question>", speculative=SpeculativeParams(p_min=0.5)).timings.draft_n == 0


def test_the_draft_model_keeps_its_cells_in_step_with_the_slot() -> None:
    answer = "abcdefghijklmnopqrstuvwxyz"
    draft = draft_backend(lambda prompt: answer)
    backend = FakeBackend(reply_for=lambda prompt: answer, n_seq=1, draft=draft)
    run(backend, SpeculationOptions(types=("draft-simple",), draft_n_max=3), prompt="letters>", n_predict=12)
    common = min(len(draft.kv[0]), len(backend.kv[0]))
    assert common > len(encode("letters>")) and draft.kv[0][:common] == backend.kv[0][:common]
    prompt = len(encode("letters>"))
    prompt_decodes = sum(sum(entry.pos < prompt for entry in batch) for batch in draft.batches)
    assert prompt_decodes == prompt  # the prompt went through the draft model once


def test_draft_model_drafts_shorter_than_n_min_are_dropped() -> None:
    want = DraftWant(0, encode("q>"), encode("x")[0], limit=2)
    options = SpeculationOptions(types=("draft-simple",), draft_n_max=4, draft_n_min=3)
    assert Speculator(options, draft_backend(lambda prompt: "xyzw"), n_vocab=300).drafts([want]) == {}
    long_enough = replace(want, limit=10)  # the draft runs on past the end of the answer, as llama.cpp's
    assert Speculator(options, draft_backend(lambda prompt: "xyzw"), n_vocab=300).drafts([long_enough]) == {
        0: [*encode("yzw"), EOS]}


def test_the_speculation_metrics_count_drafts_and_accepted_tokens() -> None:
    backend = FakeBackend(reply_for=lambda prompt: TEXT * 2, n_seq=1)
    with running_engine(backend, EngineOptions(speculation=NGRAM)) as engine:
        result = finish(engine)
        stats = engine.stats()
        text = MetricsExporter(engine.stats).render()
    assert stats.draft_tokens_total == result.timings.draft_n
    assert stats.draft_accepted_total == result.timings.draft_n_accepted
    assert stats.drafts_total > 0 and stats.accepted_per_position[0] <= stats.drafts_total
    assert f"llamacpp:spec_decode_num_draft_tokens_total {float(stats.draft_tokens_total)}" in text
    assert 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}' in text


def test_a_model_that_cannot_rewind_its_cells_does_not_speculate() -> None:
    backend = FakeBackend(reply_for=lambda prompt: TEXT * 2, n_seq=1, can_rewind=False)
    assert run(backend, NGRAM).timings.draft_n == 0


def test_ngram_mod_drafts_from_the_shared_table_and_keeps_its_minimum() -> None:
    table = NgramMod(n_match=3, n_min=2, n_max=4)
    history = [1, 2, 3, 4, 5, 6, 7, 9, 9, 9]
    # slot 0's history fed the table: after (1, 2, 3) comes 4, then 5, 6, 7 ...
    assert table.draft(0, history, 9, limit=8) == []  # (9, 9, 9) was never followed by anything
    assert table.draft(1, [8, 1, 2], 3, limit=8) == [4, 5, 6, 7]  # another slot drafts from the same table
    assert table.draft(1, [8, 1, 2], 3, limit=2) == [4, 5]  # the step's room bounds it
    assert table.draft(1, [0, 7, 9], 9, limit=8) == []  # (7, 9, 9) -> 9, then (9, 9, 9) is unknown: 1 < n_min
    assert NgramMod(n_match=3, n_min=0, n_max=4).draft(0, [1, 2], 3, limit=8) == []  # under n_match tokens


def test_ngram_mod_empties_its_table_after_five_mostly_refused_drafts() -> None:
    table = NgramMod(n_match=2, n_min=1, n_max=4)
    history = [1, 2, 3, 4, 5, 6, 1, 2]
    assert table.draft(0, history, 3, limit=4) == [4, 5, 6, 1]
    for _ in range(4):
        table.accepted(0, 0)
        assert table.draft(0, history, 3, limit=4) == [4, 5, 6, 1]
    table.accepted(0, 3)  # a good one breaks the streak
    for _ in range(5):
        assert table.draft(0, history, 3, limit=4)
        table.accepted(0, 0)
    assert not table.table
    speculator = Speculator(SpeculationOptions(types=("ngram-mod",), ngram_mod_n_match=2, ngram_mod_n_min=1), None, 16)
    assert speculator.drafts([DraftWant(seq=0, history=history, last=3, limit=3)]) == {0: [4, 5, 6]}


def test_ngram_map_k_drafts_after_the_latest_earlier_key_and_as_long_as_the_model_kept() -> None:
    drafter = NgramMap(size_n=2, size_m=3, min_hits=1, key_only=True)
    history = [1, 2, 7, 8, 9, 5, 1, 2, 6, 6, 6, 4, 4, 4, 1]
    # the key (1, 2): its places are 0 and 6; the latest with room for 3 tokens and the key after is 6
    assert drafter.draft(0, history, 2, limit=8) == [6, 6, 6]
    drafter.accepted(0, 1)  # the model kept one: this key's next draft is one token long
    assert drafter.draft(0, history, 2, limit=8) == [6]
    assert drafter.draft(0, history, 3, limit=8) == []  # (1, 3) never came before
    assert drafter.draft(1, history[:5], 2, limit=8) == []  # under 2n+m tokens of history


def test_ngram_map_k4v_drafts_only_a_dominant_continuation() -> None:
    drafter = NgramMap(size_n=2, size_m=2, min_hits=2, key_only=False)
    agreeing = [1, 2, 5, 6, 0, 1, 2, 5, 6, 0, 1, 2, 5, 6, 0, 9, 9, 9, 1]
    assert drafter.draft(0, agreeing, 2, limit=8) == []  # first hit: under min_hits
    assert drafter.draft(0, agreeing, 2, limit=8) == [5, 6]  # (5, 6) after every place of (1, 2)
    split = [1, 2, 5, 6, 0, 1, 2, 7, 7, 0, 1, 2, 8, 8, 0, 9, 9, 9, 1]
    other = NgramMap(size_n=2, size_m=2, min_hits=1, key_only=False)
    assert other.draft(0, split, 2, limit=8) == []  # three continuations seen once each: none dominates
    speculator = Speculator(SpeculationOptions(types=("ngram-map-k",), ngram_map={
        "ngram-map-k": (2, 3, 1), "ngram-map-k4v": (2, 3, 1)}), None, 16)
    drafts = speculator.drafts([DraftWant(seq=0, history=[1, 2, 7, 8, 9, 5, 1, 2, 6, 6, 6, 4, 4, 4, 1], last=2,
                                          limit=2)])
    assert drafts == {0: [6, 6]}


def test_ngram_cache_drafts_the_dominant_follower_of_the_longest_ngram_seen() -> None:
    """llama.cpp's lookup decoding: the slot's own n-gram counts (lax thresholds) draft up to 8 tokens."""
    from app.engine.ngram_cache import NgramCache

    drafter = NgramCache()
    history = [5, 1, 2, 3, 4, 9, 1, 2, 3, 4, 9, 1, 2, 3, 4, 9, 1]
    assert drafter.draft(0, history, 2, limit=8) == [3, 4, 9, 1, 2, 3, 4, 9]
    assert drafter.draft(0, history, 2, limit=3) == [3, 4, 9]
    assert NgramCache().draft(0, [5, 1, 2, 7], 8, limit=8) == []  # nothing seen twice: no draft
    assert drafter.draft(1, [1, 2], 3, limit=8) == []  # each slot has its own counts
    assert drafter.draft(0, [1, 2, 6], 1, limit=8) == []  # a shorter history: a new job, counted afresh


def test_ngram_cache_reads_llama_cpps_lookup_files_and_the_static_cache_drafts_alone(tmp_path: Path) -> None:
    """The file is llama.cpp's common_ngram_cache_save layout (packed here by hand), read back as written."""
    import struct

    from app.engine.ngram_cache import LookupCacheError, NgramCache, load, save

    raw = tmp_path / "static.bin"  # (7, 8) was followed by 3 three times, by 4 once
    raw.write_bytes(struct.pack("<4i", 7, 8, -1, -1) + struct.pack("<i", 2) + struct.pack("<4i", 3, 3, 4, 1)
                    + struct.pack("<4i", 8, 3, -1, -1) + struct.pack("<i", 1) + struct.pack("<2i", 7, 2))
    cache = load(str(raw))
    assert cache == {(7, 8, -1, -1): {3: 3, 4: 1}, (8, 3, -1, -1): {7: 2}}
    save(cache, str(tmp_path / "again.bin"))
    assert (tmp_path / "again.bin").read_bytes() == raw.read_bytes()
    drafter = NgramCache.from_files(str(raw), None)
    assert drafter.draft(0, [1, 7], 8, limit=8)[:2] == [3, 7]  # 3 of 4 after (7, 8); then 7 after (8, 3)
    (tmp_path / "cut.bin").write_bytes(raw.read_bytes()[:-3])
    for bad in (tmp_path / "cut.bin", tmp_path / "missing.bin"):
        with pytest.raises(LookupCacheError, match=bad.name):
            load(str(bad))


def test_ngram_cache_speeds_a_repeating_answer_without_changing_it() -> None:
    reply = lambda prompt: TEXT * 2  # noqa: E731
    plain = run(FakeBackend(reply_for=reply, n_seq=1), SpeculationOptions())
    backend = FakeBackend(reply_for=reply, n_seq=1)
    fast = run(backend, SpeculationOptions(types=("ngram-cache",)))
    assert fast.text == plain.text and fast.timings.draft_n_accepted > 0
    assert len(backend.batches) < len(plain.tokens)


def test_synthetic_rates_resolve_as_llama_server_resolves_them() -> None:
    from app.engine.synthetic import SyntheticAcceptanceError, conditional, resolve_rates

    assert resolve_rates(None, (), 8) == ()
    assert resolve_rates(None, (0.9, 0.5, 0.5), 3) == (0.9, 0.5, 0.5)
    geometric = resolve_rates(2.5, (), 4)  # p + p^2 + p^3 + p^4 = 1.5
    assert abs(sum(geometric) - 1.5) < 1e-6 and all(b == pytest.approx(a * geometric[0])
                                                     for a, b in itertools.pairwise(geometric))
    assert resolve_rates(5.0, (), 4) == (1.0, 1.0, 1.0, 1.0) and resolve_rates(1.0, (), 2) == (0.0, 0.0)
    assert conditional((0.8, 0.4, 0.0, 0.0)) == (0.8, 0.5, 0.0, 0.0)
    for length, rates, n_max, says in ((2.0, (0.5,), 1, "mutually exclusive"), (2.0, (), 0, "speculative"),
                                       (None, (0.5, 0.6), 2, "rise"), (None, (0.5,), 2, "give 2 values"),
                                       (None, (1.5,), 1, r"\[0, 1\]"), (6.0, (), 4, r"\[1, 5\]")):
        with pytest.raises(SyntheticAcceptanceError, match=says):
            resolve_rates(length, rates, n_max)


def test_synthetic_acceptance_keeps_drafts_at_the_rate_asked_not_by_the_model() -> None:
    """--spec-synth-len at its longest keeps every draft token, at 1 none (the model's own drafts would be
    mostly kept); each job draws from its seed, so the same seed gives the same output."""
    reply = lambda prompt: TEXT * 2  # noqa: E731
    everything = run(FakeBackend(reply_for=reply, n_seq=1), replace(NGRAM, synth_len=9.0))  # n_max 8, + 1
    assert everything.timings.draft_n > 0 and everything.timings.draft_n_accepted == everything.timings.draft_n
    nothing = run(FakeBackend(reply_for=reply, n_seq=1), replace(NGRAM, synth_len=1.0))
    assert nothing.timings.draft_n > 0 and nothing.timings.draft_n_accepted == 0
    assert nothing.text == TEXT * 2  # none kept: every token is the model's
    half = []
    for _ in range(2):
        options = EngineOptions(speculation=replace(NGRAM, synth_len=2.0))
        with running_engine(FakeBackend(reply_for=reply, n_seq=1), options) as engine:
            half.append(completion_of(engine.submit(GenerationRequest(
                prompt=tuple(encode(PROMPT)), sampling=SamplingParams(temperature=0, seed=7)))))
    assert half[0].tokens == half[1].tokens
    assert (half[0].timings.draft_n, half[0].timings.draft_n_accepted) == (
        half[1].timings.draft_n, half[1].timings.draft_n_accepted)
    assert 0 < half[0].timings.draft_n_accepted < half[0].timings.draft_n


def test_synthetic_verification_never_keeps_a_drafted_end_of_generation() -> None:
    import random

    from app.engine.synthetic import synthetic_verify
    from app.engine.types import Sampled

    picks = iter([Sampled(21), Sampled(22), Sampled(23)])
    produced = synthetic_verify([5, EOS, 6], (1.0, 1.0, 1.0), random.Random(0), lambda offset: next(picks),
                                lambda token: token == EOS)
    assert [sampled.token for sampled in produced] == [5, 22]  # the drafted EOS is the model's pick instead
