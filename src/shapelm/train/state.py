"""The run directory's state for the training loop: the checkpoints it writes and resumes from,
the final model, and the start-up decision (the directory is writable and locked, the token
files are intact, which checkpoint to resume). The on-disk layout is shapelm.train.checkpoint's.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from shapelm import files
from shapelm.config import TrainRecipe
from shapelm.errors import ConfigError, ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.model.io import save_pretrained
from shapelm.model.transformer import build_model
from shapelm.train import checkpoint as ckpt
from shapelm.train.distributed import DistEnv, barrier, broadcast_object
from shapelm.train.lock import RunLock
from shapelm.train.parallel import (
    full_model_state,
    full_optimizer_state,
    is_fsdp,
    load_optimizer_state,
)
from shapelm.train.schedule import lr_at
from shapelm.train.storage import make_group_readable, probe_writable, storage_error

log = logging.getLogger(__name__)


#: Where rank 0 records the fast hash of each token file whose sha256 verified (a restart
#: re-reads every file but computes only that hash: shapelm.data.tokens.fast_hash).
TOKEN_CHECKSUM_CACHE = "token-checksums.json"


def verify_tokens(store, out_dir: Path) -> None:
    store.verify_checksums(cache=out_dir / TOKEN_CHECKSUM_CACHE)


def diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += diff_keys(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def checkpoint_format(recipe: TrainRecipe, env: DistEnv) -> str:
    """full (gathered to rank 0) or sharded (every rank writes its shards; auto under FSDP/HSDP)."""
    fmt = getattr(recipe, "checkpoint_format", "auto")
    if fmt == "auto":
        return "sharded" if is_fsdp(recipe, env) else "full"
    return fmt


def save_checkpoint(out_dir, step, model, optimizer, env, recipe, rhash, rcontent, extra,
                    background: bool = False, scheduler: dict | None = None) -> PendingCheckpoint:
    """Every rank: write the checkpoint of `step`. `background` (sharded format only): the
    model and optimizer shards are copied now and written by a thread while training goes on;
    the checkpoint exists once `.seal()` (the next save, or the end of training) has run.
    `scheduler`: the lr schedule's state recorded in trainer.pt (default: pretraining's cosine
    schedule of `recipe`)."""
    sharded = checkpoint_format(recipe, env) == "sharded"
    msd = None if sharded else full_model_state(model, recipe, env)
    osd = None if sharded else full_optimizer_state(model, optimizer, recipe, env)
    tmp = ckpt.begin_save(out_dir, step) if env.is_main else None
    tmp = Path(broadcast_object(str(tmp) if tmp else None, env))
    digests, written, failure = {}, None, None
    try:
        if sharded:
            written = ckpt.save_sharded(model, optimizer, tmp, env.rank, background=background)
        _write_files(tmp, msd, osd, step, env, recipe, rhash, digests, scheduler)
    except ShapelmError as err:  # a full disk: every rank must hear of it, or the others hang
        failure = err
    del msd, osd
    raise_if_any_failed(failure, env)
    meta = {"recipe_hash": rhash, "recipe": rcontent, "world_size": env.world_size,
            "torch_threads": torch.get_num_threads(),
            "checkpoint_format": "sharded" if sharded else "full", **extra}
    pending = PendingCheckpoint(out_dir, step, tmp, meta, digests, written, recipe.keep_last, env)
    if sharded and background:
        log.info("checkpoint of step %d: shards being written in the background", step)
    else:
        pending.seal()
    return pending


class PendingCheckpoint:
    """A checkpoint whose files are written, or still being written in the background.
    `seal()` (every rank: a collective) waits for them, then rank 0 writes meta.json with the
    sha256 of every rank's files and renames the directory: only then is it a checkpoint."""

    def __init__(self, out_dir, step, tmp, meta, digests, written, keep_last, env):
        self.out_dir, self.step, self.tmp, self.meta = Path(out_dir), step, tmp, meta
        self.digests, self.written, self.keep_last, self.env = digests, written, keep_last, env
        self.path: Path | None = None

    def seal(self) -> Path:
        if self.path is None:
            self.path = self._seal()
        return self.path

    def _seal(self) -> Path:
        env, tmp, failure = self.env, self.tmp, None
        if self.written is not None:  # sharded: this rank's shards, then everyone's sha256s
            try:
                self.digests.update(self.written())
            except ShapelmError as err:
                failure = err
            raise_if_any_failed(failure, env)
            self.digests = gather_digests(self.digests, env)
        final = None
        if env.is_main:
            try:
                final = ckpt.finish_save(tmp, self.step, self.meta, self.digests)
                removed = ckpt.prune(self.out_dir, self.keep_last, protect=self.step)
                log.info("checkpoint %s written%s", final,
                         f"; removed steps {removed}" if removed else "")
            except OSError as err:
                failure = storage_error(err, err.filename or tmp / "meta.json")
        raise_if_any_failed(failure, env)
        return Path(broadcast_object(str(final) if final else None, env))


def _write_files(tmp: Path, msd, osd, step, env, recipe, rhash, digests: dict,
                 scheduler: dict | None = None) -> None:
    """Rank 0 the model and optimizer state (unless sharded: None) and the trainer state;
    every rank its RNG state."""
    if env.is_main:
        if msd is not None:
            digests["model.pt"] = ckpt.save_torch(msd, tmp / "model.pt")
            digests["optimizer.pt"] = ckpt.save_torch(osd, tmp / "optimizer.pt")
        digests["trainer.pt"] = ckpt.save_torch(
            {
                "format": ckpt.FORMAT,
                "step": step,
                "tokens": step * recipe.batch_tokens,
                "next_instance": step * recipe.batch_sequences,
                "scheduler": scheduler or {
                    "kind": "cosine_with_warmup_tokens",
                    "step": step,
                    "last_lr": lr_at(step, recipe) if step > 0 else 0.0,
                    "peak_lr": recipe.lr,
                    "final_lr_ratio": recipe.final_lr_ratio,
                    "warmup_tokens": recipe.warmup_tokens,
                    "total_steps": recipe.total_steps,
                },
                "recipe_hash": rhash,
                "world_size": env.world_size,
            },
            tmp / "trainer.pt",
        )
    ckpt.save_torch(ckpt.rng_state(), tmp / f"rng-rank{env.rank:05d}.pt")


def raise_if_any_failed(failure: ShapelmError | None, env: DistEnv) -> None:
    """A collective (it also synchronises, like a barrier): every rank raises the first rank's
    error if any rank had one, so one rank's full disk stops all of them at once."""
    if env.distributed:
        import torch.distributed as dist

        failures = [None] * env.world_size
        dist.all_gather_object(failures, failure)
        failure = next((f for f in failures if f is not None), None)
        if failure is not None:
            # Every rank is here and raises. The barrier lets gloo's worker thread drop the
            # gathered tensors first: released later from that thread (it needs the GIL) while
            # the main thread, holding the GIL at exit, joins it from the process group's
            # destructor, they deadlock and the rank never exits.
            barrier(env)
    if failure is not None:
        raise failure


def gather_digests(digests: dict[str, str], env: DistEnv) -> dict[str, str]:
    """Every rank's sha256s of the files it wrote, merged (on every rank)."""
    if not env.distributed:
        return digests
    import torch.distributed as dist

    every = [None] * env.world_size
    dist.all_gather_object(every, digests)
    return {name: sha for d in every for name, sha in d.items()}


def load_checkpoint(path: Path, model, optimizer, recipe: TrainRecipe, env: DistEnv) -> dict:
    """The optimizer state (and, for a sharded checkpoint, the model state: a full one was
    loaded when the model was built), the RNG state; returns the trainer state."""
    if ckpt.is_sharded(path):
        ckpt.load_sharded(path, model, optimizer)
    else:
        reads = env.is_main or not is_fsdp(recipe, env)  # FSDP: rank 0 reads and broadcasts
        osd = ckpt.load_torch(path / "optimizer.pt", mmap=True) if reads else {}
        load_optimizer_state(model, optimizer, osd, recipe, env)
        del osd
    trainer = ckpt.load_torch(path / "trainer.pt")
    rng = path / f"rng-rank{env.rank:05d}.pt"
    if rng.exists():
        ckpt.set_rng_state(ckpt.load_torch(rng))
    else:
        log.warning("%s: no RNG state for rank %d (world size changed); RNG left seeded", path, env.rank)
    return trainer


def write_final(out_dir: Path, model, cfg: ModelConfig, recipe: TrainRecipe, env: DistEnv,
                 info: dict) -> Path:
    msd = full_model_state(model, recipe, env)
    final = out_dir / "final"
    if env.is_main:
        host = build_model(cfg, "meta")
        host.load_state_dict({k: v.float() for k, v in msd.items()}, assign=True)
        tmp = out_dir / ".final.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        save_pretrained(host, tmp)
        files.write_json(tmp / "train_state.json", info, **files.RUN_FILE)
        make_group_readable(tmp)
        for p in tmp.iterdir():
            files.fsync_path(p)
        files.fsync_path(tmp)
        if final.exists():
            shutil.rmtree(final)
        files.rename(tmp, final)
    barrier(env)
    return final


def prepare_run_dir(out_dir: Path, store, rhash: str, rcontent: dict, held) -> list | None:
    """Rank 0, before the model is built: the directory is writable and ours (its lock is
    held until training returns), the token files are intact, leftovers of killed saves are
    gone; returns [step, path] of the checkpoint to resume from (None: start afresh)."""
    probe_writable(out_dir)
    held.enter_context(RunLock(out_dir))
    verify_tokens(store, out_dir)
    for p in ckpt.clean_temporaries(out_dir):
        log.warning("removed partial checkpoint %s", p)
    found = ckpt.latest_valid(out_dir)
    if not found:
        return None
    meta = json.loads((found[1] / "meta.json").read_text())
    if meta.get("recipe_hash") != rhash:
        diff = diff_keys(meta.get("recipe"), rcontent)
        raise ConfigError(
            f"{found[1]} was written by a different recipe (hash {meta.get('recipe_hash')}, "
            f"now {rhash}; differs in {diff[:8]}); use another --out or delete "
            f"{ckpt.checkpoints_root(out_dir)}"
        )
    saved_threads = meta.get("torch_threads")
    if saved_threads is not None and saved_threads != torch.get_num_threads():
        log.warning("%s was written with %s CPU threads, this process uses %d: the resumed run "
                    "will not be bitwise equal to an uninterrupted one (set --threads or "
                    "SHAPELM_THREADS to the same value)", found[1], saved_threads,
                    torch.get_num_threads())
    return [found[0], str(found[1])]
