"""torchrun for the multi-rank tests, each rank forked from a process that has already imported
torch, its distributed checkpointing and shapelm's trainer.

The same elastic agent as `torchrun --standalone` (torch.distributed.launcher.api.elastic_launch,
a c10d rendezvous on a free local port, the same RANK/WORLD_SIZE/MASTER_* environment per rank),
with torch's "fork" start method instead of a fresh interpreter per rank: each rank skips the
~3 s of CPU that importing torch, DCP and the trainer costs (a 4-rank launch saves ~12 s; the
multi-rank tests launch 24 ranks). tests/train/test_train_distributed.py still launches the real
`torch.distributed.run`, as the workflow does.

    python warm_torchrun.py NPROC SCRIPT [ARGS...]

A rank's non-zero exit fails the launch (the agent reports it and this exits non-zero), as with
torchrun.
"""

from __future__ import annotations

import os
import runpy
import sys
import uuid

# Loaded once here, inherited by every forked rank. torch.optim's first step loads torch._dynamo.
import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch.distributed.checkpoint  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

import shapelm.train.loop  # noqa: F401


def _rank(script: str, args: list[str]) -> None:
    """One rank: run `script` as torchrun would (its folder first on sys.path, as __main__)."""
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (0, None):  # the agent sees the exit status, as torchrun's does
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(stop.code if isinstance(stop.code, int) else 1)


def main(argv: list[str]) -> int:
    nproc, script, *args = argv
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=int(nproc), run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.1, start_method="fork")
    elastic_launch(config, _rank)(os.path.abspath(script), args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
