"""Plan-time checks of the long-context stage: one malformed config per check."""

import copy
from pathlib import Path

import pytest

from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.plan.inputs import experiment_inputs
from shapelm.longctx.plan import check_longctx, longctx_settings, needed_inputs, run_lengths

ROOT = Path(__file__).parents[2]


@pytest.fixture()
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    for name in ("PaulGrahamEssays.json", "squad.json", "hotpotqa.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "pg19" / "train").mkdir(parents=True)
    (tmp_path / "pg19" / "train" / "1.txt").write_text("a book")
    (tmp_path / "pp.jsonl").write_text('{"text": "x"}\n')
    return tmp_path


def config(inputs: Path, **longctx) -> dict:
    lc = {"factor": 16, "lengths": [512, 1024], "finetune_batch": 4, "proofpile_min_tokens": 1024,
          "pg19": str(inputs / "pg19"), "proofpile": str(inputs / "pp.jsonl"),
          "essays": str(inputs / "PaulGrahamEssays.json"), "squad": str(inputs / "squad.json"),
          "hotpotqa": str(inputs / "hotpotqa.json")}
    lc.update(longctx)
    return {
        "name": "lc",
        "data": {"source": "olmo"},
        "model_defaults": {"vocab_size": 128},
        "scales": {"s": {"n_heads": 2, "train": {"lr": 1e-3, "batch_tokens": 512, "seq_len": 64,
                                                  "total_tokens": 5120, "warmup_tokens": 512},
                         "resources": {"gpus": 2, "nodes": 1}}},
        "runs": {"a": {"scale": "s", "longctx": True, "arch": {"kind": "conventional", "d_model": 32,
                                                              "n_layers": 2, "d_h": 64}},
                 "b": {"scale": "s", "arch": {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64}}},
        "longctx": {k: v for k, v in lc.items() if v is not None},
    }


def check(cfg) -> list[str]:
    """The plan-time check as shapelm.plan.checks runs it: inputs a `fetch` job gets are not looked for."""
    from shapelm.plan.inputs import fetched_by_job

    return check_longctx(load_experiment(cfg), fetched_by_job)


def test_a_complete_config_passes_and_defaults_follow_the_run(inputs):
    exp = load_experiment(config(inputs))
    assert check_longctx(exp) == []
    assert run_lengths(exp, "a") == {"original": 64, "factor": 16.0, "target": 1024, "seq_len": 1024}
    assert longctx_settings(exp)["finetune_steps"] == 400 and len(longctx_settings(exp)["ruler_tasks"]) == 13


def test_the_shipped_configs_check_clean_where_their_inputs_exist():
    assert check_longctx(load_experiment(ROOT / "configs" / "default.yaml")) == []
    assert check_longctx(load_experiment(ROOT / "configs" / "ci.yaml")) == []  # no longctx run
    errors = check_longctx(load_experiment(ROOT / "configs" / "paper.yaml"))
    assert all(e.startswith("longctx.") and "hg8b_conv, hg8b_hg" in e for e in errors)


def test_missing_input_names_the_key_and_the_runs(inputs):
    errors = check(config(inputs, pg19=None))
    assert errors == ["longctx.pg19: not set; run a (longctx: true) need it for the YaRN finetune's training text"]


def test_inputs_a_task_subset_does_not_use_are_not_required(inputs):
    cfg = config(inputs, essays=None, squad=None, ruler_tasks=["niah_single_1", "qa_2"])
    assert check(cfg) == []
    assert set(needed_inputs(longctx_settings(load_experiment(cfg)))) == {"pg19", "proofpile", "hotpotqa"}


def test_the_default_corpus_substitutes_missing_inputs(inputs):
    cfg = config(inputs, pg19=None, proofpile=None, essays=None, squad=None, hotpotqa=None)
    cfg["data"] = {"source": "default"}
    assert check(cfg) == []


def test_local_path_that_does_not_exist(inputs):
    # where the workflow fetches inputs, its fetch job says so in one line; the tiny default,
    # which fetches nothing, refuses it at plan time
    cfg = config(inputs, squad=str(inputs / "nope.json"))
    assert check(cfg) == []
    assert experiment_inputs(load_experiment(cfg))["squad-file"].repo == str(inputs / "nope.json")
    cfg["data"] = {"source": "default"}
    errors = check(cfg)
    assert len(errors) == 1 and errors[0].startswith(f"longctx.squad: {inputs / 'nope.json'}: no such file")


def test_local_folder_without_the_split(inputs):
    (inputs / "pp" / "validation").mkdir(parents=True)
    (inputs / "pp" / "validation" / "validation.jsonl").write_text("{}\n")
    errors = check(config(inputs, proofpile=str(inputs / "pp")))
    assert len(errors) == 1 and errors[0].startswith("longctx.proofpile:") and "'test'" in errors[0]


def test_hub_input_not_in_the_cache_is_reported_without_reading_it(inputs):
    cfg = config(inputs, pg19="hf:emozilla/pg19/data")
    assert check(cfg) == []  # its fetch job gets it
    assert experiment_inputs(load_experiment(cfg))["pg19-emozilla--pg19"].include[0] == "data/train/*"
    cfg["data"] = {"source": "default"}  # no fetch jobs: the cache must hold it
    errors = check(cfg)
    assert len(errors) == 1
    assert errors[0].startswith("longctx.pg19: hf:emozilla/pg19/data: dataset emozilla/pg19 is not in the local HF cache")
    assert str(inputs / "hfcache" / "datasets--emozilla--pg19") in errors[0]


def test_factor_must_exceed_one(inputs):
    cfg = config(inputs, factor=1, original_length=512, lengths=[512], seq_len=512, proofpile_min_tokens=512)
    cfg["scales"]["s"]["train"]["seq_len"] = 512  # so that only the factor is wrong
    with pytest.raises(ConfigError, match=r"longctx.factor: 1 is less than or equal to the minimum of 1"):
        load_experiment(cfg)  # the schema's range, before any check


def test_lengths_above_the_extended_context(inputs):
    errors = check(config(inputs, lengths=[1024, 2048], proofpile_min_tokens=2048))
    assert errors == ["longctx.lengths: [2048] exceed run a's extended context original_length 64 x factor 16 = 1024"]


def test_lengths_too_short_for_ruler(inputs):
    errors = check(config(inputs, lengths=[256, 512]))
    assert errors == ["longctx.lengths: [256] are below 512 tokens, where RULER's templates and generation "
                      "budgets (128 tokens for niah) leave no room for most tasks (run a)"]


def test_finetune_segments_longer_than_the_extended_context(inputs):
    errors = check(config(inputs, seq_len=2048))
    assert errors == ["longctx.seq_len: 2048 must lie in [2, 1024] (run a's original_length 64 x factor 16)"]


def test_original_length_beyond_pretraining(inputs):
    errors = check(config(inputs, original_length=128))
    assert errors == ["longctx.original_length: 128 exceeds run a's pretraining train.seq_len 64 "
                      "(YaRN's L0 is the context the model was trained at)"]


def test_proofpile_documents_shorter_than_the_longest_length(inputs):
    errors = check(config(inputs, proofpile_min_tokens=1000))
    assert len(errors) == 1 and errors[0].startswith("longctx.proofpile_min_tokens: 1000 is below")


def test_batch_not_divisible_over_the_finetune_processes(inputs):
    cfg = config(inputs, finetune_batch=6)
    cfg["longctx"]["resources"] = {"gpus": 4, "nodes": 1}
    errors = check(cfg)
    assert errors == ["longctx.finetune_batch: 6 segments are not divisible by longctx.micro_batch 1 x 4 "
                      "processes of the finetune job (longctx.resources) of run a"]


def test_unknown_keys_are_refused_by_the_schema(inputs):
    cfg = config(inputs)
    cfg["longctx"]["pg_19"] = "typo"
    with pytest.raises(ConfigError, match="longctx.pg_19: unknown key; allowed here: checkpoint_every"):
        load_experiment(cfg)
    bad = copy.deepcopy(config(inputs))
    bad["longctx"]["ruler_tasks"] = ["niah_single_9"]
    with pytest.raises(ConfigError, match="longctx.ruler_tasks.0"):
        load_experiment(bad)
