"""Speculative decoding: the drafts a step verifies (llama-server's, as the pinned llama.cpp's
``common/speculative.cpp`` has it; that code lives in the static libcommon, which has no bindings).

Before each step the scheduler asks ``Speculator.drafts`` for up to ``limit`` tokens that may follow
each generating slot's last sampled token. It puts a slot's draft in the step's one batch right after
that token, every entry with logits; sampling then walks the draft and keeps the tokens the model
itself picks, and the cells of the rejected rest are dropped (app/engine/scheduler.py). So greedy output
is the output without speculation wherever llama.cpp computes a token's logits alike alone and inside a
batch; it does not quite on CPU (README, "Speculative decoding"), so a near-tie may go the other way.

Two kinds of drafter, tried in the order ``--spec-type`` gives them, the first draft taken:

- ``ngram-simple``: no model. The last ``size_n`` tokens (the sampled one last) are looked up in the
  slot's own history, latest match first; the ``size_m`` tokens that followed it there are the draft.
- ``ngram-mod``: no model. A table shared by every slot maps each ``n_match`` tokens to the one that
  followed them; the draft follows it from the slot's last tokens (app/engine/ngram_mod.py).
- ``ngram-map-k``, ``ngram-map-k4v``: no model. The slot's last tokens looked up in its own history,
  the key alone or with the continuations seen after it (app/engine/ngram_map.py).
- ``draft-simple``: a small model of the same vocabulary (``-md``) drafts greedily, in a context of its
  own with one sequence per slot; all slots' drafts advance in one decode per drafted token, and a
  draft stops at a token the draft model is less sure of than ``p_min``.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine.backend import Backend, BatchToken
from app.engine.errors import DecodeError
from app.engine.ngram_cache import N_DRAFT, NgramCache
from app.engine.ngram_map import NgramMap
from app.engine.ngram_mod import NgramMod
from app.engine.slots import common_prefix_length
from app.engine.synthetic import conditional, resolve_rates
from app.engine.types import SpeculativeParams

log = logging.getLogger(__name__)

# --spec-type values: the ones implemented here, and the pinned llama.cpp's others (refused at start-up)
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
UPSTREAM_ONLY_SPEC_TYPES = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
MAP_TYPES = ("ngram-map-k", "ngram-map-k4v")


@dataclass(frozen=True)
class SpeculationOptions:
    """The server's speculation settings (``--spec-*``, llama-server's defaults)."""

    types: tuple[str, ...] = ()  # drafters in the order tried ("ngram-simple", "draft-simple"); (): off
    draft_n_max: int = 3  # --spec-draft-n-max
    draft_n_min: int = 0  # --spec-draft-n-min
    draft_p_min: float = 0.0  # --spec-draft-p-min
    ngram_size_n: int = 12  # --spec-ngram-simple-size-n
    ngram_size_m: int = 48  # --spec-ngram-simple-size-m
    ngram_mod_n_match: int = 24  # --spec-ngram-mod-n-match
    ngram_mod_n_min: int = 48  # --spec-ngram-mod-n-min
    ngram_mod_n_max: int = 64  # --spec-ngram-mod-n-max
    # --spec-ngram-map-k-size-n/-size-m/-min-hits and the same for ngram-map-k4v
    ngram_map: dict[str, tuple[int, int, int]] = field(
        default_factory=lambda: {kind: (12, 48, 1) for kind in MAP_TYPES})
    lookup_cache_static: str | None = None  # -lcs: ngram-cache's static lookup cache file
    lookup_cache_dynamic: str | None = None  # -lcd: its dynamic one (read, never written, as llama-server)
    synth_len: float | None = None  # --spec-synth-len: synthetic acceptance's mean length (app/engine/synthetic.py)
    synth_rates: tuple[float, ...] = ()  # --spec-synth-rates: its per-position rates

    @property
    def enabled(self) -> bool:
        return bool(self.types)

    @property
    def n_max_by_type(self) -> dict[str, int]:
        """Each drafter's configured most tokens a draft (ngram-simple: its size_m; ngram-cache: llama-server's 8)."""
        return {"draft-simple": self.draft_n_max, "ngram-simple": self.ngram_size_m, "ngram-mod": self.ngram_mod_n_max,
                **{kind: self.ngram_map[kind][1] for kind in MAP_TYPES}, "ngram-cache": N_DRAFT}

    @property
    def longest_draft(self) -> int:
        """The longest draft the server's drafters make (0 without speculation); a request may ask for less."""
        return max((self.n_max_by_type[kind] for kind in self.types), default=0)

    @property
    def synthetic_acceptance(self) -> tuple[float, ...]:
        """The conditional keep probability of each draft position (llama-server's synth_probs); () when off.
        SyntheticAcceptanceError for rates llama-server refuses (the settings check it at start)."""
        return conditional(resolve_rates(self.synth_len, self.synth_rates, self.longest_draft))


@dataclass(frozen=True)
class DraftWant:
    """A slot that may speculate this step: the tokens in its cells, the token sampled last (not in
    them yet), the most draft tokens that fit (context, n_predict, the batch) and its request's
    parameters."""

    seq: int
    history: Sequence[int]
    last: int
    limit: int
    params: SpeculativeParams = field(default_factory=SpeculativeParams)


def ngram_simple_draft(history: Sequence[int], last: int, size_n: int, size_m: int) -> list[int]:
    """llama.cpp's ``common_ngram_simple_draft``: the pattern is the last ``size_n - 1`` tokens of
    ``history`` and ``last``; its latest earlier occurrence (not the current one, never at 0) gives the
    up to ``size_m`` tokens after it, or nothing when fewer than ``size_n`` follow or the history is
    too short (at most ``size_n + size_m + 1`` tokens)."""
    length = len(history)
    if length <= size_n + size_m + 1:
        return []
    pattern = array("i", history[length - size_n + 1:])
    pattern.append(last)
    haystack, needle = array("i", history).tobytes(), pattern.tobytes()
    width = pattern.itemsize
    end = (length - 1) * width  # a match starts at most at length - size_n - 1
    while True:
        found = haystack.rfind(needle, width, end)
        if found < 0:
            return []
        if found % width == 0:
            break
        end = found + len(needle) - 1  # a match that straddles tokens: look further back
    start = found // width + size_n
    count = min(size_m, length - start)
    return list(history[start:start + count]) if count >= size_n else []


class DraftModel:
    """``draft-simple``: the draft model's context holds, per slot, the tokens it last drafted from;
    each round it catches up with the slot's history (the common prefix kept), decodes the sampled
    token, then drafts greedily, one decode per drafted token for all slots together."""

    def __init__(self, backend: Backend, n_vocab_target: int) -> None:
        self.backend = backend
        self.n_vocab = n_vocab_target  # a drafted id the target model lacks ends its draft
        self.cells: dict[int, list[int]] = {}

    def draft(self, wants: Sequence[DraftWant], n_max: dict[int, int], p_min: dict[int, float]
              ) -> dict[int, list[int]]:
        room = self.backend.n_ctx_seq  # its context may be shorter than the target's
        wants = [want for want in wants if len(want.history) + 1 + n_max[want.seq] < room]
        try:
            return self._draft(wants, n_max, p_min) if wants else {}
        except DecodeError as exc:  # the draft model failed: no drafts this step, its cells forgotten
            log.warning("the draft model's decode failed (%s): this step runs without drafts", exc.code)
            for want in wants:
                self.backend.forget(want.seq, 0)
                self.cells[want.seq] = []
            return {}

    def _draft(self, wants: Sequence[DraftWant], n_max: dict[int, int], p_min: dict[int, float]
               ) -> dict[int, list[int]]:
        self._catch_up(wants)
        backend = self.backend
        batch = [BatchToken(want.last, len(want.history), want.seq, True) for want in wants]
        results: dict[int, list[int]] = {want.seq: [] for want in wants}
        while batch:
            backend.decode(batch)
            following: list[BatchToken] = []
            for index, entry in enumerate(batch):
                self.cells[entry.seq].append(entry.token)
                token, probability = backend.top_token(index)
                result = results[entry.seq]
                if probability < p_min[entry.seq] or token >= self.n_vocab:
                    continue
                result.append(token)
                if len(result) < n_max[entry.seq]:
                    following.append(BatchToken(token, entry.pos + 1, entry.seq, True))
            batch = following
        return results

    def _catch_up(self, wants: Sequence[DraftWant]) -> None:
        """Make each slot's draft cells hold its history: keep the common prefix, decode the rest
        (all slots' rests in batches of the draft context's ``n_batch``)."""
        pending: list[BatchToken] = []
        for want in wants:
            cells = self.cells.setdefault(want.seq, [])
            keep = common_prefix_length(cells, want.history)
            if not self.backend.forget(want.seq, keep):
                keep = 0
            del cells[keep:]
            pending.extend(BatchToken(token, pos, want.seq, False)
                           for pos, token in enumerate(want.history[keep:], start=keep))
        step = self.backend.n_batch
        for first in range(0, len(pending), step):
            chunk = pending[first:first + step]
            self.backend.decode(chunk)
            for entry in chunk:
                self.cells[entry.seq].append(entry.token)


class Speculator:
    """The drafters ``--spec-type`` names, in its order; a slot takes the first non-empty draft."""

    def __init__(self, options: SpeculationOptions, draft_backend: Backend | None, n_vocab: int) -> None:
        self.options = options
        self.types = options.types
        self.model = DraftModel(draft_backend, n_vocab) if draft_backend is not None else None
        # the drafters that keep a table of their own, told how much of each of their drafts was kept
        self.tables: dict[str, NgramMod | NgramMap | NgramCache] = {
            "ngram-mod": NgramMod(options.ngram_mod_n_match, options.ngram_mod_n_min, options.ngram_mod_n_max),
            **{kind: NgramMap(*options.ngram_map[kind], key_only=kind == "ngram-map-k") for kind in MAP_TYPES}}
        if "ngram-cache" in self.types:  # its files are read only when it drafts
            self.tables["ngram-cache"] = NgramCache.from_files(options.lookup_cache_static,
                                                               options.lookup_cache_dynamic)
        self._n_max = options.n_max_by_type
        self.synthetic = options.synthetic_acceptance  # llama-server's benchmarking aid; () when off
        if self.synthetic:
            log.warning("synthetic speculative acceptance is on (--spec-synth-len/--spec-synth-rates), for "
                        "benchmarking: the output is not the model's")
        self._drafted_by: dict[int, str] = {}  # each slot's last draft: the drafter that made it
        if "draft-simple" in self.types and self.model is None:
            log.warning("draft-simple speculation needs a draft model (--spec-draft-model): left out")
            self.types = tuple(kind for kind in self.types if kind != "draft-simple")

    def n_max(self, kind: str, params: SpeculativeParams) -> int:
        """The most tokens a drafter of ``kind`` proposes for a request with ``params``."""
        configured = self._n_max[kind]
        if params.n_max is None:
            return configured
        return params.n_max if kind == "draft-simple" else min(configured, params.n_max)

    def n_min(self, params: SpeculativeParams) -> int:
        """The shortest draft-model draft worth verifying (a shorter one is dropped)."""
        return self.options.draft_n_min if params.n_min is None else params.n_min

    def drafts(self, wants: Sequence[DraftWant]) -> dict[int, list[int]]:
        """Each slot's draft (absent: none), at most its ``limit`` tokens and at least its ``n_min``."""
        drafts: dict[int, list[int]] = {}
        for kind in self.types:
            bound = {want.seq: min(want.limit, self.n_max(kind, want.params)) for want in wants
                     if want.seq not in drafts}
            asking = [want for want in wants if bound.get(want.seq, 0) > 0]
            if not asking:
                break
            if kind == "ngram-simple":
                found = {want.seq: ngram_simple_draft(want.history, want.last, self.options.ngram_size_n,
                                                      self.options.ngram_size_m) for want in asking}
            elif kind in self.tables:
                table = self.tables[kind]
                found = {want.seq: table.draft(want.seq, want.history, want.last, bound[want.seq]) for want in asking}
            else:
                assert self.model is not None
                found = self.model.draft(asking, bound, {want.seq: self.options.draft_p_min if want.params.p_min
                                                         is None else want.params.p_min for want in asking})
            for want in asking:
                draft = found.get(want.seq, [])[: bound[want.seq]]
                if draft and (kind != "draft-simple" or len(draft) >= self.n_min(want.params)):
                    drafts[want.seq] = draft
                    self._drafted_by[want.seq] = kind
        return drafts

    def accepted(self, seq: int, accepted: int) -> None:
        """The model kept ``accepted`` tokens of the slot's last draft (ngram-mod empties its table after
        a run of mostly refused drafts of its own; the n-gram maps shorten that value's next draft)."""
        table = self.tables.get(self._drafted_by.pop(seq, ""))
        if table is not None:
            table.accepted(seq, accepted)
