"""Training recipe units: schedule, weight-decay groups, accumulation, config errors, SLURM env."""

from __future__ import annotations

import math

import pytest

from shapelm.config import TrainRecipe
from shapelm.errors import ConfigError, DataError
from shapelm.model import ModelConfig, build_model
from shapelm.train import grad_accumulation, lr_at, param_groups, train
from shapelm.train.distributed import env_from_slurm, expand_nodelist
from shapelm.train.schedule import decays
from train_helpers import make_tokens, run_config


def recipe(**kw) -> TrainRecipe:
    base = dict(lr=1e-3, warmup_tokens=10 * 1024, total_tokens=110 * 1024, batch_tokens=1024,
                seq_len=128, final_lr_ratio=0.1)
    base.update(kw)
    return TrainRecipe.from_dict(base)


def test_schedule_known_steps():
    r = recipe()  # warmup 10 steps, 110 steps in all
    assert r.total_steps == 110
    assert lr_at(1, r) == pytest.approx(1e-4)  # linear from 0: step 1 of 10
    assert lr_at(5, r) == pytest.approx(5e-4)
    assert lr_at(10, r) == pytest.approx(1e-3)  # peak at the end of warmup
    assert lr_at(60, r) == pytest.approx((1e-3 + 1e-4) / 2)  # cosine midpoint
    assert lr_at(110, r) == pytest.approx(1e-4)  # end = 0.1 x peak
    assert lr_at(500, r) == pytest.approx(1e-4)
    lrs = [lr_at(s, r) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # monotone decay


def test_schedule_fractional_warmup_in_tokens():
    # Table 4, 113M: 50M warmup tokens over 512K-token batches = 95.37 steps, not rounded
    r = TrainRecipe.from_dict(dict(lr=6e-4, warmup_tokens="50e6", total_tokens="2.5e9",
                                   batch_tokens=512 * 1024, seq_len=2048))
    w = 50e6 / (512 * 1024)
    assert lr_at(95, r) == pytest.approx(6e-4 * 95 / w)
    assert lr_at(95, r) < 6e-4 < lr_at(96, r) * 1.0001
    assert lr_at(r.total_steps, r) == pytest.approx(6e-5)


def test_schedule_without_warmup():
    r = recipe(warmup_tokens=0)
    assert lr_at(1, r) == pytest.approx(1e-4 + 0.9e-3 * (1 + math.cos(math.pi / 110)) / 2)


def test_weight_decay_groups():
    cfg = ModelConfig.from_dict(run_config()["model"])
    model = build_model(cfg)
    groups = param_groups(model, 0.1)
    by_id = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    names = dict(model.named_parameters())
    decayed = sorted(n for n, p in names.items() if by_id[id(p)] == 0.1)
    assert "embed_tokens.weight" not in decayed  # OLMo does not decay embeddings
    assert "lm_head.weight" in decayed
    assert "layers.0.attn.q_proj.weight" in decayed and "layers.1.mlps.0.down_proj.weight" in decayed
    assert not any("norm" in n for n in decayed)  # RMSNorm and QK-norm weights
    assert all(names[n].ndim == 2 for n in decayed)
    assert set(by_id) == {id(p) for p in model.parameters()}
    assert decays("layers.0.attn.o_proj.weight", names["layers.0.attn.o_proj.weight"])
    # a frozen LM head is left out of the optimizer
    model.lm_head.weight.requires_grad_(False)
    assert id(model.lm_head.weight) not in {id(p) for g in param_groups(model, 0.1) for p in g["params"]}


def test_grad_accumulation():
    r = recipe(batch_tokens=8 * 128, micro_batch_size=2)
    assert grad_accumulation(r, 1) == 4
    assert grad_accumulation(r, 2) == 2
    assert grad_accumulation(r, 4) == 1
    with pytest.raises(ConfigError, match="micro_batch_size") as err:
        grad_accumulation(r, 3)
    assert "batch_tokens" in str(err.value)


@pytest.mark.parametrize(
    "train, key",
    [
        ({"lrr": 1.0}, "lrr"),
        ({"micro_batch_size": 3}, "micro_batch_size"),
        ({"batch_tokens": 100}, "batch_tokens"),
        ({"seq_len": 128, "batch_tokens": 1024, "total_tokens": 20480}, "max_seq_len"),
        ({"keep_last": 0}, "keep_last"),
        ({"precision": "fp8"}, "precision"),
    ],
)
def test_bad_config_names_key(tmp_path, train, key):
    cfg = run_config()
    cfg["train"].update(train)
    with pytest.raises(ConfigError, match=key):
        train_fn(cfg, tmp_path)


def train_fn(cfg, tmp_path):
    return train(cfg, tmp_path / "run", data_dir=tmp_path / "missing", progress=False)


def test_missing_data_dir_is_named(tmp_path):
    with pytest.raises(ConfigError, match="--data"):
        train(run_config(), tmp_path / "run", progress=False)
    with pytest.raises(DataError, match="missing"):
        train_fn(run_config(), tmp_path)


def test_too_little_data_is_an_error(tmp_path):
    make_tokens(tmp_path / "tok", n_tokens=1000)
    with pytest.raises(DataError, match="total_tokens"):
        train(run_config(), tmp_path / "run", data_dir=tmp_path / "tok", progress=False)


def test_cli_bad_config_exit_2(tmp_path, capsys):
    import json

    from shapelm.cli import main

    cfg = run_config()
    cfg["train"]["micro_batch_size"] = 3
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cfg))
    assert main(["train", str(path), "--out", str(tmp_path / "o"), "--data", str(tmp_path)]) == 2
    assert "micro_batch_size" in capsys.readouterr().err


def test_nodelist_and_slurm_env():
    assert expand_nodelist("node[01-03,07],gpu5") == ["node01", "node02", "node03", "node07", "gpu5"]
    assert expand_nodelist("a-b[9-10]") == ["a-b9", "a-b10"]
    env = {"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "9", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "zz-nonexistent[3-4]", "SLURM_JOB_ID": "12345"}
    got = env_from_slurm(env)
    assert got["RANK"] == "9" and got["WORLD_SIZE"] == "16" and got["LOCAL_RANK"] == "1"
    assert got["MASTER_ADDR"] == "zz-nonexistent3"
    assert got["MASTER_PORT"] == str(15000 + 12345 % 20000)
    assert env_from_slurm({**env, "RANK": "0"}) == {}  # torchrun inside the allocation wins
    assert env_from_slurm({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) == {}  # batch script, no srun
