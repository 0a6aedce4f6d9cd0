"""Spread over a run's repeated seeds (`seeds:` in the config, docs/RESULTS.md "Seeds and error bars").

A row backed by several seeds shows the mean, the sample standard deviation (ddof = 1: the
seeds are a sample of the seeds one could have drawn; the LWS paper prints a std over five runs
without saying which, and the sample std is the usual choice) and n, the number of seeds whose
result exists. The paper comparison uses the mean.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from shapelm.results import readers


@dataclass(frozen=True)
class Spread:
    mean: float | None
    std: float | None  # sample std (ddof = 1); None for fewer than two values
    n: int


def spread(values: Iterable[float | None]) -> Spread:
    """Mean, sample std and count of the values that exist (None: a seed not finished yet)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return Spread(None, None, 0)
    std = statistics.stdev(vals) if len(vals) > 1 else None
    return Spread(statistics.fmean(vals), std, len(vals))


def _mean(values: Iterable[float | None]) -> float | None:
    return spread(values).mean


def mean_ppl(results: list[readers.PPL]) -> readers.PPL:
    """The seeds' held-out results averaged field by field (sets present in every seed)."""
    names = set.intersection(*(set(r.sets) for r in results)) if results else set()
    sets = {name: {key: _mean(r.sets[name].get(key) for r in results) for key in ("loss", "ppl")}
            for name in sorted(names)}
    return readers.PPL(_mean(r.val_loss for r in results), _mean(r.val_ppl for r in results),
                       _mean(r.exp_mean_loss for r in results), sets)


def mean_downstream(results: list[readers.Downstream]) -> readers.Downstream:
    names = set.intersection(*(set(r.tasks) for r in results)) if results else set()
    tasks = {t: _mean(r.tasks[t] for r in results) for t in sorted(names)}
    return readers.Downstream(tasks, _mean(r.avg_acc for r in results), _mean(r.avg_ppl for r in results))


def mean_by_length(results: list[dict[int, float]]) -> dict[int, float]:
    lengths = set.intersection(*(set(r) for r in results)) if results else set()
    return {L: _mean(r[L] for r in results) for L in sorted(lengths)}
