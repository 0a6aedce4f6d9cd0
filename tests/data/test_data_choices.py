"""Plan-time data checks: each malformed config is reported naming the run or scale and the key."""

import copy

import pytest

from shapelm.plan.experiment import load_experiment
from shapelm.data import choices
from shapelm.data.tokenizer import train_bpe

BASE = {
    "name": "t",
    "model_defaults": {"vocab_size": 100352},
    "data": {"source": "olmo", "tokenizer": "allenai/dolma2-tokenizer",
             "validation_sets": ["dolma_stack", "wikitext_103"]},
    "scales": {
        "s113M": {"n_heads": 2, "train": {"batch_tokens": 256, "seq_len": 64, "total_tokens": 1024}},
        "tapered440M": {"n_heads": 2, "train": {"batch_tokens": 256, "seq_len": 64, "total_tokens": 2048},
                        "data": {"tokenizer": "meta-llama/Llama-2-7b-hf", "retokenize": {"over_slice": 1.25}}},
    },
    "runs": {
        "hg_conv": {"scale": "s113M", "arch": {"kind": "conventional", "d_model": 16, "n_layers": 1, "d_h": 32}},
        "tp440m_uniform": {"scale": "tapered440M",
                           "arch": {"kind": "conventional", "d_model": 16, "n_layers": 1, "d_h": 32,
                                    "vocab_size": 32000}},
    },
}


def errors_of(edit=None):
    cfg = copy.deepcopy(BASE)
    if edit:
        edit(cfg)
    return choices.check_data(load_experiment(cfg))


@pytest.fixture(autouse=True)
def _no_local_tokenizers(tmp_path, monkeypatch):
    """Vocabularies come from the known table unless a test puts a tokenizer in its HF cache."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("HOME", str(tmp_path))


def test_sound_configs_have_no_errors():
    assert errors_of() == []
    for path in ("configs/paper.yaml", "configs/default.yaml", "configs/ci.yaml"):
        assert choices.check_data(load_experiment(path)) == [], path


def test_model_vocab_smaller_than_the_data_vocabulary():
    def drop_scale_data(cfg):
        del cfg["scales"]["tapered440M"]["data"]

    (err,) = errors_of(drop_scale_data)
    assert err == (
        "runs.tp440m_uniform: model vocab_size 32000 (runs.tp440m_uniform.arch.vocab_size) < data "
        "vocabulary 100278 of tokenizer allenai/dolma2-tokenizer "
        "(scales.tapered440M.data.tokenizer, inherited from data.tokenizer)"
    )


def test_unknown_source_kind():
    def edit(cfg):
        cfg["scales"]["tapered440M"]["data"]["source"] = "olmo3"

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: unknown data source kind 'olmo3' "
                          "(scales.tapered440M.data.source)")


def test_source_kind_differing_from_the_experiment():
    def edit(cfg):
        cfg["scales"]["s113M"]["data"] = {"source": "default", "validation_sets": ["default_web"]}
        cfg["runs"]["hg_conv"]["arch"]["vocab_size"] = 4096

    (err,) = errors_of(edit)
    assert err.startswith("scales.s113M: data source 'default' differs from the experiment's 'olmo' "
                          "(scales.s113M.data.source)")


def test_retokenize_without_a_target_tokenizer():
    def edit(cfg):
        del cfg["scales"]["tapered440M"]["data"]["tokenizer"]
        cfg["runs"]["tp440m_uniform"]["arch"]["vocab_size"] = 100352

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: data.retokenize has no target tokenizer")
    assert "(scales.tapered440M.data.tokenizer, inherited from data.tokenizer)" in err


def test_tokenizer_other_than_the_source_without_retokenize():
    def edit(cfg):
        del cfg["scales"]["tapered440M"]["data"]["retokenize"]

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: data.tokenizer meta-llama/Llama-2-7b-hf "
                          "(scales.tapered440M.data.tokenizer) is not the tokenizer of the olmo source")
    assert "add scales.tapered440M.data.retokenize" in err


def test_retokenize_on_the_default_source():
    def edit(cfg):
        cfg["data"] = {"source": "default", "default_corpus": {"vocab_size": 1024},
                       "validation_sets": ["default_web"]}
        cfg["scales"]["tapered440M"]["data"] = {"retokenize": {}}

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: data.retokenize needs source olmo")
    assert "(scales.tapered440M.data.retokenize)" in err


def test_validation_sets_the_source_does_not_produce():
    def edit(cfg):
        cfg["scales"]["tapered440M"]["data"]["validation_sets"] = ["wikitext_103", "lambada"]

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: validation set(s) ['lambada'] are not produced by "
                          "source olmo (scales.tapered440M.data.validation_sets)")


def test_unknown_vocabulary_and_explicit_vocab_size():
    def edit(cfg):
        cfg["scales"]["tapered440M"]["data"]["tokenizer"] = "someorg/unknown-32k"

    (err,) = errors_of(edit)
    assert err.startswith("scales.tapered440M: vocabulary of tokenizer someorg/unknown-32k "
                          "(scales.tapered440M.data.tokenizer) unknown")
    assert "set scales.tapered440M.data.vocab_size" in err

    def explicit(cfg):
        edit(cfg)
        cfg["scales"]["tapered440M"]["data"]["vocab_size"] = 32768

    (err,) = errors_of(explicit)
    assert err.startswith("runs.tp440m_uniform: model vocab_size 32000")
    assert "data vocabulary 32768 of tokenizer someorg/unknown-32k" in err


def test_a_local_tokenizer_file_gives_the_real_vocabulary(tmp_path, monkeypatch):
    """A tokenizer found in the HF cache counts, not the table (a rehearsal's stand-ins)."""
    hub = tmp_path / "hub"
    snap = hub / "models--meta-llama--Llama-2-7b-hf" / "snapshots" / "abc"
    train_bpe(["some text to learn from"] * 20, 300, snap / "tokenizer.json")
    (hub / "models--meta-llama--Llama-2-7b-hf" / "refs").mkdir()
    (hub / "models--meta-llama--Llama-2-7b-hf" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    vocab = len(__import__("tokenizers").Tokenizer.from_file(str(snap / "tokenizer.json")).get_vocab())

    def small_model(cfg):
        cfg["runs"]["tp440m_uniform"]["arch"]["vocab_size"] = vocab - 1

    (err,) = errors_of(small_model)
    assert f"< data vocabulary {vocab} of tokenizer meta-llama/Llama-2-7b-hf" in err

    def disagreeing(cfg):
        cfg["scales"]["tapered440M"]["data"]["vocab_size"] = 32000

    (err,) = errors_of(disagreeing)
    assert err.startswith("scales.tapered440M: data.vocab_size 32000 "
                          "(scales.tapered440M.data.vocab_size) disagrees with the")


def test_missing_path_list(tmp_path):
    def edit(cfg):
        cfg["data"]["olmo"] = {"paths": str(tmp_path / "nope.txt")}

    (err,) = errors_of(edit)
    assert err == f"data.olmo.paths: path list {tmp_path / 'nope.txt'} not found"


def test_workflow_helpers():
    raw = load_experiment(BASE).raw
    assert choices.source_tokens(raw, "s113M") == 1024
    assert choices.source_tokens(raw, "tapered440M") == 2560  # total_tokens x over_slice
    assert choices.tokenizer_slug("meta-llama/Llama-2-7b-hf") == "meta-llama--Llama-2-7b-hf"
    slug = choices.tokenizer_slug("/data/toks/tokenizer.json")
    assert slug.startswith("tokenizer.json-") and "/" not in slug
    paper = load_experiment("configs/paper.yaml")
    tokenizers = {s: choices.run_tokenizer(choices.scale_data(paper.raw, s)) for s in paper.raw["scales"]}
    assert tokenizers["tapered440M"] == "meta-llama/Llama-2-7b-hf"
    assert tokenizers["lws190M"] == "allenai/gpt-neox-olmo-dolma-v1_5"
    assert tokenizers["906M"] == "allenai/dolma2-tokenizer"
