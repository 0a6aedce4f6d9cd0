"""FSDP2 with deferred gradient sync, HSDP (2-D mesh) and per-shard seeded init, on gloo.

Every run is launched with torchrun at once (2 ranks FSDP, 4 ranks HSDP as 2 emulated nodes of 2,
each with 2 micro batches per rank, so gradient sync is deferred to the last), while the
single-process reference runs here; their loss trajectories must agree to float tolerance."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

# Also run as a torchrun script, whose path starts at this folder: the helpers are one up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_helpers import (
    HELPER,
    load_final,
    make_tokens,
    metrics,
    run_config,
    torchrun,
    write_config,
)

from shapelm.train import train

STEPS = 4
THIS = Path(__file__).resolve()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    tokens = make_tokens(root / "tok")
    configs = {  # 8 sequences per step
        "fsdp2": (2, run_config(steps=STEPS, micro_batch_size=2, distributed="fsdp"), {}),
        "hsdp4": (4, run_config(steps=STEPS, micro_batch_size=1, distributed="hsdp"),
                  {"SHAPELM_SHARD_SIZE": "2"}),
    }
    procs = {name: torchrun(n, str(HELPER), str(write_config(root / f"{name}.json", cfg)),
                            str(root / name), str(tokens), "0", "api", **env)
             for name, (n, cfg, env) in configs.items()}
    procs["init"] = torchrun(2, str(THIS), str(root / "init2.pt"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(run_config(steps=STEPS), root / "single", data_dir=tokens, progress=False)
    finally:
        torch.set_num_threads(n)
    for name, p in procs.items():
        out, _ = p.communicate(timeout=500)
        assert p.returncode == 0, f"{name} failed:\n{out[-4000:]}"
    return root


@pytest.mark.parametrize("name", ["fsdp2", "hsdp4"])
def test_sharded_training_matches_one_process(runs, name):
    ref, got = metrics(runs / "single"), metrics(runs / name)
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for a, b in zip(ref, got):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    final_ref, final = load_final(runs / "single"), load_final(runs / name)
    for key in final_ref:
        torch.testing.assert_close(final[key], final_ref[key], rtol=1e-5, atol=2e-6, msg=key)
    manifest = json.loads((runs / name / "manifest.json").read_text())
    assert manifest["recipe"]["grad_accumulation"] == 2


def test_seeded_init_is_the_same_on_one_and_two_ranks(runs):
    from shapelm.config import TrainRecipe
    from shapelm.model.config import ModelConfig
    from shapelm.train.parallel import initial_state

    cfg = run_config(steps=STEPS)
    one = initial_state(ModelConfig.from_dict(cfg["model"]), TrainRecipe.from_dict(cfg["train"]))
    two = torch.load(runs / "init2.pt", weights_only=True)
    assert one.keys() == two.keys()
    for key in one:
        assert torch.equal(one[key], two[key]), key
    other = initial_state(ModelConfig.from_dict(cfg["model"]),
                          TrainRecipe.from_dict({**cfg["train"], "seed": 1}))
    assert not torch.equal(other["lm_head.weight"], one["lm_head.weight"])


def _init_on_ranks(path: str) -> None:
    """torchrun entry: build the FSDP2-sharded model from the seed and save the gathered state."""
    from shapelm.config import TrainRecipe
    from shapelm.model.config import ModelConfig
    from shapelm.train.distributed import process_group
    from shapelm.train.parallel import build_parallel, full_model_state

    torch.set_num_threads(1)
    cfg = run_config(steps=STEPS, distributed="fsdp")
    recipe = TrainRecipe.from_dict(cfg["train"])
    with process_group("cpu") as env:
        model, _ = build_parallel(ModelConfig.from_dict(cfg["model"]), recipe, env, None, None)
        state = full_model_state(model, recipe, env)
        if env.is_main:
            torch.save(state, path)


if __name__ == "__main__":
    _init_on_ranks(sys.argv[1])
