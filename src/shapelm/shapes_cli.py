"""`shapelm shapes` (accounting tables) and `shapelm solve` (budget solver)."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

import yaml

from shapelm.accounting import SHAPE_COLUMNS, shape_row
from shapelm.config import run_recipe
from shapelm.model.config import run_model_config
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.solver import COUNTS, RATIO_TOLERANCE, parse_count, solve
from shapelm.solver_cli import parse_set


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


def cmd_shapes(args: argparse.Namespace) -> int:
    text = format_rows(shape_rows(args.config, args.runs), args.format)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    if args.grid:
        from shapelm.solver_cli import cmd_solve_joint

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
    from shapelm.solver_cli import add_joint_arguments

    add_joint_arguments(s)
    s.set_defaults(func=cmd_solve)
