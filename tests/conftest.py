import os

import pytest
import torch

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
