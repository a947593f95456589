"""Embedding jobs packed into decodes of the embedding context. Runs on the engine thread only."""

from __future__ import annotations

from collections import deque

from app.engine.backend import Backend
from app.engine.errors import ContextExceededError, EngineError
from app.engine.slots import EmbedJob
from app.engine.stats import StatsRecorder
from app.engine.types import EmbeddingResult


def run_embedding_decode(queue: deque[EmbedJob], backend: Backend, stats: StatsRecorder) -> None:
    """One embedding decode: as many queued inputs as fit (from one or more jobs, in order); a job
    whose inputs are all done gets its result, a job that cannot run gets its error."""
    if not queue:
        return
    try:
        embedder = backend.embedder()
    except EngineError as exc:
        while queue:
            queue.popleft().outcome.set_exception(exc)
        return
    for job in list(queue):
        longest = max(len(tokens) for tokens in job.inputs)
        if longest > embedder.n_ctx:
            queue.remove(job)
            job.outcome.set_exception(ContextExceededError(longest, embedder.n_ctx))
    batch: list[tuple[EmbedJob, int]] = []
    tokens = 0
    for job in queue:
        for number in range(job.done, len(job.inputs)):
            size = len(job.inputs[number])
            if batch and (tokens + size > embedder.n_ctx or len(batch) >= embedder.n_seq):
                break
            batch.append((job, number))
            tokens += size
        else:
            continue
        break
    if not batch:
        return
    try:
        vectors = embedder.embed([job.inputs[number] for job, number in batch])
    except EngineError as exc:
        for job in {id(job): job for job, _ in batch}.values():
            queue.remove(job)
            job.outcome.set_exception(exc)
        return
    stats.on_decode(tokens, len(batch))
    for (job, number), result in zip(batch, vectors, strict=True):
        job.results[number] = result
        job.done = number + 1
    while queue and queue[0].done == len(queue[0].inputs):
        job = queue.popleft()
        job.outcome.set_result(EmbeddingResult(tuple(job.results), tuple(len(t) for t in job.inputs),
                                               embedder.pooling))
