"""Build every paper shape on the meta device and count it: goal well under a second each.

Prints, per run, the time to build the module on "meta" and count its parameters, beside the
time of the analytic count (the reference), and the ratio.
"""

import time
from pathlib import Path

from shapelm.shapes.accounting import param_counts
from shapelm.model.config import run_model_config
from shapelm.plan.experiment import load_experiment
from shapelm.model import build_model


def main() -> None:
    exp = load_experiment(Path(__file__).parents[1] / "configs" / "paper.yaml")
    print(f"{'run':<26} {'params':>14} {'meta build+count s':>19} {'analytic s':>11} {'ratio':>8}")
    worst = 0.0
    for name in exp.runs:
        if not name.startswith(("hg8b", "hg3b", "hg906m_conv", "hg906m_hg")) or "attn" in name:
            continue
        cfg = run_model_config(exp.run(name))
        t0 = time.perf_counter()
        counts = param_counts(cfg)
        t1 = time.perf_counter()
        model = build_model(cfg, "meta")
        n = model.num_parameters()
        t2 = time.perf_counter()
        assert n == counts.total, name
        worst = max(worst, t2 - t1)
        print(f"{name:<26} {n:>14,} {t2 - t1:>19.4f} {t1 - t0:>11.6f} {(t2 - t1) / max(t1 - t0, 1e-9):>8.0f}x")
    print(f"slowest meta build: {worst:.3f} s (goal < 1 s): {'OK' if worst < 1 else 'SLOW'}")


if __name__ == "__main__":
    main()
