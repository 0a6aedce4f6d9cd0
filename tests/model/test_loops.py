"""Looped blocks (arXiv 2607.13491), `arch.loops`: the stored layers applied several rounds;
parameters counted once, FLOPs and KV bytes unrolled."""

import pytest
import torch

from model_helpers import V, assert_cached_decode_matches, assert_remote_export_exact, ids, randomized, tiny_arch
from shapelm.shapes.accounting import flops_per_token, kv_cache_bytes_per_token, param_counts, shape_row
from shapelm.errors import ConfigError
from shapelm.model import ModelConfig
from shapelm.model.builders import build_model_config

LOOPED = tiny_arch(vocab_size=V, max_seq_len=128, loops=3)


def test_parameters_stored_once_flops_and_kv_unrolled():
    looped = build_model_config(LOOPED)
    stored = build_model_config(tiny_arch(vocab_size=V, max_seq_len=128))
    unrolled = build_model_config(tiny_arch(vocab_size=V, max_seq_len=128, n_layers=6))
    assert looped.n_layers == 2 and len(looped.unrolled_layers) == 6
    assert param_counts(looped) == param_counts(stored)
    assert randomized(looped).num_parameters() == param_counts(looped).total
    assert flops_per_token(looped, 64) == flops_per_token(unrolled, 64)
    assert kv_cache_bytes_per_token(looped) == kv_cache_bytes_per_token(unrolled) == 3 * kv_cache_bytes_per_token(stored)
    row = shape_row("looped", looped, 64, 256)
    assert row["loops"] == 3 and row["params_total"] == param_counts(stored).total


def test_forward_is_the_unrolled_stack_with_shared_weights():
    """The looped model equals a 6-layer model whose layers i and i + 2, i + 4 hold the same weights."""
    looped = randomized(build_model_config(LOOPED))
    unrolled = randomized(build_model_config(tiny_arch(vocab_size=V, max_seq_len=128, n_layers=6)))
    state = {k: v for k, v in looped.state_dict().items() if not k.startswith("layers.")}
    for key, value in looped.state_dict().items():
        if key.startswith("layers."):
            _, i, rest = key.split(".", 2)
            for r in range(3):
                state[f"layers.{int(i) + 2 * r}.{rest}"] = value
    unrolled.load_state_dict(state)
    x = ids(seq=16)
    with torch.no_grad():
        torch.testing.assert_close(looped(x).logits, unrolled(x).logits, rtol=0, atol=0)


def test_cached_decode_equals_full_forward():
    assert_cached_decode_matches(randomized(build_model_config(LOOPED)))


def test_hf_export_reloads_with_equal_logits(tmp_path):
    # remote code (a stock Llama runs its layers once), the same logits to the last bit
    assert_remote_export_exact(tmp_path, randomized(build_model_config(LOOPED)), "looped")


def test_fingerprint_of_unlooped_configs_is_unchanged():
    cfg = build_model_config(tiny_arch())
    assert "loops" not in cfg.to_dict()
    looped = build_model_config(LOOPED)
    assert ModelConfig.from_dict(looped.to_dict()).loops == 3 and looped.fingerprint() != cfg.fingerprint()


@pytest.mark.parametrize("loops", [0, -1, 1.5, True])
def test_loop_count_below_one_names_the_key(loops):
    with pytest.raises(ConfigError, match=r"arch\.loops must be an integer >= 1"):
        build_model_config({**LOOPED, "loops": loops})


def test_recurrent_state_layers_are_not_looped():
    with pytest.raises(ConfigError, match="loops"):
        build_model_config({**LOOPED, "mixer": "titans", "memory_chunk": 8, "window": 16})
