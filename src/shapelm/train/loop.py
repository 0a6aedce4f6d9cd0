"""The pretraining job: `train(run_config, out_dir, data_dir=...)`, its data, resume and manifest
around the shared step loop (`shapelm.train.steps.run_steps`).

See docs/TRAINING.md for the recipe, the step -> data mapping, the checkpoint layout and the
preemption / exit-code contract. In one paragraph: update `s` (1-based) consumes the global
instances [(s-1)*B, s*B) of the token stream (B = batch_sequences, instance i = tokens
[i*seq_len, (i+1)*seq_len)); inputs are the whole instance, labels the instance shifted by one
with the last position ignored (-100), as OLMo does, so every instance contributes seq_len - 1
predicted tokens. Each rank takes a contiguous share of B / world_size instances, in micro
batches of micro_batch_size; gradients are scaled so that the update equals the single-process
update on the token-weighted mean loss of the global batch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shapelm import files
from shapelm.config import TrainRecipe, config_hash
from shapelm.data.repetition import repetition_mask
from shapelm.data.tokens import file_checksum
from shapelm.errors import ConfigError, DataError, ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.train import checkpoint as ckpt
from shapelm.train import provenance
from shapelm.train.distributed import DistEnv, broadcast_object, hostname, process_group
from shapelm.train.evaluator import Evaluator, is_due, summary_line
from shapelm.train.observe import (
    MetricsLog, device_names, git_commit, max_memory, package_versions, peak_flops_for,
)
from shapelm.train.parallel import autocast_dtype, build_parallel, is_fsdp, make_optimizer
from shapelm.train.preempt import Preemption
from shapelm.train.schedule import lr_at
from shapelm.train.state import load_checkpoint, prepare_run_dir, save_checkpoint, write_final
from shapelm.train.steps import StepHooks, run_steps
from shapelm.train.storage import is_storage_failure, storage_error
from shapelm.train.threads import set_threads


log = logging.getLogger(__name__)

#: Recipe fields that change the math of training (the recipe hash). The others (checkpoint
#: cadence, logging, micro batch size, DDP/FSDP, compile, precision) may change on resume.
HASHED_RECIPE_KEYS = (
    "lr", "final_lr_ratio", "warmup_tokens", "total_tokens", "batch_tokens", "seq_len",
    "betas", "eps", "weight_decay", "grad_clip", "z_loss", "seed", "frozen_lm_head",
)


class NonFiniteLossError(ShapelmError):
    """The loss or the gradient norm became NaN/inf; no update was applied and no checkpoint
    was written, so the last good checkpoint stays the newest."""


@dataclass
class TrainResult:
    status: str  # "completed" | "already_complete" | "stopped" (max_steps) | "preempted"
    step: int
    total_steps: int
    out_dir: Path
    signal: int | None = None
    checkpoint: Path | None = None

    @property
    def exit_code(self) -> int:
        """0 unless preempted; preempted: 128 + signal number (143 SIGTERM, 138 SIGUSR1)."""
        return 128 + self.signal if self.status == "preempted" and self.signal else 0


# -- configuration ---------------------------------------------------------------------------
def _resolve(run_config: dict[str, Any]) -> tuple[ModelConfig, TrainRecipe]:
    if not isinstance(run_config, dict):
        raise ConfigError(f"run config must be a mapping, got {type(run_config).__name__}")
    for key in ("model", "train"):
        if key not in run_config:
            raise ConfigError(f"run config lacks key {key!r}")
    try:
        cfg = ModelConfig.from_dict(run_config["model"])
    except ConfigError as err:
        raise ConfigError(f"model: {err}") from None
    except TypeError as err:
        raise ConfigError(f"model: {err}") from None
    recipe = TrainRecipe.from_dict(run_config["train"], "train")
    if recipe.seq_len > cfg.max_seq_len:
        raise ConfigError(
            f"train.seq_len={recipe.seq_len} exceeds model.max_seq_len={cfg.max_seq_len}"
        )
    if recipe.keep_last < 1:
        raise ConfigError(f"train.keep_last must be >= 1, got {recipe.keep_last}")
    if recipe.checkpoint_every < 1:
        raise ConfigError(f"train.checkpoint_every must be >= 1, got {recipe.checkpoint_every}")
    if recipe.log_every < 1:
        raise ConfigError(f"train.log_every must be >= 1, got {recipe.log_every}")
    return cfg, recipe


def grad_accumulation(recipe: TrainRecipe, world_size: int) -> int:
    """Micro batches per rank per step: batch_sequences / (micro_batch_size * world_size)."""
    per_step = recipe.micro_batch_size * world_size
    if recipe.batch_sequences % per_step:
        raise ConfigError(
            f"train.batch_tokens / train.seq_len = {recipe.batch_sequences} sequences per step is "
            f"not divisible by train.micro_batch_size x world size = {recipe.micro_batch_size} x "
            f"{world_size}; change train.micro_batch_size or the number of processes"
        )
    return recipe.batch_sequences // per_step


def _data_dir(run_config: dict[str, Any], data_dir) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    data = run_config.get("data") or {}
    for key in ("train_dir", "train_tokens"):
        if data.get(key):
            return Path(data[key])
    raise ConfigError(
        "no training token directory: pass --data DIR (train(data_dir=...)) or set "
        "data.train_dir in the run config"
    )


def _open_tokens(path: Path, cfg: ModelConfig, recipe: TrainRecipe, stop_step: int):
    from shapelm.data.tokens import TokenStore

    # ids are checked against the manifest's per-file max_id here and as each batch is read
    # (TokenStore.read_checked); a full scan of a multi-billion-token stream on every
    # (re)start would cost minutes. The checksums are verified by rank 0 (_verify_tokens).
    store = TokenStore(path, check_ids=False)
    if store.vocab_size > cfg.vocab_size:
        raise DataError(
            f"{path}: token vocab_size {store.vocab_size} exceeds model.vocab_size {cfg.vocab_size}"
        )
    need = stop_step * recipe.batch_sequences
    have = store.n_instances(recipe.seq_len)
    if have < need:
        raise DataError(
            f"{path}: {store.n_tokens:,} tokens = {have:,} instances of train.seq_len="
            f"{recipe.seq_len}, but {stop_step} steps of {recipe.batch_sequences} sequences need "
            f"{need:,} instances ({need * recipe.seq_len:,} tokens); lower train.total_tokens "
            f"or slice more data"
        )
    want = store.manifest.get("seq_len")
    if want and int(want) != recipe.seq_len:
        log.warning("%s: sliced for seq_len %s, training with seq_len %d", path, want, recipe.seq_len)
    return store


def _data_identity(store) -> dict[str, Any]:
    m = store.manifest
    return {
        "n_tokens": int(store.n_tokens),
        "files": [[f.get("path"), f.get("n_tokens"), file_checksum(f)] for f in m["files"]],
    }


def recipe_fingerprint(cfg: ModelConfig, recipe: TrainRecipe, data_identity: dict) -> tuple[str, dict]:
    train = recipe.to_dict()
    content = {
        "model": cfg.to_dict(),
        # fp8 changes the updates' arithmetic; hashed only when on, so bf16 runs keep their hash
        "train": {**{k: train[k] for k in HASHED_RECIPE_KEYS}, **({"fp8": True} if train.get("fp8") else {})},
        "data": data_identity,
    }
    blob = json.dumps(content, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16], content


# -- data -------------------------------------------------------------------------------------
def micro_batches(store, step: int, recipe: TrainRecipe, env: DistEnv, accum: int):
    """(inputs, labels) micro batches of update `step` (1-based) for this rank, and the number
    of labelled tokens in them (counted on the host: no device sync)."""
    seq, mbs = recipe.seq_len, recipe.micro_batch_size
    per_rank = recipe.batch_sequences // env.world_size
    first = (step - 1) * recipe.batch_sequences + env.rank * per_rank
    out, count = [], 0
    for j in range(accum):
        start = first + j * mbs
        tokens = store.read_checked(start * seq, mbs * seq).reshape(mbs, seq).astype(np.int64)
        x = torch.from_numpy(tokens)
        labels = torch.full_like(x, -100)
        labels[:, :-1] = x[:, 1:]
        if recipe.repetition_filter:  # OLMo masks (never drops) highly repetitive instances
            labels[torch.from_numpy(~repetition_mask(tokens))] = -100
        count += int((labels != -100).sum())
        if env.device.type == "cuda":
            x = x.pin_memory().to(env.device, non_blocking=True)
            labels = labels.pin_memory().to(env.device, non_blocking=True)
        out.append((x, labels))
    return out, count


def all_masked_error(store, step: int, recipe: TrainRecipe) -> DataError:
    """Update `step` has no label to learn from (its loss would be 0 / 0)."""
    first = (step - 1) * recipe.batch_sequences * recipe.seq_len
    end = first + recipe.batch_sequences * recipe.seq_len
    f, pos = store.locate(first)
    return DataError(
        f"{f}: every label of update {step} (stream tokens [{first}, {end}), from position {pos} "
        f"of this file) is masked: the data is all EOS or one repeated pattern, which the "
        f"repetition filter (train.repetition_filter) masks; check the token directory "
        f"{store.path}"
    )


# -- the loop --------------------------------------------------------------------------------
def train(
    run_config: dict[str, Any],
    out_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    max_steps: int | None = None,
    device: str | None = None,
    peak_flops: float | None = None,
    progress: bool = True,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    time_limit_min: float | None = None,
    stop_margin_s: float = 120.0,
    threads: int | None = None,
    val_dirs: list[str | os.PathLike] | None = None,
) -> TrainResult:
    """Train (or resume) the run `run_config` into `out_dir`; see the module docstring.

    `max_steps` stops after that update with a checkpoint (status "stopped"; the schedule
    still spans total_steps). `device`: None/"auto", "cpu" or "cuda". `peak_flops`: per-device
    peak FLOP/s for MFU (default: from the GPU name; none on CPU). `on_step(record)` is called
    on every rank after every update (tests, custom logging). `time_limit_min`: this job's
    wall-clock limit; the run checkpoints and returns "preempted" (exit 138) when the time left
    no longer holds `stop_margin_s` plus two steps. `threads`: the CPU thread count (else
    SHAPELM_THREADS, else what torch uses; see shapelm.train.threads). `val_dirs`: held-out
    token directories scored every `train.eval_every` tokens, beside the held-out split of the
    training stream (shapelm.train.evaluator). Under torchrun/srun the process group is
    created here and destroyed on return.

    Before the first update rank 0 checks that `out_dir` is writable, takes its lock (one
    trainer per run directory) and verifies the token files' checksums; a disk failure later is
    a StorageError naming the file.
    """
    cfg, recipe = _resolve(run_config)
    out_dir = Path(out_dir)
    tokens_path = _data_dir(run_config, data_dir)
    thread_info = set_threads(threads)
    preempt = Preemption(time_limit_min=time_limit_min, margin_s=stop_margin_s)
    try:
        with process_group(device) as env, contextlib.ExitStack() as held:
            try:
                preempt.install()
                return _train(run_config, cfg, recipe, out_dir, tokens_path, env, preempt,
                              max_steps, peak_flops, progress, on_step, held, thread_info,
                              val_dirs)
            finally:
                preempt.restore()
    except OSError as err:
        if is_storage_failure(err):
            raise storage_error(err, err.filename or out_dir) from None
        raise


def _train(run_config, cfg, recipe, out_dir, tokens_path, env, preempt, max_steps,
           peak_flops, progress, on_step, held, thread_info, val_dirs=None) -> TrainResult:
    total = recipe.total_steps
    stop = total if max_steps is None else min(total, int(max_steps))
    accum = grad_accumulation(recipe, env.world_size)
    store = _open_tokens(tokens_path, cfg, recipe, stop)
    amp = autocast_dtype(recipe, env.device)
    rhash, rcontent = recipe_fingerprint(cfg, recipe, _data_identity(store))
    fsdp = is_fsdp(recipe, env)

    # Already finished?
    final_state = out_dir / "final" / "train_state.json"
    if (out_dir / "final" / "model.safetensors").exists() and final_state.exists():
        done = json.loads(final_state.read_text())
        if done.get("recipe_hash") != rhash:
            raise ConfigError(
                f"{out_dir / 'final'} was trained from a different recipe (hash "
                f"{done.get('recipe_hash')}, now {rhash}); use another --out or delete it"
            )
        log.info("%s: already complete (step %s)", out_dir, done.get("step"))
        return TrainResult("already_complete", int(done.get("step", total)), total, out_dir)

    # Check the directory and the data, find the checkpoint to resume from: rank 0 decides,
    # everyone follows (and raises rank 0's error, instead of waiting for it forever).
    resume = failure = None
    if env.is_main:
        try:
            resume = prepare_run_dir(out_dir, store, rhash, rcontent, held)
        except ShapelmError as err:
            failure = err
    resume, failure = broadcast_object([resume, failure], env)
    if failure is not None:
        raise failure
    start_step = resume[0] if resume else 0
    if resume and stop <= start_step < total:  # --max-steps at or below a saved step
        log.info("%s: already at step %d >= --max-steps %d", out_dir, start_step, stop)
        return TrainResult("stopped", start_step, total, out_dir, checkpoint=Path(resume[1]))
    # Every rank opens the evaluation sets (the same files: the same verdict on each).
    evaluator = (Evaluator(recipe, store, val_dirs, env, cfg.vocab_size, amp)
                 if recipe.eval_every > 0 else None)

    # Seed everything, then build the model from the init or the checkpoint.
    random.seed(recipe.seed)
    np.random.seed(recipe.seed % 2**32)
    torch.manual_seed(recipe.seed)
    if not resume or ckpt.is_sharded(Path(resume[1])):
        full = None  # every rank initialises its own shard from the seed (shapelm.model.init);
        # a sharded checkpoint's state replaces it in load_checkpoint
    elif env.is_main or not fsdp:  # under FSDP rank 0 reads and broadcasts
        full = ckpt.load_torch(Path(resume[1]) / "model.pt", mmap=True)
    else:
        full = {}
    model, forward = build_parallel(cfg, recipe, env, full, amp)
    del full
    # the weights before any update: only a run that starts here sees them (provenance.json)
    prov = (provenance.started(out_dir, store.manifest, None if fsdp else model, env.device,
                               resumed=bool(resume), run=run_config.get("name"))
            if env.is_main else None)
    if prov is not None:
        prov.write(out_dir / "provenance.json")
    optimizer = make_optimizer(model, recipe, env, fsdp)
    if resume:
        load_checkpoint(Path(resume[1]), model, optimizer, recipe, env)
        log.info("resumed from %s (step %d of %d)", resume[1], start_step, total)
    trainable = [p for p in model.parameters() if p.requires_grad]

    # Manifest and metrics.
    hosts = [hostname()]
    if env.distributed:
        import torch.distributed as dist

        hosts = [None] * env.world_size
        dist.all_gather_object(hosts, hostname())
    if env.is_main:
        _write_manifest(out_dir, run_config, recipe, rhash, tokens_path, store, env, hosts,
                        accum, start_step, amp, thread_info, evaluator)
    metrics = MetricsLog(out_dir / "metrics.jsonl", start_step, enabled=env.is_main)
    names = device_names(env.device)
    peak = peak_flops if peak_flops else (peak_flops_for(names[0]) if env.device.type == "cuda" else None)
    from shapelm.shapes.accounting import flops_per_token

    train_flops = flops_per_token(cfg, recipe.seq_len).train

    bar = None
    if progress and env.is_main:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=start_step, desc=run_config.get("name", "train"),
                   unit="step", file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.5 if sys.stderr.isatty() else 30.0)

    amp_ctx = (lambda: torch.autocast(env.device.type, dtype=amp)) if amp else contextlib.nullcontext
    name = run_config.get("name", "")
    t_last, step_last = time.perf_counter(), start_step  # throughput since the last record

    def before(step: int) -> float:
        if env.is_main:
            preempt.hold_for_signal(name, step, out_dir / "HOLDING")
        # a step that evaluates needs the time of the last evaluation too
        return evaluator.seconds if evaluator is not None and is_due(step, recipe, total) else 0.0

    def record(step: int, lr: float, out: tuple, took: float) -> dict[str, Any]:
        nonlocal t_last, step_last
        loss, ce_loss, z_loss, grad_norm = out
        rec = {"step": step, "tokens": step * recipe.batch_tokens, "loss": loss,
               "ce_loss": ce_loss, "z_loss": z_loss, "lr": lr, "grad_norm": grad_norm}
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", refresh=False)
        if step % recipe.log_every == 0 or step == start_step + 1 or step == stop:
            now = time.perf_counter()
            tps = (step - step_last) * recipe.batch_tokens / max(now - t_last, 1e-9)
            mfu = train_flops * tps / (peak * env.world_size) if peak else None
            rec.update({"tokens_per_s": tps, "mfu": mfu, **max_memory(), "time": time.time()})
            metrics.write(rec)
            t_last, step_last = now, step
        return rec

    def after(step: int) -> None:
        nonlocal t_last, step_last
        if evaluator is None or not is_due(step, recipe, total):
            return
        val = evaluator.run(model, step)  # before the checkpoint: a checkpoint implies it
        metrics.write(val)
        if env.is_main:
            line = summary_line(val, total)
            log.info("%s", line)
            if bar is not None:
                bar.write(line, file=sys.stderr)
        t_last, step_last = time.perf_counter(), step  # evaluation time is not throughput

    def save(step: int, extra: dict[str, Any], background: bool):
        nonlocal t_last, step_last
        pending = save_checkpoint(out_dir, step, model, optimizer, env, recipe, rhash, rcontent,
                                  extra, background)
        t_last, step_last = time.perf_counter(), step  # checkpoint time is not throughput
        return pending

    try:
        hooks = StepHooks(
            batches=lambda step: micro_batches(store, step, recipe, env, accum),
            lr_at=lambda step: lr_at(step, recipe), record=record, save=save,
            nonfinite_error=functools.partial(_nonfinite_error, metrics, out_dir, env),
            no_labels_error=lambda step: all_masked_error(store, step, recipe),
            before=before, after=after, on_step=on_step)
        done = run_steps(model, forward, optimizer, trainable, recipe, env, amp_ctx, preempt, hooks,
                         start=start_step, stop=stop, total=total,
                         saved=start_step if resume else None, out_dir=out_dir)
    finally:
        if bar is not None:
            bar.close()
        metrics.close()

    step = done.step
    if done.status == "completed":
        info = {"step": step, "tokens": step * recipe.batch_tokens, "recipe_hash": rhash,
                "config_hash": run_config.get("hash") or config_hash(run_config),
                "name": run_config.get("name")}
        final = write_final(out_dir, model, cfg, recipe, env, info)
        if prov is not None:
            provenance.completed(out_dir, prov).write(out_dir / "provenance.json")
        if env.is_main:
            log.info("training complete: %s", final)
        return TrainResult("completed", step, total, out_dir, checkpoint=final)
    return _interrupted(done.status, step, total, out_dir, done.checkpoint, preempt)


def _nonfinite_error(metrics, out_dir: Path, env, step: int, loss: float,
                     grad_norm: float) -> NonFiniteLossError:
    """Pretraining's non-finite step: recorded in metrics.jsonl, the error names the last good
    checkpoint."""
    metrics.write({"step": step, "loss": loss, "grad_norm": grad_norm, "nonfinite": True})
    good = ckpt.latest_valid(out_dir, verify=False) if env.is_main else None
    return NonFiniteLossError(
        f"step {step}: non-finite loss {loss} / grad norm {grad_norm}; no update was "
        f"applied; the last good checkpoint is "
        f"{good[1] if good else 'none (no checkpoint yet)'}"
    )


def _interrupted(status: str, step: int, total: int, out_dir: Path, path, preempt) -> TrainResult:
    if status == "preempted":
        log.warning("preempted by %s at step %d: checkpoint %s; exit %d",
                    signal.Signals(preempt.signum).name, step, path, 128 + preempt.signum)
        return TrainResult("preempted", step, total, out_dir, signal=preempt.signum, checkpoint=path)
    return TrainResult("stopped", step, total, out_dir, checkpoint=path)


def _write_manifest(out_dir, run_config, recipe, rhash, tokens_path, store, env, hosts, accum,
                    start_step, amp, thread_info, evaluator=None) -> None:
    import datetime

    manifest = {
        "run_config": run_config,
        "config_hash": run_config.get("hash") or config_hash(run_config),
        "recipe_hash": rhash,
        "recipe": {
            **recipe.to_dict(),
            "batch_sequences": recipe.batch_sequences,
            "total_steps": recipe.total_steps,
            "warmup_steps": recipe.warmup_tokens / recipe.batch_tokens,
            "grad_accumulation": accum,
            "autocast": str(amp) if amp else None,
        },
        "data": {"dir": str(Path(tokens_path).resolve()), "n_tokens": store.n_tokens,
                 "vocab_size": store.vocab_size, "eos_id": store.eos_id},
        "git": git_commit(),
        "versions": package_versions(),
        "hardware": {
            "hostname": hosts[0],
            "hosts": sorted(set(hosts)),
            "world_size": env.world_size,
            "launcher": env.launcher,
            "device_type": env.device.type,
            "devices": device_names(env.device),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch_threads_from": thread_info["source"],
        },
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "resumed_from_step": start_step or None,
        "validation": None if evaluator is None else {
            "eval_every": recipe.eval_every,
            "sets": [{"name": s.name, "path": str(Path(s.store.path).resolve()),
                      "first_instance": s.first, "n_instances": s.n} for s in evaluator.sets],
        },
        "argv": sys.argv,
    }
    files.write_json(out_dir / "manifest.json", manifest, **files.RUN_FILE)
