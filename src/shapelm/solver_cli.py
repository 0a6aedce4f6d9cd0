"""`shapelm solve --grid ...`: the joint budget solver's command line (shapelm.solver_pareto)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from shapelm.errors import ConfigError
from shapelm.solver import parse_count


def add_joint_arguments(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group("joint solver (with --grid): Pareto set over several targets")
    g.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2",
                   help="builder keys to sweep, e.g. d_model=1024,1536 n_layers=12,16 d_h_ratio=0.8,2.7")
    g.add_argument("--kinds", nargs="*", default=None, help="kinds to try (default: --kind)")
    g.add_argument("--mixers", nargs="*", default=["attention"], help="token mixers to try")
    g.add_argument("--flops-target", help="training FLOPs per token, e.g. 5.6e9 or 5.6G")
    g.add_argument("--kv-target", help="KV cache + state bytes of one sequence at --context, e.g. 1.2G")
    g.add_argument("--latency-target", type=float, help="decode latency per token at --context, ms")
    g.add_argument("--context", type=int, default=4096, help="context length for KV bytes and latency")
    g.add_argument("--seq-len", type=int, default=4096, help="training sequence length for FLOPs")
    g.add_argument("--decode-file", help="decode benchmark results (decode.json) for measured latency")


def parse_set(items: list[str]) -> dict[str, object]:
    """`--set KEY=VALUE ...` -> {KEY: VALUE} (each value read as YAML)."""
    fixed: dict[str, object] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        fixed[key] = yaml.safe_load(value)
    return fixed


def _grid(items: list[str]) -> dict[str, list]:
    """KEY=V1,V2,... -> {KEY: [V1, V2, ...]} (each value read as YAML)."""
    grid = {key: [yaml.safe_load(v) for v in str(raw).split(",") if v]
            for key, raw in parse_set(items).items()}
    for key, values in grid.items():
        if not values:
            raise ConfigError(f"--grid {key}: no values")
    return grid


def cmd_solve_joint(args: argparse.Namespace) -> int:
    from shapelm.solver_pareto import solve_joint

    targets: dict[str, float] = {}
    if args.target:
        targets["params"] = float(parse_count(args.target))
    if args.flops_target:
        targets["flops_per_token"] = float(parse_count(args.flops_target))
    if args.kv_target:
        targets["kv_bytes"] = float(parse_count(args.kv_target))
    if args.latency_target is not None:
        targets["latency_ms"] = float(args.latency_target)
    rows = None
    if args.decode_file:
        path = Path(args.decode_file)
        if not path.is_file():
            raise ConfigError(f"--decode-file {path}: not found")
        rows = json.loads(path.read_text()).get("rows")
    grid = {**{k: [v] for k, v in parse_set(args.set).items()}, **_grid(args.grid)}
    front, lat, n = solve_joint(targets, grid, kinds=args.kinds or [args.kind], mixers=args.mixers,
                                seq_len=args.seq_len, context=args.context, decode_rows=rows,
                                decode_source=str(args.decode_file or ""), multiple=args.multiple)
    print(f"{n} shapes built; Pareto set of {len(front)} over the distances to {', '.join(targets)}")
    print(f"latency: {lat.source}")
    names = list(targets)
    print(" | ".join(["arch", *(f"{k} (vs target)" for k in names)]))
    for s in front[: args.top]:
        arch = " ".join(f"{k}={v}" for k, v in s.arch.items())
        print(" | ".join([arch, *(f"{s.values[k]:.4g} ({s.values[k] / targets[k] - 1:+.2%})" for k in names)]))
    return 0
