"""Run hashes and run directories of the shipped configs are pinned: a change that moves one
makes every run retrain (a new `config_hash`) or lose its outputs (a new directory), so it must
be deliberate. The pins are regenerated, after such a deliberate change, with

    .venv/bin/python tests/test_run_pins.py --write
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PINS = Path(__file__).with_name("pins") / "run_pins.json"
CONFIGS = ("configs/default.yaml", "configs/paper.yaml", "configs/field.yaml", "configs/field-paper.yaml")


def current_pins() -> dict[str, dict[str, dict[str, str]]]:
    """config file -> run -> its `config_hash` and its run directory, as the code computes them."""
    from shapelm.config import config_hash
    from shapelm.plan.experiment import load_experiment
    from shapelm.plan.paths import run_dir

    pins = {}
    for path in CONFIGS:
        exp = load_experiment(ROOT / path)
        pins[path] = {name: {"config_hash": config_hash(run), "hash": run["hash"],
                             "run_dir": run_dir(exp.name, name)}
                      for name, run in exp.runs.items()}
    return pins


@pytest.mark.parametrize("path", CONFIGS)
def test_run_hashes_and_directories_are_pinned(path):
    pinned = json.loads(PINS.read_text())[path]
    now = current_pins()[path]
    assert sorted(now) == sorted(pinned), "runs added or removed: regenerate the pins (module docstring)"
    moved = {name: (pinned[name], now[name]) for name in now if now[name] != pinned[name]}
    assert not moved, f"{len(moved)} run(s) moved (pinned, now): {moved}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.argv[0]} --write  (rewrites {PINS.name} from the current code)")
    PINS.write_text(json.dumps(current_pins(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
