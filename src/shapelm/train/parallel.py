"""Model parallelism for training: build a model under DDP or FSDP2 from a full state dict,
and gather / restore full (world-size independent) model and optimizer states.

Shared by pretraining (shapelm.train.loop) and the YaRN finetune (shapelm.longctx.finetune).
"""

from __future__ import annotations

import torch
from torch import nn

from shapelm.config import TrainRecipe
from shapelm.errors import ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.model.transformer import build_model
from shapelm.train.distributed import DistEnv
from shapelm.train.schedule import param_groups


def autocast_dtype(recipe: TrainRecipe, device: torch.device) -> torch.dtype | None:
    if recipe.precision == "bf16" or (recipe.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def initial_state(cfg: ModelConfig, recipe: TrainRecipe) -> dict[str, torch.Tensor]:
    """The seeded float32 init, built on CPU so that it is the same on every device."""
    torch.manual_seed(recipe.seed)
    return build_model(cfg, "cpu").state_dict()


def build_parallel(cfg: ModelConfig, recipe: TrainRecipe, env: DistEnv, full_state: dict, amp):
    """Returns (raw model: holds the parameters, forward model: DDP wrapper or the same).

    `full_state` is the full float32 state dict (the seeded init or a checkpoint); under FSDP
    only rank 0 holds it (others pass {}) and it is broadcast and sharded."""
    model = build_model(cfg, "meta")
    if recipe.frozen_lm_head:
        model.lm_head.weight.requires_grad_(False)
    if recipe.compile:
        for block in model.layers:
            block.compile()
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32)
        for block in model.layers:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        model.to_empty(device=env.device)
        set_model_state_dict(
            model, full_state,
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        return model, model
    model.to_empty(device=env.device)
    model.load_state_dict(full_state)
    if env.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [env.device.index] if env.device.type == "cuda" else None
        return model, DDP(model, device_ids=ids)
    return model, model


def is_fsdp(recipe: TrainRecipe, env: DistEnv) -> bool:
    return env.distributed and recipe.distributed == "fsdp"


def _param_names(model: nn.Module, optimizer) -> list[str]:
    """Parameter names in the optimizer's id order (its state_dict numbers them 0, 1, ...)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]


def full_model_state(model: nn.Module, recipe: TrainRecipe, env: DistEnv) -> dict:
    """Full float32 CPU state dict on rank 0 ({} on other ranks under FSDP)."""
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)
    if not env.is_main:
        return {}
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def full_optimizer_state(model: nn.Module, optimizer, recipe: TrainRecipe, env: DistEnv) -> dict:
    """The optimizer state keyed by parameter name: `torch.distributed.checkpoint`'s full
    optimizer state dict format, so DDP, FSDP and single-process checkpoints interchange."""
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=opts)
    if not env.is_main:
        return {}
    names = _param_names(model, optimizer)
    sd = optimizer.state_dict()
    state = {
        names[i]: {k: (v.detach().to("cpu", copy=True) if torch.is_tensor(v) else v) for k, v in s.items()}
        for i, s in sd["state"].items()
    }
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_optimizer_state(model: nn.Module, optimizer, osd: dict, recipe: TrainRecipe, env: DistEnv) -> None:
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_optimizer_state_dict(model, optimizer, osd, options=opts)
        return
    names = _param_names(model, optimizer)
    index = {n: i for i, n in enumerate(names)}
    saved = [n for g in osd["param_groups"] for n in g["params"]]
    if sorted(saved) != sorted(names):
        raise ShapelmError(
            f"checkpoint optimizer state covers {len(saved)} parameters, the model trains "
            f"{len(names)} (frozen_lm_head changed?)"
        )
    optimizer.load_state_dict({
        "state": {index[n]: s for n, s in osd["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in osd["param_groups"]],
    })


def make_optimizer(model: nn.Module, recipe: TrainRecipe, env: DistEnv, fsdp: bool):
    # fused kernels on GPU (plain tensors); the multi-tensor path elsewhere (DTensor under FSDP,
    # and on CPU, where it is ~25% faster than torch's per-tensor default)
    kwargs = {"fused": True} if env.device.type == "cuda" and not fsdp else {"foreach": True}
    return torch.optim.AdamW(
        param_groups(model, recipe.weight_decay),
        lr=recipe.lr,
        betas=tuple(recipe.betas),
        eps=recipe.eps,
        **kwargs,
    )
