import os

import pytest
import torch

# Two cores: keep torch from oversubscribing when several test processes run.
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(0)
    yield


def tiny_arch(**overrides):
    arch = {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4,
            "vocab_size": 97, "max_seq_len": 64}
    arch.update(overrides)
    return arch
