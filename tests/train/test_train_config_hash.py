"""A run's training config hash covers only what changes its weights: a setting that decides
how often training evaluates, logs or checkpoints, how many checkpoints it keeps, or which
held-out sets it scores leaves the hash (and weights_config.json, the train rule's input) as it
was; a setting that changes the weights moves it. The workflow side (no train job planned) is
tests/test_rules.py::test_changing_evaluation_settings_does_not_rerun_training."""

from __future__ import annotations

from pathlib import Path

import pytest

from shapelm.config import WEIGHT_NEUTRAL_TRAIN_KEYS, load_yaml, merge
from shapelm.plan.experiment import load_experiment
from shapelm.plan.jobs import training_config, weights_config

ROOT = Path(__file__).resolve().parents[2]
RUN = "hg113m_conv"


def _experiment(train=None, data=None):
    raw = load_yaml(ROOT / "configs" / "default.yaml")
    return load_experiment(merge(raw, {"runs": {RUN: {"train": train or {}}}, "data": data or {}}))


BASE = _experiment()


@pytest.mark.parametrize(("key", "value"), [
    ("eval_every", 4096),
    ("eval_max_instances", 3),
    ("eval_heldout_sequences", 8),
    ("log_every", 1),
    ("checkpoint_every", 7),
    ("keep_last", 5),
    ("checkpoint_format", "sharded"),
    ("async_checkpoint", True),
])
def test_a_setting_that_leaves_the_weights_leaves_the_hash(key, value):
    changed = _experiment(train={key: value})
    assert changed.run(RUN)["train"][key] == value != BASE.run(RUN)["train"].get(key)  # applied
    assert training_config(changed, RUN)["hash"] == training_config(BASE, RUN)["hash"]
    assert changed.run(RUN)["hash"] == BASE.run(RUN)["hash"]
    assert weights_config(changed, RUN) == weights_config(BASE, RUN)  # the train rule's input
    assert training_config(changed, RUN) != training_config(BASE, RUN)  # the trainer sees it


def test_the_validation_sets_leave_the_hash():
    fewer = _experiment(data={"validation_sets": ["default_web"]})
    assert fewer.run(RUN)["data"] != BASE.run(RUN)["data"]
    dirs = ["work/default/data/corpus/val/default_web"]
    assert training_config(fewer, RUN, dirs)["validation_dirs"] == dirs
    assert training_config(fewer, RUN, dirs)["hash"] == training_config(BASE, RUN)["hash"]
    assert weights_config(fewer, RUN) == weights_config(BASE, RUN)


@pytest.mark.parametrize(("key", "value"), [("lr", 1e-3), ("seed", 7), ("micro_batch_size", 2),
                                            ("z_loss", 0.0), ("precision", "bf16")])
def test_a_setting_that_changes_the_weights_moves_the_hash(key, value):
    changed = _experiment(train={key: value})
    assert training_config(changed, RUN)["hash"] != training_config(BASE, RUN)["hash"]
    assert weights_config(changed, RUN) != weights_config(BASE, RUN)


def test_every_neutral_key_is_a_train_setting():
    assert set(WEIGHT_NEUTRAL_TRAIN_KEYS) <= set(BASE.run(RUN)["train"])
