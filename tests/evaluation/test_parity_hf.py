"""Parity between shapelm and Hugging Face transformers (float32 logits, allclose).

* conventional shapelm weights copied into stock `Olmo2ForCausalLM` (qk_norm, reordered norm)
  and `LlamaForCausalLM` (no qk_norm, pre-norm), with and without YaRN, d_attn != d_model;
* an hourglass with K=1 and d_attn=d_model is the conventional model (same weights);
* `shapelm export-hf` directories load with AutoModelForCausalLM(trust_remote_code=True) and
  give shapelm's logits: stock and remote-code architectures, generation, lm-eval's `hf`.
"""

import json

import pytest
import torch

from shapelm.evaluation.export_hf import (
    choose_architecture,
    export_hf,
    stock_config,
    stock_state_dict,
)
from shapelm.evaluation.loading import EvalError
from shapelm.model import build_model, save_pretrained
from shapelm.model.builders import build_model_config
from model_helpers import V, cfg, export_and_load, ids, randomized



@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from shapelm.data.tokenizer import train_bpe
    from synthetic_lm import synthetic_documents

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe(synthetic_documents(), 280, path)
    return path
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}


def stock_copy(model, arch):
    from transformers import LlamaForCausalLM, Olmo2ForCausalLM

    hf_cfg = stock_config(model.config, arch)
    cls = {"LlamaForCausalLM": LlamaForCausalLM, "Olmo2ForCausalLM": Olmo2ForCausalLM}[arch]
    hf = cls(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(stock_state_dict(model.state_dict(), arch), strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return hf


CASES = {
    "olmo2": (dict(qk_norm=True, norm_placement="reordered"), "Olmo2ForCausalLM"),
    "llama": (dict(qk_norm=False, norm_placement="pre"), "LlamaForCausalLM"),
    "olmo2_yarn": (dict(qk_norm=True, norm_placement="reordered", rope_scaling=YARN), "Olmo2ForCausalLM"),
    "llama_yarn": (dict(qk_norm=False, norm_placement="pre", rope_scaling=YARN), "LlamaForCausalLM"),
    "olmo2_narrow_attn": (dict(qk_norm=True, norm_placement="reordered", layers=[
        {"attention": {"n_heads": 2, "n_kv_heads": 1, "head_dim": 12}, "ffn_widths": [48]}] * 3),
        "Olmo2ForCausalLM"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_weights_copied_into_stock_transformers_match(case):
    kw, arch = CASES[case]
    model = randomized(cfg(**kw))
    assert choose_architecture(model.config) == arch
    hf = stock_copy(model, arch)
    x = ids()
    with torch.no_grad():
        ref, got = model(x).logits, hf(x).logits
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_yarn_changes_logits_beyond_original_length():
    """Guard against a parity test that passes because RoPE scaling is ignored on both sides."""
    plain = randomized(cfg(qk_norm=False))
    yarn = randomized(cfg(qk_norm=False, rope_scaling=YARN))
    x = ids(seq=100)
    with torch.no_grad():
        assert not torch.allclose(plain(x).logits, yarn(x).logits, atol=1e-4)


def test_hourglass_k1_full_attention_equals_conventional():
    common = dict(d_model=32, n_layers=2, d_h=64, n_heads=4, vocab_size=V, max_seq_len=64)
    conv = build_model_config({"kind": "conventional", **common})
    hour = build_model_config({"kind": "hourglass", "k": 1, "d_attn": 32, **common})
    a, b = build_model(conv).eval(), build_model(hour).eval()
    b.load_state_dict(a.state_dict())
    x = ids(seq=40)
    with torch.no_grad():
        torch.testing.assert_close(b(x).logits, a(x).logits, rtol=0, atol=0)
    # ... and its remote-code export equals the stock export of the same weights
    assert choose_architecture(hour) == choose_architecture(conv)


REMOTE_CASES = {
    "hourglass_k3": [{"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [16] * 3}] * 2,
    "per_layer": [
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64]},
        {"attention": None, "ffn_widths": [32]},
        {"attention": {"n_heads": 2, "n_kv_heads": 1, "head_dim": 6}, "ffn_widths": []},
    ],
    # gated attention (the gate travels in config.json's layers and as gate_proj weights)
    "gated": [
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64],
         "mixer": "gated_attention"},
        {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [32],
         "mixer": "gated_attention", "gate": "headwise"},
        {"attention": None, "ffn_widths": [32]},
    ],
    # Hope-attention: fast-weight CMS levels (chunks 3 and 5 over the 16-token inputs)
    "hope": [
        {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [16, 24],
         "mixer": "hope_attention", "cms_chunks": [3, 5], "cms_lr": 2.0, "cms_momentum": 0.5, "cms_decay": 0.1},
        {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [16]},
    ],
}


@pytest.mark.parametrize("case", sorted(REMOTE_CASES))
@pytest.mark.parametrize("placement", ["pre", "reordered"])
def test_export_remote_code_matches(tmp_path, case, placement):
    model = randomized(cfg(layers=REMOTE_CASES[case], norm_placement=placement, rope_scaling=YARN))
    info, hf = export_and_load(tmp_path, model, case)
    assert info["architecture"] == "ShapelmForCausalLM"
    conf = json.loads((tmp_path / f"{case}_hf" / "config.json").read_text())
    assert conf["auto_map"]["AutoModelForCausalLM"] == "modeling_shapelm.ShapelmForCausalLM"
    assert (tmp_path / f"{case}_hf" / "modeling_shapelm.py").is_file()
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_gated_model_exports_with_remote_code_and_stock_refuses_it(tmp_path):
    layer = {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64],
             "mixer": "gated_attention"}
    for kw, arch in (CASES["olmo2"][0], "Olmo2ForCausalLM"), (CASES["llama"][0], "LlamaForCausalLM"):
        gated = cfg(layers=[layer] * 2, **kw)
        assert choose_architecture(gated) == "ShapelmForCausalLM"
        with pytest.raises(EvalError, match="gated_attention: export it with trust_remote_code"):
            stock_config(gated, arch)
    model = randomized(cfg(layers=[layer] * 2, qk_norm=False, norm_placement="pre"))
    info, hf = export_and_load(tmp_path, model, "gated_llama_like")
    assert info["architecture"] == "ShapelmForCausalLM"
    assert hf.model.layers[0].attn.gate_proj.weight.shape == (32, 32)
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_export_pre_norm_with_qk_norm_uses_remote_code(tmp_path):
    model = randomized(cfg(qk_norm=True, norm_placement="pre"))
    info, hf = export_and_load(tmp_path, model, "pre_qk")
    assert info["architecture"] == "ShapelmForCausalLM"
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["olmo2_yarn", "llama", "olmo2", "llama_yarn"])
def test_export_stock_matches_and_includes_tokenizer(tmp_path, case, tiny_tokenizer):
    """Each stock export reloads with transformers' own class, its RoPE as written, same logits."""
    from transformers import AutoTokenizer

    kw, arch = CASES[case]
    model = randomized(cfg(**kw))
    info, hf = export_and_load(tmp_path, model, case, tokenizer=str(tiny_tokenizer))
    assert info["architecture"] == arch and type(hf).__name__ == arch
    out = tmp_path / f"{case}_hf"
    assert not (out / "modeling_shapelm.py").exists()
    written = json.loads((out / "config.json").read_text())
    theta = model.config.rope_theta
    assert theta != 10_000 and written["rope_parameters"]["rope_theta"] == written["rope_theta"] == theta
    assert hf.config.rope_parameters["rope_theta"] == theta  # what transformers read back
    assert hf.config.rope_parameters["rope_type"] == ("yarn" if "yarn" in case else "default")
    head_dim = model.config.layers[0].attention.head_dim
    if "yarn" not in case:
        want = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        torch.testing.assert_close(hf.model.rotary_emb.inv_freq, want)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.eos_token == "<|endoftext|>"
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_remote_code_hope_right_padding_works_left_padding_refused(tmp_path):
    model = randomized(cfg(layers=REMOTE_CASES["hope"]))
    _, hf = export_and_load(tmp_path, model, "hope_pad")
    x = ids(seq=12, batch=1)
    pad = torch.zeros(1, 5, dtype=torch.long)
    with torch.no_grad():
        right = hf(torch.cat([x, pad], 1), attention_mask=torch.cat([torch.ones_like(x), pad], 1))
        torch.testing.assert_close(right.logits[:, :12], model(x).logits, rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="right padding"):
            hf(torch.cat([pad, x], 1), attention_mask=torch.cat([pad, torch.ones_like(x)], 1))


def test_remote_code_padding_and_generation(tmp_path):
    model = randomized(cfg(layers=REMOTE_CASES["hourglass_k3"]))
    _, hf = export_and_load(tmp_path, model, "gen")
    x = ids(seq=12, batch=1)
    # left padding with a mask gives the unpadded logits
    padded = torch.cat([torch.zeros(1, 5, dtype=torch.long), x], 1)
    mask = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones_like(x)], 1)
    with torch.no_grad():
        torch.testing.assert_close(hf(padded, attention_mask=mask).logits[:, 5:], model(x).logits,
                                   rtol=1e-5, atol=1e-5)
    out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=4, do_sample=False)
    ref = x
    with torch.no_grad():
        for _ in range(4):
            ref = torch.cat([ref, model(ref).logits[:, -1:].argmax(-1)], 1)
    assert out.tolist() == ref.tolist()


def test_hourglass_remote_equals_stock_export_of_same_weights(tmp_path):
    """K=1, d_attn=d_model exported through the remote-code path equals the stock export."""
    model = randomized(cfg(qk_norm=True, norm_placement="reordered"))
    save_pretrained(model, tmp_path / "m" / "final")
    from transformers import AutoModelForCausalLM

    export_hf(tmp_path / "m", tmp_path / "stock")
    export_hf(tmp_path / "m", tmp_path / "remote", force_remote=True)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "stock", dtype=torch.float32)
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "remote", trust_remote_code=True, dtype=torch.float32)
    assert type(a).__name__ == "Olmo2ForCausalLM" and type(b).__name__ == "ShapelmForCausalLM"
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(b(x).logits, a(x).logits, rtol=1e-5, atol=1e-5)


def test_lm_eval_hf_model_matches_shapelm_lm(tmp_path, tiny_tokenizer):
    pytest.importorskip("accelerate", reason="lm-eval's hf model needs accelerate")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from shapelm.evaluation.lm_eval_model import ShapelmLM

    model = randomized(cfg(layers=REMOTE_CASES["hourglass_k3"]))
    save_pretrained(model, tmp_path / "m" / "final")
    export_hf(tmp_path / "m", tmp_path / "hf", tokenizer=str(tiny_tokenizer))
    reqs = [Instance("loglikelihood", {}, ("the cat", " sat on the mat"), 0),
            Instance("loglikelihood", {}, ("Question: why?\nAnswer:", " because"), 1)]
    a = HFLM(pretrained=str(tmp_path / "hf"), trust_remote_code=True, dtype="float32",
             batch_size=2, device="cpu").loglikelihood(reqs)
    b = ShapelmLM(model=model, tokenizer=str(tiny_tokenizer)).loglikelihood(reqs)
    for (la, ga), (lb, gb) in zip(a, b):
        assert la == pytest.approx(lb, abs=1e-4) and ga == gb


def test_export_refuses_a_transformers_that_ignores_rope_parameters(tmp_path, monkeypatch):
    import transformers

    save_pretrained(randomized(cfg()), tmp_path / "m" / "final")
    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    with pytest.raises(EvalError, match=r"transformers >= 5\.0 \(found 4\.57\.1\).*rope_theta 10000"):
        export_hf(tmp_path / "m", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_export_rejects_checkpoint_whose_shape_disagrees_with_config(tmp_path):
    model = randomized(cfg())
    save_pretrained(model, tmp_path / "m" / "final")
    conf = json.loads((tmp_path / "m/final/model_config.json").read_text())
    conf["layers"][0]["ffn_widths"] = [72]
    (tmp_path / "m/final/model_config.json").write_text(json.dumps(conf))
    with pytest.raises(EvalError, match=r"layers\.0\.mlps\.0\.\w+_proj\.weight"):
        export_hf(tmp_path / "m", tmp_path / "hf")


@pytest.mark.parametrize("case", ["per_layer", "gated", "hope"])
def test_remote_code_generate_with_the_kv_cache_equals_without(tmp_path, case):
    """`generate` with the remote code's KV cache gives the tokens (and nearly the scores) of
    generation without it, left-padded prompts of two lengths in one batch included; Hope's
    recurrent state takes no cache (its export says use_cache false) and generates the same."""
    model = randomized(cfg(layers=REMOTE_CASES[case], norm_placement="reordered", rope_scaling=YARN))
    _, hf = export_and_load(tmp_path, model, case)
    assert hf.generation_config.use_cache is (case != "hope")
    x = ids(seq=9, batch=2)
    mask = torch.ones_like(x)
    if case != "hope":  # Hope refuses left padding
        mask[1, :3] = 0
    runs = {}
    for use_cache in (True, False):
        runs[use_cache] = hf.generate(x, attention_mask=mask, max_new_tokens=6, do_sample=False, min_new_tokens=6,
                                      use_cache=use_cache, return_dict_in_generate=True, output_scores=True)
    assert runs[True].sequences.tolist() == runs[False].sequences.tolist()
    for a, b in zip(runs[True].scores, runs[False].scores):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    if case != "hope":  # and the cache holds each attention layer's keys in its own KV heads and width
        n_attn = sum(layer["attention"] is not None for layer in REMOTE_CASES[case])
        cache = runs[True].get("cache", runs[True].get("past_key_values"))
        assert cache.get_seq_length() == 9 + 6 - 1
        kv_heads = [layer["attention"]["n_kv_heads"] for layer in REMOTE_CASES[case] if layer["attention"]]
        assert [cache.layers[i].keys.shape[1] for i in range(n_attn)] == kv_heads
