"""Checkpoint save time, sharded vs gathered, for a ~300M-parameter model on 2 gloo ranks.

    .venv/bin/python benchmarks/checkpoint_save.py [--ranks 2] [--layers 12] [--with-optimizer]

Launches itself under torchrun (CPU, gloo). The model (d_model 1024, 12 layers of d_h 4096,
vocabulary 50,304: ~300M parameters) is built the trainer's way (shapelm.train.parallel:
meta build, FSDP2, each rank initialising its own shard), then saved three ways, side by side:

* ``gathered``: the trainer's ``train.checkpoint_format: full`` (the DDP default): the full
  state gathered to rank 0 (``full_model_state``) and written there with one fsynced
  ``torch.save`` while the other rank waits;
* ``sharded``: ``torch.distributed.checkpoint.save``: every rank writes its own shard (the
  trainer's ``sharded`` format, the FSDP/HSDP default);
* ``async``: ``torch.distributed.checkpoint.async_save`` (``train.async_checkpoint: true``): the
  time training is blocked (the copy to host memory) and the time until the files are complete.

Not a test: wall-clock times on a shared machine. Model weights only unless --with-optimizer
(AdamW moments triple the bytes; mind the host memory of a small VM).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _worker(args) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from shapelm.config import TrainRecipe
    from shapelm.model.config import ModelConfig
    from shapelm.train import checkpoint as ckpt
    from shapelm.train.distributed import barrier, process_group
    from shapelm.train.parallel import (
        build_parallel,
        full_model_state,
        full_optimizer_state,
        make_optimizer,
    )

    torch.set_num_threads(1)
    layer = {"attention": {"n_heads": 16, "n_kv_heads": 16, "head_dim": 64}, "ffn_widths": [4096]}
    cfg = ModelConfig(vocab_size=50304, d_model=1024, layers=[layer] * args.layers)
    recipe = TrainRecipe.from_dict({"batch_tokens": 4096, "seq_len": 1024, "total_tokens": 8192,
                                    "distributed": "fsdp"})
    with process_group("cpu") as env:
        t0 = time.perf_counter()
        model, _ = build_parallel(cfg, recipe, env, None, None)
        optimizer = make_optimizer(model, recipe, env, fsdp=True) if args.with_optimizer else None
        if optimizer is not None:
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            optimizer.step()
        built = time.perf_counter() - t0
        root = Path(args.dir)
        times = {}

        barrier(env)
        t0 = time.perf_counter()
        state = {"model": full_model_state(model, recipe, env)}
        if optimizer is not None:
            state["optimizer"] = full_optimizer_state(model, optimizer, recipe, env)
        if env.is_main:
            ckpt.save_torch(state, root / "gathered.pt")
        del state
        barrier(env)
        times["gathered"] = time.perf_counter() - t0

        def sharded_state():
            msd, osd = get_state_dict(model, optimizer or [])
            return {"model": msd, **({"optimizer": osd} if optimizer is not None else {})}

        barrier(env)
        t0 = time.perf_counter()
        dcp.save(sharded_state(), checkpoint_id=str(root / "sharded"))
        barrier(env)
        times["sharded"] = time.perf_counter() - t0

        barrier(env)
        t0 = time.perf_counter()
        future = dcp.async_save(sharded_state(), checkpoint_id=str(root / "async"))
        times["async_blocked"] = time.perf_counter() - t0
        future.result()
        barrier(env)
        times["async_done"] = time.perf_counter() - t0

        if env.is_main:
            n = sum(p.numel() for p in model.parameters())
            size = (root / "gathered.pt").stat().st_size
            print(f"{n / 1e6:.0f}M parameters on {env.world_size} gloo ranks (built and initialised "
                  f"per shard in {built:.1f} s); {size / 1e9:.2f} GB per checkpoint"
                  f"{' with AdamW moments' if optimizer is not None else ' (weights only)'}")
            print(f"{'method':<28} {'seconds':>8} {'vs gathered':>12}")
            labels = {"gathered": "gathered to rank 0 + torch.save", "sharded": "dcp.save (sharded)",
                      "async_blocked": "dcp.async_save: blocked", "async_done": "dcp.async_save: complete"}
            for key, label in labels.items():
                print(f"{label:<28} {times[key]:>8.2f} {times[key] / times['gathered']:>11.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--with-optimizer", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(args.ranks), __file__, "--worker", "--dir", tmp, "--layers", str(args.layers)]
        if args.with_optimizer:
            cmd.append("--with-optimizer")
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
