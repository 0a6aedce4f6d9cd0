"""`shapelm shapes` over configs/paper.yaml reproduces the papers' parameter and FLOPs columns.

Every printed accounting cell is checked at its printed precision. The paper's own
inconsistencies are listed in KNOWN_MISMATCHES with the reason, and asserted to still mismatch
(so a fix to either side is noticed), never skipped.
"""

from pathlib import Path

import pytest

from shapelm import reference
from shapelm.shapes.accounting import flops_per_token, param_counts
from shapelm.config import run_recipe
from shapelm.model.config import run_model_config
from shapelm.plan.experiment import load_experiment

PAPER = load_experiment(Path(__file__).parents[2] / "configs" / "paper.yaml")

def _params(run, kind):
    p = param_counts(run_model_config(PAPER.run(run)))
    return {"attention": p.attention, "ffn": p.ffn, "non_embedding": p.non_embedding,
            "matrices": p.attention + p.ffn}[kind]


def _flops(run, table):
    cfg, recipe = run_model_config(PAPER.run(run)), run_recipe(PAPER.run(run))
    return flops_per_token(cfg, recipe.seq_len).train * recipe.batch_tokens


# (table, column) -> (our value for a run, scale dividing it before comparing with the print)
CHECKS = {
    ("hourglass_table1", "attn_params"): (lambda r, t: _params(r, "attention"), 1.0),
    ("hourglass_table1", "ffn_params"): (lambda r, t: _params(r, "ffn"), 1.0),
    ("hourglass_table1", "params_total"): (lambda r, t: _params(r, "matrices"), 1.0),
    ("hourglass_table2", "attn_params"): (lambda r, t: _params(r, "attention"), 1e6),
    ("hourglass_table2", "ffn_params"): (lambda r, t: _params(r, "ffn"), 1e6),
    ("hourglass_table2", "train_flops"): (_flops, 1.0),
    ("hourglass_table5", "flops"): (_flops, 1.0),
    ("hourglass_table8", "params"): (lambda r, t: _params(r, "non_embedding"), 1.0),
    ("hourglass_table8", "flops"): (_flops, 1.0),
    ("hourglass_table9", "ffn_params"): (lambda r, t: _params(r, "ffn"), 1.0),
    ("hourglass_table10", "model_size"): (lambda r, t: _params(r, "matrices"), 1.0),
    ("hourglass_table10", "attn_size"): (lambda r, t: _params(r, "attention"), 1.0),
    ("hourglass_table10", "ffn_size"): (lambda r, t: _params(r, "ffn"), 1.0),
    ("hourglass_table11", "model_size"): (lambda r, t: _params(r, "matrices"), 1.0),
    ("hourglass_table11", "attn_size"): (lambda r, t: _params(r, "attention"), 1.0),
    ("hourglass_table11", "ffn_size"): (lambda r, t: _params(r, "ffn"), 1.0),
}

# The paper's numbers that no consistent counting reproduces (docs/PAPER_NOTES.md).
KNOWN_MISMATCHES = {
    ("hourglass_table2", "attn_params", "hg906m_conv"):
        "bare matrices give 226.49M, printed 227; no one rule fits all six cells",
    ("hourglass_table2", "attn_params", "hg8b_conv"):
        "bare matrices give 2147.48M, printed 2148; no one rule fits all six cells",
}


def _cases():
    for (table, column), (fn, scale) in CHECKS.items():
        for row in reference.table(table):
            if column in row.get("values", {}) and row["run"] in PAPER.runs:
                yield pytest.param(table, column, row["run"], fn, scale, id=f"{table}-{column}-{row['run']}")


@pytest.mark.parametrize("table, column, run, fn, scale", list(_cases()))
def test_accounting_matches_printed_value(table, column, run, fn, scale):
    printed = reference.printed(table, run, column)
    ours = fn(run, table)
    known = KNOWN_MISMATCHES.get((table, column, run))
    if known:
        assert not printed.matches(ours, scale=scale), f"known mismatch now matches: {known}"
    else:
        assert printed.matches(ours, scale=scale), f"{table}.{column}[{run}]: ours {ours / scale:.6g} vs printed {printed.text}"


def test_every_accounting_cell_of_the_paper_is_checked():
    checked = {(t, r) for t, c, r, *_ in (p.values for p in _cases())}
    for (table, column) in CHECKS:
        for row in reference.table(table):
            if column in row.get("values", {}):
                assert row["run"] in PAPER.runs, f"{table} row {row['run']} has no run in configs/paper.yaml"
                assert (table, row["run"]) in checked


def test_kv_reductions_are_one_minus_layer_ratio():
    for conv, hg, printed in [("hg906m_conv", "hg906m_hg", 0.5), ("hg8b_conv", "hg8b_hg", 0.3125)]:
        from shapelm.shapes.accounting import kv_cache_bytes_per_token

        a = kv_cache_bytes_per_token(run_model_config(PAPER.run(conv)))
        b = kv_cache_bytes_per_token(run_model_config(PAPER.run(hg)))
        assert 1 - b / a == pytest.approx(printed)
    # The introduction's 3B figure 35.3% is not 1 - 18/28 = 35.7% (a paper inconsistency).
    a = run_model_config(PAPER.run("hg3b_conv")).n_layers
    b = run_model_config(PAPER.run("hg3b_hg")).n_layers
    assert round(100 * (1 - b / a), 1) == 35.7


def test_403m_recipe_is_the_one_table5_flops_imply():
    """Table 5's 403M FLOPs fit S = 2048 and 256 x 2048 tokens per step (PAPER_NOTES)."""
    for run in ("hg403m_conv", "hg113m_conv"):
        recipe = run_recipe(PAPER.run(run))
        assert (recipe.seq_len, recipe.batch_tokens) == (2048, 256 * 2048)


@pytest.mark.parametrize("run", ["hg403m_conv_r3", "hg403m_conv_r2", "hg403m_conv_r1p5"])
def test_table5_ffn_ratio_rows_change_flops_as_printed(run):
    """The relative FLOP changes depend on shape and S only; the printed ones are ratios of
    rounded FLOPs, so within 0.3 pp. Each row at its named ratio (1.5%) and parameter-matched
    to the standard 403M (0.5%)."""
    base = _flops("hg403m_conv", "hourglass_table5")
    printed = reference.printed("hourglass_table5", run, "flops_delta").value
    assert abs(_flops(run, "hourglass_table5") / base - 1 - printed) <= 0.003
    named = reference.printed("hourglass_table5", run, "ffn_ratio").value
    arch = PAPER.run(run)["arch"]
    assert arch["d_h"] / arch["d_model"] == pytest.approx(named, rel=0.015)
    assert _params(run, "non_embedding") == pytest.approx(_params("hg403m_conv", "non_embedding"), rel=0.005)


@pytest.mark.parametrize("scale", ["tp760m", "tp1300m"])
def test_tapered_table2_backbones_match_the_transformer_size(scale):
    """Tapered Table 2 compares four backbones at 760M and 1.3B: every backbone run (uniform
    and tapered) within 2% of the Transformer pair's total parameters."""
    base = param_counts(run_model_config(PAPER.run(f"{scale}_uniform"))).total
    runs = [r for r in PAPER.runs if r.startswith(f"{scale}_") and "tapered_table2" in PAPER.run(r)["tables"]]
    assert len(runs) == 8
    for run in runs:
        total = param_counts(run_model_config(PAPER.run(run))).total
        assert total == pytest.approx(base, rel=0.02), f"{run}: {total / 1e6:.1f}M vs {base / 1e6:.1f}M"
