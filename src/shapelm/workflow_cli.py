"""`shapelm resolve` (one run's config for the workflow) and `shapelm plan` (GPU-hours)."""

from __future__ import annotations

import argparse

from shapelm.config import load_experiment, write_json_atomic
from shapelm.workflow import plan_rows


def cmd_resolve(args: argparse.Namespace) -> int:
    exp = load_experiment(args.config)
    write_json_atomic(args.out, exp.run(args.run))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    exp = load_experiment(args.config)
    rows = plan_rows(exp)
    print(f"{'table':<34} {'runs':>5} {'train FLOPs':>12} {'GPU-hours':>10}")
    for row in rows:
        print(f"{row['table']:<34} {row['runs']:>5} {row['flops']:>12.3e} {row['gpu_hours']:>10.1f}")
    print("GPU-hours assume each scale's resources.assumed_mfu (default 0.4) of "
          "resources.gpu_peak_tflops (default 989, H100/H200 dense bf16).")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("resolve", help="write one run's resolved run config (JSON)")
    r.add_argument("config")
    r.add_argument("run")
    r.add_argument("--out", required=True)
    r.set_defaults(func=cmd_resolve)
    p = sub.add_parser("plan", help="training GPU-hours per table from the FLOP accounting")
    p.add_argument("config")
    p.set_defaults(func=cmd_plan)
