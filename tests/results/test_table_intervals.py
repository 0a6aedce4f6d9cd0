"""Paired bootstrap intervals beside the comparison tables' deltas (Hourglass Table 2, Tapered
Table 2, LWS Table 3), on fabricated ppl.json files of the tiny default config."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment as load
from shapelm.results.context import Context
from shapelm.results.render import to_csv, to_latex, to_markdown
from shapelm.results.tables import build_table

from results_fixtures import fabricate

SETS = ("default_web", "default_code")
N = 48


def write_ppl(path, shift: float, rng, per_instance: bool = True) -> None:
    """A ppl.json whose per-set losses and aggregates agree with its per-instance losses: every
    instance's loss is a shared difficulty (what pairing cancels) plus the run's shift and noise."""
    difficulty = np.random.default_rng(7).normal(5.0, 0.4, (len(SETS), N))
    sets = {}
    for name, d in zip(SETS, difficulty):
        losses = d + shift + rng.normal(0, 0.01, N)
        loss = float(losses.mean())  # equal token counts: the token-weighted mean
        sets[name] = {"loss": loss, "ppl": math.exp(loss), "n_instances": N, "n_tokens": 255 * N}
        if per_instance:
            sets[name].update(instance_losses=losses.tolist(), instance_tokens=[255] * N)
    loss = [s["loss"] for s in sets.values()]
    agg = {"val_loss": sum(loss) / len(loss), "val_ppl": sum(map(math.exp, loss)) / len(loss),
           "exp_mean_loss": math.exp(sum(loss) / len(loss)), "n_sets": len(loss)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"seq_len": 256, "sets": sets, "aggregate": agg}))


def write_downstream(folder, better: float, rng) -> None:
    """downstream.json and lm-eval per-item samples that agree: two accuracy tasks (one scored by
    acc_norm) and one CE task; the arm answers a `better` share more items right (and lower CE)."""
    truth = np.random.default_rng(11)
    items = {"task_a": (truth.random(300) < 0.5), "task_b": (truth.random(200) < 0.4)}
    metrics, details = {}, {}
    for task, right in items.items():
        got = (right | (rng.random(len(right)) < better)).astype(float)
        primary = "acc_norm" if task == "task_a" else "acc"
        write_samples(folder, task, [{"doc_id": i, "acc": 0.0, primary: v} for i, v in enumerate(got)])
        metrics[task] = float(got.mean())
        details[task] = {"primary": primary, "kind": "acc", "lm_eval_task": f"lm_{task}", "n": len(got)}
    ce = truth.normal(3.0, 0.5, 150) - 2 * better + rng.normal(0, 0.01, 150)
    write_samples(folder, "task_c", [{"doc_id": i, "ce_loss": v} for i, v in enumerate(ce.tolist())])
    metrics["task_c"] = float(ce.mean())
    details["task_c"] = {"primary": "ce_loss", "kind": "ce", "lm_eval_task": "lm_task_c", "n": 150}
    data = {"metrics": metrics, "Avg Acc": (metrics["task_a"] + metrics["task_b"]) / 2, "Avg PPL": metrics["task_c"],
            "acc_tasks": ["task_a", "task_b"], "ce_tasks": ["task_c"], "details": details}
    (folder / "downstream.json").write_text(json.dumps(data))


def write_samples(folder, task: str, records: list[dict]) -> None:
    path = folder / "downstream_lm_eval" / f"samples_lm_{task}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    exp = load("configs/default.yaml")
    base = tmp_path_factory.mktemp("intervals")
    results = base / "results"
    fabricate(exp, results, base / "work")  # every run; its ppl.json files have no per-instance losses
    rng = np.random.default_rng(0)
    shifts = {"hg906m_conv": 0.0, "hg906m_hg": -0.05, "tp760m_uniform": 0.0, "tp760m_cosine_1p5_0p5": 0.03,
              "lws_baseline_12l": 0.0, "lws_baseline_12l_s1": 0.02, "lws_baseline_12l_s2": -0.01,
              "lws_vanilla_12l": -0.04}
    for run, shift in shifts.items():
        write_ppl(results / "runs" / run / "ppl.json", shift, rng)
    for run, better in (("hg906m_conv", 0.0), ("hg906m_hg", 0.1)):
        write_downstream(results / "runs" / run, better, rng)
    return Context(load_plan(exp), results, base / "work")


def ours(table, row: str, col: str) -> float | None:
    return table.cell(row, col).ours


def test_hourglass_table2_interval_contains_the_printed_relative_change(ctx):
    t = build_table(ctx, "hourglass_table2")
    delta = ours(t, "hg906m_hg", "val_ppl_delta")
    lo, hi = ours(t, "hg906m_hg", "val_ppl_delta_lo95"), ours(t, "hg906m_hg", "val_ppl_delta_hi95")
    assert delta is not None and lo is not None and hi is not None
    assert lo <= delta <= hi and lo < hi
    # a 0.05 lower loss on instances with noise 0.01: the whole interval is an improvement of ~5%
    assert hi < 0 and lo > math.expm1(-0.08)
    # the base row has no change, so no interval
    assert ours(t, "hg906m_conv", "val_ppl_delta_lo95") is None


def test_hourglass_table2_downstream_changes_get_item_intervals(ctx):
    t = build_table(ctx, "hourglass_table2")
    for col, sign in (("avg_acc_delta", +1), ("avg_ppl_delta", -1)):
        delta, lo, hi = (ours(t, "hg906m_hg", col + s) for s in ("", "_lo95", "_hi95"))
        assert lo <= delta <= hi, col
        assert (lo > 0) if sign > 0 else (hi < 0), col  # a 10% item gain, a lower CE: outside zero


def test_samples_that_do_not_give_the_average_are_not_used(tmp_path):
    """An Avg Acc that the per-item samples do not reproduce (another metric, other items): no
    interval rather than one around another number."""
    exp = load("configs/default.yaml")
    rng = np.random.default_rng(1)
    for run, better in (("hg906m_conv", 0.0), ("hg906m_hg", 0.1)):
        write_downstream(tmp_path / "runs" / run, better, rng)
    path = tmp_path / "runs" / "hg906m_hg" / "downstream.json"
    data = json.loads(path.read_text())
    data["Avg Acc"] += 0.01
    path.write_text(json.dumps(data))
    t = build_table(Context(load_plan(exp), tmp_path, tmp_path / "work"), "hourglass_table2")
    cell = t.cell("hg906m_hg", "avg_acc_delta_lo95")
    assert cell.ours is None and cell.status == "n/a" and "per-item" in cell.ours_text
    assert t.cell("hg906m_hg", "avg_ppl_delta_lo95").ours is not None  # its samples still agree


def test_tapered_and_lws_deltas_and_intervals_from_per_instance_losses(ctx):
    t = build_table(ctx, "tapered_table2")
    d, lo, hi = (ours(t, "tp760m_cosine_1p5_0p5", f"val_ppl_heldout_delta{s}") for s in ("", "_lo95", "_hi95"))
    ppl = {r: ctx.ppl(r).val_ppl for r in ("tp760m_cosine_1p5_0p5", "tp760m_uniform")}
    assert d == pytest.approx(ppl["tp760m_cosine_1p5_0p5"] - ppl["tp760m_uniform"])
    assert 0 < lo <= d <= hi
    # the ga pair's ppl.json files have no per-instance losses: empty and said so, not invented
    cell = t.cell("tp760m_ga_cosine_1p5_0p5", "val_ppl_heldout_delta_lo95")
    assert cell.ours is None and cell.status == "n/a" and "per-instance" in cell.ours_text
    assert ours(t, "tp760m_ga_cosine_1p5_0p5", "val_ppl_heldout_delta") is None
    # the baseline has three seeds: its instance losses enter averaged over them
    t = build_table(ctx, "lws_table3")
    d, lo, hi = (ours(t, "lws_vanilla_12l", f"val_ppl_heldout_delta{s}") for s in ("", "_lo95", "_hi95"))
    assert lo <= d <= hi < 0
    assert ours(t, "lws_baseline_12l", "val_ppl_heldout_delta") is None


def test_interval_columns_render_in_csv_markdown_and_latex(ctx):
    t = build_table(ctx, "hourglass_table2")
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(to_csv(t)))}
    assert float(rows["hg906m_hg"]["val_ppl_delta_lo95_ours_value"]) < 0
    assert rows["hg906m_conv"]["val_ppl_delta_hi95_ours_value"] == ""
    md = to_markdown(t)
    assert "95% lo (paired bootstrap over evaluation windows only)" in md and "percentile bootstrap of the pair's change" in md
    assert "95\\% hi (paired bootstrap over evaluation windows only)" in to_latex(t)


def test_no_interval_before_the_runs_are_evaluated(tmp_path):
    exp = load("configs/default.yaml")
    t = build_table(Context(load_plan(exp), tmp_path / "results", tmp_path / "work"), "hourglass_table2")
    cell = t.cell("hg906m_hg", "val_ppl_delta_lo95")
    assert cell.ours is None and cell.status == "pending"


# ----------------------------------------------------------------------------- Figure 4's fit band


def test_fit_band_holds_the_line_and_widens_with_the_points_noise():
    from shapelm.results.intervals import log_compute_fit_band

    compute, acc, grid = [1e20, 1e21, 1e22], [0.50, 0.61, 0.70], np.linspace(19.9, 22.1, 12)
    b, a = np.polyfit(np.log10(compute), acc, 1)
    narrow = log_compute_fit_band(compute, acc, [0.005] * 3, grid, n_boot=500)
    wide = log_compute_fit_band(compute, acc, [0.03] * 3, grid, n_boot=500)
    assert narrow.slope.estimate == pytest.approx(b)
    assert narrow.slope.lo < b < narrow.slope.hi
    assert np.all(narrow.lo < a + b * grid) and np.all(a + b * grid < narrow.hi)
    assert np.all(wide.hi - wide.lo > 3 * (narrow.hi - narrow.lo))
    # no standard error for one point, or one compute only: no band
    assert log_compute_fit_band(compute, acc, [0.01, None, 0.01], grid) is None
    assert log_compute_fit_band([1e20, 1e20], acc[:2], [0.01] * 2, grid) is None


def test_figure4_shades_our_fit_only_where_the_points_have_errors(tmp_path):
    from matplotlib.collections import PolyCollection

    from results_fixtures import fake_downstream
    from shapelm.plan.experiment import load_experiment
    from shapelm.results.figures.hourglass import fig4_compute_fit

    exp = load_experiment("configs/paper.yaml")
    accs = {"hg906m_conv": .50, "hg3b_conv": .62, "hg8b_conv": .70, "hg906m_hg": .505, "hg3b_hg": .628, "hg8b_hg": .706}

    def bands(stderr):
        for run, acc in accs.items():
            d = fake_downstream(run, avg_acc=acc)
            if stderr:
                d["details"] = {t: {"primary": "acc", "acc": d["metrics"][t], "acc_stderr": stderr}
                                for t in d["acc_tasks"]}
            path = tmp_path / str(stderr) / "runs" / run / "downstream.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(d))
        fig = fig4_compute_fit(Context(load_plan(exp), tmp_path / str(stderr), tmp_path / "work"))
        ours = fig.axes[1]
        return ([c for c in ours.collections if isinstance(c, PolyCollection)],
                [line.get_label() for line in ours.get_lines()])

    shaded, labels = bands(0.015)
    assert len(shaded) == 2 and sum("/decade" in label for label in labels) == 2
    shaded, labels = bands(None)  # lm-eval run without standard errors: the fits alone
    assert not shaded and not any("/decade" in label for label in labels)
