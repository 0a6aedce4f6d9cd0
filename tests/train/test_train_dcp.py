"""Sharded (torch.distributed.checkpoint) checkpoints under FSDP2, on gloo: 4 ranks train and
stop; the run resumes on 2 ranks (DCP reshards) with the next-step loss of the uninterrupted
4-rank run; a flipped byte in a shard falls back to the previous checkpoint; one process reads
the sharded model state."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

# Also run as a torchrun script, whose path starts at this folder: the helpers are one up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_helpers import flip_byte, load_final, make_tokens, metrics, run_config, torchrun, write_config

from shapelm.train import checkpoint as ckpt

STEPS, STOP = 4, 2
THIS = Path(__file__).resolve()


def config(nproc: int, background: bool = False) -> dict:
    # 8 sequences per step: 4 ranks x 2 micro batches of 1, 2 ranks x 2 x 2
    return run_config(steps=STEPS, checkpoint_every=1, distributed="fsdp",
                      micro_batch_size=8 // (2 * nproc), async_checkpoint=background)


def launch(nproc: int, root: Path, out: Path, tokens: Path, max_steps: int, background=False):
    cfg = write_config(root / f"{out.name}-{nproc}.json", config(nproc, background))
    return torchrun(nproc, str(THIS), str(cfg), str(out), str(tokens), str(max_steps))


def finish(procs: dict) -> dict[str, str]:
    """Wait for every launch; their combined output by name."""
    logs = {}
    for name, p in procs.items():
        logs[name], _ = p.communicate(timeout=500)
        assert p.returncode == 0, f"{name} failed:\n{logs[name][-4000:]}"
    return logs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dcp")
    tokens = make_tokens(root / "tok")
    # the interrupted run saves in the background (step 1's shards are written while step 2
    # trains); the reference saves synchronously
    finish({"reference": launch(4, root, root / "reference", tokens, STEPS),
            "stopped": launch(4, root, root / "stopped", tokens, STOP, background=True)})
    shutil.copytree(root / "stopped", root / "corrupt")
    shard = root / "corrupt" / "checkpoints" / "step-00000002" / "dcp" / "__1_0.distcp"
    flip_byte(shard, shard.stat().st_size // 2)
    logs = finish({"resumed": launch(2, root, root / "stopped", tokens, STEPS, background=True),
                   "corrupt": launch(2, root, root / "corrupt", tokens, STEPS)})
    return root, logs


@pytest.mark.parametrize(("name", "ranks"), [("reference", 4), ("stopped", 2)])
def test_sharded_layout_and_manifest(runs, name, ranks):
    root, _ = runs
    ckpts = ckpt.list_checkpoints(root / name)
    assert [s for s, _ in ckpts] == [2, 3]  # keep_last 2; step 4 is final/
    path = ckpts[-1][1]  # written by the 4-rank reference, by 2 ranks in the background
    meta = json.loads((path / "meta.json").read_text())
    assert meta["checkpoint_format"] == "sharded" and meta["world_size"] == ranks
    assert not (path / "model.pt").exists() and not (path / "optimizer.pt").exists()
    shards = {f"dcp/__{r}_0.distcp" for r in range(ranks)}
    assert set(meta["sha256"]) == set(meta["files"]) >= shards | {"dcp/.metadata", "trainer.pt"}
    assert ckpt.problem(path) is None
    assert not any(p.name.startswith(".tmp-") for p in path.parent.iterdir())


def test_resume_on_two_ranks_continues_the_four_rank_run(runs):
    root, logs = runs
    ref, got = metrics(root / "reference"), metrics(root / "stopped")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert "resumed from" in logs["resumed"] and "step-00000002" in logs["resumed"]
    assert "step 3: shards being written in the background" in logs["resumed"]
    for a, b in zip(ref[STOP:], got[STOP:]):  # the next step and the rest
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    final_ref, final = load_final(root / "reference"), load_final(root / "stopped")
    for key in final_ref:
        torch.testing.assert_close(final[key], final_ref[key], rtol=1e-5, atol=2e-6, msg=key)


def test_flipped_byte_in_a_shard_falls_back_to_the_previous_checkpoint(runs):
    root, logs = runs
    assert "step-00000002/dcp/__1_0.distcp: sha256" in logs["corrupt"]
    assert "resumed from" in logs["corrupt"] and "step-00000001" in logs["corrupt"]
    ref, got = metrics(root / "reference"), metrics(root / "corrupt")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for a, b in zip(ref[1:], got[1:]):  # step 2 recomputed from step 1's checkpoint
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)


def test_one_process_reads_the_sharded_model_state(runs):
    root, _ = runs
    # read back without a process group: step 3 written by 4 ranks, and by 2 ranks after the
    # resume, and step 2 by 4 ranks
    a = ckpt.load_model_state(root / "reference" / "checkpoints" / "step-00000003")
    b = ckpt.load_model_state(root / "stopped" / "checkpoints" / "step-00000003")
    c = ckpt.load_model_state(root / "reference" / "checkpoints" / "step-00000002")
    from shapelm.config import TrainRecipe
    from shapelm.model.config import ModelConfig
    from shapelm.train.parallel import initial_state

    cfg = config(4)
    init = initial_state(ModelConfig.from_dict(cfg["model"]), TrainRecipe.from_dict(cfg["train"]))
    assert a.keys() == b.keys() == c.keys() == init.keys()
    for key in init:
        assert a[key].shape == init[key].shape and a[key].dtype == torch.float32, key
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=2e-6, msg=key)
    assert not torch.equal(c["lm_head.weight"], init["lm_head.weight"])  # trained
    assert not torch.equal(a["lm_head.weight"], c["lm_head.weight"])  # steps 3 and 2 differ


@pytest.mark.parametrize("background", [False, True])
def test_a_rank_that_cannot_write_its_shard_stops_every_rank(tmp_path, background):
    tokens = make_tokens(tmp_path / "tok")
    cfg = write_config(tmp_path / "run.json", config(2, background))
    proc = torchrun(2, str(THIS), str(cfg), str(tmp_path / "run"), str(tokens), str(STEPS),
                    SHAPELM_TEST_DCP_FULL_ON_RANK="1")
    out, _ = proc.communicate(timeout=300)  # no rank waits forever for the other
    assert proc.returncode != 0
    assert "checkpoints/.tmp-step-00000001/dcp: cannot write" in out, out[-3000:]
    assert "No space left on device" in out
    assert ckpt.list_checkpoints(tmp_path / "run") == []


def _train_on_ranks(config_path: str, out: str, tokens: str, max_steps: str) -> int:
    """torchrun entry: train (FSDP2 on gloo) until `max_steps`."""
    import logging

    from shapelm.config import load_run_config
    from shapelm.train import train

    logging.basicConfig(level=logging.INFO)  # the resume and fallback messages, for the test
    if os.environ.get("SHAPELM_TEST_DCP_FULL_ON_RANK") == os.environ["RANK"]:  # disk full here
        import errno

        from torch.distributed.checkpoint.filesystem import FileSystemWriter

        def full(self, plan, planner):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        FileSystemWriter.write_data = full
    torch.set_num_threads(1)
    result = train(load_run_config(config_path), Path(out), data_dir=Path(tokens),
                   progress=False, max_steps=int(max_steps))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(_train_on_ranks(*sys.argv[1:]))
