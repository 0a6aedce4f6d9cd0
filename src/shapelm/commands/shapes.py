"""`shapelm shapes` (accounting tables) and `shapelm solve` (the budget solver, and with `--grid`
the joint Pareto search over several targets): the front end of `shapelm.shapes`.

Reads an experiment's plan for its runs' shapes; computes nothing itself (`shapes.accounting`,
`shapes.solver`, `shapes.solver_pareto` do).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

import yaml

from shapelm.shapes.accounting import SHAPE_COLUMNS, shape_row
from shapelm.config import run_recipe
from shapelm.model.config import run_model_config
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.shapes.solver import COUNTS, RATIO_TOLERANCE, parse_count, solve
from shapelm import files


def shape_rows(config_path: str, runs: list[str] | None = None) -> list[dict[str, object]]:
    exp = load_experiment(config_path)
    names = runs or list(exp.runs)
    rows = []
    for name in names:
        run = exp.run(name)
        recipe = run_recipe(run)
        rows.append(shape_row(name, run_model_config(run), recipe.seq_len, recipe.batch_tokens))
    return rows


def format_rows(rows: list[dict[str, object]], fmt: str) -> str:
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=SHAPE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()
    header = "| " + " | ".join(SHAPE_COLUMNS) + " |"
    lines = [header, "|" + "---|" * len(SHAPE_COLUMNS)]
    for row in rows:
        cells = []
        for col in SHAPE_COLUMNS:
            value = row[col]
            if isinstance(value, float):
                value = f"{value:.4g}" if "flops" in col else f"{value:.0f}"
            elif isinstance(value, int) and col.startswith("params"):
                value = f"{value / 1e6:,.2f}M"
            cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"



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
    from shapelm.shapes.solver_pareto import solve_joint

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


def cmd_shapes(args: argparse.Namespace) -> int:
    text = format_rows(shape_rows(args.config, args.runs), args.format)
    if args.out:
        files.write_text(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    if args.grid:
        return cmd_solve_joint(args)
    if not args.target:
        raise ConfigError("solve: --target (parameters) is required without --grid")
    arch = {"kind": args.kind, **parse_set(args.set)}
    target = parse_count(args.target)
    candidates = solve(
        arch,
        target,
        ratio=args.ratio,
        multiple=args.multiple,
        d_h_multiple=args.d_h_multiple,
        tolerance=args.tolerance,
        ratio_tolerance=args.ratio_tolerance,
        count=args.count,
    )
    print(f"target {target:,} {args.count} parameters, tolerance {args.tolerance:.2%}")
    print(f"{'d_model':>8} {'d_h':>6} {'ratio':>6} {'params':>15} {'error':>8}")
    for c in candidates[: args.top]:
        print(f"{c.arch['d_model']:>8} {c.arch['d_h']:>6} {c.ratio:>6.3f} {c.params:>15,} {c.rel_error:>+8.3%}")
    best = candidates[0]
    print("\nbest arch:")
    print(yaml.safe_dump({"arch": best.arch}, sort_keys=False), end="")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shapes", help="parameter, FLOP and KV-cache accounting of a config's runs")
    p.add_argument("config", help="experiment config (configs/*.yaml)")
    p.add_argument("--format", choices=["md", "csv"], default="md", help="output format")
    p.add_argument("--runs", nargs="*", help="only these runs (default: all)")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_shapes)

    s = sub.add_parser("solve", help="find widths that land a shape on a parameter budget")
    s.add_argument("--target", help="parameter target, e.g. 906.1M")
    s.add_argument("--kind", default="hourglass", help="builder kind (hourglass, conventional, ...)")
    s.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="fixed builder keys, e.g. n_layers=12 k=4 d_attn=1536 n_heads=16")
    s.add_argument("--ratio", type=float, help="d_h/d_model ratio when d_model is free")
    s.add_argument("--multiple", type=int, default=32, help="d_model multiple (default 32)")
    s.add_argument("--d-h-multiple", type=int, help="d_h multiple (default: --multiple)")
    s.add_argument("--tolerance", type=float, default=0.005, help="relative tolerance (0.005)")
    s.add_argument("--ratio-tolerance", type=float, default=RATIO_TOLERANCE,
                   help=f"refuse when the best d_h/d_model misses --ratio by more than this, relative, "
                        f"after trying finer d_h multiples ({RATIO_TOLERANCE})")
    s.add_argument("--count", choices=COUNTS, default="non_embedding", help="which parameters the target counts")
    s.add_argument("--top", type=int, default=5, help="how many solutions to print")
    add_joint_arguments(s)
    s.set_defaults(func=cmd_solve)
