"""Each run's held-out PPL is scored at its scale's training length unless the protocol names
another (113M: trained on 2,048, scored at 4,096), resolved per run and written to plan.json."""

from __future__ import annotations

import copy
import json

import pytest

from shapelm.config import load_yaml
from shapelm.plan.build import write_plan
from shapelm.plan.experiment import load_experiment
from shapelm.plan.runs import ppl_seq_len


@pytest.fixture(scope="module")
def paper_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    write_plan(load_experiment("configs/paper.yaml"), path)
    return json.loads(path.read_text())


@pytest.mark.parametrize("run, length", [
    ("hg113m_conv", 4096),  # the protocol's: trained on 2,048
    ("hg403m_conv", 2048), ("hg906m_conv", 4096), ("hg8b_conv", 4096),
    ("tp440m_uniform", 4096), ("lws_vanilla_12l", 1024), ("lws_baseline_18l_s1", 1024)])
def test_plan_json_carries_each_runs_scoring_length(paper_plan, run, length):
    config = paper_plan["runs"][run]["config"]
    assert config["eval"]["ppl_seq_len"] == length
    if not run.startswith("hg113m"):
        assert length == config["train"]["seq_len"]  # no extrapolation unless the protocol asks


def test_precedence_scale_then_top_level_then_training_length():
    data = {"scales": {"a": {"eval": {"ppl_seq_len": 4096}}, "b": {}}, "eval": {}}
    assert ppl_seq_len(data, "a", 2048) == 4096
    assert ppl_seq_len(data, "b", 1024) == 1024
    top = copy.deepcopy(data) | {"eval": {"ppl_seq_len": 256}}
    assert ppl_seq_len(top, "b", 1024) == 256 and ppl_seq_len(top, "a", 2048) == 4096


def test_the_tiny_default_keeps_its_one_length():
    exp = load_experiment("configs/default.yaml")
    assert {run["eval"]["ppl_seq_len"] for run in exp.runs.values()} == {256}
    assert load_yaml("configs/default.yaml")["eval"]["ppl_seq_len"] == 256


def test_lws_columns_meaning_different_numbers_have_different_labels():
    """LWS Table 3's held-out-sets PPL (ppl.json) and Figure 4's (metrics.jsonl) are different
    numbers of the same run: different names, headers that say where each comes from."""
    from shapelm.plan.build import load_plan
    from shapelm.results.context import Context
    from shapelm.results.tables import build_table

    ctx = Context(load_plan("configs/default.yaml"), "/nonexistent/r", "/nonexistent/w")
    t3 = {c.name: c.header for c in build_table(ctx, "lws_table3").columns}
    f4 = {c.name: c.header for c in build_table(ctx, "lws_fig4_val_ppl").columns}
    assert "val_ppl_heldout_sets" in t3 and "val_ppl_heldout_sets" not in f4
    assert "ppl.json" in t3["val_ppl_heldout_sets"] and "metrics.jsonl" in f4["val_ppl_heldout_sets_in_training"]
    assert t3["val_ppl_heldout_sets"] != f4["val_ppl_heldout_sets_in_training"]
