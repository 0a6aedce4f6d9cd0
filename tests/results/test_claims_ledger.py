"""The claims ledger of derived_claims: holds / does not hold / pending from whatever runs exist.
The per-run results are fabricated (final in-distribution evaluations of chosen value)."""

from __future__ import annotations

import json
import math
from pathlib import Path


from shapelm.config import run_recipe
from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment
from shapelm.results.claims import AGAINST, FAILS, HOLDS, INCONCLUSIVE, derived_claims, verdict
from shapelm.results.context import Context

ROOT = Path(__file__).resolve().parents[2]
PAPER = load_experiment(ROOT / "configs" / "paper.yaml")


def _final_ppl(work: Path, run: str, ppl: float) -> None:
    """A run's final in-distribution evaluation (what Tapered Table 1 and LWS Table 3 read)."""
    steps = run_recipe(PAPER.run(run)).total_steps
    rec = {"kind": "val", "step": steps, "tokens": steps * PAPER.run(run)["train"]["batch_tokens"],
           "train_heldout": {"loss": math.log(ppl), "ppl": ppl}}
    (work / "runs" / run).mkdir(parents=True, exist_ok=True)
    (work / "runs" / run / "metrics.jsonl").write_text(json.dumps(rec) + "\n")


def _ledger(tmp_path: Path, ppls: dict[str, float]) -> dict:
    for run, v in ppls.items():
        _final_ppl(tmp_path / "w", run, v)
    return {c.id: c for c in derived_claims(Context(load_plan(PAPER), tmp_path / "r", tmp_path / "w"))}


def test_verdict_counts_what_is_measured():
    assert verdict("a", "", "", "", [None, None]).status == "pending"
    assert verdict("a", "", "", "", [True, None]).status == HOLDS
    assert verdict("a", "", "", "", [True, False]).status == FAILS
    seven = [True] * 7 + [False]
    assert verdict("a", "", "", "7/8", seven, need=7 / 8).status == HOLDS
    assert verdict("a", "", "", "7/8", seven[1:] + [False], need=7 / 8).status == FAILS
    c = verdict("a", "", "", "", [True, False, None])
    assert c.ours == 1 and "1 of 2 measured comparisons hold (3 in all)" in c.note


def test_verdict_has_three_states():
    """holds / inconclusive / against: a comparison inside its noise can neither make a claim hold
    nor, while the claim could still be reached with it, make it fail."""
    assert verdict("a", "", "", "", [True, INCONCLUSIVE]).status == INCONCLUSIVE
    assert verdict("a", "", "", "", [INCONCLUSIVE, None]).status == INCONCLUSIVE
    assert verdict("a", "", "", "", [False, INCONCLUSIVE]).status == AGAINST
    seven = [True] * 6 + [INCONCLUSIVE, False]
    assert verdict("a", "", "", "7/8", seven, need=7 / 8).status == INCONCLUSIVE
    assert verdict("a", "", "", "7/8", seven[:-2] + [False, False], need=7 / 8).status == AGAINST
    c = verdict("a", "", "", "", [True, INCONCLUSIVE, None])
    assert c.ours == 1 and "1 of 2 measured comparisons hold, 1 inconclusive (3 in all)" in c.note
    assert {HOLDS, INCONCLUSIVE, AGAINST} == {"holds", "inconclusive", "against"}


def test_paired_claims_follow_the_pairs_verdicts(monkeypatch, tmp_path):
    """A paper's paired-signs claim from paired_differences: one-seed pairs leave it inconclusive,
    a seed-aware interval against the claim makes it against."""
    from shapelm.results import claims as C
    from shapelm.results import intervals as I

    ctx = Context(load_plan(PAPER), tmp_path / "r", tmp_path / "w")
    verdicts = {}
    monkeypatch.setattr(I, "pairs", lambda ctx: [("hg113m_hg", "hg113m_conv"), ("hg403m_hg", "hg403m_conv")])
    monkeypatch.setattr(I, "pair_row", lambda ctx, a, b: {"paper": "Hourglass", "verdict": verdicts.get(a)})
    assert [c.status for c in C.paired_claims(ctx)] == ["pending"]
    verdicts.update(hg113m_hg=I.HOLDS, hg403m_hg=I.ONE_SEED)
    assert C.paired_claims(ctx)[0].status == INCONCLUSIVE
    verdicts.update(hg403m_hg=I.HOLDS)
    assert C.paired_claims(ctx)[0].status == HOLDS
    verdicts.update(hg403m_hg=I.AGAINST)
    assert C.paired_claims(ctx)[0].status == AGAINST


def test_tapered_schedule_order_and_u_shape(tmp_path):
    ratios = ["1p25_0p75", "1p375_0p625", "1p5_0p5", "1p625_0p375", "1p75_0p25"]
    u = [15.2, 14.8, 14.44, 14.9, 15.49]  # the paper's U over the cosine ratios
    ppls = {f"tp440m_cosine_{r}": v for r, v in zip(ratios, u)}
    ppls |= {f"tp440m_linear_{r}": v + 1.0 for r, v in zip(ratios, u)}
    ppls |= {f"tp440m_sigmoid_{r}": v + 2.0 for r, v in zip(ratios, u)}
    got = _ledger(tmp_path / "a", ppls)
    assert got["tapered_schedule_order"].status == HOLDS and got["tapered_schedule_order"].ours == 5
    assert got["tapered_cosine_u_shape"].status == HOLDS
    ppls["tp440m_sigmoid_1p5_0p5"] = 14.0  # sigmoid best at one ratio; the U's bottom moves
    ppls["tp440m_cosine_1p625_0p375"] = 14.0
    got = _ledger(tmp_path / "b", ppls)
    assert got["tapered_schedule_order"].status == FAILS and got["tapered_schedule_order"].ours == 4
    assert got["tapered_cosine_u_shape"].status == FAILS


def test_lws_claims(tmp_path):
    base = dict(zip(PAPER.instances("lws_baseline_18l"), [5.40, 5.35, 5.45, 5.38, 5.42]))
    variants = {"lws_vanilla_18l": 5.093, "lws_framed_18l": 5.205, "lws_reverse_18l": 5.087, "lws_crown_18l": 5.057}
    got = _ledger(tmp_path / "a", {**base, **variants, "lws_baseline_12l": 4.962, "lws_vanilla_12l": 4.984})
    assert got["lws_variants_beat_baseline18"].status == HOLDS
    assert got["lws_best_three_within_0p04"].status == HOLDS  # the paper's own 0.036
    assert got["lws_baseline12_best"].status == HOLDS
    # Each variant first reaches its baseline's final PPL at its own last step (or never): no 2x.
    assert got["lws_no_2x_data_efficiency"].status == HOLDS and got["lws_no_2x_data_efficiency"].ours == 2
    got = _ledger(tmp_path / "b", {**base, **variants, "lws_framed_18l": 5.5, "lws_reverse_18l": 5.2})
    assert got["lws_variants_beat_baseline18"].status == FAILS
    assert got["lws_variants_beat_baseline18"].ours == 3
    assert got["lws_best_three_within_0p04"].status == FAILS
    assert got["lws_baseline12_best"].status == "pending"


def test_without_runs_only_the_analytic_claims_are_decided(tmp_path):
    """Shapes and FLOPs need no run: Table 5's ratio-4 row is the cheapest, the hourglass trains
    with fewer FLOPs at every scale; every measured claim is pending."""
    got = {c.id: c for c in derived_claims(Context(load_plan(PAPER), tmp_path / "r", tmp_path / "w")) if c.kind == "verdict"}
    analytic = {"hourglass_table5_ratio4_cheapest", "hourglass_table2_fewer_flops"}
    assert len(got) == 19 + 14 and {got[c].status for c in analytic} == {HOLDS}  # 14 from ledger_more
    assert {c.status for i, c in got.items() if i not in analytic} == {"pending"}
    assert got["tapered_wikitext_7of8"].note == "none of 8 comparisons measured yet."


def test_lws_2x_data_efficiency_is_caught(tmp_path):
    """Vanilla 12L at its baseline's final PPL after a quarter of training: 2x holds, the claim not."""
    _ledger(tmp_path, {"lws_baseline_12l": 5.0, "lws_vanilla_12l": 4.9})
    metrics = tmp_path / "w" / "runs" / "lws_vanilla_12l" / "metrics.jsonl"
    steps = run_recipe(PAPER.run("lws_vanilla_12l")).total_steps
    early = {"kind": "val", "step": steps // 4, "tokens": steps // 4 * PAPER.run("lws_vanilla_12l")["train"]["batch_tokens"],
             "train_heldout": {"loss": math.log(4.99), "ppl": 4.99}}
    metrics.write_text(json.dumps(early) + "\n" + metrics.read_text())
    got = {c.id: c for c in derived_claims(Context(load_plan(PAPER), tmp_path / "r", tmp_path / "w"))}
    assert got["lws_no_2x_data_efficiency"].status == FAILS
