"""Which runs get a per-run analysis beyond evaluation: by table membership, as the novelty
figure's runs are chosen (a run lists the analysis' table in `tables:`).

    DEPTH_TABLE            the depth analyses' table and figure (residual-stream norms, skip losses)
    DEPTH_FILE             the record each chosen run writes beside ppl.json (records.DepthRecord)
    depth_runs(tables_of)  the runs, seed instances included, in config order

Pure data in and out: the rules, the plan and the results read it alike (the results may not
import the experiment loader, so nothing here does).
"""

from __future__ import annotations

from typing import Iterable, Mapping

DEPTH_TABLE = "depth_analyses"
DEPTH_FILE = "depth.json"


def depth_runs(tables_of: Mapping[str, Iterable[str]]) -> list[str]:
    """The runs (keys of `tables_of`: run -> the tables it lists) whose tables name DEPTH_TABLE.
    A seed instance lists its run's tables, so every seed of a chosen run is measured."""
    return [run for run, tables in tables_of.items() if DEPTH_TABLE in tables]
