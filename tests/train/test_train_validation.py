"""Validation during training (train.eval_every): the held-out split of the training stream is
never trained on, evaluations land at the right steps, a resumed run writes the same records as
an uninterrupted one. (Two gloo ranks writing the records of one process: the DDP and FSDP runs
of tests/train/test_train_distributed.py evaluate too.)"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from shapelm.config import TrainRecipe
from shapelm.plan.experiment import load_experiment
from shapelm.data.tokens import TokenStore, write_token_dir
from shapelm.errors import ConfigError, DataError
from shapelm.train import train
from shapelm.train.distributed import DistEnv
from shapelm.train.evaluator import HELDOUT_SPLIT, due_steps, heldout_split, is_due
from shapelm.train.loop import grad_accumulation, micro_batches
from train_helpers import make_tokens, run_config

EVAL = dict(eval_every=5 * 128, eval_heldout_sequences=13, eval_max_instances=10)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("valdata")
    return make_tokens(root / "tok"), make_tokens(root / "val", n_tokens=3000, seed=1)


def val_records(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("time", "seconds")}
            for r in rows if r.get("kind") == "val"]


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
    tok, val = data
    out = tmp_path_factory.mktemp("full") / "run"
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(run_config(**EVAL), out, data_dir=tok, progress=False, val_dirs=[val])
    finally:
        torch.set_num_threads(n)
    return out


def test_results_read_the_split_by_the_trainers_name():
    from shapelm.results.readers import HELDOUT_SPLIT as READ

    assert READ == HELDOUT_SPLIT


def test_due_steps():
    r = TrainRecipe.from_dict({"total_tokens": 20 * 128, "batch_tokens": 128, "seq_len": 16,
                               "eval_every": 300})
    # the first update at or past each multiple of 300 tokens (384, 640, 1024, ...), and the last
    assert due_steps(r) == [3, 5, 8, 10, 12, 15, 17, 19, 20]
    assert not any(is_due(s, TrainRecipe.from_dict({"total_tokens": 256, "batch_tokens": 128,
                                                    "seq_len": 16}), 2) for s in (1, 2))


def test_heldout_split_is_never_trained_on(tmp_path):
    """Every instance holds its own index as tokens: the instances the batches of every step
    read, at 1, 2 and 4 ranks, are exactly [0, T*B), and the split is the n after them."""
    seq, steps, bsz, n = 8, 6, 8, 5
    ids = np.repeat(np.arange(steps * bsz + n + 3, dtype=np.uint32), seq)
    write_token_dir(tmp_path / "tok", ids, vocab_size=int(ids.max()) + 1, eos_id=0)
    store = TokenStore(tmp_path / "tok")
    recipe = TrainRecipe.from_dict({"total_tokens": steps * bsz * seq, "batch_tokens": bsz * seq,
                                    "seq_len": seq, "micro_batch_size": 2, "eval_every": bsz * seq,
                                    "eval_heldout_sequences": n})
    first, count = heldout_split(recipe)
    assert (first, count) == (steps * bsz, n)
    split = set(range(first, first + count))
    for world in (1, 2, 4):
        seen: list[int] = []
        for step in range(1, steps + 1):
            for rank in range(world):
                env = DistEnv(rank=rank, world_size=world, local_rank=rank,
                              device=torch.device("cpu"), launcher="test")
                batches, _ = micro_batches(store, step, recipe, env, grad_accumulation(recipe, world))
                for x, _ in batches:
                    assert (x == x[:, :1]).all()  # one instance per row
                    seen += x[:, 0].tolist()
        assert sorted(seen) == list(range(steps * bsz)), world
        assert not split & set(seen)
    from shapelm.train.evaluator import Evaluator

    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), launcher="test")
    (s,) = Evaluator(recipe, store, [], env, vocab_size=store.vocab_size).sets
    got = store.read(s.first * seq, s.n * seq).reshape(s.n, seq)[:, 0]
    assert s.name == HELDOUT_SPLIT and set(got.tolist()) == split


def test_records_at_the_right_steps(full_run, data):
    recs = val_records(full_run)
    assert [r["step"] for r in recs] == [5, 10, 15, 20]
    last = recs[-1]
    assert last["tokens"] == 20 * 128
    held = last[HELDOUT_SPLIT]
    assert held["n_instances"] == 13 and held["n_tokens"] == 13 * 15
    assert held["ppl"] == pytest.approx(np.exp(held["loss"]))
    assert last["sets"]["val"]["n_instances"] == 10  # eval_max_instances
    assert last["aggregate"]["n_sets"] == 1
    assert recs[0][HELDOUT_SPLIT]["loss"] > held["loss"]  # it learns the pattern
    manifest = json.loads((full_run / "manifest.json").read_text())
    assert [s["name"] for s in manifest["validation"]["sets"]] == [HELDOUT_SPLIT, "val"]
    assert manifest["validation"]["sets"][0]["first_instance"] == 20 * 8
    # the last evaluation is `shapelm eval ppl`'s number for the final model
    from shapelm.evaluation.ppl import evaluate_perplexity
    from shapelm.model import load_pretrained

    ref = evaluate_perplexity(load_pretrained(full_run / "final"), [data[1]], seq_len=16,
                              max_instances=10, progress=False)
    assert last["sets"]["val"]["loss"] == pytest.approx(ref["sets"]["val"]["loss"], rel=1e-5)


def test_resume_repeats_and_skips_nothing(full_run, data, tmp_path):
    """Stopped at step 12 (checkpoints 10 and 12), the newest checkpoint lost: the run resumes at
    10 with metrics.jsonl holding records up to 12, and ends with the uninterrupted records."""
    tok, val = data
    out = tmp_path / "run"
    first = train(run_config(**EVAL), out, data_dir=tok, progress=False, val_dirs=[val], max_steps=12)
    assert first.status == "stopped"
    shutil.rmtree(out / "checkpoints" / "step-00000012")
    train(run_config(**EVAL), out, data_dir=tok, progress=False, val_dirs=[val])
    assert val_records(out) == val_records(full_run)


def test_errors_name_the_key(data, tmp_path):
    tok, _ = data
    with pytest.raises(ConfigError, match="eval_heldout_sequences"):
        TrainRecipe.from_dict({"total_tokens": 256, "batch_tokens": 128, "seq_len": 16,
                               "eval_heldout_sequences": -1})
    with pytest.raises(ConfigError, match="nothing to evaluate"):
        train(run_config(eval_every=128), tmp_path / "a", data_dir=tok, progress=False)
    with pytest.raises(DataError, match="train.eval_heldout_sequences=10,000"):
        train(run_config(eval_every=128, eval_heldout_sequences=10_000), tmp_path / "b",
              data_dir=tok, progress=False)
    raw = {"name": "x", "scales": {"s": {"train": {"total_tokens": 256, "batch_tokens": 128,
                                                   "seq_len": 16, "eval_every": "often"}}},
           "runs": {"r": {"scale": "s", "arch": {"kind": "conventional", "d_model": 32,
                                                  "n_layers": 1, "d_h": 64, "n_heads": 2,
                                                  "vocab_size": 64}}}}
    with pytest.raises(ConfigError, match="scales.s.train.eval_every"):
        load_experiment(raw)


def test_data_choices_slice_the_split():
    from shapelm.data.choices import source_tokens, stream_tokens

    raw = {"train_defaults": {"seq_len": 1024},
           "scales": {"s": {"train": {"total_tokens": "5.1e9", "eval_heldout_sequences": 9766}}}}
    assert stream_tokens(raw, "s") == 5_100_000_000 + 9766 * 1024
    assert source_tokens(raw, "s") == stream_tokens(raw, "s")
