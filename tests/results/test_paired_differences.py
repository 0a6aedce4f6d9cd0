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
    # one seed each: the evaluation-only interval is on the claimed side, the verdict is still capped
    assert row["eval_side"] == (I.HOLDS if row["claimed_sign"] == "-" else I.AGAINST)
    assert row["verdict"] == I.ONE_SEED and row["verdict_noise"] == "evaluation windows only (one seed)"
    assert row.get("d_loss_seeds_lo") is None
    assert rows[("lws_vanilla_12l", "lws_baseline_12l")]["status"] == "pending"
    assert rows[("lws_vanilla_12l", "lws_baseline_12l")].get("verdict") is None


def _iv(lo, hi):
    return I.Interval((lo + hi) / 2, lo, hi, 100)


def test_three_verdict_states_on_the_claimed_sign():
    assert _iv(-0.3, -0.1).side(-1) == I.HOLDS and _iv(-0.3, -0.1).side(+1) == I.AGAINST
    assert _iv(0.056, 0.068).side(-1) == I.AGAINST  # significantly against is not "crosses 0"
    assert _iv(-0.1, 0.1).side(-1) == I.INCONCLUSIVE == _iv(-0.1, 0.1).side(+1)
    # a seed-aware interval decides; an evaluation-only one never says holds (nor against)
    assert I.verdict(_iv(-0.3, -0.1), _iv(-0.3, -0.1), -1) == I.HOLDS
    assert I.verdict(_iv(-0.3, -0.1), _iv(-0.4, 0.05), -1) == I.INCONCLUSIVE
    assert I.verdict(_iv(0.1, 0.3), _iv(0.05, 0.4), -1) == I.AGAINST
    assert I.verdict(_iv(-0.3, -0.1), None, -1) == I.ONE_SEED
    assert I.verdict(_iv(0.1, 0.3), None, -1) == I.ONE_SEED
    assert I.verdict(None, None, -1) is None


def test_seed_aware_interval_covers_seed_to_seed_variation():
    evaluation = _iv(-0.012, -0.008)  # tight: evaluation windows only, on the claimed side
    # seeds that scatter by 0.02 around a 0.01 gap: the verdict's interval crosses 0
    arm, base = [3.00, 3.02, 2.98], [3.01, 3.03, 2.99]
    seeded = I.seed_aware_interval(evaluation, arm, base)
    assert seeded.n == 6 and seeded.lo < evaluation.lo and seeded.hi > evaluation.hi
    sd = np.sqrt(np.var(arm, ddof=1) / 3 + np.var(base, ddof=1) / 3)
    half = np.sqrt((I.t975(4) * sd) ** 2 + 0.002 ** 2)  # Welch df = 4 for equal variances and n
    assert seeded.hi - evaluation.estimate == pytest.approx(half)
    assert seeded.side(-1) == I.INCONCLUSIVE and evaluation.side(-1) == I.HOLDS
    # seeds that agree: the seed-aware interval stays on the claimed side
    assert I.seed_aware_interval(evaluation, [3.000, 3.001], [3.010, 3.011]).side(-1) == I.HOLDS
    # fewer than two finished (finite) seeds on either side: no seed-aware interval
    assert I.seed_aware_interval(evaluation, [3.0], [3.0, 3.1]) is None
    assert I.seed_aware_interval(evaluation, [3.0, float("nan")], [3.0, 3.1]) is None
    assert I.t975(1) == 12.706 and I.t975(4.7) == 2.776 and I.t975(1000) == 1.96


def test_paired_figure_has_a_legend_for_every_state(monkeypatch, tmp_path):
    """Every state drawn gets its own colour and a legend entry; significantly against (one seed)
    is not drawn like an interval that crosses 0."""
    import matplotlib

    matplotlib.use("Agg")
    from shapelm.results.plain import PlainTable

    def row(arm, lo, hi, verdict, seeds=None):
        sign = -1
        ev = _iv(lo, hi)
        r = {"arm": arm, "base": "conv", "claimed_sign": "-", "d_loss": ev.estimate, "d_loss_lo": lo,
             "d_loss_hi": hi, "eval_side": ev.side(sign), "verdict": verdict}
        if seeds:
            r.update(d_loss_seeds_lo=seeds[0], d_loss_seeds_hi=seeds[1])
        return r

    rows = [row("a_holds", -0.05, -0.03, I.HOLDS, (-0.06, -0.02)),
            row("a_incon", -0.05, -0.03, I.INCONCLUSIVE, (-0.08, 0.01)),
            row("a_against", 0.03, 0.05, I.AGAINST, (0.01, 0.07)),
            row("one_claimed", -0.05, -0.03, I.ONE_SEED), row("one_cross", -0.01, 0.01, I.ONE_SEED),
            row("one_against", 0.056, 0.068, I.ONE_SEED)]
    monkeypatch.setattr(I, "paired_table", lambda ctx: PlainTable("paired_differences", "", I.COLUMNS, rows, []))
    fig = I.paired_figure(None)
    fig.savefig(tmp_path / "paired.png", dpi=80)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == 6 and all(any(s in t for t in labels) for s in (I.HOLDS, I.INCONCLUSIVE, I.AGAINST))
    styles = {I._verdict_style(r)[:2] for r in rows}
    assert len(styles) == 6  # six distinct (colour, fill) pairs
    assert I._verdict_style(rows[5])[0] != I._verdict_style(rows[4])[0]
