"""Compiled blocks for models whose layers differ in shape (tapered, layer-wise scaled, ...).

`torch.compile` traces a block's `forward` once per distinct set of weight shapes (parameters
are static shapes), and the blocks of one model share that code object: a model with more
distinct `LayerShape`s than `torch._dynamo.config.recompile_limit` (8) would silently run its
remaining layers eager. `compile_blocks` raises the limit to the model's number of distinct
shapes (each traced once; same-shape layers reuse the graph) and compiles every block.
"""

from __future__ import annotations

from torch import nn

#: Traces per distinct shape: training (grad on) and evaluation (no_grad) guard separately.
TRACES_PER_SHAPE = 2


def distinct_layer_shapes(model: nn.Module) -> int:
    return len(set(model.config.layers))


def compile_blocks(model: nn.Module, backend: str = "inductor", **options) -> int:
    """Compile every block of `model` in place; returns the number of distinct layer shapes."""
    import torch._dynamo.config as dynamo_config

    shapes = distinct_layer_shapes(model)
    need = TRACES_PER_SHAPE * shapes
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, need)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * need)
    for block in model.layers:
        block.compile(backend=backend, **options)
    return shapes


def should_compile(setting: bool | str, device_type: str) -> bool:
    """train.compile: true / false, or "auto" (compiled on CUDA, where it pays; eager on CPU)."""
    return device_type == "cuda" if setting == "auto" else bool(setting)
