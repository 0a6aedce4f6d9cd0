"""Where an experiment's files live, relative to the workflow's working directory. The one
spelling of the layout: rules, the rest of `shapelm.plan` and `shapelm results` take it from here."""
from __future__ import annotations

from pathlib import Path

#: The folder of the per-run files under a work or results directory (work/EXP/runs/RUN/...).
RUNS = "runs"


def runs_under(root: str | Path) -> Path:
    """Every run's folder under a work or results directory that may live anywhere (a copy, a
    test's temp folder): `shapelm results` reads its inputs through here."""
    return Path(root) / RUNS


def run_under(root: str | Path, run: str) -> Path:
    """One run's folder under a work or results directory (`runs_under`)."""
    return runs_under(root) / run


def work_dir(exp: str) -> str:
    """Training state, run configs, checkpoints and the experiment's merged config."""
    return f"work/{exp}"


def run_dir(exp: str, run: str) -> str:
    """One run's directory: run config, checkpoints, final model, metrics.jsonl."""
    return f"{work_dir(exp)}/{RUNS}/{run}"


def benchmarks_dir(exp: str) -> str:
    """Wall time and memory of each heavy job (Snakemake's `benchmark:` TSVs)."""
    return f"{work_dir(exp)}/benchmarks"


def logs_dir(exp: str) -> str:
    """Every job's log."""
    return f"logs/{exp}"


def results_dir(exp: str) -> str:
    """Per-run result JSONs, the decode benchmark and the tables."""
    return f"results/{exp}"


def run_results_dir(exp: str, run: str) -> str:
    """One run's result JSONs (ppl.json, downstream.json, proofpile.json, ruler.json, novelty.json)."""
    return f"{results_dir(exp)}/{RUNS}/{run}"


def figures_dir(exp: str) -> str:
    return f"paper_figures/{exp}"
