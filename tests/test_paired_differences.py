"""Paired bootstrap differences on synthetic per-unit losses (shapelm.results.intervals)."""

import math

import numpy as np
import pytest

from shapelm.results import intervals as I


def _sets(rng, shift, n=300, k=2):
    base, arm = [], []
    for _ in range(k):
        difficulty = rng.normal(3.0, 0.5, n)  # shared by both arms: what pairing cancels
        tokens = np.full(n, 255.0)
        base.append((difficulty + rng.normal(0, 0.02, n), tokens))
        arm.append((difficulty + shift + rng.normal(0, 0.02, n), tokens))
    return arm, base


def test_paired_interval_covers_the_true_shift_at_about_95_percent():
    rng = np.random.default_rng(0)
    hits = 0
    for draw in range(40):
        arm, base = _sets(rng, -0.01)
        loss, ppl = I.paired_set_bootstrap(arm, base, n_boot=400, seed=draw)
        true = np.mean([np.average(a, weights=t) - np.average(b, weights=t) for (a, t), (b, _) in zip(arm, base)])
        assert loss.estimate == pytest.approx(true)
        hits += loss.lo <= -0.01 <= loss.hi
        assert ppl.lo <= ppl.estimate <= ppl.hi
    assert hits / 40 >= 0.85
    # pairing removes the shared difficulty: the interval is far narrower than unpaired noise (0.5/sqrt(n))
    assert loss.hi - loss.lo < 0.5 / math.sqrt(300)


def test_claimed_sign_holds_only_when_the_interval_excludes_zero():
    rng = np.random.default_rng(1)
    loss, _ = I.paired_set_bootstrap(*_sets(rng, -0.02), n_boot=500)
    assert loss.holds(-1) and not loss.holds(+1)
    loss, _ = I.paired_set_bootstrap(*_sets(rng, 0.0), n_boot=500)
    assert loss.lo < 0 < loss.hi and not loss.holds(-1)


def test_arms_on_different_units_are_refused():
    rng = np.random.default_rng(2)
    arm, base = _sets(rng, 0.0)
    arm[0] = (arm[0][0][:-1], arm[0][1][:-1])
    with pytest.raises(ValueError, match="same evaluation units"):
        I.paired_set_bootstrap(arm, base)


def test_item_accuracy_difference():
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2, 2000).astype(float)
    arm = np.where(rng.random(2000) < 0.1, 1.0, base)  # the arm fixes ~10% of items
    acc = I.paired_mean_bootstrap(arm, base, n_boot=500)
    assert acc.lo > 0 and acc.lo <= acc.estimate <= acc.hi and acc.n == 2000


def test_paired_table_reads_per_instance_losses_of_the_compared_runs(tmp_path):
    """End to end on the tiny config: the hourglass/conventional pair's ppl.json files -> a
    measured row whose interval excludes zero on the claimed side; a pair without files pending."""
    import json

    from shapelm.plan.build import load_plan
    from shapelm.results.context import Context

    plan = load_plan("configs/default.yaml")
    rng = np.random.default_rng(0)
    difficulty = {s: rng.normal(6.0, 0.4, 64) for s in ("default_web", "default_code")}
    for run, shift in (("hg906m_conv", 0.0), ("hg906m_hg", -0.05)):
        sets = {s: {"loss": float(d.mean() + shift), "ppl": float(np.exp(d.mean() + shift)),
                    "instance_losses": list(d + shift + rng.normal(0, 0.01, 64)), "instance_tokens": [255] * 64}
                for s, d in difficulty.items()}
        path = tmp_path / "runs" / run / "ppl.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"sets": sets, "aggregate": {"val_loss": 6.0 + shift, "val_ppl": 400.0,
                                                                 "exp_mean_loss": float(np.exp(6.0 + shift))}}))
    rows = {(r["arm"], r["base"]): r for r in I.paired_table(Context(plan, tmp_path, tmp_path / "work")).rows}
    row = rows[("hg906m_hg", "hg906m_conv")]
    assert row["status"] == "measured" and row["units"] == 128
    assert row["d_loss_lo"] < -0.05 < row["d_loss_hi"] < 0
    assert row["holds_95"] == (row["claimed_sign"] == "-")
    assert rows[("lws_vanilla_12l", "lws_baseline_12l")]["status"] == "pending"
