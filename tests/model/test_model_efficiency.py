"""Memory/speed features of the model that must not change the math: activation checkpointing,
device-resident RoPE tables, compiled blocks grouped by shape."""

import pytest
import torch
from model_helpers import tiny_arch

from shapelm.model import build_model
from shapelm.model.builders import build_model_config
from shapelm.model.transformer import RECOMPUTE_MODES

HOURGLASS = tiny_arch(kind="hourglass", d_model=48, k=3, d_h=16, d_attn=32)


def _grads(arch: dict, mode: str, reordered: bool = False):
    torch.manual_seed(0)
    cfg = build_model_config({**arch, **({"norm_placement": "reordered"} if reordered else {})})
    model = build_model(cfg)
    model.set_recompute(mode)
    x = torch.randint(0, 97, (2, 13), generator=torch.Generator().manual_seed(1))
    out = model(x, x.roll(-1, 1), z_loss_multiplier=1e-4, return_logits=False, loss_chunk_tokens=8)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("reordered", [False, True])
@pytest.mark.parametrize("mode", [m for m in RECOMPUTE_MODES if m != "none"])
def test_recompute_gives_the_same_loss_and_gradients(mode, reordered):
    ref_loss, ref = _grads(HOURGLASS, "none", reordered)
    loss, grads = _grads(HOURGLASS, mode, reordered)
    assert torch.equal(loss, ref_loss)
    for name, g in ref.items():
        torch.testing.assert_close(grads[name], g, rtol=0, atol=1e-7, msg=name)


def _saved_bytes(mode: str) -> int:
    cfg = build_model_config(HOURGLASS)
    model = build_model(cfg)
    model.set_recompute(mode)
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    x = torch.randint(0, 97, (2, 32))
    h = model.embed_tokens(x).detach().requires_grad_()
    cos, sin = model._cos_sin(model.layers[0].attn.shape.head_dim, torch.arange(32), h.dtype)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.layers[0](h, cos, sin)
    return total


def test_recompute_saves_less():
    none, selective, ffn, full = (_saved_bytes(m) for m in RECOMPUTE_MODES)
    assert full < ffn < selective < none


def test_unknown_recompute_mode_is_refused():
    model = build_model(build_model_config(tiny_arch()))
    with pytest.raises(ValueError, match="activation checkpointing"):
        model.set_recompute("some")


def test_rope_inverse_frequencies_are_cached_per_device():
    model = build_model(build_model_config(tiny_arch()))
    x = torch.randint(0, 97, (1, 9))
    model(x)
    model(x)
    assert list(model._rope) == [(8, torch.device("cpu"))]


def test_compiling_a_model_of_many_layer_shapes_compiles_every_layer():
    """10 distinct shapes > dynamo's default recompile limit of 8: none may fall back to eager."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from shapelm.model.compile import compile_blocks

    layers = [{"n_heads": 2, "head_dim": 8, "ffn": [16 + 8 * i]} for i in range(10)]
    cfg = build_model_config({"kind": "explicit", "d_model": 16, "vocab_size": 97, "layers": layers})
    model = build_model(cfg)
    x = torch.randint(0, 97, (1, 8))
    with torch.no_grad():
        expected = model(x).logits
    torch._dynamo.reset()
    counters.clear()
    assert compile_blocks(model, backend="eager") == 10
    with torch.no_grad():
        got = model(x).logits
    assert counters["stats"]["unique_graphs"] == 10
    assert not any("recompile_limit" in k or "cache_size" in k for k in counters["unimplemented"])
    torch.testing.assert_close(got, expected)
    torch._dynamo.reset()


def test_fp8_converts_the_block_linears_and_is_refused_off_cuda():
    pytest.importorskip("torchao.float8")
    from shapelm.config import TrainRecipe
    from shapelm.errors import ConfigError
    from shapelm.train.distributed import DistEnv
    from shapelm.train.parallel import build_parallel, convert_to_fp8, fp8_linear_layers

    model = build_model(build_model_config(tiny_arch(kind="hourglass", d_model=32, k=2, d_h=16)), "meta")
    # per layer: q, k, v, o and 3 per sub-MLP; the LM head stays bf16
    assert fp8_linear_layers(model) == 2 * (4 + 2 * 3)
    assert type(model.lm_head).__name__ == "Linear"
    assert type(model.layers[0].mlps[1].down_proj).__name__ == "Float8Linear"
    with pytest.raises(ConfigError, match="fp8.*CUDA"):
        convert_to_fp8(model, torch.device("cpu"))
    recipe = TrainRecipe.from_dict({"batch_tokens": 32, "seq_len": 16, "total_tokens": 64, "fp8": True})
    cfg = build_model_config(tiny_arch())
    with pytest.raises(ConfigError, match="train.fp8"):
        build_parallel(cfg, recipe, DistEnv(), None, None)
