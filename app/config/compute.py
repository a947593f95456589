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
    cpu_mask_batch: str | None = option(("-Cb", "--cpu-mask-batch"), "str", None,
        "CPUs for prompt processing's threads, a hexadecimal mask; with --cpu-range-batch, both (default: "
        "--cpu-mask's and --cpu-range's)", metavar="M")
    cpu_range_batch: str | None = option(("-Crb", "--cpu-range-batch"), "str", None,
        "CPUs for prompt processing's threads, lo-hi (default: --cpu-mask's and --cpu-range's)", metavar="lo-hi")
    cpu_strict_batch: int | None = option(("--cpu-strict-batch",), "int", None,
        "--cpu-strict for prompt processing (default: --cpu-strict)", minimum=0, maximum=1, metavar="<0|1>")
    prio_batch: int | None = option(("--prio-batch",), "int", None,
        "priority of prompt processing's threads: 0 normal, 1 medium, 2 high, 3 realtime (default: --prio)",
        minimum=0, maximum=3, metavar="N")
    poll_batch: int | None = option(("--poll-batch",), "int", None,
        "--poll for prompt processing's threads (default: --poll; an OpenMP build waits as --poll says for both)",
        minimum=0, maximum=100, metavar="<0...100>")
    spec_draft_cpu_mask: str | None = option(("--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"), "str", None,
        "CPUs for the draft model's threads, a hexadecimal mask (default: --cpu-mask's and --cpu-range's)",
        metavar="M")
    spec_draft_cpu_range: str | None = option(("--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"), "str", None,
        "CPUs for the draft model's threads, lo-hi (default: --cpu-mask's and --cpu-range's)", metavar="lo-hi")
    spec_draft_cpu_strict: int | None = option(("--spec-draft-cpu-strict", "--cpu-strict-draft"), "int", None,
        "--cpu-strict for the draft model (default: --cpu-strict)", minimum=0, maximum=1, metavar="<0|1>")
    spec_draft_prio: int | None = option(("--spec-draft-prio", "--prio-draft"), "int", None,
        "priority of the draft model's threads: 0 normal ... 3 realtime (default: --prio)", minimum=0, maximum=3,
        metavar="N")
    spec_draft_poll: int | None = option(("--spec-draft-poll", "--poll-draft"), "int", None,
        "--poll for the draft model's threads (default: --poll)", minimum=0, maximum=100, metavar="<0...100>")
    spec_draft_cpu_mask_batch: str | None = option(("--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"),
        "str", None, "CPUs for the draft model's prompt processing, a hexadecimal mask (default: "
        "--cpu-mask-batch's)", metavar="M")
    spec_draft_cpu_strict_batch: int | None = option(("--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"),
        "int", None, "--cpu-strict for the draft model's prompt processing (default: --cpu-strict-batch)",
        minimum=0, maximum=1, metavar="<0|1>")
    spec_draft_prio_batch: int | None = option(("--spec-draft-prio-batch", "--prio-batch-draft"), "int", None,
        "priority of the draft model's prompt processing threads (default: --prio-batch)", minimum=0, maximum=3,
        metavar="N")
    spec_draft_poll_batch: int | None = option(("--spec-draft-poll-batch", "--poll-batch-draft"), "int", None,
        "--poll for the draft model's prompt processing (default: --poll-batch)", minimum=0, maximum=100,
        metavar="<0...100>")

    @functools.cached_property
    def _available_cpus(self) -> frozenset[int]:
        """The CPUs the process may use when first asked (at validation): read once, so the engine thread,
        whose own affinity is the generation's set once placed, gets the same answers without reading it."""
        return frozenset(os.sched_getaffinity(0))

    def _cpus(self, mask: str | None, cpu_range: str | None, flags: tuple[str, str]) -> frozenset[int] | None:
        try:
            return compute_cpus(mask, cpu_range, self._available_cpus, flags)
        except PlacementError as exc:
            raise SettingsError(str(exc)) from None

    @functools.cached_property
    def compute_cpus(self) -> frozenset[int] | None:
        """The CPUs --cpu-mask and --cpu-range give llama.cpp's threads (None: not placed)."""
        return self._cpus(self.cpu_mask, self.cpu_range, ("--cpu-mask", "--cpu-range"))

    @functools.cached_property
    def compute_cpus_batch(self) -> frozenset[int] | None:
        """Prompt processing's CPUs: --cpu-mask-batch and --cpu-range-batch, else generation's."""
        own = self._cpus(self.cpu_mask_batch, self.cpu_range_batch, ("--cpu-mask-batch", "--cpu-range-batch"))
        return self.compute_cpus if own is None else own

    @functools.cached_property
    def draft_cpus(self) -> frozenset[int] | None:
        own = self._cpus(self.spec_draft_cpu_mask, self.spec_draft_cpu_range,
                         ("--spec-draft-cpu-mask", "--spec-draft-cpu-range"))
        return self.compute_cpus if own is None else own

    @functools.cached_property
    def draft_cpus_batch(self) -> frozenset[int] | None:
        own = self._cpus(self.spec_draft_cpu_mask_batch, None, ("--spec-draft-cpu-mask-batch", ""))
        return self.compute_cpus_batch if own is None else own

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
        """A bad --cpu-mask or --cpu-range (of any of the four thread pools) is named."""
        _ = self.compute_cpus, self.compute_cpus_batch, self.draft_cpus, self.draft_cpus_batch
