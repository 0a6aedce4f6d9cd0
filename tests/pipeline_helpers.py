"""Helpers of the end-to-end tests (no tests here): the repository copied as a fresh clone
would have it, the user's environment for child processes, and the emulated GPU cluster."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LOCAL_SLURM = Path(os.environ.get("SHAPELM_LOCAL_SLURM", ROOT.parent / "shared" / "tools" / "local-slurm"))


def user_env(**extra):
    # PATH as the user has it: the workflow itself must find the environment's `shapelm`.
    env = {**os.environ, **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def snakemake_here(args, cwd, timeout=300, check=True, **env):
    """The real snakemake on this repository's Snakefile, working in `cwd`."""
    cmd = [str(VENV_BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(cwd), *args]
    proc = subprocess.run(cmd, check=False, cwd=cwd, env=user_env(**env), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file() or src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    return dest


def ensure_gpu_cluster():
    """The emulated GPU cluster of .ci/gpu-cluster.sh (started there by .ci/run)."""
    script = ROOT / ".ci" / "gpu-cluster.sh"
    if (LOCAL_SLURM / "start.sh").exists():
        subprocess.run(["bash", str(script)], check=True, capture_output=True, timeout=900)
    elif shutil.which("sbatch") is None:
        pytest.skip("no SLURM: neither ../shared/tools/local-slurm nor sbatch on PATH")
