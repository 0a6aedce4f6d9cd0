"""YaRN parity: shapelm.model.rope.rope_inv_freq == transformers' _compute_yarn_parameters."""

import itertools
import math

import pytest
import torch

from shapelm.errors import ConfigError
from shapelm.longctx.yarn import apply_yarn, yarn_scaling
from shapelm.model.rope import rope_inv_freq

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import _compute_yarn_parameters  # noqa: E402

CASES = list(itertools.product([2, 4, 8, 16, 32], [2048, 4096], [10_000.0, 500_000.0], [32, 64, 96, 128]))


def hf_yarn(head_dim, theta, factor, original):
    cfg = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=int(original * factor),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": theta,
            "factor": float(factor),
            "original_max_position_embeddings": original,
        },
    )
    return _compute_yarn_parameters(cfg, "cpu")


@pytest.mark.parametrize("factor,original,theta,head_dim", CASES)
def test_yarn_matches_transformers(factor, original, theta, head_dim):
    ref, ref_attn = hf_yarn(head_dim, theta, factor, original)
    ours, attn = rope_inv_freq(head_dim, theta, yarn_scaling(factor, original))
    assert ours.shape == ref.shape == (head_dim // 2,)
    torch.testing.assert_close(ours, ref.to(ours.dtype), rtol=1e-6, atol=0)
    assert attn == pytest.approx(ref_attn, rel=1e-12)
    assert attn == pytest.approx(0.1 * math.log(factor) + 1.0)


def test_yarn_extremes_interpolate_and_extrapolate():
    # highest frequencies untouched, lowest divided by s
    base, _ = rope_inv_freq(128, 500_000.0)
    ours, _ = rope_inv_freq(128, 500_000.0, yarn_scaling(16, 4096))
    assert ours[0] == base[0]
    torch.testing.assert_close(ours[-1], base[-1] / 16)


def test_yarn_scaling_dict():
    assert yarn_scaling() == {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}
    assert yarn_scaling(None, 256, target_length=1024)["factor"] == 4.0
    with pytest.raises(ConfigError):
        yarn_scaling(0.5)


def test_apply_yarn_sets_config_and_changes_rope():
    from tiny_longctx import tiny_model

    m = tiny_model(max_seq_len=64)
    x = torch.randint(0, 600, (1, 20))
    before = m(x).logits
    apply_yarn(m, yarn_scaling(4, 64))
    assert m.config.rope_scaling["factor"] == 4.0 and m.config.max_seq_len == 256
    after = m(x).logits
    assert not torch.allclose(before, after)
