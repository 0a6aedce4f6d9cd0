"""A run's provenance: what its numbers came from, small enough to commit beside them.

`RUN_DIR/provenance.json` is written when training starts (the initial weights are only seen
then; a resumed run keeps the digest it started with) and again when it completes, with the
first logged losses. `shapelm train provenance RUN_DIR --out FILE` copies it into the results
tree, where `shapelm results compare` reads it: equal provenance must give equal bits.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

import torch

from shapelm.data.tokens import file_checksum
from shapelm.numerics import numerics_settings
from shapelm.records import ProvenanceRecord, read_metrics, is_val
from shapelm.train.observe import git_commit

PACKAGE = Path(__file__).resolve().parents[1]
LOCK = PACKAGE.parents[1] / "requirements.lock"
FIRST_LOSSES = 5
FORMAT = "shapelm-provenance-v1"


def source_sha256(root: Path = PACKAGE) -> str:
    """sha256 over the package's files (path and bytes, sorted by path; caches left out)."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over a model's state (name, dtype, shape and bytes of each tensor, by name)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _blas() -> str | None:
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line or "OpenBLAS" in line or "BLAS_INFO" in line:
            return line.strip(" -")
    return None


def environment(device: torch.device) -> dict[str, Any]:
    """What decides the arithmetic: torch, its BLAS and CPU kernel path, threads, the lock."""
    return {
        "torch": torch.__version__,
        "blas": _blas(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numerics": numerics_settings(),
        "threads": torch.get_num_threads(),
        "device": device.type,
        "lock_sha256": hashlib.sha256(LOCK.read_bytes()).hexdigest() if LOCK.is_file() else None,
    }


def data_identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The training tokens (sha256 over the files' checksums, `file_checksum`: a sha256
    manifest's value is what it always was) and the tokenizer and corpus the manifest names."""
    digests = "".join(str(file_checksum(f)) for f in manifest.get("files", []))
    return {
        "train_sha256": hashlib.sha256(digests.encode()).hexdigest(),
        "n_tokens": manifest.get("n_tokens"),
        "tokenizer_sha256": manifest.get("tokenizer_sha256"),
        "corpus_sha256": manifest.get("corpus_sha256"),
    }


def started(out_dir: Path, manifest: dict[str, Any], model, device, resumed: bool,
            run: str | None) -> ProvenanceRecord:
    """The record at the start of training (written by the caller on the main rank)."""
    path = out_dir / "provenance.json"
    previous = ProvenanceRecord.read(path) if resumed and path.is_file() else None
    if previous is not None:
        init = previous.init_weights_sha256
    else:  # a sharded model's full state is not gathered for this
        init = None if resumed or model is None else weights_sha256(model)
    return ProvenanceRecord(
        code={"source_sha256": source_sha256(), **git_commit()},
        data=data_identity(manifest),
        init_weights_sha256=init,
        environment=environment(device),
        first_losses=[],
        extra={"format": FORMAT, "run": run, "python": platform.python_version()},
    )


def completed(out_dir: Path, record: ProvenanceRecord) -> ProvenanceRecord:
    """The record with the run's first logged training losses."""
    losses = [float(r["loss"]) for r in read_metrics(out_dir / "metrics.jsonl")
              if not is_val(r) and "loss" in r][:FIRST_LOSSES]
    record.first_losses = losses
    return record
