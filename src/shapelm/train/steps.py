"""The one step loop of shapelm, shared by pretraining (`shapelm.train.loop`) and the YaRN
finetune (`shapelm.longctx.finetune`): `run_steps` makes a span of updates through a trainer's
`StepHooks`, every rank agreeing at each step boundary whether to stop (`agree_to_stop`), and
`update` is the only place an optimizer is stepped (gradients accumulated over micro batches,
clipped, a non-finite update refused before it is applied).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from shapelm.config import TrainRecipe
from shapelm.errors import DataError
from shapelm.train import checkpoint as ckpt
from shapelm.train.distributed import DistEnv, all_reduce_sum
from shapelm.train.parallel import micro_batch_sync
from shapelm.train.preempt import Preemption


@dataclass
class StepsOutcome:
    """What `run_steps` ends with: `status` "completed" (every update up to `total` made),
    "stopped" (at `stop` < `total`) or "preempted" (a signal or the time limit: `signal`);
    `step` the state's update; `checkpoint` the checkpoint holding it when not completed
    (None: no update and nothing saved yet)."""

    status: str
    step: int
    signal: int = 0
    checkpoint: Path | None = None


@dataclass
class StepHooks:
    """What a trainer hands the step loop: where its batches, learning rate, records and
    checkpoints come from. Called on every rank, for update `step` (1-based), in this order:

        batches(step) -> (micro batches, labelled tokens)   this rank's (inputs, labels) pairs
        before(step) -> seconds                             work before the update (an evaluation);
                                                            the seconds it adds to the step's pace
        no_labels_error(step) -> Exception                  raised when no rank has a labelled token
        lr_at(step) -> lr                                   the update's learning rate
        nonfinite_error(step, loss, grad_norm) -> Exception raised instead of a non-finite update
        record(step, lr, (loss, ce, z, grad norm), seconds) -> the step's metrics record (written
                                                            or logged by the trainer)
        on_step(record)                                     sees the record (a progress bar)
        after(step)                                         runs before the checkpoint that implies
                                                            it (an evaluation)
        save(step, extra, async_) -> PendingCheckpoint      a checkpoint, sealed before the next
                                                            save or at the end

    Optional hooks are None where a trainer has nothing to do (the finetune evaluates nothing
    during its steps)."""

    batches: Callable[[int], tuple[list, int]]
    lr_at: Callable[[int], float]
    record: Callable[[int, float, tuple, float], dict[str, Any]]
    save: Callable[[int, dict[str, Any], bool], Any]
    nonfinite_error: Callable[..., Exception]
    no_labels_error: Callable[[int], Exception] | None = None
    before: Callable[[int], float] | None = None
    after: Callable[[int], None] | None = None
    on_step: Callable[[dict[str, Any]], None] | None = None


def run_steps(model, forward, optimizer, trainable, recipe: TrainRecipe, env: DistEnv, amp_ctx,
              preempt: Preemption, hooks: StepHooks, *, start: int, stop: int, total: int,
              saved: int | None, out_dir: Path, sync_each_micro_batch: bool = False) -> StepsOutcome:
    """The one step loop of shapelm (pretraining's `train` and the YaRN finetune): updates
    `start + 1 .. stop` (1-based) of a `total`-update schedule, each one `update`, through the
    trainer's `hooks` (StepHooks). Before each update every rank agrees whether to stop
    (`agree_to_stop`: a signal, or the time limit no longer holding the margin and two steps),
    which also sums the token counts. Every `recipe.checkpoint_every` updates before `total` a
    checkpoint is saved (`recipe.async_checkpoint`). `saved`: the update whose state is already
    on disk at `start` (None: none).

    A run that does not complete ends with the checkpoint of its last update:
    `hooks.save(step, {"reason": status}, False)` unless that update is `saved` (then the newest
    valid checkpoint of `out_dir`)."""
    in_flight = None  # the previous periodic save, sealed before the next save or the end
    step_seconds = 0.0  # running pace of one update, for the time-limit stop
    status, step, stop_signal = "completed", start, 0
    for step in range(start + 1, stop + 1):
        t_step = time.perf_counter()
        micro, local = hooks.batches(step)
        extra = hooks.before(step) if hooks.before is not None else 0.0
        # Every rank stops at the same step (the agreement carries the token count).
        stop_signal, (n_global,) = agree_to_stop(preempt, step_seconds + extra, env, local)
        if stop_signal:
            step -= 1  # the state is that after the previous update
            status = "preempted"
            break
        loss, took = _one_update(model, forward, optimizer, trainable, recipe, env, amp_ctx, hooks,
                                 step, micro, n_global, t_step, sync_each_micro_batch)
        del micro
        step_seconds = took if step_seconds == 0.0 else 0.8 * step_seconds + 0.2 * took
        if step % recipe.checkpoint_every == 0 and step < total:
            if in_flight is not None:
                in_flight.seal()
            in_flight = hooks.save(step, {"loss": loss}, recipe.async_checkpoint)
            saved = step
    else:
        status = "completed" if stop >= total else "stopped"
    if in_flight is not None:
        in_flight.seal()
    if status == "completed":
        return StepsOutcome(status, step)
    return StepsOutcome(status, step, stop_signal, _last_checkpoint(hooks, step, status, saved, out_dir))


def _one_update(model, forward, optimizer, trainable, recipe: TrainRecipe, env: DistEnv, amp_ctx,
                hooks: StepHooks, step: int, micro: list, n_global: int, t_step: float,
                sync_each_micro_batch: bool) -> tuple[float, float]:
    """Update `step` with its hooks around it: the learning rate, the record, `on_step` and
    `after`. Returns the update's loss and its seconds since `t_step` (the pace the time limit
    reads: batches, `before` and the update, not `after`'s evaluation)."""
    if n_global == 0:
        raise (hooks.no_labels_error(step) if hooks.no_labels_error is not None
               else DataError(f"update {step} has no labelled token"))
    lr = hooks.lr_at(step)
    out = update(model, forward, optimizer, trainable, micro, n_global, lr, recipe, env,
                 amp_ctx, functools.partial(hooks.nonfinite_error, step),
                 sync_each_micro_batch=sync_each_micro_batch)
    took = time.perf_counter() - t_step
    rec = hooks.record(step, lr, out, took)
    if hooks.on_step is not None:
        hooks.on_step(rec)
    if hooks.after is not None:
        hooks.after(step)
    return out[0], took


def _last_checkpoint(hooks: StepHooks, step: int, status: str, saved: int | None,
                     out_dir: Path) -> Path | None:
    """The checkpoint of a run that stops before `total`: saved now unless `step` is on disk."""
    if saved != step:
        return hooks.save(step, {"reason": status}, False).seal()
    found = ckpt.latest_valid(out_dir, verify=False)
    return found[1] if found else None


def agree_to_stop(preempt: Preemption, step_seconds: float, env: DistEnv,
                  *counts: int) -> tuple[int, list[int]]:
    """Every rank, at a step boundary: whether any rank stops (a signal, or its time limit no
    longer holding the margin and two steps of `step_seconds`), decided in one all-reduce that
    also sums this rank's `counts`. Returns (the signal every rank stops with, 0: none; the
    summed counts). A rank stopped by another's signal or clock takes the largest signal
    number of the ranks as its own, so every rank checkpoints and exits alike."""
    head = torch.tensor([1 if preempt.should_stop(step_seconds) else 0, *counts],
                        dtype=torch.int64, device=env.device)
    all_reduce_sum(head, env)
    flagged, *totals = head.tolist()
    if not flagged:
        return 0, totals
    signum = torch.tensor([preempt.signum or 0], dtype=torch.int64, device=env.device)
    if env.distributed:
        import torch.distributed as dist

        dist.all_reduce(signum, op=dist.ReduceOp.MAX)
    preempt.signum = int(signum[0])
    return preempt.signum, totals


def update(model, forward, optimizer, trainable, batches, n_global: int, lr: float,
           recipe: TrainRecipe, env, amp_ctx, nonfinite_error: Callable[[float, float | None], Exception],
           *, sync_each_micro_batch: bool = False) -> tuple[float, float, float, float | None]:
    """One optimizer update, the only place where shapelm steps an optimizer (pretraining and
    the YaRN finetune): gradients of this rank's micro `batches` ((inputs, labels) pairs; the
    global batch has `n_global` labelled tokens), clipped to `recipe.grad_clip` (None: not
    clipped, no norm), then AdamW at `lr`. A non-finite loss or norm raises
    `nonfinite_error(loss, grad_norm)` instead: no update is applied. `sync_each_micro_batch`: FSDP
    reduce-scatters every micro batch's gradients instead of holding unsharded ones until the
    last (the finetune's 8B gradients would not fit). Returns (loss, cross-entropy, z-loss,
    grad norm) of the global batch."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss, ce_loss, z_loss = _accumulate_gradients(model, forward, batches, n_global, recipe, env,
                                                  amp_ctx, sync_each_micro_batch)
    grad_norm = None if recipe.grad_clip is None else _clip_gradients(trainable, recipe.grad_clip)
    if not (math.isfinite(loss) and (grad_norm is None or math.isfinite(grad_norm))):
        raise nonfinite_error(loss, grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, ce_loss, z_loss, grad_norm


def _accumulate_gradients(model, forward, batches, n_global: int, recipe: TrainRecipe, env,
                          amp_ctx, sync_each_micro_batch: bool = False) -> tuple[float, float, float]:
    """Forward and backward of one step's micro-batches, gradients synced on the last only
    (unless `sync_each_micro_batch`); the global batch's mean loss, cross-entropy and
    (weighted) z-loss."""
    accum = len(batches)
    sums = torch.zeros(3, dtype=torch.float64, device=env.device)
    for j, (x, labels) in enumerate(batches):
        with micro_batch_sync(model, forward, recipe, last=sync_each_micro_batch or j == accum - 1):
            with amp_ctx():
                out = forward(x, labels, z_loss_multiplier=recipe.z_loss, return_logits=False,
                              loss_chunk_tokens=recipe.loss_chunk_tokens or None)
            n = (labels != -100).sum()
            # Sum of per-token losses of this micro batch / tokens in the global batch;
            # x world_size because DDP/FSDP average gradients over ranks.
            (out.loss * n * (env.world_size / n_global)).backward()
        sums += torch.stack([out.loss.detach(), out.ce_loss.detach(),
                             out.z_loss.detach() * recipe.z_loss]).double() * n
    all_reduce_sum(sums, env)
    loss, ce_loss, z_loss = (sums / n_global).tolist()
    return loss, ce_loss, z_loss


def _clip_gradients(trainable: list[torch.Tensor], max_norm: float) -> float:
    """Clip to `max_norm`; the total norm before clipping (over every shard under FSDP)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    return float(grad_norm)
