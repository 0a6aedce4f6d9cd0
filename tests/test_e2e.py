"""End-to-end runs of the real DAG (slow: they run in .ci/run, not in `make test`)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LOCAL_SLURM = Path(os.environ.get("SHAPELM_LOCAL_SLURM", ROOT.parent / "shared" / "tools" / "local-slurm"))


def _env():
    # PATH as the user has it: the workflow itself must find the environment's `shapelm`.
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _planning_env():
    # The paper's long-context inputs are not on this machine: plan with them as warnings.
    return {**_env(), "SHAPELM_ALLOW_MISSING_INPUTS": "1"}


def _copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file() or src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    return dest


def _snakemake(args, cwd, timeout, env=None):
    cmd = ["timeout", "-s", "INT", "-k", "20", str(timeout), str(VENV_BIN / "snakemake"), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True)
    if proc.returncode != 0:
        logs = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted(Path(cwd, "logs").rglob("*.log")))
        pytest.fail(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}\n{logs}")
    return proc


@pytest.mark.slow
def test_paper_dry_run_plans_every_table(tmp_path):
    # The README's line as typed, on a fresh copy with no input and no hub: the fetch jobs are
    # planned (GPT-2's novelty_hf after theirs) and the rest of the paper with them.
    repo = _copy_repo(tmp_path / "repo")
    hf = tmp_path / "hf"
    env = {**{k: v for k, v in _env().items() if not k.startswith(("HF_", "SHAPELM_ALLOW"))},
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


def ensure_gpu_cluster():
    """The emulated GPU cluster of .ci/gpu-cluster.sh (started there by .ci/run)."""
    script = ROOT / ".ci" / "gpu-cluster.sh"
    if (LOCAL_SLURM / "start.sh").exists():
        subprocess.run(["bash", str(script)], check=True, capture_output=True, timeout=900)
    elif shutil.which("sbatch") is None:
        pytest.skip("no SLURM: neither ../shared/tools/local-slurm nor sbatch on PATH")


@pytest.mark.slow
def test_tiny_target_through_real_slurm(tmp_path):
    ensure_gpu_cluster()
    repo = _copy_repo(tmp_path / "repo")
    _snakemake(["--profile", "profiles/slurm-ci", "run_ci_tiny"], repo, 1500)
    results = repo / "results" / "ci" / "runs" / "ci_tiny"
    assert (results / "ppl.json").exists() and (results / "downstream.json").exists()
    assert (repo / "work" / "ci" / "runs" / "ci_tiny" / "final" / "model.safetensors").exists()
    sacct = subprocess.run(["sacct", "-n", "-X", "-o", "JobName%40,State"], capture_output=True, text=True)
    assert "COMPLETED" in sacct.stdout


@pytest.mark.slow
def test_tiny_default_dag_end_to_end(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    _snakemake(["--cores", "2"], repo, 2400)
    from shapelm.plan.build import load_plan
    from shapelm.results import artifacts

    for artifact in artifacts(load_plan(repo / "configs" / "default.yaml")):
        assert (repo / artifact["path"]).exists(), artifact["path"]
