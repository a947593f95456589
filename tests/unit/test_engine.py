"""The engine's scheduler on a fake backend: batching, limits, stops, cache reuse, cancellation."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest

from app.engine import (
    CancelledError,
    Completion,
    ContextExceededError,
    DecodeError,
    Engine,
    EngineOptions,
    FinishReason,
    GenerationRequest,
    InvalidJobError,
    Job,
    NotReadyError,
    Scheduler,
    TokenChunk,
)
from tests.fakes import FakeBackend, encode


def start(backend: FakeBackend, **options: object) -> Engine:
    engine = Engine(lambda: backend, EngineOptions(**options))  # type: ignore[arg-type]
    engine.start()
    assert engine.wait_ready(5)
    return engine


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def engine(backend: FakeBackend) -> Iterator[Engine]:
    engine = start(backend)
    yield engine
    engine.stop()


def events_of(job: Job, timeout: float = 5.0) -> list[TokenChunk | Completion]:
    return family_events(job, 1, timeout)[job.index]


def request(prompt: str, **fields: object) -> GenerationRequest:
    return GenerationRequest(prompt=tuple(encode(prompt + ">")), **fields)  # type: ignore[arg-type]


def test_a_job_generates_its_reply_and_stops_on_eos(engine: Engine) -> None:
    events = events_of(engine.submit(request("hi")))
    final = events[-1]
    assert isinstance(final, Completion)
    assert final.text == "Hello, world!"
    assert final.finish is FinishReason.EOS
    assert "".join(e.text for e in events if isinstance(e, TokenChunk)) == "Hello, world!"
    assert final.timings.predicted_n == len("Hello, world!")
    assert final.n_prompt == len(encode("hi>"))


def test_n_predict_limits_the_tokens(engine: Engine) -> None:
    final = events_of(engine.submit(request("hi", n_predict=4)))[-1]
    assert isinstance(final, Completion)
    assert final.text == "Hell"
    assert final.finish is FinishReason.LIMIT


def test_n_predict_zero_only_evaluates_the_prompt(engine: Engine) -> None:
    final = events_of(engine.submit(request("hi", n_predict=0)))[-1]
    assert isinstance(final, Completion)
    assert final.text == "" and final.tokens == ()
    assert final.finish is FinishReason.LIMIT


def test_server_n_predict_is_the_default_a_requests_own_wins(backend: FakeBackend) -> None:
    engine = start(backend, n_predict_default=3)
    try:
        final = events_of(engine.submit(request("hi", n_predict=-1)))[-1]
        assert isinstance(final, Completion) and final.text == "Hel"
        own = events_of(engine.submit(request("hi", n_predict=5)))[-1]
        assert isinstance(own, Completion) and own.text == "Hello"  # more than -n, as llama-server
    finally:
        engine.stop()


def test_a_stop_string_cuts_the_text_and_is_never_streamed(engine: Engine) -> None:
    events = events_of(engine.submit(request("hi", stop=("o, w",))))
    final = events[-1]
    assert isinstance(final, Completion)
    assert final.text == "Hell"
    assert final.finish is FinishReason.WORD
    assert final.stopping_word == "o, w"
    streamed = "".join(e.text for e in events if isinstance(e, TokenChunk))
    assert streamed == "Hell"


def test_a_partial_stop_match_is_released_when_it_does_not_complete() -> None:
    backend = FakeBackend(reply_for=lambda prompt: "abcabd")
    engine = start(backend)
    try:
        events = events_of(engine.submit(request("x", stop=("abd!",))))
        chunks = [e.text for e in events if isinstance(e, TokenChunk)]
        assert "".join(chunks) == "abcabd"
        final = events[-1]
        assert isinstance(final, Completion) and final.finish is FinishReason.EOS
    finally:
        engine.stop()


def test_multibyte_characters_are_never_split_across_chunks() -> None:
    reply = "héllo ✓ 日本"
    engine = start(FakeBackend(reply_for=lambda prompt: reply))
    try:
        events = events_of(engine.submit(request("x")))
        chunks = [e.text for e in events if isinstance(e, TokenChunk)]
        assert "".join(chunks) == reply
        assert all("\ufffd" not in chunk for chunk in chunks)
    finally:
        engine.stop()


def test_concurrent_jobs_share_decode_steps(backend: FakeBackend, engine: Engine) -> None:
    jobs = [engine.submit(request(f"prompt {i}")) for i in range(4)]
    finals = [events_of(job)[-1] for job in jobs]
    assert all(isinstance(f, Completion) and f.text == "Hello, world!" for f in finals)
    assert backend.max_sequences_in_one_decode() == 4
    assert engine.stats().max_sequences_per_decode == 4
    assert engine.stats().n_decode_total < 4 * (len("Hello, world!") + 1)


def test_long_prompts_are_split_into_chunks_within_n_batch() -> None:
    backend = FakeBackend(n_batch=16, reply_for=lambda prompt: prompt[:5])
    engine = start(backend)
    try:
        prompts = ["a" * 40, "b" * 33, "c" * 7]
        jobs = [engine.submit(request(p)) for p in prompts]
        finals = [events_of(job)[-1] for job in jobs]
        assert [f.text for f in finals if isinstance(f, Completion)] == [p[:5] for p in prompts]
        assert max(len(batch) for batch in backend.batches) <= 16
    finally:
        engine.stop()


def test_a_repeated_prefix_is_reused_from_the_slot_cache(engine: Engine) -> None:
    first = events_of(engine.submit(request("a long shared system prompt, then question one")))[-1]
    second = events_of(engine.submit(request("a long shared system prompt, then question two")))[-1]
    assert isinstance(first, Completion) and isinstance(second, Completion)
    assert first.timings.cache_n == 0
    shared = len(encode("a long shared system prompt, then question "))
    assert second.timings.cache_n == shared
    assert second.timings.prompt_n == second.n_prompt - shared
    assert second.text == first.text


def test_cache_prompt_off_reprocesses_the_whole_prompt(engine: Engine) -> None:
    events_of(engine.submit(request("same prompt")))
    again = events_of(engine.submit(request("same prompt", cache_prompt=False)))[-1]
    assert isinstance(again, Completion)
    assert again.timings.cache_n == 0
    assert again.timings.prompt_n == again.n_prompt


def test_a_cancelled_job_frees_its_slot() -> None:
    backend = FakeBackend(n_seq=1, reply_for=lambda prompt: "x" * 200)
    engine = start(backend)
    try:
        job = engine.submit(request("long"))
        _, first = job.sink.get(timeout=5)
        assert isinstance(first, TokenChunk)
        job.cancel()
        deadline = time.monotonic() + 5
        while engine.slot_views()[0].is_processing and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not engine.slot_views()[0].is_processing
        follow_up = events_of(engine.submit(GenerationRequest(prompt=tuple(encode("next>")), n_predict=3)))
        assert isinstance(follow_up[-1], Completion) and follow_up[-1].text == "xxx"
    finally:
        engine.stop()


def test_a_job_cancelled_while_queued_never_runs() -> None:
    backend = FakeBackend(n_seq=1, reply_for=lambda prompt: "y" * 50)
    engine = start(backend)
    try:
        running = engine.submit(request("first"))
        waiting = engine.submit(request("second"))
        waiting.cancel()
        assert isinstance(events_of(running)[-1], Completion)
        _, event = waiting.sink.get(timeout=5)
        assert isinstance(event, CancelledError)
    finally:
        engine.stop()


def test_a_prompt_that_fills_the_slot_is_rejected_with_the_counts(engine: Engine) -> None:
    with pytest.raises(ContextExceededError) as caught:
        engine.submit(GenerationRequest(prompt=tuple([20] * 256)))
    assert caught.value.n_prompt_tokens == 256
    assert caught.value.n_ctx == 256


def test_an_empty_prompt_and_unknown_tokens_are_rejected(engine: Engine) -> None:
    with pytest.raises(InvalidJobError):
        engine.submit(GenerationRequest(prompt=()))
    with pytest.raises(InvalidJobError, match="invalid tokens"):
        engine.submit(GenerationRequest(prompt=(99999,)))


def test_generation_stops_when_the_slot_context_is_full() -> None:
    backend = FakeBackend(n_ctx_seq=32, reply_for=lambda prompt: "z" * 100)
    engine = start(backend)
    try:
        final = events_of(engine.submit(request("0123456789")))[-1]
        assert isinstance(final, Completion)
        assert final.truncated and final.finish is FinishReason.LIMIT
        assert final.n_prompt + len(final.tokens) <= 32
    finally:
        engine.stop()


def test_a_failed_decode_fails_its_jobs_and_the_engine_keeps_serving(backend: FakeBackend, engine: Engine) -> None:
    backend.fail_decodes = 1
    job = engine.submit(request("boom"))
    _, event = job.sink.get(timeout=5)
    assert isinstance(event, DecodeError)
    final = events_of(engine.submit(request("fine")))[-1]
    assert isinstance(final, Completion) and final.text == "Hello, world!"
    assert not any(view.is_processing for view in engine.slot_views())


def test_id_slot_pins_the_job_to_that_slot(engine: Engine) -> None:
    final = events_of(engine.submit(request("pinned", id_slot=2)))[-1]
    assert isinstance(final, Completion) and final.id_slot == 2
    with pytest.raises(InvalidJobError, match="slot"):
        engine.submit(request("pinned", id_slot=9))


def test_without_continuous_batching_new_jobs_wait_for_a_quiet_engine() -> None:
    backend = FakeBackend(reply_for=lambda prompt: "w" * 30)
    engine = start(backend, cont_batching=False)
    try:
        first = engine.submit(request("one"))
        first.sink.get(timeout=5)  # generating now
        second = engine.submit(request("two"))
        assert isinstance(events_of(first)[-1], Completion)
        assert isinstance(events_of(second)[-1], Completion)
        assert backend.max_sequences_in_one_decode() == 1
    finally:
        engine.stop()


def test_ignore_eos_bans_the_end_of_generation_token(engine: Engine) -> None:
    from app.engine import SamplingParams

    final = events_of(engine.submit(request("x", n_predict=16, sampling=SamplingParams(ignore_eos=True))))[-1]
    assert isinstance(final, Completion)
    assert final.finish is FinishReason.LIMIT
    assert final.text.startswith("Hello, world!")


def test_submit_before_the_model_is_loaded_is_refused() -> None:
    gate = threading.Event()

    def slow_backend() -> FakeBackend:
        gate.wait(5)
        return FakeBackend()

    engine = Engine(slow_backend)
    engine.start()
    try:
        assert not engine.is_ready
        with pytest.raises(NotReadyError):
            engine.submit(request("early"))
    finally:
        gate.set()
        assert engine.wait_ready(5)
        engine.stop()


def test_ready_only_after_on_ready_has_run() -> None:
    """/health follows is_ready: it must not say 200 before on_ready has published what the handlers
    need (a fresh-clone run saw /apply-template answer 503 right after /health's first 200)."""
    seen: list[tuple[bool, int]] = []
    engine: Engine

    def on_ready() -> None:
        time.sleep(0.2)  # a slow publication widens the window the old order left open
        seen.append((engine.is_ready, engine.info.n_vocab))  # the model is known, the engine not yet ready

    engine = Engine(FakeBackend, on_ready=on_ready)
    engine.start()
    try:
        assert engine.wait_ready(5)
        assert seen and seen[0][0] is False and seen[0][1] > 0
    finally:
        engine.stop()


def test_a_load_failure_is_reported_to_the_owner() -> None:
    failures: list[BaseException] = []

    def broken() -> FakeBackend:
        raise OSError("no such model")

    engine = Engine(broken, on_load_failure=failures.append)
    engine.start()
    deadline = time.monotonic() + 5
    while not failures and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(failures[0], OSError)
    assert not engine.is_ready


def test_stop_frees_the_backend_and_fails_running_jobs(backend: FakeBackend) -> None:
    backend.reply_for = lambda prompt: "q" * 200
    engine = start(backend)
    job = engine.submit(request("long"))
    job.sink.get(timeout=5)
    engine.stop()
    assert backend.closed
    seen = []
    while True:
        try:
            seen.append(job.sink.get_nowait()[1])
        except queue.Empty:
            break
    assert any(isinstance(event, NotReadyError) for event in seen) or any(
        isinstance(event, Completion) for event in seen
    )


def family_events(job: Job, size: int, timeout: float = 5.0) -> dict[int, list[TokenChunk | Completion]]:
    events: dict[int, list[TokenChunk | Completion]] = {}
    done = 0
    deadline = time.monotonic() + timeout
    while done < size and time.monotonic() < deadline:
        try:
            index, event = job.sink.get(timeout=0.05)
        except queue.Empty:
            continue
        if isinstance(event, Exception):
            raise event
        events.setdefault(index, []).append(event)
        done += isinstance(event, Completion)
    assert done == size, "the family did not finish"
    return events


def test_copies_decode_the_prompt_once_and_copy_the_cells(backend: FakeBackend, engine: Engine) -> None:
    prompt = request("a prompt shared by three completions")
    job = engine.submit(prompt, copies=3, index=10)
    events = family_events(job, 3)
    assert sorted(events) == [10, 11, 12]
    finals = [events[i][-1] for i in (10, 11, 12)]
    assert all(isinstance(f, Completion) and f.text == "Hello, world!" for f in finals)
    prompt_tokens_decoded = sum(1 for batch in backend.batches for entry in batch if not entry.logits or
                                entry.token in prompt.prompt[-1:])
    assert prompt_tokens_decoded <= len(prompt.prompt) + 2
    leader_slot = finals[0].id_slot
    assert sorted(target for source, target in backend.copies if source == leader_slot) == sorted(
        f.id_slot for f in finals[1:]
    )
    assert len({f.id_slot for f in finals}) == 3


def test_copies_get_distinct_seeds_when_one_is_given(engine: Engine) -> None:
    from app.engine import SamplingParams

    job = engine.submit(request("x", sampling=SamplingParams(seed=7)), copies=2)
    assert [member.request.sampling.seed for member in job.family] == [7, 8]


def test_too_many_copies_is_refused(engine: Engine) -> None:
    with pytest.raises(InvalidJobError, match="n must be between"):
        engine.submit(request("x"), copies=5)


def test_a_grammar_llama_cpp_rejects_fails_its_job_on_the_engine_thread(engine: Engine) -> None:
    """The grammar is parsed once a sequence, where its sampler is made (not again on the HTTP
    thread): the job's first event is the error, and the engine goes on."""
    from app.engine import SamplingParams

    job = engine.submit(request("x", sampling=SamplingParams(grammar="nonsense")))
    _, outcome = job.sink.get(timeout=5)
    assert isinstance(outcome, InvalidJobError) and "Failed to initialize samplers" in str(outcome)
    assert isinstance(events_of(engine.submit(request("still fine")))[-1], Completion)


def test_token_probabilities_travel_with_the_chunks(engine: Engine) -> None:
    from app.engine import SamplingParams

    events = events_of(engine.submit(request("x", n_predict=4, sampling=SamplingParams(n_probs=2))))
    chunks = [e for e in events if isinstance(e, TokenChunk)]
    assert sum(len(c.probs) for c in chunks) == 4
    assert all(len(c.probs) == len(c.tokens) for c in chunks)
    final = events[-1]
    assert isinstance(final, Completion) and [p.token for p in final.probs] == list(final.tokens)


def test_n_indent_stops_at_a_line_indented_less() -> None:
    engine = start(FakeBackend(reply_for=lambda prompt: "def f():\n    return 1\nprint(f())\n"))
    try:
        final = events_of(engine.submit(request("code", n_indent=4)))[-1]
        assert isinstance(final, Completion)
        assert final.text == "def f():\n    return 1"
        assert final.finish is FinishReason.LIMIT
    finally:
        engine.stop()


def test_t_max_predict_ms_stops_at_the_next_new_line() -> None:
    engine = start(FakeBackend(reply_for=lambda prompt: "line one\nline two\nline three\n", decode_seconds=0.002))
    try:
        final = events_of(engine.submit(request("x", t_max_predict_ms=1)))[-1]
        assert isinstance(final, Completion)
        assert final.finish is FinishReason.LIMIT
        assert final.text.count("\n") == 1
    finally:
        engine.stop()


def test_embeddings_are_packed_into_as_few_decodes_as_fit(backend: FakeBackend) -> None:
    from app.engine import EmbeddingResult

    engine = start(backend)

    inputs = [encode("x" * n) for n in (10, 20, 30, 5, 5, 5, 5)]
    job = engine.submit_embeddings(inputs)
    result = job.outcome.result(timeout=5)
    assert isinstance(result, EmbeddingResult)
    assert [vectors[0][0] for vectors in result.vectors] == [10.0, 20.0, 30.0, 5.0, 5.0, 5.0, 5.0]
    assert result.n_tokens == (10, 20, 30, 5, 5, 5, 5)
    assert backend.embedder().calls == [3, 4]  # 60 tokens, then 4 inputs (the embedder's n_seq)
    too_long = engine.submit_embeddings([encode("y" * 65)]).outcome.exception(timeout=5)
    assert isinstance(too_long, ContextExceededError) and too_long.n_ctx == 64  # the embedding context's own size
    with pytest.raises(InvalidJobError, match="empty"):
        engine.submit_embeddings([])
    engine.stop()


def test_an_input_over_the_embedding_context_fails_alone(backend: FakeBackend, engine: Engine) -> None:
    job = engine.submit_embeddings([encode("z" * 100)])  # the embedding context holds 64
    outcome = job.outcome.exception(timeout=5)
    assert isinstance(outcome, ContextExceededError) and outcome.n_ctx == 64
    assert isinstance(events_of(engine.submit(request("still fine")))[-1], Completion)


def test_jobs_with_different_lora_scales_never_share_a_decode(backend: FakeBackend, engine: Engine) -> None:
    plain = engine.submit(request("one", lora=(0.0,)))
    adapted = engine.submit(request("two", lora=(1.0,)))
    assert isinstance(events_of(plain)[-1], Completion) and isinstance(events_of(adapted)[-1], Completion)
    scales_of: dict[int, set[tuple[float, ...]]] = {}
    for seqs, scales in backend.decodes_under_lora:
        for seq in seqs:
            scales_of.setdefault(seq, set()).add(scales)
    assert sorted(scales_of.values(), key=str) == [{(0.0,)}, {(1.0,)}]  # each job always under its own scales
    assert backend.max_sequences_in_one_decode() == 1


def test_control_actions_run_on_the_engine_thread(engine: Engine) -> None:
    seen: list[str] = []
    def action(scheduler: Scheduler) -> int:
        seen.append(threading.current_thread().name)
        return len(scheduler.slots)

    assert engine.control(action) == 4
    assert seen == ["engine"]
    with pytest.raises(ValueError):
        engine.control(lambda scheduler: (_ for _ in ()).throw(ValueError("boom")))


def test_idle_sleep_frees_the_backend_and_wakes_for_work() -> None:
    loads: list[FakeBackend] = []

    def factory() -> FakeBackend:
        loads.append(FakeBackend())
        return loads[-1]

    engine = Engine(factory, EngineOptions(sleep_idle_seconds=0.2))
    engine.start()
    try:
        assert engine.wait_ready(5)
        deadline = time.monotonic() + 5
        while not engine.is_sleeping and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.is_sleeping and loads[0].closed
        assert engine.info.name == "fake" and engine.n_slots == 4  # answered without waking
        assert engine.is_sleeping
        final = events_of(engine.submit(request("wake up")))[-1]
        assert isinstance(final, Completion) and len(loads) == 2
    finally:
        engine.stop()


def test_a_failing_sequence_fails_alone_and_the_batch_goes_on(backend: FakeBackend, engine: Engine) -> None:
    backend.poison = encode("#")[0]
    healthy = [engine.submit(request(f"fine {n}")) for n in range(3)]
    doomed = engine.submit(request("bad # prompt"))
    _, failure = doomed.sink.get(timeout=5)
    assert isinstance(failure, DecodeError)
    for job in healthy:
        final = events_of(job)[-1]
        assert isinstance(final, Completion) and final.text == "Hello, world!"


def test_requests_beyond_the_queue_limit_are_refused() -> None:
    from app.engine import OverloadedError

    backend = FakeBackend(n_seq=1, reply_for=lambda prompt: "x" * 100, decode_seconds=0.01)
    engine = start(backend, max_queue=2)
    try:
        jobs = [engine.submit(request(f"job {n}")) for n in range(3)]  # one running, two waiting
        with pytest.raises(OverloadedError, match="--max-queue"):
            engine.submit(request("one too many"))
        for job in jobs:
            assert isinstance(events_of(job, timeout=20)[-1], Completion)
        assert isinstance(events_of(engine.submit(request("room again")), timeout=20)[-1], Completion)
    finally:
        engine.stop()


def test_a_job_whose_sampler_cannot_be_made_fails_alone(backend: FakeBackend, engine: Engine) -> None:
    from app.engine import EngineError, SamplingParams

    original = backend.new_sampler

    def picky(params: SamplingParams, seq: int | None = None):  # type: ignore[no-untyped-def]
        if params.presence_penalty > 1:
            raise TypeError("broken binding")
        return original(params, seq)

    backend.new_sampler = picky  # type: ignore[method-assign]
    broken = engine.submit(request("x", sampling=SamplingParams(presence_penalty=2.0)))
    _, error = broken.sink.get(timeout=5)
    assert isinstance(error, EngineError) and "could not start" in str(error)
    assert isinstance(events_of(engine.submit(request("fine")))[-1], Completion)
    assert engine.is_ready


def test_a_request_admitted_as_one_takes_one_place_and_none_of_its_jobs_is_refused() -> None:
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from app.engine import SamplingParams
    from app.engine.errors import QueueFullError

    backend = FakeBackend(n_seq=2, decode_seconds=0.01)
    engine = start(backend, max_queue=1)
    try:
        with engine.admitted_as_one(), ThreadPoolExecutor(8) as pool:
            # 8 jobs on 2 slots with a queue of 1: submitted one by one, 5 of them would be refused.
            # Each runs in a copy of the context made here, as the predict fan-out does.
            futures = [pool.submit(contextvars.copy_context().run, engine.submit, request(f"unit {n}"))
                       for n in range(8)]
            jobs = [future.result() for future in futures]
            assert all(isinstance(events_of(job, 30)[-1], Completion) for job in jobs)
        blockers = [engine.submit(request("a", n_predict=200, sampling=SamplingParams(ignore_eos=True)))
                    for _ in range(3)]  # 2 running, 1 waiting: the queue is full
        with pytest.raises(QueueFullError) as refused, engine.admitted_as_one():
            pass
        assert refused.value.retry_after == 1
        for job in blockers:
            job.cancel()
    finally:
        engine.stop()


def test_a_job_past_its_deadline_ends_with_what_it_has() -> None:
    backend = FakeBackend(reply_for=lambda prompt: "x" * 200, decode_seconds=0.01)
    engine = start(backend, deadline_seconds=0.2)
    try:
        final = events_of(engine.submit(request("long")), timeout=20)[-1]
        assert isinstance(final, Completion)
        assert final.finish is FinishReason.LIMIT and final.deadline_exceeded
        assert 0 < len(final.tokens) < 200 and final.text == "x" * len(final.tokens)
        quick = events_of(engine.submit(request("short", n_predict=3)), timeout=20)[-1]
        assert isinstance(quick, Completion) and not quick.deadline_exceeded
    finally:
        engine.stop()


@pytest.mark.parametrize("similarity", [0.1, 0.04, 0.0])
def test_slot_prompt_similarity_decides_between_a_similar_slot_and_the_least_recently_used(
        similarity: float) -> None:
    """-sps: the idle slot holding a share of the prompt over the threshold takes it; else the least
    recently used slot (llama-server's rule; 0 turns the similarity off)."""
    engine = start(FakeBackend(n_seq=2), slot_similarity=similarity)
    try:
        def slot_of(prompt: str) -> int:
            final = events_of(engine.submit(request(prompt)))[-1]
            assert isinstance(final, Completion)
            return final.id_slot

        assert (slot_of("x" * 40), slot_of("q" * 40)) == (0, 1)
        if similarity == 0:
            assert slot_of("q" * 40) == 0  # the least recently used slot, though slot 1 holds all of it
            return
        assert slot_of("q" * 40) == 1  # slot 1 holds all of it; slot 0 is now the least recently used
        # 3 of its 61 tokens are in slot 1: about 5%, over 0.04 and under 0.1
        assert slot_of("qqq" + "z" * 57) == (1 if similarity < 0.05 else 0)
    finally:
        engine.stop()


def test_cache_reuse_moves_a_cached_chunk_to_where_the_new_prompt_has_it() -> None:
    """llama-server's n_cache_reuse: when a middle part of the cached prompt is gone from the new one
    (an old turn dropped from a chat), what followed it is moved in the KV cells, not computed
    again; the cells then hold exactly the new prompt."""
    backend = FakeBackend(n_seq=1, n_ctx_seq=512)
    engine = start(backend)
    try:
        head, dropped = "System: be brief.", " An old turn, now dropped."
        document = " The same long document, word for word, in both prompts"
        cold = events_of(engine.submit(request(head + document, cache_prompt=False)))[-1]
        events_of(engine.submit(request(head + dropped + document)))  # the slot holds this prompt
        reused = events_of(engine.submit(request(head + document, n_cache_reuse=8)))[-1]
        assert isinstance(cold, Completion) and isinstance(reused, Completion)
        assert backend.moves and backend.moves[0][3] >= len(encode(document)) - 1  # its space is in the prefix
        assert reused.timings.cache_n >= len(encode(head + document)) and reused.text == cold.text
        prompt = encode(head + document + ">")
        assert backend.kv[0][:len(prompt)] == prompt  # the cells hold the new prompt, in order
    finally:
        engine.stop()


def test_cache_reuse_ignores_chunks_shorter_than_asked() -> None:
    backend = FakeBackend(n_seq=1, n_ctx_seq=512)
    engine = start(backend)
    try:
        events_of(engine.submit(request("AAAA" + "BBBB" + "short")))
        reused = events_of(engine.submit(request("AAAA" + "short", n_cache_reuse=8)))[-1]
        assert isinstance(reused, Completion) and not backend.moves and reused.timings.cache_n == len("AAAA")
    finally:
        engine.stop()


@pytest.mark.parametrize("unified", [False, True])
def test_idle_slots_go_to_the_prompt_cache_and_leave_a_shared_cache(unified: bool) -> None:
    """--cache-idle-slots: when a job starts, the idle slots' prompts are kept in the prompt cache;
    with -kvu their cells are freed, and a later request for that prompt is restored from the cache."""
    backend = FakeBackend(n_seq=2, n_ctx_seq=512)
    engine = start(backend, prompt_cache_bytes=None, kv_unified=unified)
    try:
        events_of(engine.submit(request("the first prompt, a long one")))
        events_of(engine.submit(request("a second prompt, different")))
        assert backend.state_reads >= 1
        assert (backend.kv[0] == []) is unified
        again = events_of(engine.submit(request("the first prompt, a long one")))[-1]
        assert isinstance(again, Completion) and again.timings.cache_n > 0
        assert (backend.state_writes >= 1) is unified  # restored from the cache, or still in its cells
    finally:
        engine.stop()
