"""llama.cpp's threads: how many, on which CPUs, how they wait."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from app.config.options import SettingsError, option
from app.host.cpu_placement import NICE, PlacementError, compute_cpus
from app.host.cpus import usable_cpus


@dataclass(frozen=True)
class ComputeSettings:
    """llama.cpp's threads: how many, on which CPUs, how they wait."""

    threads: int = option(("-t", "--threads"), "int", -1,
        "CPU threads for generation (-1 = the CPUs this container may use: its CPU set, held to its CPU quota)",
        env="LLAMA_ARG_THREADS", minimum=-1)
    threads_batch: int = option(("-tb", "--threads-batch"), "int", -1,
        "CPU threads for prompt processing (-1 = same as --threads)",
        env="LLAMA_ARG_THREADS_BATCH", minimum=-1)
    cpu_mask: str | None = option(("-C", "--cpu-mask"), "str", None,
        "CPUs for llama.cpp's threads, a hexadecimal mask (bit i: CPU i); with --cpu-range, both", metavar="M")
    cpu_range: str | None = option(("-Cr", "--cpu-range"), "str", None, "CPUs for llama.cpp's threads, lo-hi",
        metavar="lo-hi")
    cpu_strict: int = option(("--cpu-strict",), "int", 0,
        "1: each of llama.cpp's threads bound to one CPU of --cpu-mask/--cpu-range", minimum=0, maximum=1,
        metavar="<0|1>")
    prio: int = option(("--prio",), "int", 0,
        "process priority: low(-1), normal(0), medium(1), high(2), realtime(3); above normal needs CAP_SYS_NICE",
        minimum=min(NICE), maximum=max(NICE), metavar="N")
    poll: int = option(("--poll",), "int", 50,
        "how long llama.cpp's threads spin waiting for work, 0 to 100 (0: they sleep at once, kinder to a shared "
        "core)", minimum=0, maximum=100, metavar="<0...100>")

    @functools.cached_property
    def compute_cpus(self) -> frozenset[int] | None:
        """The CPUs --cpu-mask and --cpu-range give llama.cpp's threads (None: not placed), of those the
        process may use when first asked (at validation): read once, so the engine thread, whose own
        affinity is this set once placed, gets the same answer without reading it again."""
        try:
            return compute_cpus(self.cpu_mask, self.cpu_range, frozenset(os.sched_getaffinity(0)))
        except PlacementError as exc:
            raise SettingsError(str(exc)) from None

    @property
    def cpu_threads(self) -> int:
        """--threads; by default the CPUs --cpu-mask/--cpu-range give, else those the container may use."""
        if self.threads > 0:
            return self.threads
        placed = self.compute_cpus
        return len(placed) if placed else usable_cpus()

    @property
    def cpu_threads_batch(self) -> int:
        return self.threads_batch if self.threads_batch > 0 else self.cpu_threads

    def check(self) -> None:
        """A bad --cpu-mask or --cpu-range is named."""
        _ = self.compute_cpus
