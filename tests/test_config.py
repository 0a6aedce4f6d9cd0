"""Experiment configs: schema errors name the key before any work; runs resolve their recipe."""

import copy
from pathlib import Path

import pytest

from shapelm.config import TrainRecipe, load_experiment, load_run_config, write_json_atomic
from shapelm.errors import ConfigError

ROOT = Path(__file__).parents[1]


def _minimal():
    return {
        "name": "t",
        "scales": {"s": {"n_heads": 2, "train": {"lr": 1e-3, "batch_tokens": 64, "seq_len": 16,
                                                   "total_tokens": 640, "warmup_tokens": 64}}},
        "runs": {"a": {"scale": "s", "arch": {"kind": "conventional", "d_model": 16, "n_layers": 1,
                                              "d_h": 32, "vocab_size": 50}}},
    }


def test_shipped_configs_load_and_validate():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        exp = load_experiment(path)
        assert exp.runs, path


def test_run_inherits_scale_recipe_and_heads():
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    run = exp.run("hg906m_hg")
    assert run["train"]["lr"] == 2.5e-4 and run["train"]["total_tokens"] == 18_000_000_000
    assert run["model"]["layers"][0]["attention"]["n_heads"] == 16
    assert run["train"]["seed"] == 6198
    assert len(run["hash"]) == 16


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c.update(bogus=1), "bogus"),
        (lambda c: c["runs"]["a"].update(colour="red"), "colour"),
        (lambda c: c["scales"]["s"]["train"].update(lr=-1), "lr"),
        (lambda c: c["scales"]["s"]["train"].update(lrr=1), "lrr"),
        (lambda c: c["runs"]["a"].update(scale="nope"), "nope"),
        (lambda c: c["runs"]["a"]["arch"].update(n_heads=3), "n_heads"),
        (lambda c: c["runs"]["a"]["arch"].update(kind="pyramid"), "kind"),
        (lambda c: c["runs"].update({"Bad-Name": c["runs"]["a"]}), "Bad-Name"),
        (lambda c: c["scales"]["s"]["train"].update(batch_tokens=60), "batch_tokens"),
        (lambda c: c["scales"]["s"]["train"].update(precision="fp8"), "precision"),
        (lambda c: c.pop("runs"), "runs"),
    ],
)
def test_bad_configs_name_the_key(mutate, needle):
    cfg = copy.deepcopy(_minimal())
    mutate(cfg)
    with pytest.raises(ConfigError, match=needle):
        load_experiment(cfg)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_experiment(bad)


def test_run_config_roundtrip(tmp_path):
    exp = load_experiment(_minimal())
    write_json_atomic(tmp_path / "r.json", exp.run("a"))
    run = load_run_config(tmp_path / "r.json")
    assert run == exp.run("a")
    recipe = TrainRecipe.from_dict(run["train"])
    assert recipe.total_steps == 10 and recipe.warmup_steps == 1 and recipe.batch_sequences == 4
