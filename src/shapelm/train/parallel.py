"""Model parallelism for training: build a model under DDP, FSDP2 or HSDP (FSDP2 over a 2-D
mesh) with each rank initialising its own shard, synchronise gradients once per step, and
gather / restore full (world-size independent) model and optimizer states.

Shared by pretraining (shapelm.train.loop) and the YaRN finetune (shapelm.longctx.finetune).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch import nn

from shapelm.config import TrainRecipe
from shapelm.errors import ConfigError, ShapelmError
from shapelm.model.compile import compile_blocks, should_compile
from shapelm.model.config import ModelConfig
from shapelm.model.init import init_parameters
from shapelm.model.transformer import build_model, materialize
from shapelm.train.distributed import DistEnv
from shapelm.train.schedule import param_groups


def autocast_dtype(recipe: TrainRecipe, device: torch.device) -> torch.dtype | None:
    if recipe.precision == "bf16" or (recipe.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def initial_state(cfg: ModelConfig, recipe: TrainRecipe) -> dict[str, torch.Tensor]:
    """The seeded float32 init drawn on the CPU, as a full state dict (what every CPU rank's shard
    holds, whatever the world size; a GPU rank draws the same blocks with CUDA's generator)."""
    model = materialize(build_model(cfg, "meta"), "cpu")
    init_parameters(model, recipe.seed)
    return model.state_dict()


def build_parallel(cfg: ModelConfig, recipe: TrainRecipe, env: DistEnv, full_state: dict | None, amp):
    """Returns (raw model: holds the parameters, forward model: DDP wrapper or the same).

    The model is built on meta and materialised on the device, sharded first under FSDP/HSDP.
    `full_state` None: every rank initialises its own shard on its device from `recipe.seed`
    (shapelm.model.init: the same full parameters whatever the world size, on one kind of
    device). Else the full float32 state dict (a
    checkpoint); under FSDP only rank 0 holds it (others pass {}) and it is broadcast and sharded."""
    model = build_model(cfg, "meta")
    if getattr(recipe, "frozen_lm_head", False):
        model.lm_head.weight.requires_grad_(False)
    model.set_recompute(getattr(recipe, "activation_checkpointing", "none"))
    if getattr(recipe, "fp8", False):
        convert_to_fp8(model, env.device)
    if should_compile(getattr(recipe, "compile", False), env.device.type):
        compile_blocks(model)
    if is_fsdp(recipe, env):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32)
        mesh = device_mesh(recipe, env)
        for i, block in enumerate(model.layers):
            # the last block's backward starts right after the forward: keep it gathered
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < cfg.n_layers - 1)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        model.to_empty(device=env.device)
        if full_state is None:
            init_parameters(model, recipe.seed)
        else:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
            )

            set_model_state_dict(
                model, full_state,
                options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
            )
        return model, model
    materialize(model, env.device)
    if full_state is None:
        init_parameters(model, recipe.seed)
    else:
        model.load_state_dict(full_state)
    if env.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [env.device.index] if env.device.type == "cuda" else None
        return model, DDP(model, device_ids=ids)
    return model, model


def is_fsdp(recipe: TrainRecipe, env: DistEnv) -> bool:
    """FSDP2 sharding: train.distributed fsdp, or hsdp (sharded within a node)."""
    return env.distributed and recipe.distributed in ("fsdp", "hsdp")


def shard_group_size(env: DistEnv, environ=None) -> int:
    """Ranks that shard one replica under HSDP: the ranks of one node (SHAPELM_SHARD_SIZE
    overrides, e.g. to emulate nodes on one host)."""
    environ = os.environ if environ is None else environ
    for key in ("SHAPELM_SHARD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = environ.get(key, "").split("(")[0]  # SLURM writes "8(x4)"
        if value.isdigit() and int(value) > 0:
            size = int(value)
            break
    else:
        size = env.world_size
    if env.world_size % size:
        raise ShapelmError(f"HSDP: world size {env.world_size} is not a multiple of the "
                           f"{size} ranks per node (set SHAPELM_SHARD_SIZE)")
    return size


def device_mesh(recipe: TrainRecipe, env: DistEnv):
    """1-D mesh of every rank (FSDP), or 2-D (replicate across nodes, shard within) for HSDP."""
    from torch.distributed.device_mesh import init_device_mesh

    if recipe.distributed != "hsdp":
        return init_device_mesh(env.device.type, (env.world_size,))
    shard = shard_group_size(env)
    return init_device_mesh(env.device.type, (env.world_size // shard, shard),
                            mesh_dim_names=("replicate", "shard"))


def micro_batch_sync(model: nn.Module, forward: nn.Module, recipe: TrainRecipe, last: bool):
    """Context for one micro batch's backward: gradients are synchronised on the last one only.

    DDP: `no_sync` before it. FSDP: no reduce-scatter before it (unsharded float32 gradients
    accumulate locally). HSDP: the intra-node reduce-scatter runs every micro batch (gradients
    stay sharded), the inter-node all-reduce only on the last."""
    if forward is not model:
        return contextlib.nullcontext() if last else forward.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):
        if recipe.distributed == "hsdp":
            model.set_requires_all_reduce(last)
        else:
            model.set_requires_gradient_sync(last)
        model.set_is_last_backward(last)
    return contextlib.nullcontext()


def convert_to_fp8(model: nn.Module, device: torch.device) -> int:
    """Train the blocks' Linear layers in float8 (torchao, tensorwise dynamic scaling: the
    recipe of the authors' `bf16_with_fp8_current_scaling_mixed`); embeddings, norms and the LM
    head stay bf16. Returns the number of converted layers. Refused off CUDA / below SM89."""
    if device.type != "cuda":
        raise ConfigError("train.fp8: float8 training needs a CUDA GPU of compute capability "
                          f">= 8.9 (H100, L40S, ...); this run is on {device.type}. Set fp8: false")
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        raise ConfigError(f"train.fp8: {torch.cuda.get_device_name(device)} (SM{major}{minor}) has "
                          "no float8 tensor cores (needs SM89+); set fp8: false")
    return fp8_linear_layers(model)


def fp8_linear_layers(model: nn.Module) -> int:
    """Swap the blocks' Linear layers for torchao's Float8Linear (dims must be multiples of 16)."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as err:
        raise ConfigError(f"train.fp8 needs torchao (pip install torchao): {err}") from None

    def eligible(module: nn.Module, fqn: str) -> bool:
        return (isinstance(module, nn.Linear) and fqn.startswith("layers.")
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
    convert_to_float8_training(model, config=config, module_filter_fn=eligible)
    return sum(type(m).__name__ == "Float8Linear" for m in model.modules())


def _param_names(model: nn.Module, optimizer) -> list[str]:
    """Parameter names in the optimizer's id order (its state_dict numbers them 0, 1, ...)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]


def full_model_state(model: nn.Module, recipe: TrainRecipe, env: DistEnv) -> dict:
    """Full float32 CPU state dict on rank 0 ({} on other ranks under FSDP)."""
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)
    if not env.is_main:
        return {}
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def full_optimizer_state(model: nn.Module, optimizer, recipe: TrainRecipe, env: DistEnv) -> dict:
    """The optimizer state keyed by parameter name: `torch.distributed.checkpoint`'s full
    optimizer state dict format, so DDP, FSDP and single-process checkpoints interchange."""
    if is_fsdp(recipe, env):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

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
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

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
