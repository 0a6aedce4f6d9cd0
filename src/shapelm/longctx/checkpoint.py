"""Atomic, resumable training state for the YaRN finetune (``DIR/checkpoints/step-XXXXXXXX/``).

Each checkpoint directory holds ``state.pt`` (the full model state dict, the optimizer state
keyed by parameter name as ``torch.distributed.checkpoint``'s full format -- the same as
pretraining's, so 1-process and FSDP checkpoints interchange --, step, rank 0's RNG states, the
run config as JSON) and is complete once it has its final name: it is written under a
temporary name in the same folder and renamed with ``os.replace``. Loading uses
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shapelm.errors import DataError

STATE = "state.pt"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


def rng_state() -> dict[str, Any]:
    st = {
        "torch": torch.get_rng_state(),
        "python": json.dumps(random.getstate()),
        "numpy": json.dumps(_np_state_to_json(np.random.get_state())),
    }
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st: dict[str, Any]) -> None:
    torch.set_rng_state(st["torch"])
    random.setstate(_tuples(json.loads(st["python"])))
    np.random.set_state(_np_state_from_json(json.loads(st["numpy"])))
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def _tuples(x):
    return tuple(_tuples(i) for i in x) if isinstance(x, list) else x


def _np_state_to_json(s):
    return [s[0], s[1].tolist(), int(s[2]), int(s[3]), float(s[4])]


def _np_state_from_json(s):
    return (s[0], np.array(s[1], dtype=np.uint32), s[2], s[3], s[4])


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:08d}"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        m = _STEP_DIR.match(d.name)
        if m and (d / STATE).is_file():
            out.append((int(m.group(1)), d))
    return sorted(out)


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


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
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    state = {
        "model": {k: v.detach().cpu() for k, v in model_state.items()},
        "optimizer": optimizer_state,
        "step": int(step),
        "rng": rng_state(),
        "config": json.dumps(config, sort_keys=True),
    }
    with open(tmp / STATE, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep > 0:
        for _, old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    f = Path(path) / STATE
    if not f.is_file():
        raise DataError(f"{f}: no training state")
    try:
        # mmap: an 8B state (~100 GB) is paged in as rank 0 broadcasts it, not read up front
        state = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # a truncated or foreign file
        raise DataError(f"{f}: cannot be loaded ({e})") from e
    state["config"] = json.loads(state["config"])
    return state
