import os

from shapelm.numerics import pin_cpu_numerics

# The kernel settings every `shapelm` process starts with, set before torch loads here too: a
# test that compares an in-process run with a child process's compares the same arithmetic.
pin_cpu_numerics()

import pytest  # noqa: E402
import torch  # noqa: E402

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
