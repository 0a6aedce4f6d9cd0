"""Two CPU processes (gloo) give the update of one process with gradient accumulation.

DDP is launched with `torchrun`, FSDP2 through the srun path (SLURM_* variables only), both at
once; the single-process reference runs in this process meanwhile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from shapelm.train import train
from train_helpers import (
    free_port,
    HELPER,
    child_env,
    load_final,
    make_tokens,
    run_config,
    write_config,
)
from train_helpers import metrics as all_metrics

STEPS = 6
# Validation at steps 3 and 6 on a 25-instance held-out split: 13 chunks over 2 ranks under DDP
# (one rank repeats a forward), 7 under FSDP (the last one padded).
VAL = dict(eval_every=3 * 128, eval_heldout_sequences=25)


def metrics(out, kind=None):
    """The run's records of one kind (None: the step records)."""
    return [r for r in all_metrics(out) if r.get("kind") == kind]
def assert_close(a, b):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=2e-6, msg=k)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    tokens = make_tokens(root / "tok")
    ddp_cfg = run_config(steps=STEPS, micro_batch_size=2, **VAL)  # 2 ranks x 2 micro batches of 2
    fsdp_cfg = run_config(steps=STEPS, micro_batch_size=4, distributed="fsdp", **VAL)  # 2 ranks x 1 x 4
    args = lambda name, cfg: [str(write_config(root / f"{name}.json", cfg)), str(root / name),  # noqa: E731
                              str(tokens), "0", "api"]
    procs = {
        "ddp": [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             str(HELPER), *args("ddp", ddp_cfg)],
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)],
        "fsdp": [],
    }
    port = str(free_port())
    fsdp_args = args("fsdp", fsdp_cfg)
    for rank in range(2):  # what `srun --ntasks 2` sets; no RANK / WORLD_SIZE
        env = child_env(SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2", SLURM_PROCID=str(rank),
                        SLURM_LOCALID=str(rank), SLURM_JOB_NODELIST="localhost",
                        SLURM_JOB_ID="4242", MASTER_PORT=port)
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
            env.pop(key, None)
        procs["fsdp"].append(subprocess.Popen([sys.executable, str(HELPER), *fsdp_args], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = root / "single"
        train(run_config(steps=STEPS, micro_batch_size=4, **VAL), ref, data_dir=tokens, progress=False)
    finally:
        torch.set_num_threads(n)
    for name, group in procs.items():
        for p in group:
            out, _ = p.communicate(timeout=400)
            assert p.returncode == 0, f"{name} rank failed:\n{out[-4000:]}"
    return root, tokens


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_processes_match_one(runs, mode):
    root, _ = runs
    ref, out = root / "single", root / mode
    assert_close(load_final(ref), load_final(out))
    a, b = metrics(ref), metrics(out)
    assert [r["step"] for r in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5)
        assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-4)
    va, vb = metrics(ref, "val"), metrics(out, "val")
    assert [r["step"] for r in vb] == [3, 6]
    for x, y in zip(va, vb):
        assert y["train_heldout"]["n_tokens"] == x["train_heldout"]["n_tokens"] == 25 * 15
        assert y["train_heldout"]["loss"] == pytest.approx(x["train_heldout"]["loss"], rel=1e-5)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hardware"]["world_size"] == 2
    assert manifest["hardware"]["launcher"] == ("torchrun" if mode == "ddp" else "srun")
    assert manifest["recipe"]["grad_accumulation"] == (2 if mode == "ddp" else 1)


def test_fsdp_checkpoint_resumes_in_one_process(runs, tmp_path):
    """A 2-rank FSDP checkpoint (sharded, torch.distributed.checkpoint) resumes on 1 process."""
    root, tokens = runs
    out = tmp_path / "run"
    shutil.copytree(root / "fsdp" / "checkpoints", out / "checkpoints")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = run_config(steps=STEPS, micro_batch_size=4, distributed="fsdp")
        result = train(cfg, out, data_dir=tokens, progress=False)
    finally:
        torch.set_num_threads(n)
    assert result.status == "completed"
    assert_close(load_final(root / "single"), load_final(out))
