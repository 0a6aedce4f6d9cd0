"""Resumable training checkpoints: `DIR/checkpoints/step-XXXXXXXX/`.

Layout of one checkpoint (every `.pt` file loads with `torch.load(..., weights_only=True)`):

    model.pt            full (unsharded) model state dict, float32, keyed by parameter name
    optimizer.pt        full AdamW state dict keyed by parameter name
                        (`torch.distributed.checkpoint.state_dict` format: world-size and
                        DDP/FSDP independent)
    trainer.pt          {"step", "tokens", "next_instance", "scheduler": {...},
                         "recipe_hash", "world_size", "format"}
    rng-rank00000.pt    one per rank: python / numpy / torch CPU / CUDA generator states
    meta.json           human-readable summary, and the byte size and sha256 of every
                        file above; written last

Sharded checkpoints (`train.checkpoint_format: sharded`, the default under FSDP/HSDP) hold
`dcp/` instead of model.pt and optimizer.pt: the model and optimizer state written by
`torch.distributed.checkpoint`, every rank its own shards (`dcp/__RANK_N.distcp`) and rank 0
the index (`dcp/.metadata`). meta.json records `"checkpoint_format": "sharded"` and the size
and sha256 of every shard too (each rank hashes its own files). DCP reshards on load: a
checkpoint written by N ranks resumes on M, and `load_model_state` reads it in one process.
With `train.async_checkpoint` the shards are written by a thread (`dcp.async_save`); meta.json
and the rename wait for it (shapelm.train.state.PendingCheckpoint).

A checkpoint is written into `checkpoints/.tmp-step-XXXXXXXX/`, every file is fsynced, then
the directory is renamed to `step-XXXXXXXX` (atomic on POSIX file systems) and the parent is
fsynced. So a `step-*` directory is always complete; a leftover `.tmp-*` directory (a writer
killed mid-save) is ignored and removed at the next start.

On resume the newest checkpoint whose files all have the size and sha256 that `meta.json`
records is used; a newer one that is truncated, unreadable or altered (a flipped bit on disk,
a half-copied directory) is skipped with a warning naming the file. The sha256 of the large
files is computed while they are written, so saving reads nothing back. Every file of the
directory must be listed with its sha256: a checkpoint whose meta.json has no checksum list
(or leaves a file out, or lists one that is not there) is not used.

No code runs from a checkpoint. The checksums catch accidents, not an attacker: whoever can
replace a file can rewrite meta.json too. What protects the process is how files are read:
every `.pt` file with `torch.load(weights_only=True)`; DCP's index `dcp/.metadata` (a pickle)
with an unpickler that admits only DCP's own metadata classes (SAFE_DCP_GLOBALS), before any
shard is read; DCP's non-tensor items (the optimizer's hyper-parameters, stored as
`torch.save` bytes in the shards) with `weights_only=True` too (SafeLoadPlanner), where
torch's own planner would unpickle them freely.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shapelm.data.tokens import sha256_file
from shapelm.errors import ShapelmError
from shapelm.files import fsync_path

log = logging.getLogger(__name__)

FORMAT = "shapelm-train-ckpt-v1"
STEP_RE = re.compile(r"^step-(\d{8})$")
MAIN_FILES = ("model.pt", "optimizer.pt", "trainer.pt")
DCP_DIR = "dcp"
SHARDED_FILES = ("trainer.pt", f"{DCP_DIR}/.metadata")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


class _HashingWriter:
    """A write-only file that hashes what passes through it."""

    def __init__(self, f):
        self.f, self.sha256 = f, hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def save_torch(obj: Any, path: Path) -> str:
    """`torch.save` to `path`, fsynced; returns the file's sha256. A disk failure (a full
    disk, an I/O error) is a StorageError naming the file."""
    from shapelm.train.storage import storage_error

    try:
        with open(path, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise storage_error(err, path) from None
    except RuntimeError as err:  # torch's zip writer wraps the OS error of a failed write
        raise storage_error(OSError(str(err)), path) from None
    return writer.sha256.hexdigest()


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


def problem(path: Path, verify: bool = True) -> str | None:
    """Why the checkpoint `path` is not usable (None: it is): meta.json must parse and list
    the main files and every file of the directory with its size and sha256; every file must
    have its recorded size and (`verify`) sha256, and a sharded checkpoint's DCP index must
    hold only DCP's metadata classes (read_dcp_metadata). Nothing is unpickled before the
    sha256s match."""
    try:
        meta = json.loads((path / "meta.json").read_text())
        files, digests = meta["files"], meta.get("sha256")
        if not isinstance(files, dict) or not isinstance(digests, dict):
            return (f"{path / 'meta.json'} has no sha256 checksum list: the checkpoint cannot be "
                    f"verified and is not used")
        required = SHARDED_FILES if meta.get("checkpoint_format") == "sharded" else MAIN_FILES
        missing = [name for name in required if name not in files]
        if missing:
            return f"meta.json lists no {', '.join(missing)}"
        on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*")
                   if not p.is_dir()} - {"meta.json"}
        unlisted = sorted(on_disk - set(files)) + sorted(set(files) - set(digests))
        if unlisted:
            return f"{path / unlisted[0]}: no sha256 in meta.json, cannot be verified"
        for name, size in files.items():
            have = (path / name).stat().st_size
            if have != size:
                return f"{path / name}: {have} bytes, meta.json records {size} (truncated?)"
        if verify:
            for name in files:
                got, want = sha256_file(path / name), digests[name]
                if got != want:
                    return f"{path / name}: sha256 {got} differs from meta.json's {want} (altered?)"
            if is_sharded(path):
                check_dcp_bytes(path / DCP_DIR, read_dcp_metadata(path / DCP_DIR))
            for name in files:
                if name.endswith(".pt"):
                    check_weights_only(path / name)
    except UnsafeCheckpointError as err:
        return str(err)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"unreadable ({type(err).__name__}: {err})"
    return None


def is_valid(path: Path, verify: bool = False) -> bool:
    """Complete by the sizes meta.json records (and, with `verify`, by their sha256)."""
    return problem(path, verify) is None


def latest_valid(out_dir: Path, verify: bool = True) -> tuple[int, Path] | None:
    """The newest usable checkpoint, each newer one skipped with a warning that says why."""
    for step, path in reversed(list_checkpoints(out_dir)):
        why = problem(path, verify)
        if why is None:
            return step, path
        log.warning("%s: checkpoint skipped, the previous one is used instead: %s", path, why)
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


def finish_save(tmp: Path, step: int, meta: dict[str, Any],
                digests: dict[str, str] | None = None) -> Path:
    """Rank 0, after every rank has written its files into `tmp`: seal and rename.
    `digests`: sha256 of files already known (computed while writing); the others (the small
    per-rank RNG files) are hashed here."""
    names = [p.relative_to(tmp).as_posix() for p in sorted(tmp.rglob("*")) if p.is_file()]
    files = {name: (tmp / name).stat().st_size for name in names}
    sha = {name: (digests or {}).get(name) or sha256_file(tmp / name) for name in names}
    meta = {"format": FORMAT, "step": step, "time": time.time(), **meta, "files": files,
            "sha256": sha}
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


# -- sharded (torch.distributed.checkpoint) -----------------------------------------------------
def is_sharded(path: Path) -> bool:
    return (Path(path) / DCP_DIR).is_dir()


def _sharded_state(model, optimizer) -> dict[str, Any]:
    """This rank's shards of the model and optimizer state, keyed by parameter name (DTensors
    under FSDP; plain tensors elsewhere, so one process reads and writes the same format)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, optimizer)
    return {"model": msd, "optimizer": osd}


def save_sharded(model, optimizer, tmp: Path, rank: int, background: bool = False):
    """Every rank (a collective): write its shards into `tmp/dcp/`, or (`background`) copy them
    now and write them in a thread (`dcp.async_save`). Returns a function that waits for the
    write and returns the sha256 of the files this rank wrote, keyed by path in the checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from shapelm.train.storage import storage_error

    out = Path(tmp) / DCP_DIR
    state, future = _sharded_state(model, optimizer), None
    try:
        if background:
            future = dcp.async_save(state, checkpoint_id=str(out), process_group=_writer_group())
        else:
            dcp.save(state, checkpoint_id=str(out))
    except (CheckpointException, OSError) as err:  # DCP gathers every rank's failures into one
        raise storage_error(OSError(str(err)), out) from None
    del state

    def written() -> dict[str, str]:
        if future is not None:
            try:
                future.result()
            except (CheckpointException, OSError) as err:
                raise storage_error(OSError(str(err)), out) from None
        mine = sorted(out.glob(f"__{rank}_*.distcp")) + ([out / ".metadata"] if rank == 0 else [])
        return {p.relative_to(tmp).as_posix(): sha256_file(p) for p in mine}

    return written


def _writer_group():
    """The process group of background writes (created once per default group, by every
    rank at its first background save): its collectives run in the writer thread, so they
    must never interleave with training's on the default group. None: one process."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    world = dist.group.WORLD
    if world not in _WRITER_GROUPS:
        _WRITER_GROUPS[world] = dist.new_group(backend="gloo")
    return _WRITER_GROUPS[world]


_WRITER_GROUPS: dict = {}


def load_sharded(path: Path, model, optimizer) -> None:
    """Every rank (a collective): load the model and optimizer state of a sharded checkpoint
    into this rank's shards, whatever the world size that wrote it (DCP reshards)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    read_dcp_metadata(Path(path) / DCP_DIR)  # refused here, in one line, rather than inside DCP
    state = _sharded_state(model, optimizer)
    with _one_process_is_meant(), _one_line_errors(path):
        dcp.load(state, storage_reader=SafeFileSystemReader(Path(path) / DCP_DIR),
                 planner=SafeLoadPlanner())
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The full model state dict of a checkpoint of either format, in one process (export,
    evaluation): model.pt, or the sharded model state assembled from every rank's shards."""
    path = Path(path)
    why = problem(path, verify=True)
    if why is not None:
        raise UnsafeCheckpointError(f"{path}: not read: {why}")
    if not is_sharded(path):
        return load_torch(path / "model.pt", mmap=True)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = SafeFileSystemReader(path / DCP_DIR)
    entries = reader.read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype)
             for key, m in entries.items()
             if key.startswith("model.") and isinstance(m, TensorStorageMetadata)}
    with _one_process_is_meant(), _one_line_errors(path):
        dcp.load({"model": model}, storage_reader=reader, planner=SafeLoadPlanner(),
                 no_dist=True)
    return model


@contextlib.contextmanager
def _one_line_errors(path: Path):
    """DCP wraps a reader's error, with its traceback, in a CheckpointException: unwrap ours."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as err:
        causes = [f[0] if isinstance(f, tuple) else f for f in err.failures.values()]
        ours = next((c for c in causes if isinstance(c, UnsafeCheckpointError)), None)
        if ours is not None:
            raise UnsafeCheckpointError(f"{path}: {ours}") from None
        raise


# -- reading DCP without running code from it ---------------------------------------------------
class UnsafeCheckpointError(ShapelmError):
    """A checkpoint file asks to run code (or names a class no checkpoint holds)."""


#: Everything a DCP index (`dcp/.metadata`) written by torch names: its metadata dataclasses,
#: torch.Size, dtypes and layouts, and the path it was written to. Anything else (os.system,
#: builtins.eval, ...) is refused before it is looked up.
SAFE_DCP_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict"),
}


class _DcpMetadataUnpickler(pickle.Unpickler):
    def __init__(self, f, where: Path):
        super().__init__(f)
        self.where = where

    def find_class(self, module: str, name: str):
        if (module, name) in SAFE_DCP_GLOBALS or (
                module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise UnsafeCheckpointError(
            f"{self.where}: refers to {module}.{name}, which no DCP index holds (code in a "
            f"checkpoint?); not loaded")


def read_dcp_metadata(dcp_dir: Path):
    """The DCP index of `dcp_dir`, unpickled admitting only SAFE_DCP_GLOBALS."""
    where = Path(dcp_dir) / ".metadata"
    with open(where, "rb") as f:
        try:
            return _DcpMetadataUnpickler(f, where).load()
        except UnsafeCheckpointError:
            raise
        except Exception as err:  # a damaged pickle raises anything from its constructors
            raise UnsafeCheckpointError(f"{where}: unreadable ({type(err).__name__}: {err})") from None


def check_weights_only(path: Path) -> None:
    """Refuse a `.pt` file that does not load with weights_only=True (a pickle naming code, or
    a damaged file): memory-mapped, so its tensors are not read, only its pickle is."""
    try:
        obj = load_torch(path, mmap=True)
    except pickle.UnpicklingError:  # torch's message is a page long
        raise UnsafeCheckpointError(f"{path}: not plain data (names code?), not loaded") from None
    except Exception as err:  # a damaged zip or pickle raises anything
        raise UnsafeCheckpointError(f"{path}: unreadable ({type(err).__name__}: "
                                    f"{str(err).splitlines()[0] if str(err) else ''})") from None
    del obj


def check_dcp_bytes(dcp_dir: Path, index) -> None:
    """Refuse a sharded checkpoint whose non-tensor items (`torch.save` bytes inside a shard)
    do not load with weights_only=True, before any of its state is loaded."""
    import io

    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    for key, info in index.storage_data.items():
        if not isinstance(index.state_dict_metadata.get(key.fqn), BytesStorageMetadata):
            continue
        if getattr(info, "transform_descriptors", None):
            raise UnsafeCheckpointError(f"{dcp_dir}: DCP item {key.fqn} is transformed "
                                        f"({info.transform_descriptors}); this reader takes plain items only")
        with open(Path(dcp_dir) / info.relative_path, "rb") as f:
            f.seek(info.offset)
            blob = f.read(info.length)
        try:
            torch.load(io.BytesIO(blob), weights_only=True)
        except pickle.UnpicklingError:
            raise UnsafeCheckpointError(f"{dcp_dir}: DCP item {key.fqn}: not plain data (names code?), "
                                        f"not loaded") from None
        except Exception as err:
            raise UnsafeCheckpointError(f"{dcp_dir}: DCP item {key.fqn}: unreadable "
                                        f"({type(err).__name__})") from None


@functools.cache
def _safe_dcp_classes():
    """torch's DCP reader and load planner, with every unpickling made safe (defined lazily:
    torch.distributed.checkpoint is slow to import)."""
    import io

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import StorageMeta

    class Reader(dcp.FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            if kwargs.get("rank") is not None:  # per-rank index files: never written here
                raise UnsafeCheckpointError(f"{self.path}: per-rank DCP metadata is not read")
            metadata = read_dcp_metadata(Path(self.path))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(dcp.DefaultLoadPlanner):
        def load_bytes(self, read_item, value: io.BytesIO) -> None:
            try:
                obj = torch.load(value, weights_only=True)
            except pickle.UnpicklingError:  # torch's message is a page long
                raise UnsafeCheckpointError(
                    f"DCP item {read_item.dest_index.fqn}: not plain data (names code?), "
                    f"not loaded") from None
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return Reader, Planner


def SafeFileSystemReader(path: Path):  # noqa: N802 (a class, built lazily)
    return _safe_dcp_classes()[0](str(path))


def SafeLoadPlanner():  # noqa: N802
    return _safe_dcp_classes()[1]()


@contextlib.contextmanager
def _one_process_is_meant():
    """Without a process group DCP warns that it assumes one process: here that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single")
        yield
