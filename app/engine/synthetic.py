"""llama-server's synthetic draft acceptance (``--spec-synth-len``, ``--spec-synth-rates``), a benchmarking aid:
a draft token is kept at random, with a fixed probability for its position, instead of when the model
picks it, so that speculative decoding's speed can be measured at a chosen acceptance rate whatever the
drafts are worth. The output is not the model's (llama-server warns the same). As there, a drafted
end-of-generation token is never kept, and each job draws from a generator seeded with its ``seed``.

The rates are unconditional (position ``i`` is kept with probability ``rates[i]``, so they never rise);
the verifier uses their ratios, the probability of keeping ``i`` once ``i - 1`` was kept. A mean length
``L`` (the model's own token included) stands for the geometric rates ``p, p^2, ...`` whose sum is ``L - 1``,
``p`` found by bisection as llama.cpp finds it (common/speculative.cpp).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence

from app.engine.types import Sampled


class SyntheticAcceptanceError(ValueError):
    """Rates or a length llama-server would refuse; the message says why."""


def resolve_rates(length: float | None, rates: Sequence[float], n_max: int) -> tuple[float, ...]:
    """The per-position rates for ``n_max`` draft tokens: ``rates`` as given, or those of mean ``length``;
    () when neither is given."""
    if length is None and not rates:
        return ()
    if length is not None and rates:
        raise SyntheticAcceptanceError("--spec-synth-len and --spec-synth-rates are mutually exclusive")
    if n_max <= 0:
        raise SyntheticAcceptanceError("synthetic acceptance needs speculative decoding (--spec-type or -md)")
    if rates:
        if len(rates) != n_max:
            raise SyntheticAcceptanceError(f"--spec-synth-rates: give {n_max} values (the drafters' longest draft), "
                                           f"got {len(rates)}")
        if any(not math.isfinite(rate) or not 0.0 <= rate <= 1.0 for rate in rates):
            raise SyntheticAcceptanceError("--spec-synth-rates: each rate must be within [0, 1]")
        if any(later > earlier for earlier, later in itertools.pairwise(rates)):
            raise SyntheticAcceptanceError("--spec-synth-rates: the rates must not rise from one position to the next")
        return tuple(rates)
    assert length is not None
    longest = n_max + 1.0
    if not math.isfinite(length) or not 1.0 <= length <= longest:
        raise SyntheticAcceptanceError(f"--spec-synth-len: must be within [1, {longest:.0f}]")
    p = 1.0 if length == longest else _geometric_ratio(length - 1.0, n_max) if length > 1.0 else 0.0
    return tuple(p ** (position + 1) for position in range(n_max))


def _geometric_ratio(target: float, terms: int) -> float:
    low, high = 0.0, 1.0
    for _ in range(32):
        middle = 0.5 * (low + high)
        total = sum(middle ** (position + 1) for position in range(terms))
        if total < target:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def conditional(rates: Sequence[float]) -> tuple[float, ...]:
    """The probability of keeping each position once the one before it was kept."""
    previous = 1.0
    out = []
    for rate in rates:
        out.append(rate / previous if previous > 0.0 else 0.0)
        previous = rate
    return tuple(out)


def synthetic_verify(draft: Sequence[int], keep: Sequence[float], rng: random.Random, pick: Callable[[int], Sampled],
                     is_eog: Callable[[int], bool]) -> list[Sampled]:
    """The tokens a step gives: each draft token kept at random with its position's probability (never a drafted
    end of generation); the first one not kept is replaced by the model's pick there (``pick(offset)``, which
    also advances the sampler), which ends the step, as llama-server's synthetic verifier."""
    produced: list[Sampled] = []
    for position, token in enumerate(draft):
        picked = pick(position)
        if rng.random() < (keep[position] if position < len(keep) else 0.0) and not is_eog(token):
            produced.append(Sampled(token))
            continue
        produced.append(picked)
        return produced
    produced.append(pick(len(draft)))
    return produced
