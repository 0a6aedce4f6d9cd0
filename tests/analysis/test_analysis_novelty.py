"""Layer-wise novelty (shapelm.analysis): the hooks capture the tensors the definition names, on a
random GPT-2 from transformers and on our own decoder; the CLI on a saved tiny model of ours."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from shapelm.analysis import novelty as N
from shapelm.cli import main
from shapelm.data.tokens import write_token_dir
from shapelm.model import build_model, save_pretrained
from shapelm.model.builders import build_model_config
from model_helpers import tiny_arch


def _gpt2(n_layer=4):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=n_layer, n_embd=32, n_head=4, n_positions=64, vocab_size=101,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def test_gpt2_hooks_capture_mlp_and_block_writes():
    model = _gpt2()
    ids = torch.randint(0, 101, (1, 20))
    taps = N.hf_taps(model)
    cap = N.capture(model, taps, lambda: model(input_ids=ids, use_cache=False))
    # ground truth from transformers' own hidden states (embeddings, after each block)
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    for i, block in enumerate(model.transformer.h):
        assert torch.allclose(cap.h_in[i], hs[i], atol=1e-6)
        if i < len(taps) - 1:  # the last hidden state is after ln_f
            assert torch.allclose(cap.h_out[i], hs[i + 1], atol=1e-6)
        # the MLP write is block.mlp(ln_2(z)), z the stream after attention: h_out = z + MLP out exactly
        assert torch.equal(cap.h_out[i], cap.z[i] + cap.mlp[i])
        with torch.no_grad():
            assert torch.allclose(cap.mlp[i], block.mlp(block.ln_2(cap.z[i])), atol=1e-6)
        assert torch.equal(cap.block_write(i), cap.h_out[i] - cap.h_in[i])


def test_gpt2_measure_range_and_pearson_matches_scipy():
    from scipy.stats import pearsonr

    model = _gpt2(n_layer=6)
    ids = torch.randint(0, 101, (100,))
    out = N.measure(model, N.hf_taps(model), lambda w: model(input_ids=w, use_cache=False), ids, seq_len=32)
    assert out["n_tokens"] == 100 and out["n_layers"] == 6
    for key in ("rho_mlp", "rho_block"):
        assert all(-1 <= v <= 1 for v in out[key])
        inner = out["pearson_layers"]
        assert inner == [1, 2, 3, 4]
        expected = pearsonr(inner, [out[key][i] for i in inner]).statistic
        assert out[f"pearson_r_{key[4:]}"] == pytest.approx(expected, abs=1e-12)


def test_cosine_is_one_when_the_write_equals_the_residual():
    r = torch.randn(3, 5, 16)
    assert torch.allclose(N.token_cosine(r, r), torch.ones(15, dtype=torch.float64))
    assert torch.allclose(N.token_cosine(-2 * r, r), -torch.ones(15, dtype=torch.float64))
    other = torch.zeros(3, 5, 16)
    assert torch.equal(N.token_cosine(other, r), torch.zeros(15, dtype=torch.float64))


class _CopyMLP(nn.Module):
    """An MLP whose output is its input: with an identity pre-norm, the write equals the residual."""

    def forward(self, x):
        return x.clone()


def test_gpt2_mlp_that_copies_the_residual_gives_rho_one():
    model = _gpt2()
    for block in model.transformer.h:
        block.ln_2 = nn.Identity()
        block.mlp = _CopyMLP()
    ids = torch.randint(0, 101, (40,))
    out = N.measure(model, N.hf_taps(model), lambda w: model(input_ids=w, use_cache=False), ids, seq_len=40)
    assert out["rho_mlp"] == pytest.approx([1.0] * 4, abs=1e-9)
    assert not all(v == pytest.approx(1.0) for v in out["rho_block"])  # the attention write differs


def test_pearson_against_numpy_and_undefined_cases():
    xs, ys = [1, 2, 3, 4, 5], [0.1, 0.5, 0.2, 0.9, 0.7]
    assert N.pearson(xs, ys) == pytest.approx(np.corrcoef(xs, ys)[0, 1], abs=1e-12)
    assert N.pearson([1], [0.3]) is None
    assert N.pearson([1, 2, 3], [0.2, 0.2, 0.2]) is None


@pytest.mark.parametrize("arch", [
    tiny_arch(n_layers=4),
    tiny_arch(kind="hourglass", n_layers=4, k=3, d_h=16),
    tiny_arch(n_layers=3, norm_placement="reordered"),
])
def test_our_block_hooks(arch):
    model = build_model(build_model_config(arch)).eval()
    ids = torch.randint(0, 97, (1, 24))
    taps = N.shapelm_taps(model)
    cap = N.capture(model, taps, lambda: model.hidden_states(ids))
    for i, block in enumerate(model.layers):
        with torch.no_grad():
            x = cap.h_in[i]
            # z: the stream after attention, recomputed from the block's own modules
            if block.reordered:
                z = x + block.attn_norm(block.attn(x, *model._cos_sin(block.attn.shape.head_dim,
                                                                       torch.arange(24), x.dtype)))
            else:
                z = x + block.attn(block.attn_norm(x), *model._cos_sin(block.attn.shape.head_dim,
                                                                       torch.arange(24), x.dtype))
            assert torch.allclose(cap.z[i], z, atol=1e-6)
            # the MLP write is the sum of the sub-MLP branches
            h, total = z, torch.zeros_like(z)
            for norm, mlp in zip(block.mlp_norms, block.mlps):
                branch = block._ffn_branch(norm, mlp, h)
                h, total = h + branch, total + branch
            assert torch.allclose(cap.mlp_write(i), total, atol=1e-5)
            assert torch.allclose(cap.h_out[i], h, atol=1e-6)
            assert torch.equal(cap.block_write(i), cap.h_out[i] - cap.h_in[i])
    out = N.measure(model, taps, model.hidden_states, ids[0], seq_len=8)
    assert all(-1 <= v <= 1 for v in out["rho_mlp"] + out["rho_block"])


def test_cli_on_a_saved_tiny_model(tmp_path, capsys):
    model = build_model(build_model_config(tiny_arch(n_layers=5))).eval()
    save_pretrained(model, tmp_path / "run" / "final")
    text = tmp_path / "val"
    write_token_dir(text, np.random.default_rng(0).integers(1, 97, 300), vocab_size=97, eos_id=0)
    out = tmp_path / "novelty.json"
    rc = main(["analyze", "novelty", str(tmp_path / "run"), "--text", str(text), "--tokens", "256",
               "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["model_kind"] == "shapelm" and data["n_tokens"] == 256 and data["n_layers"] == 5
    assert data["seq_len"] == 64  # capped at the model's max_seq_len
    assert data["pearson_layers"] == [1, 2, 3]
    assert len(data["rho_mlp"]) == 5 and all(-1 <= v <= 1 for v in data["rho_mlp"])
    assert math.isfinite(data["pearson_r_mlp"])
    # too few tokens: one clear error line, status 2
    assert main(["analyze", "novelty", str(tmp_path / "run"), "--text", str(text), "--tokens", "5000",
                 "--out", str(out)]) == 2
    assert "only 300 tokens" in capsys.readouterr().err


def test_cli_hf_model_missing_from_cache(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["analyze", "novelty", "shapelm-test/not-a-model", "--text", str(tmp_path), "--out",
               str(tmp_path / "o.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "not loadable from the local Hugging Face cache" in err and "nothing is downloaded" in err


def test_cli_on_a_hugging_face_model_directory(tmp_path):
    """A saved (random) GPT-2 with its own tokenizer, on a text file: the Hugging Face path of the CLI."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [f"w{i}" for i in range(99)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<|endoftext|>", "<unk>", *words])},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    d = tmp_path / "hf"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<unk>").save_pretrained(d)
    _gpt2(n_layer=5).save_pretrained(d)
    rng = np.random.default_rng(0)
    text = tmp_path / "wiki.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(words, 40)) for _ in range(10)))
    out = tmp_path / "o.json"
    assert main(["analyze", "novelty", str(d), "--text", str(text), "--tokens", "300", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["model_kind"] == "hf" and data["n_layers"] == 5 and data["n_tokens"] == 300
    assert data["seq_len"] == 64  # capped at n_positions
    assert data["pearson_layers"] == [1, 2, 3] and all(-1 <= v <= 1 for v in data["rho_block"])


def test_cli_on_its_own_remote_code_export_needs_the_flag_and_never_prompts(tmp_path, capsys):
    """`shapelm analyze novelty` on a shapelm export whose shape is remote code: refused in one
    line without --trust-remote-code (no interactive prompt), with it the checkpoint's own rho."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from shapelm.evaluation.export_hf import export_hf

    words = [f"w{i}" for i in range(90)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<|endoftext|>", "<unk>", *words])},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    torch.manual_seed(0)
    model = build_model(build_model_config(tiny_arch(n_layers=4))).eval()
    save_pretrained(model, tmp_path / "run" / "final")
    export_hf(tmp_path / "run", tmp_path / "hf", force_remote=True)
    rng = np.random.default_rng(0)
    text = tmp_path / "wiki.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(words, 40)) for _ in range(10)))
    common = ["--text", str(text), "--tokens", "200", "--tokenizer", str(tmp_path / "tokenizer.json")]

    assert main(["analyze", "novelty", str(tmp_path / "hf"), *common, "--out", str(tmp_path / "no.json")]) == 2
    err = capsys.readouterr().err
    assert "pass --trust-remote-code" in err and "offline" not in err and "Traceback" not in err
    assert main(["analyze", "novelty", str(tmp_path / "hf"), *common, "--trust-remote-code",
                 "--out", str(tmp_path / "hf.json")]) == 0
    assert main(["analyze", "novelty", str(tmp_path / "run"), *common, "--out", str(tmp_path / "ours.json")]) == 0
    hf, ours = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("hf", "ours"))
    assert hf["model_kind"] == "hf" and hf["n_layers"] == 4
    assert hf["rho_mlp"] == pytest.approx(ours["rho_mlp"], abs=1e-4)
    assert hf["rho_block"] == pytest.approx(ours["rho_block"], abs=1e-4)
