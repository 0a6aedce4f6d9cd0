"""`shapelm resolve` (one run's config for the workflow) and `shapelm cost` (GPU-hours)."""

from __future__ import annotations

import argparse

from shapelm import files
from shapelm.plan.experiment import load_experiment
from shapelm.plan.cost import COST_STAGES, cost_rows


def cmd_resolve(args: argparse.Namespace) -> int:
    exp = load_experiment(args.config)
    files.write_json(args.out, exp.run(args.run), **files.RUN_FILE)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    exp = load_experiment(args.config)
    rows = cost_rows(exp, args.measurements)
    short = {"pretraining": "pretrain", "yarn_finetune": "yarn", "evaluation": "eval",
             "proofpile": "proofpile", "ruler": "ruler", "decode": "decode"}
    print(f"{'table':<34} {'runs':>5} {'train FLOPs':>12} "
          + " ".join(f"{short[s]:>9}" for s in COST_STAGES) + f" {'GPU-hours':>10}")
    for row in rows:
        print(f"{row['table']:<34} {row['runs']:>5} {row['flops']:>12.3e} "
              + " ".join(f"{row['stages'][s]:>9.1f}" for s in COST_STAGES) + f" {row['gpu_hours']:>10.1f}")
    print("MFU per scale, and per mixer where it is not attention (of resources.gpu_peak_tflops, "
          "default 989 = H100/H200 dense bf16):")
    for scale, source in sorted(rows[-1]["mfu_source"].items()):
        print(f"  {scale:<14} {source}")
    print("pretrain, yarn, proofpile and ruler are FLOPs at that MFU (prefill only for RULER);\n"
          "eval (perplexity + downstream) and decode are their jobs' requested GPU time.")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("resolve", help="write one run's resolved run config (JSON)")
    r.add_argument("config", help="the experiment config (YAML)")
    r.add_argument("run", help="the run's name")
    r.add_argument("--out", required=True, help="the JSON file to write")
    r.set_defaults(func=cmd_resolve)
    p = sub.add_parser("cost", help="GPU-hours per table and stage (measured or assumed MFU)")
    p.add_argument("config", help="the experiment config (YAML)")
    p.add_argument("--measurements", default=None,
                   help="directory of benchmarks/gpu_check.py JSON files (default benchmarks/results)")
    p.set_defaults(func=cmd_cost)
