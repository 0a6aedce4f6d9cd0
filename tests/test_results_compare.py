"""`shapelm results compare A B`: per number both values, the relative difference and the
quantity's tolerance; exit 1 when one is beyond it or on one side only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shapelm.cli import main
from shapelm.results.compare import compare, tolerance

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
    assert failures == 0 and lines[-1] == "5 of 5 numbers within tolerance; 0 not", lines


def test_within_tolerance_passes_and_beyond_names_the_cell(tmp_path, capsys):
    a = _tree(tmp_path / "a", 6.9496)
    near = _tree(tmp_path / "near", 6.9451)  # the two machines: 6.5e-4 apart
    far = _tree(tmp_path / "far", 6.90, acc="0.550")
    assert compare(a, near)[1] == 0
    lines, failures = compare(a, far)
    assert failures == 3  # loss, ppl, acc; n_tokens equal and the note is no number
    assert "runs/r/ppl.json:sets.web.loss: 6.9496 vs 6.9, relative difference 7.14e-03 > 2e-03" in lines
    assert any(line.startswith("tables/t.csv:r:acc: 0.5 vs 0.55") for line in lines)
    assert main(["results", "compare", str(a), str(far)]) == 1
    assert main(["results", "compare", str(a), str(near)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "4 of 4 numbers within tolerance; 0 not"


def test_a_number_on_one_side_only_fails(tmp_path):
    a = _tree(tmp_path / "a", 6.9)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "runs" / "r" / "ppl.json").write_text(json.dumps({"sets": {}}))
    lines, failures = compare(a, b)
    assert failures == 3 and "runs/r/ppl.json:sets.web.loss: only in " + str(a) in lines

