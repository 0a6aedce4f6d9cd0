"""Helpers shared by the training tests (no tests here): a tiny token dir, a tiny run config,
and a driver that runs training in a fresh process (`python tests/train_helpers.py`)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB = 64
# This environment sets PYTHONDONTWRITEBYTECODE, so every process would recompile torch's
# sources (tens of seconds per import on 2 cores). Cache bytecode outside the tree instead.
PYCACHE = os.path.join(tempfile.gettempdir(), "shapelm-test-pycache")
if sys.pycache_prefix is None and sys.dont_write_bytecode:
    sys.pycache_prefix = PYCACHE
    sys.dont_write_bytecode = False
REPO = Path(__file__).resolve().parents[1]
HELPER = Path(__file__).resolve()


def make_tokens(path: Path, n_tokens: int = 20_000, seed: int = 0) -> Path:
    """A learnable stream: a repeating period-17 pattern with 5% noise."""
    from shapelm.data.tokens import write_token_dir

    rng = np.random.default_rng(seed)
    pattern = rng.integers(1, VOCAB, size=17)
    tokens = pattern[np.arange(n_tokens) % 17].copy()
    noise = rng.random(n_tokens) < 0.05
    tokens[noise] = rng.integers(1, VOCAB, size=int(noise.sum()))
    write_token_dir(path, tokens.astype(np.uint32), vocab_size=VOCAB, eos_id=0)
    return path


def run_config(steps: int = 20, **train) -> dict:
    """2 layers, d_model 32, seq 16, 8 sequences per step, 2 micro batches of 4."""
    cfg = {
        "name": "tiny",
        "model": {
            "vocab_size": VOCAB,
            "d_model": 32,
            "layers": [{"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 16},
                        "ffn_widths": [64]}] * 2,
            "max_seq_len": 64,
            "qk_norm": True,
        },
        "train": {
            "lr": 3e-3,
            "warmup_tokens": 2 * 8 * 16,
            "total_tokens": steps * 8 * 16,
            "batch_tokens": 8 * 16,
            "seq_len": 16,
            "micro_batch_size": 4,
            "checkpoint_every": 5,
            "keep_last": 2,
            "log_every": 1,
        },
        "data": {},
    }
    cfg["train"].update(train)
    return copy.deepcopy(cfg)


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                "PYTHONPYCACHEPREFIX": PYCACHE})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg))
    return path


def driver_cmd(config: Path, out: Path, data: Path, delay: float = 0.0, cli: bool = False) -> list[str]:
    return [sys.executable, str(HELPER), str(config), str(out), str(data), str(delay),
            "cli" if cli else "api"]


def run_driver(config: Path, out: Path, data: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(driver_cmd(config, out, data, **kw), env=child_env(),
                          capture_output=True, text=True, timeout=300)


def wait_for_step(metrics: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    """Poll metrics.jsonl until it records `step` (returns the latest step seen)."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.returncode}\n{proc.stderr.read()}")
        if metrics.exists():
            steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached in {timeout}s")


def load_final(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "final" / "model.safetensors"))


def _main(argv: list[str]) -> int:
    import functools

    import torch

    torch.set_num_threads(1)
    config, out, data, delay, mode = argv
    delay = float(delay)
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
    if os.environ.get("SHAPELM_TEST_DISK_FULL_ON_RANK") == rank:  # this rank's disk is full
        import errno

        from shapelm.train import checkpoint as ckpt

        def full(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        ckpt._HashingWriter.write = full
    import shapelm.train.loop as loop

    hook = (lambda record: time.sleep(delay)) if delay > 0 else None
    if mode == "cli":  # the real `shapelm train` path, with a slowed-down loop
        loop.train = functools.partial(loop.train, on_step=hook)
        from shapelm.cli import main

        return main(["train", config, "--out", out, "--data", data, "--no-progress"])
    from shapelm.config import load_run_config

    result = loop.train(load_run_config(config), out, data_dir=data, progress=False, on_step=hook)
    return result.exit_code


def free_port() -> int:
    """A TCP port free on this host now (for a rendezvous of processes started by hand)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, *args: str, **env) -> subprocess.Popen:
    """`torchrun --standalone --nproc-per-node NPROC ARGS`, its ranks forked from a process that
    has imported torch and the trainer (warm_torchrun.py: torchrun's agent, ~3 s less CPU a rank)."""
    return subprocess.Popen(
        [sys.executable, str(HELPER.with_name("warm_torchrun.py")), str(nproc), *args],
        env=child_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def metrics(out: Path) -> list[dict]:
    """Every record of a run's metrics.jsonl, as written (a torn line fails the test)."""
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
