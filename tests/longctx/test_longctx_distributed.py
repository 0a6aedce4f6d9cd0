"""YaRN finetune across processes (FSDP2 over gloo on CPU) and its preemption contract.

* 2 processes launched as `srun --ntasks 2` would (SLURM_* variables only) follow the loss
  trajectory of 1 process with accumulation, to float tolerance;
* a SIGUSR1 that reaches one rank stops both at the same step with a checkpoint and exit 138;
  the rerun continues to exactly the weights of an uninterrupted 2-process run;
* `--time-limit` stops at a step boundary (exit 138) when the time left no longer holds the
  margin plus two steps; the rerun ends with exactly the uninterrupted run's weights.

Run as a script, this file is the per-rank driver: `shapelm longctx finetune` through the CLI,
slowed down or self-signalled by a per-step hook (STOP_AT_STEP / STOP_RANK).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_helpers import free_port, child_env, metrics  # noqa: E402  (also sets up the bytecode cache)

STEPS = 6
FT_ARGS = ["--steps", str(STEPS), "--lr", "1e-3", "--batch", "4", "--micro-batch", "1", "--seq-len", "64",
           "--factor", "2", "--original", "32", "--warmup", "2", "--loss-chunk-tokens", "16",
           "--checkpoint-every", "2", "--device", "cpu"]


def finetune_config():
    from shapelm.longctx.finetune import FinetuneConfig

    return FinetuneConfig(steps=STEPS, lr=1e-3, batch=4, micro_batch=1, seq_len=64, factor=2.0, original=32,
                          warmup=2, loss_chunk_tokens=16, checkpoint_every=2, device="cpu")


def launch(root: Path, name: str, world: int = 2, **env_extra) -> list[subprocess.Popen]:
    """`world` ranks of the driver with the variables an srun step sets (no RANK/WORLD_SIZE)."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = child_env(SLURM_STEP_NUM_TASKS=str(world), SLURM_NTASKS=str(world), SLURM_PROCID=str(rank),
                        SLURM_LOCALID=str(rank), SLURM_STEP_NODELIST="localhost", SLURM_JOB_ID="4242",
                        MASTER_PORT=port, **env_extra)
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
            env.pop(key, None)
        cmd = [sys.executable, __file__, str(root / "base"), str(root / "tokens"), str(root / name)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def wait(procs: list[subprocess.Popen], name: str) -> list[int]:
    codes = []
    for p in procs:
        out, _ = p.communicate(timeout=400)
        codes.append(p.returncode)
        if p.returncode not in (0, 138):
            raise AssertionError(f"{name}: rank exited {p.returncode}:\n{out[-4000:]}")
    return codes


def final_weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "final" / "model.safetensors"))


def make_inputs(root: Path) -> None:
    from shapelm.data.tokens import write_token_dir
    from tiny_longctx import tiny_model
    from shapelm.model import save_pretrained

    save_pretrained(tiny_model(vocab_size=300, max_seq_len=32), root / "base")
    rng = np.random.default_rng(0)
    write_token_dir(root / "tokens", rng.integers(1, 300, size=20 * 64, dtype=np.uint32), 300, 0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from shapelm.longctx.finetune import yarn_finetune

    root = tmp_path_factory.mktemp("lcdist")
    make_inputs(root)
    # Both 2-process runs at once; the 1-process reference runs in this process meanwhile.
    full = launch(root, "fsdp")
    stopped = launch(root, "stopped", STOP_AT_STEP="3", STOP_RANK="1")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = yarn_finetune(root / "base", root / "tokens", root / "single", finetune_config())
    finally:
        torch.set_num_threads(n)
    assert ref.status == "completed"
    from shapelm.train.checkpoint import list_checkpoints

    codes = {"fsdp": wait(full, "fsdp"), "stopped": wait(stopped, "stopped")}
    codes["checkpoints_at_stop"] = [s for s, _ in list_checkpoints(root / "stopped")]
    codes["steps_at_stop"] = [r["step"] for r in metrics(root / "stopped")]
    shutil.copytree(root / "stopped" / "checkpoints", root / "one_after_two" / "checkpoints")
    resumed = launch(root, "stopped")  # the rerun of the same command
    torch.set_num_threads(1)
    try:  # meanwhile, the 2-rank checkpoint resumed by one process
        yarn_finetune(root / "base", root / "tokens", root / "one_after_two", finetune_config())
    finally:
        torch.set_num_threads(n)
    codes["resumed"] = wait(resumed, "resumed")
    return root, codes


def test_two_processes_follow_the_one_process_trajectory(runs):
    root, codes = runs
    assert codes["fsdp"] == [0, 0]
    a, b = metrics(root / "single"), metrics(root / "fsdp")
    assert [r["step"] for r in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b):
        assert y["lr"] == x["lr"]
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)
    one, two = final_weights(root / "single"), final_weights(root / "fsdp")
    assert one.keys() == two.keys()
    for k in one:
        torch.testing.assert_close(two[k], one[k], rtol=1e-5, atol=2e-6, msg=k)
    cfg = json.loads((root / "fsdp" / "final" / "model_config.json").read_text())
    assert cfg["rope_scaling"] == {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}
    assert json.loads((root / "fsdp" / "final" / "train_state.json").read_text())["world_size"] == 2


def test_a_signal_to_one_rank_stops_both_then_the_rerun_ends_identically(runs):
    root, codes = runs
    assert codes["stopped"] == [138, 138]  # 128 + SIGUSR1 on both ranks, although only rank 1 got it
    # both stopped at the boundary after step 3: its checkpoint (and step 2's, kept)
    assert codes["checkpoints_at_stop"] == [2, 3] and codes["steps_at_stop"] == [1, 2, 3]
    assert codes["resumed"] == [0, 0]
    assert [r["step"] for r in metrics(root / "stopped")] == list(range(1, STEPS + 1))
    ref, res = final_weights(root / "fsdp"), final_weights(root / "stopped")
    for k in ref:
        assert torch.equal(ref[k], res[k]), k


def test_a_two_rank_checkpoint_resumes_in_one_process(runs):
    root, _ = runs
    ref, res = final_weights(root / "fsdp"), final_weights(root / "one_after_two")
    for k in ref:
        torch.testing.assert_close(res[k], ref[k], rtol=1e-5, atol=2e-6, msg=k)


def test_time_limit_stops_with_a_checkpoint_and_exit_138_then_resumes_identically(runs, monkeypatch, tmp_path):
    """A fake clock: every update takes 60 s. With a 3.5-minute limit and a 45 s margin, 30 s are
    left after step 3: stop at that boundary, checkpoint step 3, exit 138 (as SIGUSR1)."""
    from shapelm.cli import main
    from shapelm.longctx import finetune
    from shapelm.train.checkpoint import list_checkpoints
    from shapelm.train.preempt import Preemption

    root, _ = runs
    clock = {"elapsed": 0.0}
    monkeypatch.setattr(Preemption, "time_left_s",
                        lambda self: None if self.time_limit_min is None else self.time_limit_min * 60 - clock["elapsed"])

    def tick(record):
        clock["elapsed"] += 60.0

    real = finetune.yarn_finetune
    monkeypatch.setattr(finetune, "yarn_finetune", functools.partial(real, on_step=tick))
    out = tmp_path / "timed"
    argv = ["longctx", "finetune", "--model", str(root / "base"), "--data", str(root / "tokens"),
            "--out", str(out), *FT_ARGS, "--time-limit", "3.5", "--stop-margin", "45"]
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the reference's thread count: a float reduction's bits depend on it
    try:
        assert main(argv) == 128 + signal.SIGUSR1
        assert list_checkpoints(out)[-1][0] == 3
        clock["elapsed"] = 0.0  # a new job, a new clock
        assert main(argv) == 0
    finally:
        torch.set_num_threads(n)
    ref, res = final_weights(root / "single"), final_weights(out)
    for k in ref:
        assert torch.equal(ref[k], res[k]), k


def test_batch_must_split_over_the_processes():
    from shapelm.errors import ConfigError
    from shapelm.longctx.finetune import FinetuneConfig, micro_batches_per_rank

    assert micro_batches_per_rank(FinetuneConfig(batch=64, micro_batch=1), 32) == 2
    with pytest.raises(ConfigError, match="finetune.batch 6 .* 4 processes"):
        micro_batches_per_rank(FinetuneConfig(batch=6, micro_batch=1), 4)


def _driver(model: str, data: str, out: str) -> int:
    """One rank: the real CLI, with a per-step hook for the tests above."""
    torch.set_num_threads(1)
    from shapelm.cli import main
    from shapelm.longctx import finetune

    stop_at, stop_rank = int(os.environ.get("STOP_AT_STEP", "0")), int(os.environ.get("STOP_RANK", "0"))
    rank = int(os.environ.get("SLURM_PROCID", "0"))

    def hook(record):
        time.sleep(0.05)  # keep the ranks' steps interleaved as on real hardware
        if stop_at and record["step"] == stop_at and rank == stop_rank:
            os.kill(os.getpid(), signal.SIGUSR1)  # as SLURM's --signal=USR1@LEAD would

    finetune.yarn_finetune = functools.partial(finetune.yarn_finetune, on_step=hook)
    return main(["longctx", "finetune", "--model", model, "--data", data, "--out", out, *FT_ARGS])


if __name__ == "__main__":
    sys.exit(_driver(*sys.argv[1:]))
