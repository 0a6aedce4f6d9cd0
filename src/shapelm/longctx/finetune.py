"""YaRN context-extension finetuning (Peng et al. 2023; PROTOCOLS.md section 9).

Recipe (defaults): s = 16 for 4096 -> 65,536; 400 steps; AdamW beta 0.9/0.95, eps 1e-8, no
weight decay; lr 2e-5 with 20 linear warm-up steps; global batch 64 segments of 65,536 tokens
(PG19 re-tokenized with the model's tokenizer); no gradient clipping.

Schedule: jquesnelle/yarn trained with DeepSpeed ``deepspeed/zero3.json`` (README), whose
``WarmupDecayLR`` warms up linearly and then decays linearly to 0 at the last step; its plain
PyTorch path defaults to ``get_linear_schedule_with_warmup``, the same shape. Hence
``schedule="linear"`` is the default; ``"constant"`` (warm-up then flat, the repo's
``--lr-schedule constant``) is available. Both give lr = 0 on the first update, as HF's and
DeepSpeed's schedulers do.

Memory: each block runs under activation checkpointing and the loss is computed in vocabulary
chunks (``loss_chunk_tokens``), so a 65,536-token segment never materialises [tokens, vocab]
logits. Micro-batches accumulate to the global batch. Single process (no FSDP).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from shapelm.errors import ConfigError, DataError
from shapelm.longctx.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, set_rng_state
from shapelm.longctx.yarn import apply_yarn, yarn_scaling

log = logging.getLogger(__name__)


@dataclass
class FinetuneConfig:
    steps: int = 400
    lr: float = 2e-5
    batch: int = 64  # global batch in segments
    micro_batch: int = 1
    seq_len: int = 65_536  # tokens per segment (inputs are seq_len - 1 tokens, labels shifted)
    factor: float | None = 16.0  # None: seq_len / original
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
    checkpoint_every: int = 50
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


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute every decoder block in the backward pass (instance-level wrapper, weights untouched)."""
    for block in model.layers:
        if getattr(block, "_shapelm_ckpt", False):
            continue
        inner = block.forward

        def wrapped(x, cos, sin, kv_cache=None, _inner=inner):
            if kv_cache is not None or not torch.is_grad_enabled():
                return _inner(x, cos, sin, kv_cache)
            return checkpoint(_inner, x, cos, sin, use_reentrant=False)

        block.forward = wrapped
        block._shapelm_ckpt = True


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
    source: str | os.PathLike, tokenizer, seq_len: int, out_dir: str | os.PathLike, eos_id: int | None
) -> Path:
    """Tokenize a text source (dir of .txt, .jsonl, ...) into a token dir of ``seq_len`` segments."""
    from shapelm.data.tokens import write_token_dir
    from shapelm.longctx.sources import iter_documents, segment_stream

    out = Path(out_dir)
    if (out / "manifest.json").is_file():
        return out
    if eos_id is None:
        raise DataError("tokenizer has no <|endoftext|> token to separate documents")
    segs = list(segment_stream(iter_documents(source, tokenizer), seq_len, eos_id))
    if not segs:
        raise DataError(f"{source}: fewer tokens than one {seq_len}-token segment")
    write_token_dir(
        out,
        [np.concatenate(segs)],
        tokenizer.get_vocab_size(),
        eos_id,
        {"kind": "yarn-finetune-segments", "seq_len": seq_len, "source": str(source)},
    )
    return out


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _compatible(saved: dict, cfg: dict) -> None:
    fixed = ("lr", "batch", "seq_len", "factor", "original", "warmup", "schedule", "seed", "model")
    diff = [k for k in fixed if saved.get(k) != cfg.get(k)]
    if diff:
        raise ConfigError(
            "resuming with a different config: "
            + ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {cfg.get(k)!r}" for k in diff)
        )


def yarn_finetune(
    model_dir: str | os.PathLike,
    data: str | os.PathLike,
    out_dir: str | os.PathLike,
    config: FinetuneConfig | None = None,
    *,
    tokenizer=None,
    max_steps_this_call: int | None = None,
) -> Path:
    """Finetune ``model_dir/`` (or ``model_dir/final``) with YaRN; resume from ``out_dir`` if it holds state.

    ``data``: a token directory (cut into ``seq_len`` windows in stream order, then shuffled) or a
    text source (tokenized with ``tokenizer`` into ``out_dir/data``). Writes
    ``out_dir/metrics.jsonl``, ``out_dir/checkpoints/step-*/`` and, when all steps are done,
    ``out_dir/final/`` (``save_pretrained``; its config carries ``rope_scaling``).
    ``max_steps_this_call`` stops early after that many updates (for tests of resumption).
    Returns ``out_dir/final`` (or the last checkpoint when stopped early).
    """
    from shapelm.data.tokenizer import EOS_TOKEN
    from shapelm.longctx.sources import is_token_dir
    from shapelm.model import load_pretrained, save_pretrained

    cfg = config or FinetuneConfig()
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_path = Path(model_dir)
    if (model_path / "final" / "model_config.json").is_file():
        model_path = model_path / "final"
    final = out / "final"
    if (final / "model.safetensors").is_file() and (out / "DONE").is_file():
        log.info("%s already finished", out)
        return final

    if not is_token_dir(data):
        if tokenizer is None:
            raise DataError(f"{data}: a text source needs the model's tokenizer (--tokenizer)")
        data = prepare_segments(data, tokenizer, cfg.seq_len, out / "data", tokenizer.token_to_id(EOS_TOKEN))
    segments = SegmentData(data, cfg.seq_len, cfg.seed)

    device = _device(cfg.device)
    torch.manual_seed(cfg.seed)
    model = load_pretrained(model_path, device="cpu")
    scaling = cfg.scaling()
    apply_yarn(model, scaling)
    if segments.store.vocab_size > model.config.vocab_size:
        raise DataError(
            f"{data}: tokenized with vocab_size {segments.store.vocab_size} but the model has "
            f"{model.config.vocab_size} (re-tokenize with the model's tokenizer)"
        )
    model.to(device)
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay
    )
    run_cfg = dict(dataclasses.asdict(cfg), model=str(model_path.resolve()), data=str(Path(data).resolve()), rope_scaling=scaling)

    step = 0
    last = latest_checkpoint(out)
    if last is not None:
        state = load_checkpoint(last)
        _compatible(state["config"], run_cfg)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        step = int(state["step"])
        log.info("resumed %s at step %d", last, step)
    (out / "finetune_config.json").write_text(json.dumps(run_cfg, indent=1) + "\n")

    accum = cfg.batch // cfg.micro_batch
    use_autocast = device.type == "cuda"
    amp_dtype = getattr(torch, cfg.autocast_dtype)
    model.train()
    done_this_call = 0
    metrics = open(out / "metrics.jsonl", "a")
    try:
        while step < cfg.steps:
            if max_steps_this_call is not None and done_this_call >= max_steps_this_call:
                break
            t0 = time.time()
            lr = cfg.lr * lr_factor(step, cfg.warmup, cfg.steps, cfg.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            total = 0.0
            for micro in range(accum):
                first = step * cfg.batch + micro * cfg.micro_batch
                seg = np.stack([segments.sample(first + i) for i in range(cfg.micro_batch)])
                tokens = torch.from_numpy(seg.astype(np.int64)).to(device)
                with torch.autocast(device.type, dtype=amp_dtype, enabled=use_autocast):
                    outp = model(
                        tokens[:, :-1], tokens[:, 1:], return_logits=False, loss_chunk_tokens=cfg.loss_chunk_tokens
                    )
                (outp.loss / accum).backward()
                total += float(outp.loss.detach()) / accum
            if not math.isfinite(total):
                raise DataError(f"finetune: non-finite loss {total} at step {step}")
            grad_norm = None
            if cfg.grad_clip:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            done_this_call += 1
            rec = {"step": step, "loss": total, "lr": lr, "tokens": step * cfg.batch * (cfg.seq_len - 1),
                   "seconds": round(time.time() - t0, 3)}
            if grad_norm is not None:
                rec["grad_norm"] = grad_norm
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
            log.info("step %d/%d loss %.4f lr %.3g", step, cfg.steps, total, lr)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                save_checkpoint(out, step, model, optimizer, run_cfg, keep=cfg.keep_checkpoints)
    finally:
        metrics.close()
    if step < cfg.steps:
        save_checkpoint(out, step, model, optimizer, run_cfg, keep=cfg.keep_checkpoints)
        return latest_checkpoint(out)
    model.eval()
    save_pretrained(model, final)
    (out / "DONE").write_text(json.dumps({"steps": step}) + "\n")
    return final
