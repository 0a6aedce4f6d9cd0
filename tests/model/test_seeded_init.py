"""Seeded init (shapelm.model.init): each shard drawn on its own device, the same values
whichever rows a rank holds."""

import torch
from torch import nn

from shapelm.model.config import ModelConfig
from shapelm.model.init import fill_trunc_normal_rows, init_parameters, rows_per_block
from shapelm.model.transformer import build_model

LAYER = {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 16}, "ffn_widths": [64]}


def test_each_shard_is_drawn_on_the_device_that_holds_it(monkeypatch):
    """A model on "meta" stands for a GPU rank: values drawn on the CPU and copied over would
    show as a CPU generator or a CPU tensor handed to the initialiser."""
    model = build_model(ModelConfig(vocab_size=96, d_model=32, layers=[LAYER] * 2), "meta")
    generators, draws = [], []

    class RecordingGenerator:
        def __init__(self, device="cpu"):
            generators.append(torch.device(device))

        def manual_seed(self, seed):
            return self

    def recording_trunc_normal(tensor, **kwargs):
        draws.append(tensor.device)
        return tensor

    monkeypatch.setattr(torch, "Generator", RecordingGenerator)
    monkeypatch.setattr(nn.init, "trunc_normal_", recording_trunc_normal)
    init_parameters(model, seed=0)
    # a rank holding part of a block (an FSDP shard) draws the block on its device too
    fill_trunc_normal_rows(torch.empty(3, 32, device="meta"), "w", torch.Size([10, 32]), range(4, 7), 0, 0.02)
    linears = sum(isinstance(m, (nn.Linear, nn.Embedding)) for m in model.modules())
    assert len(draws) == len(generators) > linears
    assert set(generators) == set(draws) == {torch.device("meta")}


def test_a_shard_holds_the_same_values_as_the_whole_parameter():
    shape = torch.Size([3000, 1000])  # 1048 rows per block: shards cut blocks in two
    assert rows_per_block(shape) < 1500
    whole = torch.empty(shape)
    fill_trunc_normal_rows(whole, "w", shape, range(0, 3000), 7, 0.02)
    part = torch.empty(1500, 1000)
    fill_trunc_normal_rows(part, "w", shape, range(1000, 2500), 7, 0.02)
    assert torch.equal(part, whole[1000:2500])
    assert whole.abs().max() <= 3 * 0.02 and 0.015 < whole.std() < 0.025
