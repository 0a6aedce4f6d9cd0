"""Joint budget solver against brute force on small grids (shapelm.shapes.solver_pareto)."""

import itertools
import json
import subprocess
import sys

import pytest

from shapelm.errors import ConfigError
from shapelm.shapes.solver_pareto import latency_model, measure, pareto, solve_joint

GRID = {"d_model": [128, 192, 256], "n_layers": [2, 4], "d_h_ratio": [1.0, 2.0, 4.0], "n_heads": [4],
        "vocab_size": [512]}
TARGETS = {"params": 2.0e6, "flops_per_token": 1.5e7, "kv_bytes": 4.0e6, "latency_ms": 1e-3}


def _brute(targets, kinds, mixers):
    """Every shape, its distances, and the non-dominated ones by the definition (O(n^2))."""
    lat = latency_model(None)
    shapes = []
    for kind, mixer, dm, nl, r in itertools.product(kinds, mixers, GRID["d_model"], GRID["n_layers"],
                                                    GRID["d_h_ratio"]):
        arch = {"kind": kind, "d_model": dm, "n_layers": nl, "n_heads": 4, "vocab_size": 512,
                "d_h": max(32, round(r * dm / 32) * 32)}
        if mixer != "attention":
            arch["mixer"] = mixer
        v = measure(arch, 256, 1024, lat)
        shapes.append((arch, tuple(abs(v[k] / t - 1) for k, t in targets.items())))
    front = [a for a, d in shapes
             if not any(all(x <= y for x, y in zip(e, d)) and any(x < y for x, y in zip(e, d)) for _, e in shapes)]
    return shapes, front


@pytest.mark.parametrize("names", [("params", "flops_per_token"), tuple(TARGETS)])
def test_pareto_set_equals_brute_force(names):
    targets = {k: TARGETS[k] for k in names}
    kinds, mixers = ("conventional",), ("attention", "gated_attention")
    shapes, front = _brute(targets, kinds, mixers)
    got, lat, n = solve_joint(targets, GRID, kinds=kinds, mixers=mixers, seq_len=256, context=1024)
    assert n == len(shapes) and "analytic proxy" in lat.source
    key = lambda a: json.dumps(a, sort_keys=True)  # noqa: E731
    assert sorted(key(s.arch) for s in got) == sorted(key(a) for a in front)
    # the single-target optimum is always in the set, and the set is sorted by total distance
    for k in names:
        best = min(d[list(targets).index(k)] for _, d in shapes)
        assert any(s.distance[k] == pytest.approx(best) for s in got)
    totals = [sum(s.distance.values()) for s in got]
    assert totals == sorted(totals)


def test_pareto_of_points():
    pts = [(1, 3), (2, 2), (3, 1), (2, 3), (1, 3), (3, 3)]
    assert sorted(pareto(pts)) == [0, 1, 2, 4]  # ties both kept; (2,3) and (3,3) dominated


def test_measured_latency_from_a_decode_file():
    rows = [{"mixer": "mha", "n_layers": L, "kv_bytes": kv, "latency_ms_median": 0.5 + 0.1 * L + 2e-7 * kv}
            for L, kv in ((2, 1e6), (4, 1e6), (4, 4e6), (8, 2e6))]
    lat = latency_model(rows, "decode.json")
    assert lat.source.startswith("measured")
    assert lat(6, 0.0, 3e6) == pytest.approx(0.5 + 0.6 + 0.6)
    assert latency_model(rows[:2], "decode.json").source.startswith("analytic")


def test_bad_targets_are_one_clear_error():
    with pytest.raises(ConfigError, match="targets must be some of"):
        solve_joint({"speed": 1.0}, GRID)
    with pytest.raises(ConfigError, match="must be positive"):
        solve_joint({"params": 0.0}, GRID)


def test_cli_prints_the_pareto_set_and_the_latency_source():
    out = subprocess.run([sys.executable, "-m", "shapelm.cli", "solve", "--grid", "d_model=128,256",
                          "n_layers=2,4", "d_h_ratio=2", "--set", "n_heads=4", "vocab_size=512",
                          "--kind", "conventional", "--target", "1M", "--latency-target", "0.001",
                          "--context", "1024", "--seq-len", "256"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Pareto set of" in out.stdout and "latency: analytic proxy" in out.stdout
