"""A stream's first token is written before the next decode starts, where a decode takes every core.

On a CPU-only server whose llama.cpp threads number the usable cores, a decode keeps every core busy.
The engine hands a first token to the stream's reader and, without this, starts the next decode at
once; the reader (a Python thread that turns the token into the route's chunk and writes it) then
waits for a core the decode's threads hold, and the decode's threads wait at their barriers for the one
it took. Measured on 2 cores (bench/first_token.py, issue 29): the reader's median from the token to
its chunk was 0.7 ms and its mean 1.8 ms (90th percentile 4.8 ms) with the decode beside it, 0.73 and
0.95 ms (1.3 ms) when the decode waited for it. So after a step that gave a stream its first token,
the next decode waits until the reader has taken every event so far (``Job.reader_caught_up``), for at
most ``WAIT_SECONDS`` in all; only the first token (what a user waits for; later tokens' writing
overlaps decoding as before), and not where the model is on a GPU (the cores are free there).
"""

from __future__ import annotations

import time

from app.engine.slots import Job

WAIT_SECONDS = 0.003  # the longest a decode waits for the readers of this step's first tokens


class FirstChunks:
    """The streams given their first token in the last step, whose readers the next decode waits for."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._readers: list[Job] = []

    def before_emit(self, job: Job) -> None:
        """Called just before ``job`` emits a token's chunk: the first one is paced."""
        if job.first_chunk_out:
            return
        job.first_chunk_out = True
        if self.enabled and job.request.stream:
            job.reader_busy()
            self._readers.append(job)

    def wait_for_readers(self) -> None:
        """Before a decode: until each reader has taken its first token, or ``WAIT_SECONDS`` have passed."""
        if not self._readers:
            return
        deadline = time.monotonic() + WAIT_SECONDS
        for job in self._readers:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not (job.cancelled or job.finished):
                job.wait_for_reader(left)
        self._readers.clear()
