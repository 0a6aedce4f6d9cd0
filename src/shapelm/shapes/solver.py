"""Budget solver: find the free widths that land an architecture on a parameter target.

The paper's matching rule (arXiv 2602.06471 Section 4.1): a variant's parameters stay within 0.5% of the
baseline's. Given a target and the fixed choices (say L=12, K=4, d_attn=1536 and a d_h/d_model
ratio near 0.8), the solver
  1. solves the continuous d_model for the requested ratio (when d_model is free),
  2. tries hardware-friendly multiples of `multiple` around it,
  3. for each d_model, solves d_h exactly for the target and rounds it to `d_h_multiple`,
  4. keeps candidates within `tolerance` and ranks them by distance to the requested ratio,
     then by distance to the target,
  5. when the best misses the requested ratio by more than `ratio_tolerance` (relative) or no
     shape lands within `tolerance`, searches again with d_h at half the multiple (down to
     MIN_D_H_MULTIPLE): at a coarse d_h step the budget can force a shape far from the ratio
     (403M, L 24, ratio 0.6: 1376/672 = 0.49 at multiples of 32, 1280/752 = 0.59 at 16),
  6. refuses (ConfigError naming the best shape found) when even the finest multiple misses.
Counting uses `shapelm.shapes.accounting.param_counts` on the built config, so every norm is counted
exactly as the model has it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shapelm.shapes.accounting import param_counts
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config

log = logging.getLogger(__name__)

COUNTS = ("non_embedding", "matrices", "total")
#: A solved shape's d_h/d_model may differ from the requested ratio by this much (relative):
#: a sweep point named "ratio 0.6" must be one.
RATIO_TOLERANCE = 0.05
#: The finest d_h multiple the solver falls back to.
MIN_D_H_MULTIPLE = 8


@dataclass(frozen=True)
class Candidate:
    arch: dict[str, Any]
    params: int
    target: int

    @property
    def rel_error(self) -> float:
        return self.params / self.target - 1.0

    @property
    def ratio(self) -> float:
        return self.arch["d_h"] / self.arch["d_model"]


def count_params(arch: dict[str, Any], count: str = "non_embedding") -> int:
    p = param_counts(build_model_config(arch, "solver"))
    if count == "non_embedding":
        return p.non_embedding
    if count == "matrices":
        return p.attention + p.ffn
    if count == "total":
        return p.total
    raise ConfigError(f"count must be one of {COUNTS}, got {count!r}")


def _round_to(x: float, multiple: int) -> int:
    return max(multiple, int(round(x / multiple)) * multiple)


def _solve_d_h(arch: dict[str, Any], target: int, count: str) -> float:
    """Parameters are affine in d_h for a fixed d_model: solve from two evaluations."""
    p1 = count_params({**arch, "d_h": 1}, count)
    p2 = count_params({**arch, "d_h": 2}, count)
    return 1 + (target - p1) / (p2 - p1)


def _solve_d_model(arch: dict[str, Any], target: int, ratio: float, count: str) -> float:
    """Continuous d_model for d_h = ratio * d_model.

    Parameters are quadratic in d_model along that line, so three exact counts at widths that
    satisfy every divisibility rule (multiples of the heads) determine it; solve the quadratic.
    """
    step = math.lcm(64, int(arch.get("n_heads") or 1))
    points = [step * n for n in (8, 16, 32)]
    counts = [count_params({**arch, "d_model": d, "d_h": max(1, round(ratio * d))}, count) for d in points]
    a, b, c = np.polyfit(points, counts, 2)
    disc = b * b - 4 * a * (c - target)
    if a <= 0 or disc < 0:
        raise ConfigError(f"solver: target {target:,} unreachable with d_h/d_model = {ratio}")
    return (-b + math.sqrt(disc)) / (2 * a)


def solve(
    arch: dict[str, Any],
    target: int,
    *,
    ratio: float | None = None,
    multiple: int = 32,
    d_h_multiple: int | None = None,
    tolerance: float = 0.005,
    ratio_tolerance: float = RATIO_TOLERANCE,
    count: str = "non_embedding",
    span: int = 8,
) -> list[Candidate]:
    """Candidates for the free widths of `arch` (d_model and/or d_h), best first; the first is
    within `tolerance` of the target and within `ratio_tolerance` of `ratio` (else ConfigError)."""
    if target <= 0:
        raise ConfigError(f"solver: target must be positive, got {target}")
    if ratio is not None and ratio <= 0:
        raise ConfigError(f"solver: ratio must be positive, got {ratio}")
    d_h_multiple = d_h_multiple or multiple
    base = {k: v for k, v in arch.items() if k not in ("d_h", "ffn_ratio")}
    if "kind" not in base:
        raise ConfigError("solver: arch.kind is required")
    if "d_model" in base and base["d_model"]:
        d_models = [base["d_model"]]
    else:
        if ratio is None:
            raise ConfigError("solver: give d_model or a d_h/d_model ratio to solve d_model")
        centre = _solve_d_model({**base, "d_model": 1}, target, ratio, count)
        first = _round_to(centre, multiple)
        d_models = sorted({max(multiple, first + i * multiple) for i in range(-span, span + 1)})
    best: Candidate | None = None
    step = d_h_multiple
    while True:
        candidates = _candidates(base, d_models, target, step, tolerance, count)
        candidates.sort(key=lambda c: (ratio_miss(c, ratio), abs(c.rel_error)))
        if candidates and ratio_miss(candidates[0], ratio) <= ratio_tolerance:
            if step != d_h_multiple:
                log.warning("no d_h multiple of %d lands within %.1f%% of ratio %s and %.1f%% of "
                            "the target; d_h is a multiple of %d", d_h_multiple, 100 * ratio_tolerance,
                            ratio, 100 * tolerance, step)
            return candidates
        best = candidates[0] if candidates else best
        if step // 2 < MIN_D_H_MULTIPLE:
            break
        step //= 2
    if best is None:
        raise ConfigError(
            f"solver: no shape (d_model a multiple of {multiple}, d_h of {d_h_multiple} down to {step}) lands "
            f"within {tolerance:.1%} of {target:,}; loosen --tolerance or --multiple")
    raise ConfigError(
        f"solver: the best shape within {tolerance:.1%} of {target:,} (d_h multiples {d_h_multiple} down to "
        f"{step}), d_model {best.arch['d_model']} d_h {best.arch['d_h']}, has d_h/d_model {best.ratio:.3f}, "
        f"{ratio_miss(best, ratio):.1%} from the requested {ratio} (more than --ratio-tolerance "
        f"{ratio_tolerance:.0%}); change --multiple, --tolerance or the fixed keys")


def ratio_miss(c: Candidate, ratio: float | None) -> float:
    """How far a candidate's d_h/d_model is from the requested ratio, relative (0 without one)."""
    return abs(c.ratio / ratio - 1) if ratio is not None else 0.0


def _candidates(base: dict[str, Any], d_models: list[int], target: int, d_h_multiple: int, tolerance: float,
                count: str) -> list[Candidate]:
    out = []
    for d_model in d_models:
        trial = {**base, "d_model": d_model}
        try:
            exact = _solve_d_h(trial, target, count)
        except ConfigError:
            continue  # this d_model breaks a divisibility rule (e.g. heads vs d_attn)
        nearest = _round_to(exact, d_h_multiple)
        for d_h in {nearest, nearest + d_h_multiple, nearest - d_h_multiple}:
            if d_h <= 0:
                continue
            shaped = {**trial, "d_h": d_h}
            params = count_params(shaped, count)
            if abs(params / target - 1) <= tolerance:
                out.append(Candidate(shaped, params, target))
    return out


def parse_count(text: str) -> int:
    """'906.1M' -> 906_100_000; '3B' -> 3e9; plain integers pass through."""
    text = str(text).strip().replace(",", "").replace("_", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(round(float(number) * scale))
    except ValueError:
        raise ConfigError(f"cannot read a parameter count from {text!r}") from None
