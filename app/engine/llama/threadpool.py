"""llama.cpp's thread pools, as llama-server attaches them to its contexts: one for generation (a
batch of one token a sequence) and one for prompt processing (``--threads-batch``), each with its CPUs,
strict placement, priority and polling (``--cpu-mask``/``--cpu-mask-batch`` and friends, and the
draft model's ``--spec-draft-cpu-*``).

ggml applies a pool's CPU masks and priority to each of its threads at every graph it computes, in an
OpenMP build too (its team threads are re-placed at each one), which is how prompts and generation run
on different CPUs. ``poll`` reaches the pool as given; an OpenMP build waits libgomp's way instead
(``GOMP_SPINCOUNT``, which ``--poll`` sets: app/host/cpu_placement.py), in llama-server as here.

The pool functions live in ggml's CPU backend (a loadable library in a runtime-dispatch build), so
they are found through the backend's registry, as llama-server finds them.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.errors import ModelLoadError
from app.engine.llama.bindings import lc
from app.engine.llama.config import LlamaConfig, ThreadPlacement
from app.engine.llama.ggml import cpu_backend_function

log = logging.getLogger("app.engine.llama")

MAX_THREADS = 512  # ggml.h's GGML_MAX_N_THREADS: the length of a pool's CPU mask


class ThreadPoolParams(ctypes.Structure):
    """ggml.h's ``struct ggml_threadpool_params``."""

    _fields_ = [("cpumask", ctypes.c_bool * MAX_THREADS), ("n_threads", ctypes.c_int), ("prio", ctypes.c_int),
                ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool)]


def pool_params(n_threads: int, placement: ThreadPlacement) -> ThreadPoolParams:
    """The pool's parameters (not paused): an all-zero mask leaves the threads where the process may run."""
    params = ThreadPoolParams()
    for cpu in placement.cpus:
        params.cpumask[cpu] = True
    params.n_threads = n_threads
    params.prio = placement.prio
    params.poll = placement.poll
    params.strict_cpu = placement.strict
    return params


def same_pool(a: ThreadPoolParams, b: ThreadPoolParams) -> bool:
    """ggml's ``ggml_threadpool_params_match``: one pool serves both roles when nothing differs."""
    return (a.n_threads, a.prio, a.poll, a.strict_cpu, bytes(a.cpumask)) == (
        b.n_threads, b.prio, b.poll, b.strict_cpu, bytes(b.cpumask))


def _describe(role: str, n_threads: int, placement: ThreadPlacement) -> str:
    where = f"CPUs {','.join(map(str, sorted(placement.cpus)))}" if placement.cpus else "any CPU"
    strict = ", one CPU each" if placement.strict and placement.cpus else ""
    return f"{role}: {n_threads} threads on {where}{strict}, priority {placement.prio}, poll {placement.poll}"


@dataclass
class ThreadPools:
    """The pools attached to one context (the batch pool is None when the generation pool serves both)."""

    generation: Any
    batch: Any
    _free: Any

    @classmethod
    def attach(cls, ctx: Any, config: LlamaConfig) -> ThreadPools:
        """The pools ``config`` asks for, attached to ``ctx`` (the context made from it)."""
        n_threads, n_threads_batch = config.n_threads, config.n_threads_batch
        placement, placement_batch, role = config.placement, config.placement_batch, Path(config.model_path).name
        new = cpu_backend_function("ggml_threadpool_new", ctypes.c_void_p, [ctypes.POINTER(ThreadPoolParams)])
        free = cpu_backend_function("ggml_threadpool_free", None, [ctypes.c_void_p])
        generation_params = pool_params(n_threads, placement)
        batch_params = pool_params(n_threads_batch, placement_batch)
        batch = None
        if not same_pool(generation_params, batch_params):
            batch = new(ctypes.byref(batch_params))
            if not batch:
                raise ModelLoadError(f"ggml could not start the {role}'s prompt thread pool ({n_threads_batch} "
                                     "threads)")
            generation_params.paused = True  # as llama-server: it wakes when a generation step needs it
        generation = new(ctypes.byref(generation_params))
        if not generation:
            if batch:
                free(batch)
            raise ModelLoadError(f"ggml could not start the {role}'s thread pool ({n_threads} threads)")
        pools = cls(generation, batch, free)
        pools.attach_to(ctx, generation, batch or generation)
        log.info("llama.cpp's thread pools of the %s: %s", role, "; ".join(
            [_describe("generation", n_threads, placement)]
            + ([_describe("prompts", n_threads_batch, placement_batch)] if batch else [])))
        return pools

    @staticmethod
    def attach_to(ctx: Any, generation: Any, batch: Any) -> None:
        """Each pool's thread count must be the context's for its role (ggml indexes its workers by thread)."""
        lc._lib.llama_attach_threadpool(ctypes.c_void_p(ctx), ctypes.c_void_p(generation), ctypes.c_void_p(batch))

    def attach_batch_only(self, ctx: Any) -> None:
        """A context whose every decode is a batch of ``n_threads_batch`` threads (the embedding context)."""
        pool = self.batch or self.generation
        self.attach_to(ctx, pool, pool)

    def close(self) -> None:
        """After the contexts that use them are freed."""
        for pool in (self.batch, self.generation):
            if pool:
                self._free(pool)
        self.generation = self.batch = None
