"""Resumable training state of the YaRN finetune: pretraining's checkpoint layout.

``DIR/checkpoints/step-XXXXXXXX/`` is written by `shapelm.train.checkpoint` (one module for
both): ``model.pt`` (the full model state dict), ``optimizer.pt`` (the optimizer state keyed by
parameter name, ``torch.distributed.checkpoint``'s full format, so 1-process and FSDP
checkpoints interchange), ``trainer.pt`` (step and the finetune config as JSON),
``rng-rank00000.pt`` (rank 0's generators) and ``meta.json`` (sizes and sha256s), sealed by an
atomic rename. A checkpoint that is truncated or altered is skipped, with a warning, in favour
of the previous one. Loading uses ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from shapelm.errors import DataError
from shapelm.train import checkpoint as ckpt
from shapelm.train.checkpoint import list_checkpoints, set_rng_state

__all__ = ["checkpoint_dir", "latest_checkpoint", "list_checkpoints", "load_checkpoint",
           "save_checkpoint", "set_rng_state"]

FORMAT = "shapelm-yarn-ckpt-v2"


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return ckpt.checkpoints_root(Path(run_dir)) / ckpt.step_dir_name(step)


def latest_checkpoint(run_dir: str | os.PathLike, verify: bool = True) -> Path | None:
    """The newest usable checkpoint (`verify`: by sha256, else by size). With `verify`, as at
    a (re)start, leftovers of saves killed half way are removed first."""
    if verify:
        ckpt.clean_temporaries(Path(run_dir))
    found = ckpt.latest_valid(Path(run_dir), verify=verify)
    return found[1] if found else None


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
    config: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write step ``step`` atomically and keep only the newest ``keep`` checkpoints.

    ``model_state`` / ``optimizer_state``: full CPU state dicts (``shapelm.train.loop.
    full_model_state`` / ``full_optimizer_state``)."""
    run_dir = Path(run_dir)
    tmp = ckpt.begin_save(run_dir, step)
    digests = {
        "model.pt": ckpt.save_torch({k: v.detach().cpu() for k, v in model_state.items()},
                                    tmp / "model.pt"),
        "optimizer.pt": ckpt.save_torch(optimizer_state, tmp / "optimizer.pt"),
        "trainer.pt": ckpt.save_torch({"format": FORMAT, "step": int(step),
                                       "config": json.dumps(config, sort_keys=True)},
                                      tmp / "trainer.pt"),
    }
    ckpt.save_torch(ckpt.rng_state(), tmp / "rng-rank00000.pt")
    final = ckpt.finish_save(tmp, step, {"kind": "yarn_finetune"}, digests)
    if keep > 0:
        ckpt.prune(run_dir, keep, protect=step)
    return final


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """{"model", "optimizer", "step", "rng", "config"} of the checkpoint at `path`."""
    path = Path(path)
    try:
        # mmap: an 8B state (~100 GB) is paged in as rank 0 broadcasts it, not read up front
        trainer = ckpt.load_torch(path / "trainer.pt")
        state = {
            "model": ckpt.load_torch(path / "model.pt", mmap=True),
            "optimizer": ckpt.load_torch(path / "optimizer.pt", mmap=True),
            "rng": ckpt.load_torch(path / "rng-rank00000.pt"),
        }
    except Exception as e:  # a truncated or foreign file
        raise DataError(f"{path}: cannot be loaded ({e})") from e
    state.update(step=int(trainer["step"]), config=json.loads(trainer["config"]))
    return state
