"""Seeded initialisation that is the same whatever the world size and sharding.

Every weight matrix is cut along its first dimension into fixed row blocks of about 2^20
numbers (the cut depends only on the parameter's shape), and block b of parameter `name` is
drawn from its own generator seeded by (seed, name, b), on the device that holds the parameter
(a GPU rank draws its shard on its GPU: no CPU fill and copy, which costs minutes at 8B). A rank
holding rows [r0, r1) of a parameter (an FSDP2 shard, or everything) draws only the blocks that
overlap them, so no rank builds the whole model, and 1, 2 or 32 ranks of one kind of device
produce bitwise the same full parameters. CPU and CUDA generators are different streams, so a
CPU run and a GPU run start from different (equally distributed) values.
Weights are N(0, init_std) truncated at 3 sigma, norms 1, as `Transformer.reset_parameters`.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

#: Numbers per row block (a block holds at least one row).
BLOCK_NUMEL = 1 << 20


def block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.sha256(f"{seed}/{name}/{block}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def rows_per_block(shape: torch.Size) -> int:
    row = max(1, shape[1:].numel())
    return max(1, BLOCK_NUMEL // row)


def fill_trunc_normal_rows(out: torch.Tensor, name: str, shape: torch.Size, rows: range, seed: int,
                           std: float) -> None:
    """Write rows `rows` of parameter `name` (full shape `shape`) into `out`, drawing each block
    on `out`'s device with a generator of that device."""
    per = rows_per_block(shape)
    if not len(rows):
        return
    for block in range(rows.start // per, (rows.stop - 1) // per + 1):
        lo, hi = block * per, min((block + 1) * per, shape[0])
        start, stop = max(lo, rows.start), min(hi, rows.stop)
        whole = start == lo and stop == hi and out.dtype == torch.float32 and out.is_contiguous()
        # a block drawn whole (its values do not depend on which rows a rank keeps), directly
        # into `out` when this rank holds all of it in float32
        values = out[start - rows.start: stop - rows.start] if whole else torch.empty(
            (hi - lo, *shape[1:]), dtype=torch.float32, device=out.device)
        gen = torch.Generator(device=out.device).manual_seed(block_seed(seed, name, block))
        nn.init.trunc_normal_(values, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=gen)
        if not whole:
            out[start - rows.start: stop - rows.start] = values[start - lo: stop - lo]


def local_rows(param: torch.Tensor) -> tuple[torch.Tensor, range]:
    """(the tensor this rank writes, the global rows it holds); plain tensors hold every row."""
    if not hasattr(param, "to_local"):
        return param, range(param.shape[0])
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    if any(offset[1:]):
        raise ValueError("seeded init supports sharding along dim 0 only (FSDP2's default)")
    return param.to_local(), range(offset[0], offset[0] + shape[0])


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int) -> None:
    """Initialise `model` (plain or FSDP2-sharded, on any device) from `seed`."""
    from shapelm.model.titans import NeuralMemory
    from shapelm.model.layers import RMSNorm

    std = model.config.init_std
    for name, param in model.named_parameters():
        owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        local, rows = local_rows(param)
        if isinstance(owner, RMSNorm):
            local.fill_(1.0)
        elif isinstance(owner, (nn.Linear, nn.Embedding)):
            fill_trunc_normal_rows(local, name, param.shape, rows, seed, std)
        elif isinstance(owner, NeuralMemory):  # Titans' memory weights (by head), convolution, norm
            short = name.rsplit(".", 1)[1]
            memory_std = owner.init_std(short)
            if memory_std is None:
                owner.init_fixed(short, local)
            else:
                fill_trunc_normal_rows(local, name, param.shape, rows, seed, memory_std)
        else:
            raise TypeError(f"{name}: no initialiser for {type(owner).__name__}")
