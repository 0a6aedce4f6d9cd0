"""Variable residual width (arXiv 2606.18246), kind `variable_width`: the paper's dense configs'
widths and parameter counts, the model, accounting, cached decode and the Hugging Face export."""

import pytest
import torch

from model_helpers import (
    V, assert_cached_decode_matches, assert_remote_export_exact, ids, prefill_then_step_logits, randomized,
)
from shapelm.shapes.accounting import (
    flops_per_token, kv_cache_bytes_per_token, output_layer_forward_flops, param_counts,
)
from shapelm.errors import ConfigError
from shapelm.model import ModelConfig, build_model
from shapelm.model.builders import build_model_config
from shapelm.model.variable_width import matched_params

TINY = {"kind": "variable_width", "d_model": 64, "n_layers": 4, "n_heads": 2, "max_layer": 3,
        "bottleneck": 0.5, "multiple": 8, "vocab_size": V, "max_seq_len": 128}

# The paper's dense configs (their configs/dense_*.yml): h, layers, turning layer; all 16 heads,
# bottleneck 0.3, symmetric, quantized to 32, cl100k vocabulary of 100,263 tokens, MLP 4 h_i.
VOCAB = 100_263
PAPER = {
    "200M": (640, 16, 12, [1152, 960, 832, 704, 608, 512, 448, 352, 320, 256, 224, 192, 288, 480, 736, 1152]),
    "500M": (960, 24, 18, [1760, 1600, 1440, 1280, 1152, 1024, 928, 832, 768, 672, 608, 544, 480, 448, 384,
                           352, 320, 288, 384, 544, 704, 960, 1312, 1760]),
    "1B": (1280, 32, 24, [2400, 2208, 2048, 1888, 1760, 1600, 1504, 1376, 1280, 1184, 1088, 992, 928, 864, 800,
                          736, 672, 608, 576, 544, 480, 448, 416, 384, 480, 608, 768, 960, 1216, 1504, 1920, 2400]),
    "2B": (1600, 40, 30, [3040, 2848, 2656, 2496, 2336, 2208, 2080, 1952, 1824, 1696, 1600, 1504, 1408, 1312,
                          1248, 1184, 1088, 1024, 960, 896, 864, 800, 736, 704, 672, 608, 576, 544, 512, 480,
                          576, 704, 832, 992, 1216, 1440, 1728, 2080, 2528, 3040]),
}


def paper_arch(h, n_layers, k):
    return {"kind": "variable_width", "d_model": h, "n_layers": n_layers, "n_heads": 16, "max_layer": k,
            "bottleneck": 0.3, "symmetric": True, "multiple": 32, "vocab_size": VOCAB}


def hand_matched_count(widths, h, vocab, input_at_h=True, output_at_h=True):
    """The paper's matched count, written out from its definition: the input embedding v h (v w_1
    when it sits at the first layer's width), the unembedding v h (v w_L), per layer 4 w^2
    attention + 3 * w * 4w SwiGLU, no norms, less, only where the embedding stays at h, the first
    layer's 3 (w_1 - h) w_1 Q/K/V columns that see only zero padding and the last layer's
    4 w_L (w_L - h) MLP outputs cut before the unembedding."""
    n = vocab * (h if input_at_h else widths[0]) + vocab * (h if output_at_h else widths[-1])
    for w in widths:
        n += 4 * w * w + 3 * w * (4 * w)
    n -= 3 * (widths[0] - h) * widths[0] if input_at_h and widths[0] > h else 0
    n -= 4 * widths[-1] * (widths[-1] - h) if output_at_h and widths[-1] > h else 0
    return n


def hand_held_count(widths, h, vocab, n_heads=16, input_at_h=True, output_at_h=True):
    """Every weight the built model holds: the input embedding at h (or w_1), per layer Q/K/V/O
    4 w^2, SwiGLU 12 w^2, two RMSNorms over w and the QK-norms (2 w), the final norm over w_L (the
    stream as the last layer leaves it, as their code's ln_f) and the unembedding at h (or w_L)."""
    e_in, e_out = (h if input_at_h else widths[0]), (h if output_at_h else widths[-1])
    return vocab * e_in + sum(16 * w * w + 4 * w for w in widths) + widths[-1] + vocab * e_out


#: (original_input_width, original_output_width): the paper's four placements of the embeddings
EMBEDDINGS = [(True, True), (True, False), (False, True), (False, False)]


def embeddings_arch(input_at_h, output_at_h):
    return {"original_input_width": input_at_h, "original_output_width": output_at_h}


@pytest.mark.parametrize("size", list(PAPER))
def test_paper_dense_configs_widths_and_parameter_counts(size):
    h, n_layers, k, widths = PAPER[size]
    cfg = build_model_config(paper_arch(h, n_layers, k))
    built = [cfg.width(i) for i in range(n_layers)]
    assert built == widths
    assert min(built) == round(0.3 * h / 32) * 32 and built.index(min(built)) == k - 1  # the turning layer
    assert built[0] == built[-1]  # symmetric
    assert all(layer.attention.d_attn == w and layer.ffn_widths == (4 * w,) for layer, w in zip(cfg.layers, built))
    baseline = hand_matched_count([h] * n_layers, h, VOCAB)
    # the matched accounting: within 0.5% of the uniform baseline of width h after quantization
    assert abs(hand_matched_count(built, h, VOCAB) / baseline - 1) < 0.005
    # the parameters held (shapelm's count, every weight incl. norms) equal the hand count and
    # exceed the uniform baseline's held parameters by 1-2%, as the issue reports for their code
    held = param_counts(cfg).total
    assert held == hand_held_count(built, h, VOCAB)
    uniform = param_counts(build_model_config({"kind": "conventional", "d_model": h, "n_layers": n_layers,
                                               "n_heads": 16, "d_h": 4 * h, "vocab_size": VOCAB})).total
    assert 1.0 < 100 * (held / uniform - 1) < 2.0


def test_built_model_holds_what_accounting_counts():
    cfg = build_model_config(TINY)
    assert [cfg.width(i) for i in range(4)] == [80, 48, 32, 80]  # wider than h, then narrower
    model = build_model(cfg)
    assert model.num_parameters() == param_counts(cfg).total == hand_held_count([80, 48, 32, 80], 64, V, 2)
    assert model.layers[1].mlps[0].gate_proj.weight.shape == (4 * 48, 48)
    assert model.lm_head.weight.shape == (V, 64) and model.embed_tokens.weight.shape == (V, 64)


@pytest.mark.parametrize("input_at_h, output_at_h", EMBEDDINGS)
def test_forward_resizes_by_zero_padding_and_truncation(input_at_h, output_at_h):
    """An independent forward: the layers run on the stream zero-padded / cut to their width, the
    final norm on the last layer's output, then cut to the unembedding; an embedding at the first
    (last) layer's width needs no resize at that end."""
    model = randomized(build_model_config({**TINY, **embeddings_arch(input_at_h, output_at_h)}))
    out = 64 if output_at_h else 80
    x = ids(seq=12)
    with torch.no_grad():
        h = model.embed_tokens(x)
        assert h.shape[-1] == (64 if input_at_h else 80)
        positions = torch.arange(12)
        for block in model.layers:
            w = block.width
            h = torch.cat([h, h.new_zeros(*h.shape[:-1], w - h.shape[-1])], -1) if w > h.shape[-1] else h[..., :w]
            cos, sin = model._cos_sin(block.attn.shape.head_dim, positions, h.dtype)
            h = block(h, cos, sin)
        logits = model.lm_head(model.norm(h)[..., :out])
        torch.testing.assert_close(model(x).logits, logits, rtol=0, atol=0)


def test_move_up_widens_from_the_newest_earlier_state_that_has_the_channels():
    """Their dense configs' `expand_method: move_up`, written out: widths 80, 48, 32, 80; the last
    layer's input is layer 3's 32 channels, then channels 32-47 of layer 2's output, then 48-79 of
    layer 1's. A resize to a width no earlier state reaches pads the rest with zeros."""
    from shapelm.model.layers import resize

    cfg = build_model_config({**TINY, "resize": "move_up"})
    assert cfg.resize == "move_up" and cfg.to_dict()["resize"] == "move_up"
    assert "resize" not in build_model_config(TINY).to_dict()  # zero: older fingerprints kept
    model = randomized(cfg)
    x = ids(seq=12)
    with torch.no_grad():
        states = [model.embed_tokens(x)]
        positions = torch.arange(12)
        for i, block in enumerate(model.layers):
            h = states[-1]
            if i == 0:
                h = torch.cat([h, h.new_zeros(*h.shape[:-1], 16)], -1)  # 64 -> 80: no earlier state is wider
            elif i == 3:
                h = torch.cat([h, states[2][..., 32:48], states[1][..., 48:80]], -1)
            else:
                h = h[..., :block.width]
            cos, sin = model._cos_sin(block.attn.shape.head_dim, positions, h.dtype)
            states.append(block(h, cos, sin))
        logits = model.lm_head(model.norm(states[-1])[..., :64])
        torch.testing.assert_close(model(x).logits, logits, rtol=0, atol=0)
        a, b = torch.ones(1, 2), torch.full((1, 3), 2.0)
        assert resize(a, 5, [a, b]).tolist() == [[1, 1, 2, 0, 0]]
    assert not torch.equal(model(x).logits, randomized(build_model_config(TINY))(x).logits)


def test_flops_and_kv_bytes_follow_each_layer_width():
    cfg = build_model_config(TINY)
    widths = [80, 48, 32, 80]
    assert kv_cache_bytes_per_token(cfg, 2) == sum(2 * 2 * w for w in widths)
    # one uniform layer of width w at d_model w costs what the variable-width layer of width w costs
    per_layer = []
    for w in widths:
        one = ModelConfig(vocab_size=V, d_model=w, layers=[cfg.layers[widths.index(w)]])
        per_layer.append(flops_per_token(one, 64, vocab_size=1).forward - 7 * w - 2 * w)  # less its head, norm
    head = 7 * 80 + 2 * 64 * V  # the final norm over the last layer's 80 channels, the head over h
    assert flops_per_token(cfg, 64).forward == pytest.approx(sum(per_layer) + head, rel=1e-12)


@pytest.mark.parametrize("input_at_h, output_at_h", EMBEDDINGS)
def test_cached_decode_equals_full_forward(input_at_h, output_at_h):
    assert_cached_decode_matches(randomized(build_model_config({**TINY, **embeddings_arch(input_at_h, output_at_h)})))


def test_move_up_decodes_and_exports_exactly(tmp_path):
    # each token's earlier states are its own: the cache changes nothing; remote code, same bits
    model = randomized(build_model_config({**TINY, "resize": "move_up"}))
    assert_cached_decode_matches(model)
    hf = assert_remote_export_exact(tmp_path, model, "variable_width")
    assert hf.config.resize == "move_up"


@pytest.mark.parametrize("input_at_h, output_at_h", EMBEDDINGS)
def test_hf_export_reloads_with_equal_logits(tmp_path, input_at_h, output_at_h):
    # remote code (a stock Llama has one residual width), the same logits to the last bit
    model = randomized(build_model_config({**TINY, **embeddings_arch(input_at_h, output_at_h)}))
    hf = assert_remote_export_exact(tmp_path, model, "variable_width")
    assert hf.model.layers[2].mlps[0].up_proj.weight.shape == (128, 32)
    assert hf.model.embed_tokens.weight.shape == model.embed_tokens.weight.shape
    assert hf.lm_head.weight.shape == model.lm_head.weight.shape == (V, 64 if output_at_h else 80)


@pytest.mark.parametrize("input_at_h, output_at_h", EMBEDDINGS)
def test_embeddings_at_layer_widths_hold_a_hand_count(input_at_h, output_at_h):
    cfg = build_model_config({**TINY, **embeddings_arch(input_at_h, output_at_h)})
    widths = [80, 48, 32, 80]
    assert [cfg.width(i) for i in range(4)] == widths
    model = build_model(cfg)
    hand = hand_held_count(widths, 64, V, 2, input_at_h, output_at_h)
    assert model.num_parameters() == param_counts(cfg).total == hand
    assert model.embed_tokens.weight.shape == (V, 64 if input_at_h else 80)
    assert model.lm_head.weight.shape == (V, 64 if output_at_h else 80)
    assert model.norm.weight.shape == (80,)  # the last layer's width, wherever the unembedding is
    # the LM head's FLOPs follow its width, the final norm's the last layer's
    assert output_layer_forward_flops(cfg) == 7 * 80 + 2 * cfg.output_width * V


#: The 200M config's widths with each placement of the embeddings: the match moves them (an
#: embedding at a layer's width grows with it, so the layers are narrower to match).
PAPER_200M_WIDTHS = {
    (True, True): PAPER["200M"][3],
    (True, False): [928, 800, 704, 608, 512, 448, 384, 352, 288, 256, 224, 192, 288, 416, 608, 928],
    (False, True): [928, 800, 704, 608, 512, 448, 384, 352, 288, 256, 224, 192, 288, 416, 640, 928],
    (False, False): [832, 736, 640, 544, 480, 416, 384, 320, 288, 256, 224, 192, 288, 416, 576, 832],
}


#: The matched count's distance from the uniform baseline's, in %, after the widths are rounded
#: to 32, per config and placement of the embeddings (input at h, output at h). The continuous
#: solve matches exactly; the rounding moves it. All are within the paper's 0.5% except 500M
#: with the unembedding at h_L, where rounding to 32 leaves +0.52% and +0.57%.
MATCH_AFTER_ROUNDING = {
    "200M": {(True, True): 0.13, (True, False): 0.17, (False, True): 0.32, (False, False): -0.27},
    "500M": {(True, True): -0.47, (True, False): 0.52, (False, True): 0.34, (False, False): 0.57},
    "1B": {(True, True): 0.14, (True, False): 0.22, (False, True): 0.20, (False, False): 0.26},
    "2B": {(True, True): -0.16, (True, False): -0.07, (False, True): -0.08, (False, False): -0.02},
}


@pytest.mark.parametrize("size", list(PAPER))
def test_paper_configs_match_their_baselines_with_each_placement_of_the_embeddings(size):
    h, n_layers, k, _ = PAPER[size]
    baseline = hand_matched_count([h] * n_layers, h, VOCAB)
    for (input_at_h, output_at_h), percent in MATCH_AFTER_ROUNDING[size].items():
        cfg = build_model_config({**paper_arch(h, n_layers, k), **embeddings_arch(input_at_h, output_at_h)})
        widths = [cfg.width(i) for i in range(n_layers)]
        assert min(widths) == round(0.3 * h / 32) * 32 and widths.index(min(widths)) == k - 1
        matched = hand_matched_count(widths, h, VOCAB, input_at_h, output_at_h)
        assert round(100 * (matched / baseline - 1), 2) == percent, (input_at_h, output_at_h)
        assert abs(percent) < (0.6 if size == "500M" and not output_at_h else 0.5)


@pytest.mark.parametrize("input_at_h, output_at_h", EMBEDDINGS)
def test_paper_200m_matches_its_baseline_with_each_placement_of_the_embeddings(input_at_h, output_at_h):
    h, n_layers, k, _ = PAPER["200M"]
    cfg = build_model_config({**paper_arch(h, n_layers, k), **embeddings_arch(input_at_h, output_at_h)})
    widths = [cfg.width(i) for i in range(n_layers)]
    assert widths == PAPER_200M_WIDTHS[input_at_h, output_at_h]
    assert min(widths) == 192 and widths.index(192) == k - 1
    assert (cfg.input_width, cfg.output_width) == (h if input_at_h else widths[0], h if output_at_h else widths[-1])
    # the paper's count for this placement, within its 0.5% of the uniform baseline's
    matched = hand_matched_count(widths, h, VOCAB, input_at_h, output_at_h)
    assert abs(matched / hand_matched_count([h] * n_layers, h, VOCAB) - 1) < 0.005
    assert matched == matched_params(widths, h, VOCAB, original_input_width=input_at_h,
                                     original_output_width=output_at_h)
    # the parameters held: every weight, the embeddings at their own widths
    assert param_counts(cfg).total == hand_held_count(widths, h, VOCAB, 16, input_at_h, output_at_h)


def test_layer_width_round_trips_and_keeps_old_fingerprints():
    cfg = build_model_config(TINY)
    again = ModelConfig.from_dict(cfg.to_dict())
    assert again.fingerprint() == cfg.fingerprint() and again.width(0) == 80
    # the embeddings at d_model (the defaults) are written nowhere; at a layer's width they are
    assert "original_input_width" not in cfg.to_dict()
    assert build_model_config({**TINY, **embeddings_arch(True, True)}).fingerprint() == cfg.fingerprint()
    moved = build_model_config({**TINY, **embeddings_arch(False, True)})
    assert moved.to_dict()["original_input_width"] is False and "original_output_width" not in moved.to_dict()
    assert ModelConfig.from_dict(moved.to_dict()).input_width == 80
    uniform = build_model_config({"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64,
                                  "n_heads": 4, "vocab_size": V})
    assert "d_model" not in uniform.to_dict()["layers"][0]


@pytest.mark.parametrize("change, key", [
    ({"bottleneck": 0.01}, "arch.bottleneck"),  # rounds to 0 at multiple 8: cannot reach it
    ({"max_layer": 0}, "arch.max_layer"),
    ({"max_layer": 9}, "arch.max_layer"),
    ({"bottleneck": 1.5}, "arch.bottleneck"),
    ({"n_heads": 3}, "arch.n_heads"),  # a width not divisible by the head count
    ({"resize": "interpolate"}, "arch.resize"),
    ({"schedule": "cosine"}, "arch.schedule"),
    ({"symmetric": "yes"}, "arch.symmetric"),
    ({"original_input_width": "no"}, "arch.original_input_width"),
    ({"original_output_width": 0}, "arch.original_output_width"),
])
def test_bad_variable_width_config_names_its_key(change, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_model_config({**TINY, **change})


def test_arithmetic_schedule_reaches_its_bottleneck_at_parameter_match():
    cfg = build_model_config({**TINY, "schedule": "arithmetic", "n_layers": 8, "max_layer": 6, "n_heads": 1})
    widths = [cfg.width(i) for i in range(8)]
    assert min(widths) == 32 and widths.index(32) == 5 and widths[0] == widths[-1]
    steps = [b - a for a, b in zip(widths, widths[1:6])]
    assert max(steps) - min(steps) <= 8  # equal steps, up to the rounding to 8


def test_shapes_table_lists_the_layer_widths():
    from shapelm.shapes.accounting import shape_row
    from shapelm.commands.shapes import format_rows

    cfg = build_model_config(TINY)
    row = shape_row("vw", cfg, 64, 256)
    assert row["layer_widths"] == "80 48 32 80" and row["d_model"] == 64 and row["params_total"] == param_counts(cfg).total
    assert "80 48 32 80" in format_rows([row], "md")
    uniform = build_model_config({"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4})
    assert shape_row("u", uniform, 64, 256)["layer_widths"] == ""
    assert shape_row("u", uniform, 64, 256)["embedding_widths"] == row["embedding_widths"] == ""
    moved = build_model_config({**TINY, **embeddings_arch(False, True)})
    assert shape_row("vw", moved, 64, 256)["embedding_widths"] == "80 64"


def test_embedding_width_options_belong_to_variable_width():
    with pytest.raises(ConfigError, match=r"arch\.original_output_width applies only to kind variable_width"):
        build_model_config({"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4,
                            "original_output_width": False})


@pytest.mark.parametrize("mixer", ["native", "mla"])
@pytest.mark.parametrize("input_at_h, output_at_h", [(True, True), (False, False)])
def test_decode_benchmark_model_decodes_like_its_full_forward(mixer, input_at_h, output_at_h):
    from shapelm.decode.model import build_decode_model
    from shapelm.model.cache import MLASpec

    cfg = build_model_config({**TINY, **embeddings_arch(input_at_h, output_at_h)})
    model = build_decode_model(cfg, mixer, mla=MLASpec(16, 8) if mixer == "mla" else None, seed=3)
    stepped, full = prefill_then_step_logits(model, torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(stepped, full, rtol=1e-5, atol=1e-5)


def test_explicit_layers_take_their_own_width():
    """The same model spelled layer by layer: `explicit` with a d_model per layer."""
    vw = build_model_config(TINY)
    entries = [{"d_model": w, "n_heads": 2, "ffn": [4 * w]} for w in (80, 48, 32, 80)]
    spelled = build_model_config({"kind": "explicit", "d_model": 64, "layers": entries, "vocab_size": V,
                                  "max_seq_len": 128})
    assert spelled.layers == vw.layers
    with pytest.raises(ConfigError, match=r"arch\.layers\[1\]\.d_model"):
        build_model_config({"kind": "explicit", "d_model": 64, "layers": [entries[0], {**entries[1], "d_model": 0}]})


def hand_constant_stream_count(widths, h, vocab, held=False):
    """A constant residual stream (their `constant_residual_stream`), written out: both embeddings
    at h; layer i's Q/K/V map h to w_i and O back (4 h w_i), the SwiGLU's gate and up h to 4 w_i and
    down back (12 h w_i). Held also: two RMSNorms over h and the QK-norms over w_i (2 w_i) per
    layer, the final norm over h."""
    n = 2 * vocab * h + sum(16 * h * w for w in widths)
    return n + (sum(2 * h + 2 * w for w in widths) + h if held else 0)


@pytest.mark.parametrize("size", list(PAPER))
def test_constant_residual_stream_matches_its_baseline(size):
    h, n_layers, k, _ = PAPER[size]
    cfg = build_model_config({**paper_arch(h, n_layers, k), "constant_residual_stream": True})
    widths = [layer.attention.d_attn for layer in cfg.layers]
    assert all(layer.d_model is None for layer in cfg.layers) and not cfg.variable_width  # the stream stays at h
    assert min(widths) == round(0.3 * h / 32) * 32 and widths[0] == widths[-1]
    baseline = hand_constant_stream_count([h] * n_layers, h, VOCAB)
    assert baseline == hand_matched_count([h] * n_layers, h, VOCAB)  # the same uniform model
    assert abs(hand_constant_stream_count(widths, h, VOCAB) / baseline - 1) < 0.005
    assert param_counts(cfg).total == hand_constant_stream_count(widths, h, VOCAB, held=True)


def test_constant_residual_stream_builds_decodes_and_exports(tmp_path):
    cfg = build_model_config({**TINY, "constant_residual_stream": True})
    widths = [layer.attention.d_attn for layer in cfg.layers]
    model = randomized(cfg)
    assert model.num_parameters() == param_counts(cfg).total == hand_constant_stream_count(widths, 64, V, held=True)
    assert model.layers[0].attn.q_proj.weight.shape == (widths[0], 64)
    assert_cached_decode_matches(model)
    assert_remote_export_exact(tmp_path, model, "variable_width")


@pytest.mark.parametrize("key, value", [("original_output_width", False), ("original_input_width", False),
                                        ("resize", "move_up")])
def test_constant_residual_stream_refuses_a_resize_or_an_embedding_at_a_layer_width(key, value):
    with pytest.raises(ConfigError, match=f"arch.{key}: a constant residual stream"):
        build_model_config({**TINY, "constant_residual_stream": True, key: value}, where="arch")
