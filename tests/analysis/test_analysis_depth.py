"""Depth analyses (shapelm.analysis.depth): the skip loss is the loss of the model without that
block, the residual norms are the stream's, looped blocks are skipped in every round, and the
CLI writes them for a saved model."""

import copy
import json
import math

import numpy as np
import pytest
import torch

from shapelm.analysis.depth import measure_depth, windows
from shapelm.cli import main
from shapelm.data.tokens import write_token_dir
from shapelm.model import build_model, save_pretrained
from shapelm.model.builders import build_model_config
from model_helpers import tiny_arch


def _model(**arch):
    torch.manual_seed(0)
    return build_model(build_model_config(tiny_arch(**arch))).eval()


def _ids(n=200, vocab=97):
    return torch.from_numpy(np.random.default_rng(1).integers(1, vocab, n)).long()


def test_skip_loss_is_the_loss_without_that_block():
    model = _model(n_layers=4)
    ids = _ids()
    out = measure_depth(model, ids, seq_len=32)
    batch = windows(ids, 32)
    assert out["windows"] == 200 // 33 and out["tokens"] == batch.numel()
    for layer in range(4):
        pruned = copy.deepcopy(model)
        del pruned.layers[layer]  # the model built without block `layer`
        with torch.no_grad():
            expected = float(pruned(batch[:, :-1], labels=batch[:, 1:]).ce_loss)
        got = out["layers"][layer]
        assert got["skip_loss"] == pytest.approx(expected, rel=1e-6)
        assert got["skip_delta"] == pytest.approx(expected - out["loss"], abs=1e-6)
    with torch.no_grad():
        assert out["loss"] == pytest.approx(float(model(batch[:, :-1], labels=batch[:, 1:]).ce_loss), rel=1e-7)


def test_residual_norms_follow_the_stream():
    model = _model(n_layers=3)
    ids = _ids()
    out = measure_depth(model, ids, seq_len=32)
    x = windows(ids, 32)[:, :-1]
    with torch.no_grad():
        h = model.embed_tokens(x)
        assert out["embedding_norm"] == pytest.approx(float(h.norm(dim=-1).mean()), rel=1e-6)
        positions = torch.arange(x.shape[1])
        for i, block in enumerate(model.layers):
            cos, sin = model._cos_sin(block.attn.shape.head_dim, positions, h.dtype)
            nxt = block(h, cos, sin)
            applied = out["applied"][i]
            assert applied["residual_norm"] == pytest.approx(float(nxt.norm(dim=-1).mean()), rel=1e-6)
            ratio = ((nxt - h).norm(dim=-1) / h.norm(dim=-1)).mean()
            assert applied["write_ratio"] == pytest.approx(float(ratio), rel=1e-6)
            h = nxt


def test_looped_blocks_are_measured_per_round_and_skipped_in_every_round():
    model = _model(n_layers=2, loops=3)
    out = measure_depth(model, _ids(), seq_len=32)
    assert [a["layer"] for a in out["applied"]] == [0, 1, 0, 1, 0, 1]
    assert [a["depth"] for a in out["applied"]] == list(range(6))
    assert len(out["layers"]) == 2 and all(math.isfinite(x["skip_loss"]) for x in out["layers"])


def test_cli_writes_the_analyses_of_a_saved_model(tmp_path, capsys):
    save_pretrained(_model(n_layers=3), tmp_path / "run" / "final")
    text = tmp_path / "val"
    write_token_dir(text, np.random.default_rng(0).integers(1, 97, 300), vocab_size=97, eos_id=0)
    out = tmp_path / "depth.json"
    assert main(["analyze", "depth", str(tmp_path / "run"), "--text", str(text), "--tokens", "256",
                 "--seq-len", "31", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["layers"]) == 3 and len(data["applied"]) == 3 and data["windows"] == 8
    assert "skipped" in capsys.readouterr().out
    # not our checkpoint, too few tokens: one line each, status 2
    assert main(["analyze", "depth", str(tmp_path), "--text", str(text), "--out", str(out)]) == 2
    assert "not a shapelm checkpoint" in capsys.readouterr().err
    assert main(["analyze", "depth", str(tmp_path / "run"), "--text", str(text), "--tokens", "5000",
                 "--out", str(out)]) == 2
    assert "only 300 tokens" in capsys.readouterr().err
