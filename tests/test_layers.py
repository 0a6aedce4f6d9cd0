"""The import structure of src/shapelm: at most two import cycles, each of two modules
(benchmarks/import_graph.py measures them; `lint-imports` checks the layers in `make test`)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_cycles_are_few_and_narrow():
    pytest.importorskip("grimp")
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "benchmarks" / "import_graph.py")
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    cycles = graph.cycles()
    assert len(cycles) <= 2 and all(len(c) == 2 for c in cycles), cycles
