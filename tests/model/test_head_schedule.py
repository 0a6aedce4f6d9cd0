"""Head schedules (Prism, arXiv 2606.27449), kind `head_schedule`: per-layer head counts at a
fixed attention width, parameter- and FLOP-neutral against the uniform model."""

import pytest

from model_helpers import V, assert_cached_decode_matches, assert_remote_export_exact, randomized
from shapelm.shapes.accounting import flops_per_token, kv_cache_bytes_per_token, param_counts
from shapelm.errors import ConfigError
from shapelm.model import build_model
from shapelm.model.builders import build_model_config

BASE = {"d_model": 64, "n_layers": 4, "d_h": 128, "vocab_size": V, "max_seq_len": 128}


def test_doubling_blocks_from_first_to_last():
    cfg = build_model_config({**BASE, "kind": "head_schedule", "n_layers": 12, "heads": [2, 8]})
    assert [layer.attention.n_heads for layer in cfg.layers] == [2] * 4 + [4] * 4 + [8] * 4
    assert {layer.attention.d_attn for layer in cfg.layers} == {64}


@pytest.mark.parametrize("seq_len", [64, 4096])
def test_parameter_and_flop_neutral_against_the_uniform_model(seq_len):
    """Mean head count 4 = the uniform model's 4 heads: same parameters, FLOPs and KV bytes, to the
    unit, at any sequence length; the built models hold the same number of weights."""
    sched = build_model_config({**BASE, "kind": "head_schedule", "heads": [2, 2, 4, 8]})
    uniform = build_model_config({**BASE, "kind": "conventional", "n_heads": 4})
    assert param_counts(sched) == param_counts(uniform)
    assert build_model(sched, "meta").num_parameters() == build_model(uniform, "meta").num_parameters()
    assert flops_per_token(sched, seq_len) == flops_per_token(uniform, seq_len)
    assert kv_cache_bytes_per_token(sched) == kv_cache_bytes_per_token(uniform)


def test_doubling_schedule_differs_only_in_the_softmax_term():
    """[2, 8] over 12 layers has mean 14/3 heads, not 4: parameters still equal; the FLOPs differ
    by exactly the softmax's 3 S per extra head."""
    sched = build_model_config({**BASE, "kind": "head_schedule", "n_layers": 12, "heads": [2, 8]})
    uniform = build_model_config({**BASE, "kind": "conventional", "n_layers": 12, "n_heads": 4})
    assert param_counts(sched) == param_counts(uniform)
    extra_heads = sum(layer.attention.n_heads for layer in sched.layers) - 12 * 4
    diff = flops_per_token(sched, 256).forward - flops_per_token(uniform, 256).forward
    assert diff == pytest.approx(3 * 256 * extra_heads)


def test_cached_decode_and_hf_export(tmp_path):
    model = randomized(build_model_config({**BASE, "kind": "head_schedule", "heads": [2, 2, 4, 8]}))
    assert_cached_decode_matches(model)
    assert_remote_export_exact(tmp_path, model, "heads")


@pytest.mark.parametrize("heads, message", [
    ([2, 6], "power of two"),
    ([3, 3, 3, 3], "even size"),  # 64 / 3: a width not divisible by the head count
    ([2, 4, 8], "one count per layer"),
    ([1, 64], "need at least as many layers"),
    ([0, 4], "head counts >= 1"),
])
def test_bad_head_schedule_names_the_key(heads, message):
    with pytest.raises(ConfigError, match=r"arch\.heads.*" + message):
        build_model_config({**BASE, "kind": "head_schedule", "heads": heads})
