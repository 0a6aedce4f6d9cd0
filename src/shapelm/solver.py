"""Budget solver: find the free widths that land an architecture on a parameter target.

The paper's matching rule (seed 000 Section 4.1): a variant's parameters stay within 0.5% of the
baseline's. Given a target and the fixed choices (say L=12, K=4, d_attn=1536 and a d_h/d_model
ratio near 0.8), the solver
  1. solves the continuous d_model for the requested ratio (when d_model is free),
  2. tries hardware-friendly multiples of `multiple` around it,
  3. for each d_model, solves d_h exactly for the target and rounds it to `d_h_multiple`,
  4. keeps candidates within `tolerance` and ranks them by distance to the requested ratio,
     then by distance to the target.
Counting uses `shapelm.accounting.param_counts` on the built config, so every norm is counted
exactly as the model has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shapelm.accounting import param_counts
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config

COUNTS = ("non_embedding", "matrices", "total")


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
    count: str = "non_embedding",
    span: int = 8,
) -> list[Candidate]:
    """Candidates for the free widths of `arch` (d_model and/or d_h), best first."""
    if target <= 0:
        raise ConfigError(f"solver: target must be positive, got {target}")
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
    candidates = []
    for d_model in d_models:
        trial = {**base, "d_model": d_model}
        try:
            exact = _solve_d_h(trial, target, count)
        except ConfigError:
            continue  # this d_model breaks a divisibility rule (e.g. heads vs d_attn)
        for d_h in {_round_to(exact, d_h_multiple), _round_to(exact, d_h_multiple) + d_h_multiple,
                    _round_to(exact, d_h_multiple) - d_h_multiple}:
            if d_h <= 0:
                continue
            shaped = {**trial, "d_h": d_h}
            params = count_params(shaped, count)
            if abs(params / target - 1) <= tolerance:
                candidates.append(Candidate(shaped, params, target))
    candidates.sort(
        key=lambda c: (abs(c.ratio - ratio) if ratio is not None else 0.0, abs(c.rel_error))
    )
    if not candidates:
        raise ConfigError(
            f"solver: no {multiple}-multiple shape lands within {tolerance:.1%} of {target:,}; "
            "loosen --tolerance or --multiple"
        )
    return candidates


def parse_count(text: str) -> int:
    """'906.1M' -> 906_100_000; '3B' -> 3e9; plain integers pass through."""
    text = str(text).strip().replace(",", "").replace("_", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(round(float(number) * scale))
    except ValueError:
        raise ConfigError(f"cannot read a parameter count from {text!r}") from None
