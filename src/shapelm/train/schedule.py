"""The optimisation recipe: learning-rate schedule and AdamW parameter groups.

Schedule (OLMo's `CosWithWarmup` with `units: tokens`, `warmup_min_lr: 0`, `alpha_f =
final_lr_ratio`): the update numbered `step` (1-based; OLMo increments its counters before the
update) has seen `step * batch_tokens` tokens and uses

    t < W:   lr = peak * t / W                                   (linear warmup from 0)
    t >= W:  lr = final + (peak - final) * (1 + cos(pi * (t - W) / (T - W))) / 2
    final = final_lr_ratio * peak, T = total_steps * batch_tokens, W = warmup_tokens

so the last update (step == total_steps) uses exactly final_lr_ratio x peak. In steps this is
warmup over `warmup_tokens / batch_tokens` steps, kept fractional (Table 4's 50M tokens over
512K-token batches is 95.37 steps): counting in tokens means we never round it.
"""

from __future__ import annotations

import math

from torch import nn

from shapelm.config import TrainRecipe


def lr_at(step: int, recipe: TrainRecipe) -> float:
    """Learning rate of update number `step` (1-based)."""
    peak = recipe.lr
    final = recipe.final_lr_ratio * peak
    t = step * recipe.batch_tokens
    total = recipe.total_steps * recipe.batch_tokens
    warm = recipe.warmup_tokens
    if t < warm:
        return peak * t / warm
    if t >= total:
        return final
    progress = (t - warm) / max(total - warm, 1)
    return final + (peak - final) * (1.0 + math.cos(math.pi * progress)) / 2.0


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay every weight matrix except the input embedding (OLMo's
    `decay_embeddings: false`); no decay for norms (1-D weights). The LM head is a matrix and
    is decayed, as in OLMo. Frozen parameters (requires_grad False) are left out."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if decays(name, p) else no_decay).append(p)
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def decays(name: str, param: nn.Parameter) -> bool:
    """Whether parameter `name` gets weight decay: matrices, except the input embedding."""
    return param.ndim >= 2 and not _is_embedding(name)


def _is_embedding(name: str) -> bool:
    return "embed_tokens" in name.split(".")
