"""configs/one-gpu.yaml builds its results as configs/paper.yaml's analytic build does (no per-run
results: every artifact written, accounting cells decided, metric cells pending)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shapelm.plan.build import load_plan
from shapelm.results import artifacts, build_results
from shapelm.results.figures.lws import TOKEN_UNITS, _token_unit, _tokens_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    plan = load_plan(ROOT / "configs" / "one-gpu.yaml")
    base = tmp_path_factory.mktemp("one_gpu")
    return plan, base, build_results(plan, base / "results", base / "figs", base / "work")


def test_one_gpu_builds_every_artifact(built):
    plan, base, paths = built
    listed = artifacts(plan, base / "results", base / "figs")
    assert sorted(str(p) for p in paths) == sorted(a["path"] for a in listed)
    for a in listed:
        assert Path(a["path"]).stat().st_size > 0, a["path"]
    # a figure of a table none of whose runs this experiment has is drawn too (it stopped the build)
    assert (base / "figs" / "lws_fig5_val_ppl_variants.png").stat().st_size > 0


def test_token_unit_of_an_empty_figure():
    assert _token_unit(0) == TOKEN_UNITS[-1] and _tokens_text(0, 0) == "0"
    assert _token_unit(2.5e9)[2] == "B" and _token_unit(5e5)[2] == "K"
