"""Rehearsal inputs: real formats served over HTTP, sliced by byte ranges, then re-tokenized."""

import json
import urllib.request

import numpy as np
import pytest

from shapelm.config import merge
from shapelm.plan.experiment import load_experiment
from shapelm.data import choices, rehearsal
from shapelm.data.cli import main as data_cli
from shapelm.data.tokenizer import load_tokenizer
from shapelm.data.tokens import TokenStore, read_manifest


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("rehearsal")
    overrides = rehearsal.write_data_inputs(out)
    httpd, url = rehearsal.serve(out)
    yield out, overrides, url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def hub(inputs, monkeypatch):
    out, overrides, _ = inputs
    monkeypatch.setenv("HF_HUB_CACHE", overrides["env"]["HF_HUB_CACHE"])


def substitute(obj, url):
    if isinstance(obj, dict):
        return {k: substitute(v, url) for k, v in obj.items()}
    return obj.replace("{url}", url) if isinstance(obj, str) else obj


def test_overrides_and_layout(inputs):
    out, overrides, _ = inputs
    assert overrides == {
        "data": {"olmo": {"root": "{url}/olmo", "paths": "{url}/olmo/paths.txt",
                          "validation_root": "{url}/olmo-val"}},
        "env": {"HF_HUB_CACHE": str(out.resolve() / "hf" / "hub"),
                "SHAPELM_CACHE_DIR": str(out.resolve() / "cache")},
    }
    listed = [s for s in (out / "olmo" / "paths.txt").read_text().splitlines() if not s.startswith("#")]
    shipped = __import__("shapelm.data.validation", fromlist=["x"]).load_olmo_config()["paths"]
    assert len(listed) >= 5 and listed == [p for p in shipped if p in set(listed)]  # list order
    for url in listed:
        f = out / "olmo" / url[len("http://olmo-data.org/"):]
        assert f.stat().st_size % 4 == 0 and f.stat().st_size > 4096 * 4
    for vset in rehearsal.VALIDATION_TEXT:
        assert (out / "olmo-val" / vset / "val" / "part-0-00000.npy").is_file()
    info = json.loads((out / "inputs.json").read_text())
    sizes = {s: t["vocab_size"] for s, t in info["tokenizers"].items()}
    assert len(set(sizes.values())) == 3 and all(256 < n <= 2100 for n in sizes.values())
    assert sum(s["instances"] for s in info["olmo_shards"]) * 4096 > 1_000_000


def test_every_paper_tokenizer_has_a_stand_in():
    paper = load_experiment("configs/paper.yaml")
    used = {choices.run_tokenizer(choices.scale_data(paper.raw, s)) for s in paper.raw["scales"]}
    assert used <= set(rehearsal.STAND_INS)


def test_stand_ins_resolve_by_repo_id_with_their_eos(hub):
    from shapelm.data.retokenize import TokenizerSpec

    assert TokenizerSpec.open("allenai/dolma2-tokenizer").eos_id == 2048  # after the vocabulary
    assert TokenizerSpec.open("meta-llama/Llama-2-7b-hf").eos_id == 2  # </s>, as Llama's
    neox = TokenizerSpec.open("allenai/gpt-neox-olmo-dolma-v1_5")
    assert neox.eos_id == neox.vocab_size - 1  # 50279 of 50280 in the real one
    assert load_tokenizer("allenai/dolma2-tokenizer").decode([100, 200]) != ""


def test_range_requests(inputs):
    out, _, url = inputs
    path = "olmo/paths.txt"
    req = urllib.request.Request(f"{url}/{path}", headers={"Range": "bytes=2-9"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 206 and r.read() == (out / path).read_bytes()[2:10]


def test_slice_over_http_then_retokenize(inputs, hub, tmp_path):
    out, overrides, url = inputs
    olmo = substitute(overrides, url)["data"]["olmo"]
    dolma2 = ["--tokenizer", "allenai/dolma2-tokenizer"]  # as the workflow passes it
    assert data_cli(["data", "slice", str(tmp_path / "slice"), "--tokens", "40000", "--seq-len-out", "1024",
                     "--paths", olmo["paths"], "--root", olmo["root"], "--cache-dir", str(tmp_path / "c"),
                     "--quiet", *dolma2]) == 0
    sliced = read_manifest(tmp_path / "slice")
    assert sliced["n_instances"] == 10 and all(s.startswith(url) for s in sliced["sources"])
    assert (sliced["vocab_size"], sliced["eos_id"]) == (2050, 2048)  # the stand-in's, not 100278
    assert data_cli(["data", "validation", str(tmp_path / "val"), "--root", olmo["validation_root"],
                     *dolma2]) == 0
    assert read_manifest(tmp_path / "val" / "dolma_stack")["vocab_size"] == 2050
    assert data_cli(["data", "retokenize", str(tmp_path / "slice"), str(tmp_path / "train"),
                     "--source-tokenizer", "allenai/dolma2-tokenizer", "--tokenizer",
                     "meta-llama/Llama-2-7b-hf", "--tokens", "40000", "--seq-len", "1024", "--quiet"]) == 0
    assert data_cli(["data", "retokenize", str(tmp_path / "val" / "wikitext_103"),
                     str(tmp_path / "val-llama" / "wikitext_103"), "--source-tokenizer",
                     "allenai/dolma2-tokenizer", "--tokenizer", "meta-llama/Llama-2-7b-hf", "--quiet"]) == 0
    train = TokenStore(tmp_path / "train", verify=True)
    m = train.manifest
    assert (m["vocab_size"], m["eos_id"], m["tokenizer"]) == (512, 2, "meta-llama/Llama-2-7b-hf")
    assert train.n_tokens == 40 * 1024 and m["seq_len"] == 1024
    val = TokenStore(tmp_path / "val-llama" / "wikitext_103", verify=True)
    assert val.manifest["name"] == "wikitext_103" and val.vocab_size == 512
    # the same text: the first document decodes identically in both tokenizers
    src = TokenStore(tmp_path / "val" / "wikitext_103")
    src_ids = src.read(0, src.n_tokens)
    first = src_ids[: int(np.argmax(src_ids == 2048))]
    tgt_ids = val.read(0, val.n_tokens)
    tgt_first = tgt_ids[: int(np.argmax(tgt_ids == 2))]
    text = load_tokenizer("allenai/dolma2-tokenizer").decode(first.tolist())
    assert load_tokenizer("meta-llama/Llama-2-7b-hf").decode(tgt_first.tolist()) == text


def test_paper_config_on_the_rehearsal_inputs_plans_clean(inputs, hub):
    out, overrides, url = inputs
    cfg = merge(load_experiment("configs/paper.yaml").raw, {"data": substitute(overrides, url)["data"]})
    assert choices.check_data(load_experiment(cfg)) == []
    # the stand-ins' real sizes are what is checked: a model smaller than one is reported
    cfg["runs"]["lws_crown_18l"]["arch"]["vocab_size"] = 1000
    (err,) = choices.check_data(load_experiment(cfg))
    assert err.startswith("runs.lws_crown_18l: model vocab_size 1000") and "vocabulary 1027" in err


def test_source_ids_fall_back_to_the_shipped_dolma2_values(tmp_path, monkeypatch):
    from shapelm.data.cli import source_ids
    from shapelm.data.validation import load_olmo_config

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HOME", raising=False)
    assert source_ids("allenai/dolma2-tokenizer", load_olmo_config()) == (100278, 100257)
