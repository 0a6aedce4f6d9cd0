"""The equal-budget table (shapelm.results.equal_budget): configs/paper.yaml's five shapes per
scale are matched in parameters and FLOPs/token within 1%, and measured rows get intervals."""

import json

import numpy as np

from shapelm.plan.build import load_plan
from shapelm.results.context import Context
from shapelm.results.equal_budget import RUNS, SHAPES, equal_budget_rows


def test_paper_config_matches_every_shape_within_one_percent(tmp_path):
    rows = equal_budget_rows(Context(load_plan("configs/paper.yaml"), tmp_path, tmp_path))
    assert len(rows) == len(RUNS) * len(SHAPES)
    for r in rows:
        assert r["matched"] is True, r
        assert abs(r["params_rel"]) <= 0.01 and abs(r["flops_rel"]) <= 0.01
    # the shapes really differ (not five copies of the conventional run)
    assert len({(r["params"], r["flops_per_token"]) for r in rows}) >= 8


def test_tiny_default_measures_the_pair_it_has(tmp_path):
    plan = load_plan("configs/default.yaml")
    rng = np.random.default_rng(0)
    d = rng.normal(6.0, 0.3, 64)
    for run, shift in (("tp760m_uniform", 0.0), ("tp760m_cosine_1p5_0p5", 0.03)):
        path = tmp_path / "runs" / run / "ppl.json"
        path.parent.mkdir(parents=True)
        sets = {"default_web": {"loss": float(d.mean() + shift), "ppl": 1.0,
                                "instance_losses": list(d + shift), "instance_tokens": [255] * 64}}
        loss = float(d.mean() + shift)
        path.write_text(json.dumps({"sets": sets, "aggregate": {"val_loss": loss, "val_ppl": 1.0,
                                                                 "exp_mean_loss": float(np.exp(loss))}}))
    rows = {r["run"]: r for r in equal_budget_rows(Context(plan, tmp_path, tmp_path))}
    assert abs(rows["tp760m_cosine_1p5_0p5"]["d_loss"] - 0.03) < 1e-9
    assert rows["tp760m_cosine_1p5_0p5"]["d_loss_lo"] <= 0.03 <= rows["tp760m_cosine_1p5_0p5"]["d_loss_hi"]
    assert rows["eb760m_hourglass"]["status"] == "not in this config"
