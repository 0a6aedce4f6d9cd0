"""YaRN context-extension finetuning (Peng et al. 2023; docs/PAPER_NOTES.md protocol 9).

Recipe (defaults): s = 16 for 4096 -> 65,536; 400 steps; AdamW beta 0.9/0.95, eps 1e-8, no
weight decay; lr 2e-5 with 20 linear warm-up steps; global batch 64 segments of 65,536 tokens
(PG19 re-tokenized with the model's tokenizer); no gradient clipping.

Schedule: jquesnelle/yarn trained with DeepSpeed ``deepspeed/zero3.json`` (README), whose
``WarmupDecayLR`` warms up linearly and then decays linearly to 0 at the last step; its plain
PyTorch path defaults to ``get_linear_schedule_with_warmup``, the same shape. Hence
``schedule="linear"`` is the default; ``"constant"`` (warm-up then flat, the repo's
``--lr-schedule constant``) is available. Both give lr = 0 on the first update, as HF's and
DeepSpeed's schedulers do.

Updates: the finetune is a recipe handed to pretraining's step loop. :func:`finetune_recipe`
is a pretraining recipe; the loop is :func:`shapelm.train.steps.run_steps` (the stop agreement on
signals and the time limit, each update through :func:`shapelm.train.steps.update`: AdamW,
accumulation, the non-finite check; the checkpoint cadence and the checkpoint on stop), its
checkpoints pretraining's (:mod:`shapelm.train.state`). This module owns the schedule
(:func:`lr_factor`), the segment order, the initial weights and the metrics records.

Memory: each block runs under activation checkpointing (``set_recompute("full")``) and the
loss is computed in vocabulary chunks (``loss_chunk_tokens``), so a 65,536-token segment never
materialises [tokens, vocab] logits. Micro-batches accumulate to the global batch.

Processes: one per GPU (``srun`` / ``torchrun``, see :mod:`shapelm.train.distributed`); with more
than one the model is sharded with FSDP2 exactly as pretraining's ``distributed: fsdp`` does (the
same helpers, :mod:`shapelm.train.parallel`): fp32 weights, gradients and AdamW state are split
over the ranks (an 8B model's ~130 GB fit no single GPU). Rank ``r`` of ``W`` takes the
contiguous share ``[r B/W, (r+1) B/W)`` of each step's ``B`` segments, so any world size makes
the same update. SIGTERM / SIGUSR1, or ``time_limit_min`` running out, stop every rank at the
same step boundary with a checkpoint and exit code 128 + signal (143 / 138), as pretraining.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from shapelm import files
from shapelm.config import TrainRecipe, section_defaults
from shapelm.errors import ConfigError, DataError, ShapelmError
from shapelm.longctx.yarn import yarn_model_config, yarn_scaling

log = logging.getLogger(__name__)


#: The schema's `longctx:` defaults (config.schema.yaml), the one home of those it holds.
_DEFAULTS = section_defaults("longctx")


@dataclass
class FinetuneConfig:
    """The finetune's recipe; the defaults the config schema's `longctx:` section holds come
    from it (steps, batch, micro_batch, factor, checkpoint_every), the others live here (the
    `shapelm longctx finetune` options default to these)."""

    steps: int = _DEFAULTS["finetune_steps"]
    lr: float = 2e-5
    batch: int = _DEFAULTS["finetune_batch"]  # global batch in segments
    micro_batch: int = _DEFAULTS["micro_batch"]
    seq_len: int = 65_536  # tokens per segment (inputs are seq_len - 1 tokens, labels shifted)
    factor: float | None = float(_DEFAULTS["factor"])  # None: seq_len / original
    original: int = 4096
    warmup: int = 20
    schedule: str = "linear"  # "linear" (warm-up, linear decay to 0) or "constant"
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float | None = None
    seed: int = 42
    loss_chunk_tokens: int = 4096
    activation_checkpointing: bool = True
    checkpoint_every: int = _DEFAULTS["checkpoint_every"]
    keep_checkpoints: int = 2
    device: str = "auto"
    autocast_dtype: str = "bfloat16"  # on CUDA; parameters and optimizer stay fp32

    def validate(self) -> None:
        for key in ("steps", "batch", "micro_batch", "seq_len", "original", "loss_chunk_tokens"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"finetune.{key} must be positive, got {getattr(self, key)}")
        if self.batch % self.micro_batch:
            raise ConfigError(f"finetune.batch {self.batch} is not a multiple of micro_batch {self.micro_batch}")
        if self.warmup < 0:
            raise ConfigError(f"finetune.warmup must be >= 0, got {self.warmup}")
        if self.schedule not in ("linear", "constant"):
            raise ConfigError(f"finetune.schedule must be 'linear' or 'constant', got {self.schedule!r}")
        if self.seq_len < 2:
            raise ConfigError("finetune.seq_len must be >= 2")

    def scaling(self) -> dict[str, Any]:
        return yarn_scaling(self.factor, self.original, target_length=self.seq_len)


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the peak lr for the update made at 0-based ``step`` (HF/DeepSpeed convention)."""
    if step < warmup:
        return step / max(1, warmup)
    if schedule == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))


def finetune_recipe(cfg: FinetuneConfig) -> TrainRecipe:
    """The finetune as a pretraining recipe: what pretraining's model building (sharding,
    activation checkpointing), optimizer, update (shapelm.train.steps.update) and checkpoints
    (shapelm.train.state) read. Its lr schedule is `lr_factor`, not the recipe's cosine."""
    batch_tokens = cfg.batch * cfg.seq_len
    return TrainRecipe(
        lr=cfg.lr, batch_tokens=batch_tokens, total_tokens=cfg.steps * batch_tokens,
        warmup_tokens=cfg.warmup * batch_tokens, seq_len=cfg.seq_len, micro_batch_size=cfg.micro_batch,
        betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay,
        grad_clip=cfg.grad_clip, z_loss=0.0, seed=cfg.seed, compile=False,
        distributed="fsdp",  # several processes always shard: an 8B finetune fits no GPU whole
        activation_checkpointing="full" if cfg.activation_checkpointing else "none",
        checkpoint_every=cfg.checkpoint_every, keep_last=cfg.keep_checkpoints, log_every=1,
        loss_chunk_tokens=cfg.loss_chunk_tokens, repetition_filter=False,
    )


class SegmentData:
    """Fixed-length segments of a token directory, visited in a seeded random order per epoch."""

    def __init__(self, token_dir: str | os.PathLike, seq_len: int, seed: int) -> None:
        from shapelm.data.tokens import TokenStore

        self.store = TokenStore(token_dir)
        self.seq_len = seq_len
        self.seed = seed
        self.n = self.store.n_instances(seq_len)
        if self.n == 0:
            raise DataError(
                f"{token_dir}: {self.store.n_tokens} tokens, fewer than one {seq_len}-token segment"
            )
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def sample(self, i: int) -> np.ndarray:
        """The ``i``-th segment drawn (epoch ``i // n`` uses its own permutation)."""
        epoch, j = divmod(i, self.n)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return self.store.instance(int(self._perm[j]), self.seq_len)


def prepare_segments(
    source: str | os.PathLike, tokenizer, seq_len: int, out_dir: str | os.PathLike, eos_id: int | None,
    *, split: str | None = "train", max_segments: int | None = None, segments_per_file: int = 1024,
) -> Path:
    """Tokenize a text source (PG19 ...) into a token dir of ``seq_len`` segments.

    Documents are tokenized in order, each followed by EOS, concatenated and cut; tokenizing
    stops after ``max_segments`` (the finetune needs steps x batch of them: 25,600 at paper
    scale, most of the ~2B words of PG19's train split). Files of ``segments_per_file``
    segments are written as they fill, so memory stays at one file's worth."""
    from shapelm.data.tokenizer import vocab_size_of
    from shapelm.data.tokens import write_token_dir
    from shapelm.longctx.sources import iter_documents, segment_stream

    out = Path(out_dir)
    if (out / "manifest.json").is_file():
        return out
    if eos_id is None:
        raise DataError("tokenizer has no EOS token to separate documents")
    count = 0

    def files():
        nonlocal count
        part = []
        for seg in segment_stream(iter_documents(source, tokenizer, split=split), seq_len, eos_id):
            part.append(seg)
            count += 1
            if len(part) == segments_per_file or count == max_segments:
                yield np.concatenate(part)
                part = []
            if count == max_segments:
                return
        if part:
            yield np.concatenate(part)

    write_token_dir(out, files(), vocab_size_of(tokenizer), eos_id,
                    {"kind": "yarn-finetune-segments", "seq_len": seq_len, "source": str(source),
                     "split": split, "max_segments": max_segments})
    if count == 0:
        (out / "manifest.json").unlink()
        raise DataError(f"{source}: fewer tokens than one {seq_len}-token segment")
    return out


@dataclass
class FinetuneResult:
    status: str  # "completed" | "already_complete" | "stopped" (max_steps_this_call) | "preempted"
    step: int
    steps: int
    path: Path | None  # final/ when complete, else the newest checkpoint (None: no update yet)
    signal: int | None = None

    @property
    def exit_code(self) -> int:
        """0 unless preempted; preempted: 128 + signal number (143 SIGTERM, 138 SIGUSR1 or the
        time limit), as pretraining."""
        return 128 + self.signal if self.status == "preempted" and self.signal else 0


#: What a resumed finetune must share with its checkpoint: a change of any is refused (the
#: number of steps may grow; data, micro-batch and checkpoint cadence may change).
RESUME_KEYS = ("lr", "batch", "seq_len", "factor", "original", "warmup", "schedule", "seed", "model")


def resume_fingerprint(run_cfg: dict) -> tuple[str, dict]:
    """(hash, content) of the finetune's `RESUME_KEYS`: what its checkpoints record as their
    recipe, as pretraining's record the recipe hash."""
    content = {k: run_cfg.get(k) for k in RESUME_KEYS}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16], content


def micro_batches_per_rank(cfg: FinetuneConfig, world_size: int) -> int:
    """Micro-batches each rank accumulates per step: batch / (micro_batch x world size)."""
    per_pass = cfg.micro_batch * world_size
    if cfg.batch % per_pass:
        raise ConfigError(
            f"finetune.batch {cfg.batch} is not a multiple of micro_batch {cfg.micro_batch} x "
            f"{world_size} processes; change --batch / --micro-batch or the number of GPUs"
        )
    return cfg.batch // per_pass


def _model_path(model_dir) -> Path:
    p = Path(model_dir)
    return p / "final" if (p / "final" / "model_config.json").is_file() else p


def _base_weights(model_path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    f = model_path / "model.safetensors"
    if not f.is_file():
        raise DataError(f"{f}: no model weights to finetune")
    return {k: v.float() for k, v in load_file(str(f), device="cpu").items()}


def _segments_dir(data, tokenizer, cfg: FinetuneConfig, out: Path, split, env) -> Path:
    """A token dir of segments: ``data`` itself, or ``data`` tokenized into ``out/data`` by
    rank 0 while the others wait for its manifest (no collective: it may take minutes)."""
    from shapelm.data.tokenizer import tokenizer_eos_id
    from shapelm.longctx.sources import is_token_dir
    from shapelm.train.distributed import barrier

    if is_token_dir(data):
        return Path(data)
    if tokenizer is None:
        raise DataError(f"{data}: a text source needs the model's tokenizer (--tokenizer)")
    prepared = out / "data"
    if env.is_main:
        prepare_segments(data, tokenizer, cfg.seq_len, prepared, tokenizer_eos_id(tokenizer),
                         split=split, max_segments=cfg.steps * cfg.batch)
    else:
        while not (prepared / "manifest.json").is_file():
            time.sleep(2.0)
    barrier(env)
    return prepared


def micro_batches(segments: SegmentData, step: int, cfg: FinetuneConfig, env, accum: int):
    """(inputs, labels) micro-batches of this rank for the update made at 0-based `step`: its
    share of the step's segments, inputs the first seq_len - 1 tokens, labels the last."""
    out = []
    for micro in range(accum):
        first = step * cfg.batch + (env.rank * accum + micro) * cfg.micro_batch
        seg = np.stack([segments.sample(first + i) for i in range(cfg.micro_batch)])
        tokens = torch.from_numpy(seg.astype(np.int64)).to(env.device)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def _nonfinite_error(step: int, loss: float, grad_norm: float | None) -> DataError:
    """The non-finite update `step` (1-based, the step of its metrics record)."""
    return DataError(f"finetune: non-finite loss {loss} (grad norm {grad_norm}) at step {step}; "
                     f"no update was applied")


def _save(out: Path, step: int, model, optimizer, run_cfg: dict, cfg: FinetuneConfig,
          recipe: TrainRecipe, env):
    """Pretraining's checkpoint of `step` (shapelm.train.state; a collective), its schedule
    the finetune's; written and sealed (the PendingCheckpoint)."""
    from shapelm.train.state import save_checkpoint

    rhash, rcontent = resume_fingerprint(run_cfg)
    scheduler = {"kind": f"yarn_{cfg.schedule}", "step": step, "peak_lr": cfg.lr,
                 "warmup_steps": cfg.warmup, "total_steps": cfg.steps,
                 "last_lr": cfg.lr * lr_factor(step - 1, cfg.warmup, cfg.steps, cfg.schedule) if step else 0.0}
    pending = save_checkpoint(out, step, model, optimizer, env, recipe, rhash, rcontent,
                              {"kind": "yarn_finetune"}, scheduler=scheduler)
    pending.seal()
    return pending


def yarn_finetune(
    model_dir: str | os.PathLike,
    data: str | os.PathLike,
    out_dir: str | os.PathLike,
    config: FinetuneConfig | None = None,
    *,
    tokenizer=None,
    split: str | None = "train",
    max_steps_this_call: int | None = None,
    time_limit_min: float | None = None,
    stop_margin_s: float = 120.0,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> FinetuneResult:
    """Finetune ``model_dir/`` (or ``model_dir/final``) with YaRN; resume from ``out_dir`` if it holds state.

    ``data``: a token directory (cut into ``seq_len`` windows in stream order, then shuffled) or a
    text source (its ``split``, tokenized with ``tokenizer`` into ``out_dir/data``). Writes
    ``out_dir/metrics.jsonl``, ``out_dir/checkpoints/step-*/`` and, when all steps are done,
    ``out_dir/final/`` (``save_pretrained``; its config carries ``rope_scaling``) and ``DONE``.
    Under srun/torchrun every process calls this; the process group is created here.
    ``max_steps_this_call`` stops early after that many updates (tests of resumption).
    ``time_limit_min``: the job's wall-clock limit, counted from this call; the run checkpoints
    and returns "preempted" (exit 138) when the time left no longer holds ``stop_margin_s``
    (raised to 1.5x the measured checkpoint time) plus two steps. ``on_step(record)`` runs on
    every rank after every update.
    """
    from shapelm.train.distributed import process_group
    from shapelm.train.preempt import Preemption

    cfg = config or FinetuneConfig()
    cfg.validate()
    preempt = Preemption(time_limit_min=time_limit_min, margin_s=stop_margin_s)  # the clock starts
    with process_group(cfg.device) as env, contextlib.ExitStack() as held:
        try:
            preempt.install()
            return _finetune(model_dir, data, Path(out_dir), cfg, tokenizer, split, max_steps_this_call,
                             preempt, stop_margin_s, on_step, env, held)
        finally:
            preempt.restore()


def _finetune(model_dir, data, out: Path, cfg: FinetuneConfig, tokenizer, split, max_steps_this_call,
              preempt, stop_margin_s: float, on_step, env, held) -> FinetuneResult:
    from shapelm.model.io import load_model_config
    from shapelm.train import checkpoint as ckpt
    from shapelm.train import steps
    from shapelm.train.distributed import barrier, broadcast_object
    from shapelm.train.observe import MetricsLog
    from shapelm.train.parallel import build_parallel, is_fsdp, make_optimizer
    from shapelm.train.state import load_checkpoint, prepare_run_dir, write_final

    model_path = _model_path(model_dir)
    final = out / "final"
    if (final / "model.safetensors").is_file() and (out / "DONE").is_file():
        log.info("%s already finished", out)
        return FinetuneResult("already_complete", cfg.steps, cfg.steps, final)
    accum = micro_batches_per_rank(cfg, env.world_size)  # before minutes of tokenizing
    out.mkdir(parents=True, exist_ok=True)
    data = _segments_dir(data, tokenizer, cfg, out, split, env)
    segments = SegmentData(data, cfg.seq_len, cfg.seed)
    scaling = cfg.scaling()
    model_cfg = yarn_model_config(load_model_config(model_path), scaling)
    if segments.store.vocab_size > model_cfg.vocab_size:
        raise DataError(
            f"{data}: tokenized with vocab_size {segments.store.vocab_size} but the model has "
            f"{model_cfg.vocab_size} (re-tokenize with the model's tokenizer)"
        )
    run_cfg = dict(dataclasses.asdict(cfg), model=str(model_path.resolve()), data=str(Path(data).resolve()),
                   rope_scaling=scaling)

    # Pretraining's start-up: rank 0 checks the directory (writable, locked), the segments'
    # sha256 and finds the checkpoint (refused if its RESUME_KEYS differ); every rank follows
    # its decision, or raises its error.
    resume = failure = None
    if env.is_main:
        try:
            resume = prepare_run_dir(out, segments.store, *resume_fingerprint(run_cfg), held)
        except ShapelmError as err:
            failure = err
    resume, failure = broadcast_object([resume, failure], env)
    if failure is not None:
        raise failure
    step, resumed_from = (resume[0], Path(resume[1])) if resume else (0, None)
    if resumed_from is not None and ckpt.is_sharded(resumed_from):
        full = None  # seeded, then replaced by the shards (load_checkpoint)
    elif env.is_main:  # rank 0 reads, FSDP broadcasts
        full = ckpt.load_torch(resumed_from / "model.pt", mmap=True) if resumed_from else _base_weights(model_path)
    else:
        full = {}

    torch.manual_seed(cfg.seed)
    amp = getattr(torch, cfg.autocast_dtype) if env.device.type == "cuda" else None
    recipe = finetune_recipe(cfg)
    model, forward = build_parallel(model_cfg, recipe, env, full, amp)
    del full
    optimizer = make_optimizer(model, recipe, env, is_fsdp(recipe, env))
    trainable = [p for p in model.parameters() if p.requires_grad]
    if resumed_from:
        load_checkpoint(resumed_from, model, optimizer, recipe, env)
        log.info("resumed %s at step %d (%d processes)", resumed_from, step, env.world_size)
    if env.is_main:
        files.write_json(out / "finetune_config.json", run_cfg, indent=1)

    amp_ctx = (lambda: torch.autocast(env.device.type, dtype=amp)) if amp else contextlib.nullcontext
    model.train()
    start = step  # the state at `start` is on disk: a checkpoint or the base model
    stop = cfg.steps if max_steps_this_call is None else min(cfg.steps, start + max_steps_this_call)
    tokens_per_rank = accum * cfg.micro_batch * (cfg.seq_len - 1)  # every label counts
    metrics = MetricsLog(out / "metrics.jsonl", start, enabled=env.is_main)

    def record(step: int, lr: float, out_: tuple, took: float) -> dict[str, Any]:
        loss, _, _, grad_norm = out_
        rec = {"step": step, "loss": loss, "lr": lr, "tokens": step * cfg.batch * (cfg.seq_len - 1),
               "seconds": round(took, 3)}
        if grad_norm is not None:
            rec["grad_norm"] = grad_norm
        metrics.write(rec)
        if env.is_main:  # one line a step in the job log, not one per rank
            log.info("step %d/%d loss %.4f lr %.3g", step, cfg.steps, loss, lr)
        return rec

    def save(step: int, extra: dict[str, Any], background: bool):
        # written at once, meta "kind": "yarn_finetune" (not run_steps' `extra`), as before
        t_save = time.perf_counter()
        pending = _save(out, step, model, optimizer, run_cfg, cfg, recipe, env)
        # the stop must leave room for a checkpoint as slow as this one (minutes at 8B)
        preempt.margin_s = max(stop_margin_s, 1.5 * (time.perf_counter() - t_save))
        return pending

    # Pretraining's step loop (stop agreement, update, checkpoint cadence, the checkpoint on
    # stop) with the finetune's data, schedule (lr_factor of the 0-based step) and records.
    # FSDP reduce-scatters each micro-batch's gradients: no unsharded gradient is kept between
    # micro-batches (8B of them would not fit).
    try:
        hooks = steps.StepHooks(
            batches=lambda step: (micro_batches(segments, step - 1, cfg, env, accum), tokens_per_rank),
            lr_at=lambda step: cfg.lr * lr_factor(step - 1, cfg.warmup, cfg.steps, cfg.schedule),
            record=record, save=save, nonfinite_error=_nonfinite_error, on_step=on_step)
        done = steps.run_steps(model, forward, optimizer, trainable, recipe, env, amp_ctx, preempt, hooks,
                               start=start, stop=stop, total=cfg.steps, saved=start, out_dir=out,
                               sync_each_micro_batch=True)
    finally:
        metrics.close()
    status, step, stop_signal = done.status, done.step, done.signal

    if status == "completed":
        info = {"steps": step, "rope_scaling": scaling, "world_size": env.world_size}
        final = write_final(out, model, model_cfg, recipe, env, info)
        if env.is_main:
            files.write_json(out / "DONE", {"steps": step}, indent=None)
        barrier(env)
        return FinetuneResult("completed", step, cfg.steps, final)
    path = done.checkpoint  # None: no update yet
    if status == "preempted" and env.is_main:
        log.warning("stopped by %s at step %d: checkpoint %s; exit %d",
                    signal.Signals(stop_signal).name, step, path, 128 + stop_signal)
    return FinetuneResult(status, step, cfg.steps, path, signal=stop_signal or None)
