"""End-to-end runs of the real DAG (slow: they run in .ci/run, not in `make test`)."""

import shutil
import subprocess
from pathlib import Path

import pytest
from pipeline_helpers import ROOT, VENV_BIN, copy_repo, ensure_gpu_cluster, user_env


def _run(cmd, cwd, timeout, env=None):
    """`cmd` in `cwd` under `timeout` (SIGINT, then SIGKILL 20 s later); on failure, the test
    fails with its output and the tail of every job log under `cwd`/logs."""
    proc = subprocess.run(["timeout", "-s", "INT", "-k", "20", str(timeout), *map(str, cmd)], cwd=cwd,
                          env=env or user_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        logs = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted(Path(cwd, "logs").rglob("*.log")))
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n"
                    f"{proc.stderr[-6000:]}\n{logs}")
    return proc


def _snakemake(args, cwd, timeout, env=None):
    return _run([VENV_BIN / "snakemake", *args], cwd, timeout, env)


@pytest.mark.slow
def test_paper_dry_run_plans_every_table(tmp_path):
    # The README's line as typed, on a fresh copy with no input and no hub: the fetch jobs are
    # planned (GPT-2's novelty_hf after theirs) and the rest of the paper with them.
    repo = copy_repo(tmp_path / "repo")
    hf = tmp_path / "hf"
    env = {**{k: v for k, v in user_env().items() if not k.startswith(("HF_", "SHAPELM_ALLOW"))},
           "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf), "HF_HUB_CACHE": str(hf / "hub")}
    proc = _snakemake(["--profile", "slurm", "-n", "--quiet", "rules"], repo, 600, env=env)
    out = proc.stdout + proc.stderr
    counts = {line.split()[0]: int(line.split()[1]) for line in out.split("Job stats:")[1].splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    for rule in ("fetch", "slice_olmo", "train", "eval_ppl", "downstream", "yarn_finetune", "ruler", "decode_bench",
                 "novelty_hf", "results"):
        assert counts.get(rule), (rule, counts)
    assert counts["novelty_hf"] == 4  # gpt2, -medium, -large, -xl
    assert "will be fetched by job fetch" in out


@pytest.mark.slow
def test_tiny_target_through_real_slurm(tmp_path):
    ensure_gpu_cluster()
    repo = copy_repo(tmp_path / "repo")
    _snakemake(["--profile", "profiles/slurm-ci", "run_ci_tiny"], repo, 1500,
               env=user_env(SHAPELM_NUMERICS="fast"))  # the path through SLURM, not the bits
    results = repo / "results" / "ci" / "runs" / "ci_tiny"
    assert (results / "ppl.json").exists() and (results / "downstream.json").exists()
    assert (repo / "work" / "ci" / "runs" / "ci_tiny" / "final" / "model.safetensors").exists()
    sacct = subprocess.run(["sacct", "-n", "-X", "-o", "JobName%40,State"], capture_output=True, text=True)
    assert "COMPLETED" in sacct.stdout


@pytest.mark.slow
def test_make_demo_end_to_end(tmp_path):
    """`make demo` as the README types it, in a copy of the tree with nothing computed: the tiny
    DAG from nothing (corpus, 16 runs, every evaluation, table and figure) with the field's
    shapes beside it (8 runs), then every committed number of results/default and results/field
    reproduced bit for bit: the corpus is pinned by content and the CPU numerics by
    shapelm.numerics (docs/TRAINING.md, "Reproducibility"). Timings are not numbers a rerun
    reproduces; they are left out."""
    repo = copy_repo(tmp_path / "repo")
    for exp in ("default", "field"):
        for committed in ("runs", "tables"):
            shutil.rmtree(repo / "results" / exp / committed, ignore_errors=True)
    _run(["make", "demo", f"VENV={VENV_BIN.parent}"], repo, 2400)
    from shapelm.plan.build import load_plan
    from shapelm.results import artifacts
    from shapelm.results.compare import compare

    for exp in ("default", "field"):
        for artifact in artifacts(load_plan(repo / "configs" / f"{exp}.yaml")):
            assert (repo / artifact["path"]).exists(), artifact["path"]
        lines, failures = compare(repo / "results" / exp, ROOT / "results" / exp, exact=True)
        print(exp, lines[-1])
        assert failures == 0, "\n".join(lines[:40] + lines[-3:])
