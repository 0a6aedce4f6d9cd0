"""configs/one-gpu.yaml: loads, plans under a day of one GPU per paper, and each pair's printed
difference exceeds the seed-noise threshold at the seeds it plans (docs/RESULTS.md)."""

import math

import pytest

from shapelm import reference as R
from shapelm.plan.experiment import load_experiment
from shapelm.plan.cost import plan_rows

CONFIG = "configs/one-gpu.yaml"
# (table, arm, base, printed column): the pair each paper's set is there to show
PAIRS = [("hourglass_table1", "hg113m_hg_k5", "hg113m_conv", "val_loss"),
         ("tapered_table1", "tp440m_cosine_1p5_0p5", "tp440m_uniform", "val_ppl"),
         ("lws_table3", "lws_crown_18l", "lws_baseline_18l", "val_ppl")]


@pytest.fixture(scope="module")
def exp():
    return load_experiment(CONFIG)


def test_each_paper_trains_within_a_day_on_one_gpu(exp):
    rows = {r["table"]: r for r in plan_rows(exp)}
    for table, *_ in PAIRS:
        assert 0 < rows[table]["stages"]["pretraining"] < 24, (table, rows[table]["stages"])
    for scale in exp.raw["scales"].values():
        assert scale["resources"] == {"gpus": 1, "nodes": 1}


def test_printed_difference_exceeds_the_seed_noise_threshold(exp):
    # Seed noise: LWS Table 3's printed std over five baseline runs, in log-PPL (= loss) units.
    std = R.printed("lws_table3", "lws_baseline_18l", "val_ppl_std").value
    sigma = std / R.printed("lws_table3", "lws_baseline_18l", "val_ppl").value
    assert 0.005 < sigma < 0.02
    for table, arm, base, col in PAIRS:
        a, b = (R.printed(table, r, col).value for r in (arm, base))
        delta = a - b if col == "val_loss" else math.log(a / b)
        n_arm, n_base = (len(exp.instances(r)) for r in (arm, base))
        threshold = 1.96 * sigma * math.sqrt(1 / n_arm + 1 / n_base)
        assert abs(delta) > threshold, (arm, delta, threshold, n_arm, n_base)


def test_recipes_are_the_papers(exp):
    """Each scale trains with configs/paper.yaml's recipe (only the Tapered pair trains fewer
    tokens), and each paper's runs its own evaluation tasks: 113M at 524,288 tokens per step, LWS
    13,000 steps of 384 x 1,024 and no downstream tasks."""
    from shapelm.config import run_recipe

    paper = load_experiment("configs/paper.yaml")
    for run in ("hg113m_conv", "hg113m_hg_k5", "lws_baseline_18l", "lws_crown_18l"):
        assert exp.run(run)["train"] == paper.run(run)["train"], run
        assert exp.run(run)["eval"] == paper.run(run)["eval"], run
    assert run_recipe(exp.run("hg113m_conv")).batch_tokens == 524_288
    assert run_recipe(exp.run("lws_crown_18l")).total_steps == 13_000
    assert exp.run("lws_crown_18l")["eval"]["tasks"] == []
    tp, tp_paper = dict(exp.run("tp440m_uniform")["train"]), dict(paper.run("tp440m_uniform")["train"])
    assert {k for k in tp if tp[k] != tp_paper.get(k)} <= {"total_tokens", "eval_every"}
