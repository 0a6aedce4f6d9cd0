"""Resumable training checkpoints: `DIR/checkpoints/step-XXXXXXXX/`.

Layout of one checkpoint (every `.pt` file loads with `torch.load(..., weights_only=True)`):

    model.pt            full (unsharded) model state dict, float32, keyed by parameter name
    optimizer.pt        full AdamW state dict keyed by parameter name
                        (`torch.distributed.checkpoint.state_dict` format: world-size and
                        DDP/FSDP independent)
    trainer.pt          {"step", "tokens", "next_instance", "scheduler": {...},
                         "recipe_hash", "world_size", "format"}
    rng-rank00000.pt    one per rank: python / numpy / torch CPU / CUDA generator states
    meta.json           human-readable summary and the byte size of every file above;
                        written last

A checkpoint is written into `checkpoints/.tmp-step-XXXXXXXX/`, every file is fsynced, then
the directory is renamed to `step-XXXXXXXX` (atomic on POSIX file systems) and the parent is
fsynced. So a `step-*` directory is always complete; a leftover `.tmp-*` directory (a writer
killed mid-save) is ignored and removed at the next start.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

FORMAT = "shapelm-train-ckpt-v1"
STEP_RE = re.compile(r"^step-(\d{8})$")
MAIN_FILES = ("model.pt", "optimizer.pt", "trainer.pt")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def save_torch(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def load_torch(path: Path, mmap: bool = False) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


# -- RNG ----------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """Every generator's state as tensors and plain types (weights_only-loadable)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_tuplify(state["python"]))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state.get("cuda"):
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            torch.cuda.set_rng_state(cuda[torch.cuda.current_device() % len(cuda)])


def _tuplify(x):
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    if isinstance(x, tuple):
        return tuple(_tuplify(v) for v in x)
    return x


# -- directory management -----------------------------------------------------------------------
def checkpoints_root(out_dir: Path) -> Path:
    return Path(out_dir) / "checkpoints"


def list_checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (step, path), oldest first."""
    root = checkpoints_root(out_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = STEP_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def is_valid(path: Path, world_size: int | None = None) -> bool:
    """A checkpoint is usable if meta.json parses and every file it lists has its size."""
    try:
        meta = json.loads((path / "meta.json").read_text())
        for name, size in meta["files"].items():
            if (path / name).stat().st_size != size:
                return False
        return all(name in meta["files"] for name in MAIN_FILES)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def latest_valid(out_dir: Path) -> tuple[int, Path] | None:
    for step, path in reversed(list_checkpoints(out_dir)):
        if is_valid(path):
            return step, path
        log.warning("%s: incomplete or corrupt checkpoint, skipped", path)
    return None


def clean_temporaries(out_dir: Path) -> list[Path]:
    """Remove leftovers of interrupted saves or deletions (`.tmp-*`); returns what was removed."""
    root = checkpoints_root(out_dir)
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(".tmp-") or p.name.startswith(".del-"):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def prune(out_dir: Path, keep_last: int, protect: int) -> list[int]:
    """Keep the newest `keep_last` valid checkpoints (at least one) and step `protect`."""
    keep_last = max(1, keep_last)
    valid = [(s, p) for s, p in list_checkpoints(out_dir) if is_valid(p)]
    keep = {s for s, _ in valid[-keep_last:]} | {protect}
    removed = []
    for step, path in list_checkpoints(out_dir):
        if step in keep or step > protect:
            continue
        # rename first, so that a deletion killed half way never looks like a checkpoint
        trash = path.with_name(f".del-{path.name}")
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(step)
    return removed


def begin_save(out_dir: Path, step: int) -> Path:
    """Rank 0: a fresh temporary directory for the checkpoint of `step`."""
    root = checkpoints_root(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{step_dir_name(step)}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def finish_save(tmp: Path, step: int, meta: dict[str, Any]) -> Path:
    """Rank 0, after every rank has written its files into `tmp`: seal and rename."""
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
    meta = {"format": FORMAT, "step": step, "time": time.time(), **meta, "files": files}
    meta_path = tmp / "meta.json"
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    fsync_path(tmp)
    final = tmp.parent / step_dir_name(step)
    if final.exists():  # re-saving a step (e.g. SIGTERM right after a periodic save)
        trash = final.with_name(f".del-{final.name}")
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(tmp, final)
    fsync_path(tmp.parent)
    return final
