"""`scaling_fits` says, per shape family, whether the plan's sizes can ever be fitted, are waiting for
runs, or are fitted, and shows the hourglass-vs-conventional crossing with its interval once both
families are measured (shapelm.results.scaling, module docstring "Contract of the table")."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from shapelm.plan.build import load_plan
from shapelm.results import scaling as S
from shapelm.results.context import Context

ROOT = Path(__file__).resolve().parents[2]

# Two known loss-vs-compute laws (E, A, alpha) that cross once, at C = 1e20 (the planned runs span
# 3e18 to 2e23): the hourglass family lower at small compute, the conventional's lower floor wins.
HOURGLASS = (1.95, 1e3, 0.2)
CONVENTIONAL = (1.85, 2e3, 0.2)


def _law(e_a_alpha, compute):
    e, a, alpha = e_a_alpha
    return e + a / compute ** alpha


@pytest.fixture(scope="module")
def paper_plan():
    return load_plan(ROOT / "configs" / "paper.yaml")


def _ctx(plan, tmp_path, losses: dict[str, float]) -> Context:
    ctx = Context(plan, tmp_path / "results", tmp_path / "work")
    ctx.ppl = lambda run: SimpleNamespace(val_loss=losses[run]) if run in losses else None
    return ctx


def _rows(ctx) -> dict[tuple[str, str], dict]:
    return {(r["family"], r["law"]): r for r in S.scaling_table(ctx).rows}


def _synthetic(plan, families: dict[str, tuple], noise: float = 0.002) -> dict[str, float]:
    """Losses of every run of the families: each family's law at the run's compute, times a fixed
    draw of multiplicative noise (the scatter a bootstrap interval needs)."""
    planned = S.planned_families(SimpleNamespace(plan=plan, acc=lambda r: plan.accounting[r]))
    rng = np.random.default_rng(11)
    return {run: _law(law, plan.accounting[run]["total_compute"]) * float(np.exp(rng.normal(0, noise)))
            for fam, law in families.items() for run in planned[fam].runs}


def test_paper_plan_before_any_run_says_which_families_can_ever_be_fitted(paper_plan, tmp_path):
    rows = _rows(_ctx(paper_plan, tmp_path, {}))
    # hourglass and conventional are planned at five sizes each (113M to 8B): L(C) waits for runs
    for fam in ("hg_hg", "hg_conv"):
        assert rows[(fam, "L(C)")]["planned_sizes"] == 5
        assert rows[(fam, "L(C)")]["status"] == "pending: 0 of 5 planned points measured (a fit needs 5)"
        assert rows[(fam, "L(N, D)")]["status"].startswith("cannot be fitted: the plan has only 5 sizes")
    assert rows[("hg_hg vs hg_conv", "crossing of L(C)")]["status"].startswith("pending: hg_hg, 0 of 5")
    # Tapered's families have three sizes or two: never enough for L(C), whatever finishes
    assert rows[("tp_uniform", "L(C)")]["status"] == ("cannot be fitted: the plan has only 3 sizes, "
                                                      "a fit of L(C) needs 5")
    assert rows[("tp_cosine_1p5_0p5 vs tp_uniform", "crossing of L(C)")]["status"].startswith("cannot be fitted")
    # a family planned at one size has one row, and it says why
    assert rows[("hg_hg_k5", "any")]["status"] == "cannot be fitted: the plan has only 1 size, a fit of L(C) needs 5"
    families = {r["family"] for r in S.scaling_table(_ctx(paper_plan, tmp_path, {})).rows
                if r["law"] != "crossing of L(C)"}
    assert families == set(S.planned_families(_ctx(paper_plan, tmp_path, {})))


def test_measured_points_do_not_make_a_too_small_plan_fittable(paper_plan, tmp_path):
    losses = {**_synthetic(paper_plan, {"tp_uniform": HOURGLASS}), "hg113m_hg_k5": 3.4}
    rows = _rows(_ctx(paper_plan, tmp_path, losses))
    assert rows[("tp_uniform", "L(C)")]["points"] == 3
    assert rows[("tp_uniform", "L(C)")]["status"].startswith("cannot be fitted: the plan has only 3 sizes")
    assert rows[("hg_hg_k5", "any")]["points"] == 1
    assert rows[("hg_hg_k5", "any")]["status"].startswith("cannot be fitted: the plan has only 1 size")


def test_partly_measured_family_is_pending_with_its_counts(paper_plan, tmp_path):
    losses = _synthetic(paper_plan, {"hg_hg": HOURGLASS})
    del losses["hg113m_hg"], losses["hg8b_hg"]
    rows = _rows(_ctx(paper_plan, tmp_path, losses))
    assert rows[("hg_hg", "L(C)")]["status"] == "pending: 3 of 5 planned points measured (a fit needs 5)"
    assert "E" not in rows[("hg_hg", "L(C)")]


def test_measured_families_are_fitted_and_their_crossing_has_an_interval(paper_plan, tmp_path):
    losses = _synthetic(paper_plan, {"hg_hg": HOURGLASS, "hg_conv": CONVENTIONAL})
    rows = _rows(_ctx(paper_plan, tmp_path, losses))
    for fam, (e, _, _) in (("hg_hg", HOURGLASS), ("hg_conv", CONVENTIONAL)):
        row = rows[(fam, "L(C)")]
        assert row["status"] == "fitted" and row["points"] == 5
        assert row["E_lo"] <= row["E"] <= row["E_hi"] and row["E"] == pytest.approx(e, rel=0.1)
    cross = rows[("hg_hg vs hg_conv", "crossing of L(C)")]
    exact = S.crossing(S.PowerLawFit(("C",), HOURGLASS[0], (HOURGLASS[1],), (HOURGLASS[2],), 5, 0.0),
                       S.PowerLawFit(("C",), CONVENTIONAL[0], (CONVENTIONAL[1],), (CONVENTIONAL[2],), 5, 0.0),
                       1e10, 1e30)
    assert cross["status"] == "crosses"
    assert exact == pytest.approx(1e20, rel=0.01)
    assert cross["cross_C"] == pytest.approx(exact, rel=0.5)  # five noisy points per family
    assert cross["cross_C_lo"] <= cross["cross_C"] <= cross["cross_C_hi"]


def test_figure_draws_the_crossing_and_names_unfittable_families(paper_plan, tmp_path):
    import matplotlib.pyplot as plt

    fig = S.scaling_figure(_ctx(paper_plan, tmp_path, {}))
    text = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "tp_uniform: cannot be fitted" in text and "hg_hg: pending: 0 of 5" in text
    plt.close(fig)
    losses = _synthetic(paper_plan, {"hg_hg": HOURGLASS, "hg_conv": CONVENTIONAL})
    fig = S.scaling_figure(_ctx(paper_plan, tmp_path, losses))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any("fits cross at C" in label for label in labels)
    assert any(label.startswith("crossing 95% interval") for label in labels)
    plt.close(fig)


def test_collinear_planned_parameters_and_tokens_cannot_fit_the_two_variable_law():
    sizes = tuple((n, 20 * n) for n in np.logspace(8, 10, 7))  # 20 tokens per parameter: D follows N
    family = S.PlannedFamily("x", tuple(f"r{i}" for i in range(7)), sizes)
    assert family.status("L(N, D)", 7).startswith("cannot be fitted: the planned parameters and tokens vary")
    tokens = (1e10, 3e9, 2e10, 5e9, 1.5e10, 8e9, 4e9)  # varied independently of the parameters
    free = S.PlannedFamily("x", family.runs, tuple((n, d) for (n, _), d in zip(sizes, tokens)))
    assert free.status("L(N, D)", 6) == "pending: 6 of 7 planned points measured (a fit needs 7)"
    assert free.status("L(N, D)", 7) is None
