"""configs/one-gpu.yaml: loads, plans under a day of one GPU per paper, and at the seeds it plans
each pair's seed-aware verdict detects the paper's printed difference with at least 80% power
(shapelm.results.power; docs/RESULTS.md)."""

import math

import pytest

from shapelm import reference as R
from shapelm.plan.experiment import load_experiment
from shapelm.plan.cost import cost_rows
from shapelm.results.power import TARGET_POWER, min_detectable, printed_seed_sigma, verdict_power

CONFIG = "configs/one-gpu.yaml"
# (table, arm, base, printed column): the pair each paper's set is there to show
PAIRS = [("hourglass_table1", "hg113m_hg_k8", "hg113m_conv", "val_loss"),
         ("tapered_table1", "tp440m_cosine_1p5_0p5", "tp440m_uniform", "val_ppl"),
         ("lws_table3", "lws_crown_18l", "lws_baseline_18l", "val_ppl")]


@pytest.fixture(scope="module")
def exp():
    return load_experiment(CONFIG)


def test_each_paper_trains_within_a_day_on_one_gpu(exp):
    rows = {r["table"]: r for r in cost_rows(exp)}
    for table, *_ in PAIRS:
        assert 0 < rows[table]["stages"]["pretraining"] < 24, (table, rows[table]["stages"])
    for scale in exp.raw["scales"].values():
        assert scale["resources"] == {"gpus": 1, "nodes": 1}


def test_printed_difference_detected_with_80_percent_power(exp):
    # Seed noise: LWS Table 3's printed std over five baseline runs, in log-PPL (= loss) units.
    sigma = printed_seed_sigma()
    assert 0.010 < sigma < 0.012
    for table, arm, base, col in PAIRS:
        a, b = (R.printed(table, r, col).value for r in (arm, base))
        delta = a - b if col == "val_loss" else math.log(a / b)
        n_arm, n_base = (len(exp.instances(r)) for r in (arm, base))
        assert verdict_power(delta, sigma, n_arm, n_base) >= TARGET_POWER, (arm, delta, n_arm, n_base)
    # the K=5 pair, printed -0.017, would not be: why the set trains the K=8 pair
    assert verdict_power(3.749 - 3.766, sigma, 5, 5) < TARGET_POWER


def test_verdict_power_is_the_verdicts():
    """No difference: the interval's 2.5% on one side; one seed an arm: no verdict can hold; a large
    difference: always; power grows with seeds."""
    assert verdict_power(-1e-12, 0.011, 5, 5) < 0.05
    assert verdict_power(-0.5, 0.011, 1, 5) == 0.0
    assert verdict_power(-0.5, 0.011, 2, 2) > 0.99
    assert verdict_power(-0.024, 0.011, 4, 4) < verdict_power(-0.024, 0.011, 5, 5) < verdict_power(-0.024, 0.011, 6, 6)
    assert 0.02 < min_detectable(0.011, 5, 5) < 0.025


def test_recipes_are_the_papers(exp):
    """Each scale trains with configs/paper.yaml's recipe (only the Tapered pair trains fewer
    tokens), and each paper's runs its own evaluation tasks: 113M at 524,288 tokens per step, LWS
    13,000 steps of 384 x 1,024 and no downstream tasks."""
    from shapelm.config import run_recipe

    paper = load_experiment("configs/paper.yaml")
    for run in ("hg113m_conv", "hg113m_hg_k8", "lws_baseline_18l", "lws_crown_18l"):
        assert exp.run(run)["train"] == paper.run(run)["train"], run
        assert exp.run(run)["eval"] == paper.run(run)["eval"], run
    assert run_recipe(exp.run("hg113m_conv")).batch_tokens == 524_288
    assert run_recipe(exp.run("lws_crown_18l")).total_steps == 13_000
    assert exp.run("lws_crown_18l")["eval"]["tasks"] == []
    tp, tp_paper = dict(exp.run("tp440m_uniform")["train"]), dict(paper.run("tp440m_uniform")["train"])
    assert {k for k in tp if tp[k] != tp_paper.get(k)} <= {"total_tokens", "eval_every"}
