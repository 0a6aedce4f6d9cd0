import os
from pathlib import Path

from shapelm.numerics import pin_cpu_numerics

# The kernel settings every `shapelm` process starts with, set before torch loads here too: a
# test that compares an in-process run with a child process's compares the same arithmetic.
pin_cpu_numerics()

import atexit  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


def _scontrol_without_a_controller() -> None:
    """Where SLURM's client is installed but no controller answers (this machine until the
    emulated cluster starts), every Snakemake start waits ~9 s: importing the SLURM executor
    plugin runs `scontrol show config`, which retries the absent controller. Then a wrapper
    earlier on PATH answers that one question at once (no config: the plugin's documented
    fallback) and passes every other scontrol call to the real one. Set up once per session
    (the xdist workers inherit the PATH); with a controller up (the slow cluster tests) PATH is
    left alone."""
    real = shutil.which("scontrol")
    if real is None or os.environ.get("SHAPELM_TEST_SCONTROL_CHECKED"):
        return
    os.environ["SHAPELM_TEST_SCONTROL_CHECKED"] = "1"
    try:
        subprocess.run([real, "ping"], capture_output=True, timeout=3, check=True)
        return  # a controller answers
    except (subprocess.SubprocessError, OSError):
        pass
    shim = Path(tempfile.mkdtemp(prefix="shapelm-test-bin-")) / "scontrol"
    shim.write_text('#!/bin/sh\nif [ "$1" = show ] && [ "$2" = config ]; then exit 1; fi\n'
                    f'exec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    atexit.register(shutil.rmtree, shim.parent, ignore_errors=True)
    os.environ["PATH"] = f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"


_scontrol_without_a_controller()

# Two cores: keep torch from oversubscribing when several test processes run.
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def one_thread():
    """One intra-op thread (a module opts in with `pytestmark = pytest.mark.usefixtures("one_thread")`):
    on a shared 2-core machine, 2 spinning OpenMP threads make tiny models ~100x slower, and
    training children run with one thread too (same kernels, same bits); restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(0)
    yield
