"""Joint budget solver: shapes on a grid, across kinds and mixers, against several targets at once.

    shapelm solve --grid d_model=1024,1536,2048 n_layers=12,16 d_h_ratio=0.8,2.7 n_heads=16 \
        --kinds conventional hourglass --mixers attention gated_attention \
        --target 906M --flops-target 5.6e9 --kv-target 1.2G --context 65536 --latency-target 9

Targets (any subset): non-embedding parameters, training FLOPs per token (at --seq-len), KV-cache
plus recurrent-state bytes of one sequence at --context, and decode latency per token at
--context. Every grid point of every kind x mixer is built (combinations a builder refuses are
skipped) and scored by its relative distance |value / target - 1| to each target; the answer is
the Pareto set of those distance vectors (no other shape is at least as close to every target
and closer to one).

Latency: where a decode benchmark file (`results/<exp>/decode/decode.json`) is given, a linear
model latency_ms = a + b n_layers + c KV bytes fitted to its rows of the standard cache (mixer
"mha") at the measured lengths: the measured per-layer and per-byte costs; otherwise an analytic
proxy, the bytes a decoded token reads (bf16 weights + KV cache + states) over
`PROXY_BANDWIDTH`. The result says which.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from shapelm.shapes.accounting import decoding_state_bytes, flops_per_token, kv_cache_bytes, param_counts
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config

PROXY_BANDWIDTH = 3.35e12  # bytes/s, one H100 SXM's HBM3: the proxy's unit, not a measurement
METRICS = ("params", "flops_per_token", "kv_bytes", "latency_ms")


@dataclass
class LatencyModel:
    source: str  # "measured (FILE, n rows)" or "analytic proxy (...)"
    coef: tuple[float, float, float] | None = None  # a, b (per layer), c (per KV byte), in ms

    def __call__(self, n_layers: int, weight_bytes: float, kv_bytes: float) -> float:
        if self.coef is None:
            return (weight_bytes + kv_bytes) / PROXY_BANDWIDTH * 1e3
        a, b, c = self.coef
        return a + b * n_layers + c * kv_bytes


def latency_model(decode_rows: list[dict[str, Any]] | None, where: str = "") -> LatencyModel:
    rows = [r for r in decode_rows or [] if r.get("mixer") == "mha" and r.get("latency_ms_median") is not None]
    if len(rows) >= 3:
        x = np.array([[1.0, float(r["n_layers"]), float(r["kv_bytes"])] for r in rows])
        y = np.array([float(r["latency_ms_median"]) for r in rows])
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        if np.linalg.matrix_rank(x) == 3:
            return LatencyModel(f"measured ({where}, {len(rows)} rows: ms = a + b layers + c KV bytes)",
                                tuple(float(c) for c in coef))
    return LatencyModel(f"analytic proxy (bytes read per token / {PROXY_BANDWIDTH:.3g} B/s)")


@dataclass
class Shape:
    arch: dict[str, Any]
    values: dict[str, float]
    distance: dict[str, float] = field(default_factory=dict)


def measure(arch: dict[str, Any], seq_len: int, context: int, latency: LatencyModel) -> dict[str, float]:
    cfg = build_model_config(arch, "solve")
    p = param_counts(cfg)
    kv = float(kv_cache_bytes(cfg, context) + decoding_state_bytes(cfg))
    return {"params": float(p.non_embedding), "flops_per_token": float(flops_per_token(cfg, seq_len).train),
            "kv_bytes": kv, "latency_ms": latency(cfg.n_layers, 2.0 * p.total, kv)}


def expand_grid(grid: dict[str, list[Any]], kinds: Iterable[str], mixers: Iterable[str],
                multiple: int = 32) -> list[dict[str, Any]]:
    """Every kind x mixer x grid point as a builder spec; `d_h_ratio` sets d_h = ratio x d_model
    rounded to `multiple`."""
    out: list[dict[str, Any]] = []
    for kind, mixer in itertools.product(kinds, mixers):
        # a key the kind does not take (k, d_attn for conventional) is left out for that kind
        keys = [k for k in grid if k == "d_h_ratio" or k in accepted_keys(kind)]
        for values in itertools.product(*(grid[k] for k in keys)):
            arch: dict[str, Any] = {"kind": kind, **dict(zip(keys, values))}
            if mixer != "attention":
                arch["mixer"] = mixer
            ratio = arch.pop("d_h_ratio", None)
            if ratio is not None:
                arch["d_h"] = max(multiple, round(float(ratio) * arch["d_model"] / multiple) * multiple)
            if arch not in out:
                out.append(arch)
    return out


def accepted_keys(kind: str) -> set[str]:
    from shapelm.model import builders

    builders._load_schedule_kinds()
    if kind not in builders._BUILDERS:
        raise ConfigError(f"solve: unknown kind {kind!r}; known: {sorted(builders._BUILDERS)}")
    return {"kind", *builders.COMMON_KEYS, *builders.MIXER_KEYS, *builders._BUILDERS[kind][1]}


def dominates(q: tuple[float, ...], p: tuple[float, ...]) -> bool:
    return all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))


def pareto(points: list[tuple[float, ...]]) -> list[int]:
    """Indices of the non-dominated points (minimising every coordinate). After a lexicographic
    sort a point can be dominated only by one before it, and (dominance being transitive) then
    by one already kept."""
    kept: list[int] = []
    for i in sorted(range(len(points)), key=lambda i: points[i]):
        if not any(dominates(points[k], points[i]) for k in kept):
            kept.append(i)
    return kept


def solve_joint(targets: dict[str, float], grid: dict[str, list[Any]], kinds: Iterable[str] = ("conventional",),
                mixers: Iterable[str] = ("attention",), seq_len: int = 4096, context: int = 4096,
                decode_rows: list[dict[str, Any]] | None = None, decode_source: str = "",
                multiple: int = 32) -> tuple[list[Shape], LatencyModel, int]:
    """The Pareto set over the targets' relative distances, best total distance first; the
    latency model used; how many grid shapes were built."""
    unknown = sorted(set(targets) - set(METRICS))
    if unknown or not targets:
        raise ConfigError(f"solve: targets must be some of {list(METRICS)}, got {sorted(targets)}")
    for k, v in targets.items():
        if not v > 0:
            raise ConfigError(f"solve: target {k} must be positive, got {v}")
    lat = latency_model(decode_rows, decode_source)
    shapes = []
    for arch in expand_grid(grid, kinds, mixers, multiple):
        try:
            values = measure(arch, seq_len, context, lat)
        except ConfigError:
            continue  # this combination breaks a shape rule (heads vs widths, a kind's keys)
        shapes.append(Shape(arch, values, {k: abs(values[k] / t - 1.0) for k, t in targets.items()}))
    if not shapes:
        raise ConfigError("solve: no grid point builds a valid shape; check --grid and --set")
    names = list(targets)
    front = [shapes[i] for i in pareto([tuple(s.distance[k] for k in names) for s in shapes])]
    front.sort(key=lambda s: sum(s.distance.values()))
    return front, lat, len(shapes)
