"""The budget solver re-derives the paper's matched shapes from their targets."""

import pytest

from shapelm.accounting import param_counts
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config
from shapelm.solver import parse_count, solve


def test_rederives_906m_hourglass_from_the_conventional_budget():
    conv = build_model_config({"kind": "conventional", "d_model": 1536, "n_layers": 24,
                               "d_h": 6144, "n_heads": 16})
    target = param_counts(conv).non_embedding
    best = solve({"kind": "hourglass", "n_layers": 12, "k": 4, "d_attn": 1536, "n_heads": 16},
                 target, ratio=0.8)[0]
    assert (best.arch["d_model"], best.arch["d_h"]) == (2496, 2016)
    assert abs(best.rel_error) <= 0.005


def test_every_candidate_is_within_tolerance_and_on_the_grid():
    cands = solve({"kind": "hourglass", "n_layers": 18, "k": 4, "d_attn": 3072, "n_heads": 24},
                  parse_count("3171.2M"), ratio=0.8, multiple=48, d_h_multiple=16)
    assert cands
    for c in cands:
        assert abs(c.rel_error) <= 0.005
        assert c.arch["d_model"] % 48 == 0 and c.arch["d_h"] % 16 == 0


def test_fixed_d_model_solves_d_h_only():
    # Table 1: d_model 768, L 12, K 5 at the 113M conventional budget -> d_h near 614.
    conv = build_model_config({"kind": "conventional", "d_model": 768, "n_layers": 12, "d_h": 3072, "n_heads": 12})
    best = solve({"kind": "hourglass", "d_model": 768, "n_layers": 12, "k": 5, "n_heads": 12},
                 param_counts(conv).attention + param_counts(conv).ffn, count="matrices",
                 multiple=1, tolerance=0.001)[0]
    assert abs(best.arch["d_h"] - 614) <= 1


def test_parse_count_and_errors():
    assert parse_count("906.1M") == 906_100_000
    assert parse_count("3B") == 3_000_000_000
    assert parse_count("1,234") == 1234
    with pytest.raises(ConfigError, match="parameter count"):
        parse_count("lots")
    with pytest.raises(ConfigError, match="ratio"):
        solve({"kind": "hourglass", "n_layers": 2, "k": 2, "n_heads": 2}, 10_000)
    with pytest.raises(ConfigError, match="within"):
        solve({"kind": "hourglass", "n_layers": 2, "k": 2, "n_heads": 2, "d_model": 64}, 10**12,
              tolerance=1e-9, multiple=64)
