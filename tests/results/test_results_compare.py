"""`shapelm results compare A B`: per number both values, the relative difference and what it
is held to (exact under the same provenance, else seed noise or the quantity's tolerance); exit 1
when one is beyond it or on one side only; an error when nothing was compared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shapelm.cli import main
from shapelm.errors import ShapelmError
from shapelm.records import ProvenanceRecord
from shapelm.results.compare import compare, seed_noise, tolerance

def _tree(root: Path, loss: float, acc: str = "0.500") -> Path:
    (root / "runs" / "r").mkdir(parents=True)
    (root / "runs" / "r" / "ppl.json").write_text(json.dumps(
        {"sets": {"web": {"loss": loss, "n_tokens": 16320, "ppl": 2.718281828 ** loss}}}))
    (root / "tables").mkdir()
    (root / "tables" / "t.csv").write_text(f"run,acc,note\nr,{acc},text\n")
    return root


def test_tolerances_by_quantity():
    assert tolerance("n_tokens") == 0.0 and tolerance("loss") == 2e-3
    assert tolerance("val_ppl") == 2e-2 and tolerance("acc_norm") == 2e-2
    assert tolerance("mfu") == 1e-2


def test_timings_are_left_out(tmp_path):
    """A rerun's seconds, tokens/s and ms per token differ with the machine's load: not compared."""
    a, b = _tree(tmp_path / "a", 6.9496), _tree(tmp_path / "b", 6.9496)
    for root, seconds, speed in ((a, 5.1, 1200.0), (b, 9.7, 640.0)):
        data = json.loads((root / "runs" / "r" / "ppl.json").read_text())
        data.update(seconds=seconds, tokens_per_s=speed)
        (root / "runs" / "r" / "ppl.json").write_text(json.dumps(data))
        (root / "tables" / "speed.csv").write_text(f"run,ms_per_token,kv_bytes\nr,{seconds},4096\n")
    lines, failures = compare(a, b)
    assert failures == 0 and lines[-1] == "5 of 5 numbers reproduced exactly, 0 more within tolerance; 0 not", lines


def test_within_tolerance_passes_and_beyond_names_the_cell(tmp_path, capsys):
    a = _tree(tmp_path / "a", 6.9496)
    near = _tree(tmp_path / "near", 6.9451)  # the two machines: 6.5e-4 apart
    far = _tree(tmp_path / "far", 6.90, acc="0.550")
    assert compare(a, near)[1] == 0
    lines, failures = compare(a, far)
    assert failures == 3  # loss, ppl, acc; n_tokens equal and the note is no number
    assert ("runs/r/ppl.json:sets.web.loss: 6.9496 vs 6.9, relative difference 7.14e-03 > 2.0e-03 "
            "(fixed tolerance)") in lines
    assert any(line.startswith("tables/t.csv:r:acc: 0.5 vs 0.55") for line in lines)
    assert main(["results", "compare", str(a), str(far)]) == 1
    assert main(["results", "compare", str(a), str(near)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ("2 of 4 numbers reproduced exactly, 2 more "
                                                        "within tolerance; 0 not")


def test_a_number_on_one_side_only_fails(tmp_path):
    a = _tree(tmp_path / "a", 6.9)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "runs" / "r" / "ppl.json").write_text(json.dumps({"sets": {}}))
    lines, failures = compare(a, b)
    assert failures == 3 and "runs/r/ppl.json:sets.web.loss: only in " + str(a) in lines



def test_two_empty_trees_are_refused(tmp_path):
    """Nothing compared proves nothing: an error, not a pass."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(ShapelmError, match="no number to compare"):
        compare(tmp_path / "a", tmp_path / "b")
    assert main(["results", "compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2


def test_rows_sharing_a_label_do_not_overwrite_each_other(tmp_path):
    """Two rows labelled alike are two cells: a change in the first is not hidden by the second."""
    a, b = _tree(tmp_path / "a", 6.9), _tree(tmp_path / "b", 6.9)
    (a / "tables" / "dup.csv").write_text("label,ppl\nK=4,10.0\nK=4,20.0\n")
    (b / "tables" / "dup.csv").write_text("label,ppl\nK=4,15.0\nK=4,20.0\n")
    lines, failures = compare(a, b)
    assert failures == 1 and any(line.startswith("tables/dup.csv:K=4:ppl: 10 vs 15") for line in lines)


def _provenance(root: Path, run: str, init: str = "a" * 64) -> None:
    ProvenanceRecord(code={"source_sha256": "c" * 64, "commit": None}, data={"train_sha256": "d" * 64},
                     init_weights_sha256=init, environment={"torch": "2.13.0", "threads": 1},
                     first_losses=[7.6, 7.5], extra={"format": "shapelm-provenance-v1", "run": run}
                     ).write(root / "runs" / run / "provenance.json")


def test_same_provenance_demands_exact_numbers(tmp_path):
    """Runs with the same code, data, initial weights and numerics must agree bit for bit: a
    difference a float tolerance would pass is a failure."""
    a, b = _tree(tmp_path / "a", 6.9496), _tree(tmp_path / "b", 6.9495)
    for root in (a, b):
        _provenance(root, "r")
    lines, failures = compare(a, b)
    assert failures == 2 and "same provenance: must be exact" in lines[0], lines
    assert "provenance: all 1 runs the same" in lines[-2]


def test_other_provenance_names_the_first_difference_and_uses_seed_noise(tmp_path):
    a, b = _tree(tmp_path / "a", 6.9496), _tree(tmp_path / "b", 6.90)
    _provenance(a, "r", init="a" * 64)
    _provenance(b, "r", init="b" * 64)
    for root in (a, b):  # three seeds of a baseline, val_ppl 100, 104, 96: 4 % standard deviation
        for run, ppl in (("base", 100.0), ("base_s1", 104.0), ("base_s2", 96.0)):
            (root / "runs" / run).mkdir(parents=True, exist_ok=True)
            (root / "runs" / run / "ppl.json").write_text(json.dumps(
                {"sets": {}, "aggregate": {"val_loss": 4.6, "val_ppl": ppl}}))
    noise, where = seed_noise(b)
    assert noise["ppl"] == pytest.approx(0.04) and noise["loss"] == 0.0 and "base (3 seeds)" in where
    lines, failures = compare(a, b)
    assert any(line.startswith("provenance of r differs: initial weights") for line in lines), lines
    assert any("2 x seed noise (loss 0.00%, ppl 4.00%" in line for line in lines), lines
    # the 0.7 % loss change is beyond a zero seed noise of the loss; the 4.6 % PPL change within 8 %
    assert failures == 1 and lines[0].startswith("runs/r/ppl.json:sets.web.loss"), lines


def test_exact_holds_every_number_to_its_bits(tmp_path):
    """`--exact` (the reproduction check): a loss 1e-5 apart fails without any provenance."""
    a, b = _tree(tmp_path / "a", 6.94960), _tree(tmp_path / "b", 6.94961)
    assert compare(a, b)[1] == 0
    lines, failures = compare(a, b, exact=True)
    assert failures == 2 and "(--exact)" in lines[0]
    assert main(["results", "compare", "--exact", str(a), str(b)]) == 1


def test_claims_about_speed_and_tool_dates_are_left_out(tmp_path):
    """A derived claim measured in tokens/s (its row label says so) and lm-eval's `date` stamp
    change with the machine's load and the clock: neither is compared."""
    a, b = _tree(tmp_path / "a", 6.9), _tree(tmp_path / "b", 6.9)
    for root, speed, date in ((a, 0.356, 1765000000.5), (b, 0.41, 1765003600.25)):
        (root / "tables" / "claims.csv").write_text(
            f"id,ours_value\nlws_throughput_min,{speed}\nparam_match_tiny,0.0021\n")
        (root / "runs" / "r" / "downstream_lm_eval").mkdir()
        (root / "runs" / "r" / "downstream_lm_eval" / "results.json").write_text(json.dumps({"date": date}))
    lines, failures = compare(a, b)
    assert failures == 0 and lines[-1].startswith("5 of 5 numbers reproduced exactly"), lines
