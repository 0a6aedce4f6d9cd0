"""The field's table and the depth analyses' table on synthetic records (configs/field.yaml's
plan; shapelm.results.field, shapelm.results.depth): which runs they list, the pairs' verdicts
over seeds, the rows of a looped model, and the files an experiment writes for them."""

import json
import math

import numpy as np
import pytest

from shapelm.plan.build import load_plan
from shapelm.results import artifacts, build_results
from shapelm.results.context import Context
from shapelm.results.depth import depth_table
from shapelm.results.field import field_table

# arm -> the shift of its held-out loss against the uniform run (invented numbers)
SHIFTS = {"field_tiny_uniform": 0.0, "field_tiny_variable_width": -0.2, "field_tiny_looped": 0.0,
          "field_tiny_head_schedule": +0.2}


@pytest.fixture(scope="module")
def plan():
    return load_plan("configs/field.yaml")


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _ppl(rng, difficulty, shift):
    losses = difficulty + shift + rng.normal(0, 0.01, len(difficulty))
    loss = float(losses.mean())
    return {"sets": {"default_wiki": {"loss": loss, "ppl": math.exp(loss), "instance_losses": list(losses),
                                      "instance_tokens": [127] * len(losses)}},
            "aggregate": {"val_loss": loss, "val_ppl": math.exp(loss), "exp_mean_loss": math.exp(loss)}}


def _depth(n_stored, rounds, loss):
    applied = [{"depth": d, "layer": d % n_stored, "residual_norm": 1.0 + d, "write_ratio": 0.5 if d else math.nan}
               for d in range(n_stored * rounds)]
    layers = [{"layer": i, "skip_loss": loss + 0.1 * (i + 1), "skip_delta": 0.1 * (i + 1)} for i in range(n_stored)]
    return {"model": "FAKE", "loss": loss, "embedding_norm": 0.5, "applied": applied, "layers": layers,
            "tokens": 2048}


@pytest.fixture
def measured(plan, tmp_path):
    """Every seed's ppl.json (the arms shifted by SHIFTS, seed noise far below the shifts) and
    depth.json, except field_tiny_head_schedule_s1's depth (pending)."""
    rng = np.random.default_rng(0)
    difficulty = rng.normal(6.0, 0.3, 64)
    for run, shift in SHIFTS.items():
        for inst in plan.instances(run):
            _write(tmp_path / "runs" / inst / "ppl.json", _ppl(rng, difficulty, shift + rng.normal(0, 0.005)))
            if inst != "field_tiny_head_schedule_s1":
                rounds = 2 if run == "field_tiny_looped" else 1
                _write(tmp_path / "runs" / inst / "depth.json", _depth(4, rounds, 6.0 + shift))
    return Context(plan, tmp_path, tmp_path / "work")


def test_field_table_pairs_each_shape_with_the_uniform_run_and_gives_its_verdict(measured):
    rows = {r["arm"]: r for r in field_table(measured).rows}
    assert set(rows) == {"field_tiny_variable_width", "field_tiny_looped", "field_tiny_head_schedule"}
    assert {r["base"] for r in rows.values()} == {"field_tiny_uniform"}
    assert all(r["seeds"] == "2/2" and r["verdict_noise"] == "evaluation windows + seeds" for r in rows.values())
    # the claim is a lower loss: -0.2 holds, +0.2 is against, 0 with seed noise is inconclusive
    assert rows["field_tiny_variable_width"]["verdict"] == "holds"
    assert rows["field_tiny_head_schedule"]["verdict"] == "against"
    assert rows["field_tiny_looped"]["verdict"] == "inconclusive"
    looped = rows["field_tiny_looped"]
    assert looped["shape"] == "looped blocks" and looped["loops"] == 2
    assert looped["params_rel"] == 0.0 and looped["flops_rel"] > 0.5  # stored parameters matched, FLOPs not
    assert rows["field_tiny_head_schedule"]["params_rel"] == 0.0 and rows["field_tiny_head_schedule"]["flops_rel"] == 0.0


def test_field_table_is_pending_without_results(plan, tmp_path):
    rows = field_table(Context(plan, tmp_path, tmp_path / "work")).rows
    assert len(rows) == 3 and {r["status"] for r in rows} == {"pending"} and not any(r.get("verdict") for r in rows)


def test_depth_table_lists_every_measured_seed_and_the_pending_one(measured):
    rows = depth_table(measured).rows
    by_run = {}
    for r in rows:
        by_run.setdefault(r["run"], []).append(r)
    assert set(by_run) == {i for run in SHIFTS for i in measured.plan.instances(run)}
    assert [r["status"] for r in by_run["field_tiny_head_schedule_s1"]] == ["pending"]
    looped = by_run["field_tiny_looped_s1"]
    assert [(r["depth"], r["layer"], r["round"]) for r in looped] == [(d + 1, d % 4 + 1, d // 4 + 1) for d in range(8)]
    # the skip columns stand on each stored layer's first round only
    assert [r.get("skip_delta") for r in looped] == pytest.approx([0.1, 0.2, 0.3, 0.4] + [None] * 4, nan_ok=True)
    first = by_run["field_tiny_uniform"][0]
    assert first["write_ratio"] is None and first["seed_of"] == "field_tiny_uniform" and first["tokens"] == 2048


def test_the_field_experiment_writes_its_two_tables_and_figures_and_the_default_does_not(plan, measured, tmp_path):
    names = {(a["name"], a["kind"]) for a in artifacts(plan)}
    for name in ("field_shapes", "depth_analyses"):
        assert {(name, "table"), (name, "figure")} <= names
    default = {a["name"] for a in artifacts(load_plan("configs/default.yaml"))}
    assert not default & {"field_shapes", "depth_analyses"}
    written = build_results(plan, tmp_path, tmp_path / "figs", tmp_path / "work",
                            only={"field_shapes", "depth_analyses"})
    assert {p.name for p in written} >= {"field_shapes.csv", "field_shapes.png", "depth_analyses.md",
                                         "depth_analyses.pdf"}
