"""`shapelm eval ppl`: token-weighted CE per held-out set, the paper's aggregates, errors."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shapelm.cli import main
from shapelm.data.tokens import write_token_dir
from shapelm.evaluation.loading import EvalError
from shapelm.evaluation.ppl import evaluate_perplexity
from shapelm.model import ModelConfig, build_model, save_pretrained

V = 61


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ppl")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, d_model=32, max_seq_len=64, layers=[
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64]}] * 2)
    model = build_model(cfg).eval()
    save_pretrained(model, root / "run" / "final")
    rng = np.random.default_rng(0)
    sets = {}
    for name, n in (("web", 100), ("code", 70)):
        sets[name] = rng.integers(0, V, n)
        write_token_dir(root / "val" / name, sets[name], vocab_size=V, eos_id=0)
    return root, model, sets


def manual_loss(model, tokens, seq_len):
    total, count = 0.0, 0
    for i in range(len(tokens) // seq_len):
        x = torch.tensor(tokens[i * seq_len:(i + 1) * seq_len], dtype=torch.long)[None]
        with torch.no_grad():
            logits = model(x[:, :-1]).logits
        total += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        count += seq_len - 1
    return total / count


def test_per_set_loss_and_aggregates_match_hand_computation(setup):
    root, model, sets = setup
    res = evaluate_perplexity(model, [root / "val/web", root / "val/code"], seq_len=16,
                              batch_size=3, progress=False)
    for name in ("web", "code"):
        want = manual_loss(model, sets[name], 16)
        got = res["sets"][name]
        assert got["loss"] == pytest.approx(want, rel=1e-5)
        assert got["ppl"] == pytest.approx(math.exp(want), rel=1e-5)
        assert got["n_instances"] == len(sets[name]) // 16
        assert got["n_tokens"] == got["n_instances"] * 15
    losses = [res["sets"][n]["loss"] for n in ("web", "code")]
    agg = res["aggregate"]
    assert agg["val_loss"] == pytest.approx(sum(losses) / 2)
    assert agg["val_ppl"] == pytest.approx(sum(math.exp(x) for x in losses) / 2)
    assert agg["exp_mean_loss"] == pytest.approx(math.exp(sum(losses) / 2))


def test_batch_size_and_max_instances(setup):
    root, model, sets = setup
    a = evaluate_perplexity(model, [root / "val/web"], seq_len=10, batch_size=1, progress=False)
    b = evaluate_perplexity(model, [root / "val/web"], seq_len=10, batch_size=4, progress=False)
    assert a["sets"]["web"]["loss"] == pytest.approx(b["sets"]["web"]["loss"], rel=1e-5)
    c = evaluate_perplexity(model, [root / "val/web"], seq_len=10, max_instances=2, progress=False)
    assert c["sets"]["web"]["n_instances"] == 2
    assert c["sets"]["web"]["loss"] == pytest.approx(manual_loss(model, sets["web"][:20], 10), rel=1e-5)


def test_cli_writes_results_json(setup, tmp_path):
    root, _, _ = setup
    out = tmp_path / "r" / "results.json"
    rc = main(["eval", "ppl", "--model", str(root / "run"), "--data", str(root / "val/web"),
               str(root / "val/code"), "--seq-len", "16", "--batch-size", "2", "--no-progress",
               "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["sets"]) == {"web", "code"} and res["seq_len"] == 16
    assert {"val_loss", "val_ppl", "exp_mean_loss"} <= set(res["aggregate"])
    assert not list(out.parent.glob(".*tmp*"))  # atomic write leaves no temp file


def test_empty_dataset_is_named(setup, tmp_path, capsys):
    root, model, _ = setup
    write_token_dir(tmp_path / "tiny", np.arange(5), vocab_size=V, eos_id=0)
    with pytest.raises(EvalError, match=r"tiny: empty dataset: 5 tokens, fewer than one instance"):
        evaluate_perplexity(model, [tmp_path / "tiny"], seq_len=16, progress=False)
    rc = main(["eval", "ppl", "--model", str(root / "run"), "--data", str(tmp_path / "nope"),
               "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "nope" in capsys.readouterr().err


def test_checkpoint_shape_disagreeing_with_config_is_named(setup, tmp_path, capsys):
    root, model, _ = setup
    save_pretrained(model, tmp_path / "bad" / "final")
    cfg_file = tmp_path / "bad/final/model_config.json"
    conf = json.loads(cfg_file.read_text())
    conf["d_model"] = 48
    cfg_file.write_text(json.dumps(conf))
    rc = main(["eval", "ppl", "--model", str(tmp_path / "bad"), "--data", str(root / "val/web"),
               "--seq-len", "16", "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "model_config.json" in err or "bad/final" in err
    assert "shape" in err and "embed_tokens.weight" in err
    rc = main(["eval", "ppl", "--model", str(tmp_path / "nothing"), "--data", str(root / "val/web"),
               "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "no such checkpoint" in capsys.readouterr().err


def test_per_instance_losses_are_each_windows_loss_in_order(setup):
    """ppl.json's instance_losses (the paired bootstrap's units): window i's own mean CE, the
    same with any batch size, and their token-weighted mean is the set's loss."""
    root, model, sets = setup
    res = {b: evaluate_perplexity(model, [root / "val/web"], seq_len=16, batch_size=b, progress=False)
           for b in (1, 4)}
    one, four = res[1]["sets"]["web"], res[4]["sets"]["web"]
    assert len(one["instance_losses"]) == one["n_instances"] == 6
    assert four["instance_losses"] == pytest.approx(one["instance_losses"], rel=1e-5)
    for i in (0, 5):
        assert one["instance_losses"][i] == pytest.approx(manual_loss(model, sets["web"][i * 16:(i + 1) * 16], 16),
                                                          rel=1e-5)
    assert np.average(four["instance_losses"], weights=four["instance_tokens"]) == pytest.approx(four["loss"])
