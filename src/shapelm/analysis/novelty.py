"""Layer-wise novelty (Tapered LMs, arXiv 2606.23670 Section 4, Figure 4).

For layer l with input h_l, residual after the token mixer z_l and output h_{l+1}:

    rho_l^MLP   = mean over tokens of cos(h_{l+1} - z_l, z_l)   (the MLP's write vs the stream it is added to)
    rho_l^block = mean over tokens of cos(h_{l+1} - h_l, h_l)   (the whole layer's write vs its input)

The paper names rho but prints no equation; this is the definition we chose (docs/RESULTS.md
"Layer-wise novelty"): signed cosine, so an MLP that reinforces the stream gives rho near 1, one
that writes orthogonal (novel) content rho near 0, one that erases it rho < 0. A layer with
several sub-MLPs (hourglass: K residual sub-MLPs in a row) writes their sum, h_{l+1} - z_l, so
its MLP output is that sum and its residual is z_l, the stream before the first sub-MLP.

Captured with forward hooks, never by re-running pieces of a block:
  * our Transformer: z_l = the input of the first sub-MLP branch (the pre-MLP norm, or the MLP
    itself under reordered norms), h_l / h_{l+1} = the Block's input / output;
  * Hugging Face GPT-2-like (`transformer.h[i]` with `ln_2`, `mlp`) and LLaMA-like
    (`model.layers[i]` with `post_attention_layernorm`, `mlp`) decoders: z_l = the input of the
    pre-MLP norm, MLP output = the `mlp` module's output, block output = output - input.
The first and last layers are omitted from the Pearson r with layer index, as in the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from shapelm.errors import ShapelmError

# The paper's sample: 2,048 tokens of WikiText-2.
PAPER_TOKENS = 2048


class AnalysisError(ShapelmError):
    """Bad analysis input (model, text, tokens); names the culprit."""


@dataclass
class LayerSums:
    """Running sums over tokens for one layer (so a long text never holds every activation)."""

    mlp_cos: float = 0.0
    block_cos: float = 0.0
    mlp_ratio: float = 0.0  # ||MLP write|| / ||z||: how large the write is, beside its direction
    block_ratio: float = 0.0
    tokens: int = 0
    has_mlp: bool = True


def token_cosine(update: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Per-token cosine of [..., d] tensors, in float64 (0 where either vector is zero)."""
    u, r = update.double().flatten(0, -2), residual.double().flatten(0, -2)
    dot = (u * r).sum(-1)
    norms = u.norm(dim=-1) * r.norm(dim=-1)
    return torch.where(norms > 0, dot / norms.clamp_min(1e-300), torch.zeros_like(dot))


def _norm_ratio(update: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    u, r = update.double().flatten(0, -2), residual.double().flatten(0, -2)
    return u.norm(dim=-1) / r.norm(dim=-1).clamp_min(1e-300)


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson r, or None when undefined (fewer than 2 points or a constant series)."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys) if y is not None and not math.isnan(y)]
    if len(pairs) < 2:
        return None
    if len({x for x, _ in pairs}) < 2 or len({y for _, y in pairs}) < 2:
        return None
    n = len(pairs)
    mx = sum(x for x, _ in pairs) / n
    my = sum(y for _, y in pairs) / n
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    syy = sum((y - my) ** 2 for _, y in pairs)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _first_tensor(value: Any) -> torch.Tensor:
    """A module's hidden-state output: the tensor itself or the first element of a tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    raise AnalysisError(f"cannot find the hidden states in a module output of type {type(value).__name__}")


def _hidden_input(args: tuple, kwargs: dict) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"]
    if isinstance(kwargs.get("x"), torch.Tensor):
        return kwargs["x"]
    raise AnalysisError("cannot find the hidden states among a block's inputs")


@dataclass
class LayerTaps:
    """The modules of one layer to hook: the block, where z enters the MLP branch, and (for HF
    models) the MLP whose output is the write; None = the write is block output - z."""

    block: nn.Module
    mlp_entry: nn.Module | None
    mlp_out: nn.Module | None = None


@dataclass
class Capture:
    """What one forward pass leaves per layer (the tests read it; `measure` reduces it)."""

    h_in: dict[int, torch.Tensor] = field(default_factory=dict)
    z: dict[int, torch.Tensor] = field(default_factory=dict)
    mlp: dict[int, torch.Tensor] = field(default_factory=dict)
    h_out: dict[int, torch.Tensor] = field(default_factory=dict)

    def mlp_write(self, i: int) -> torch.Tensor | None:
        if i not in self.z:
            return None
        return self.mlp[i] if i in self.mlp else self.h_out[i] - self.z[i]

    def block_write(self, i: int) -> torch.Tensor:
        return self.h_out[i] - self.h_in[i]


def shapelm_taps(model: nn.Module) -> list[LayerTaps]:
    """Our decoder: every Block; its MLP branch starts at the first sub-MLP's norm (pre-norm) or
    the sub-MLP itself (reordered norms, x + Norm(MLP(x)))."""
    taps = []
    for block in model.layers:
        entry = None
        if len(block.mlps):
            entry = block.mlps[0] if getattr(block, "reordered", False) else block.mlp_norms[0]
        taps.append(LayerTaps(block, entry))
    return taps


def hf_taps(model: nn.Module) -> list[LayerTaps]:
    """GPT-2-like and LLaMA-like Hugging Face decoders (pre-norm: x + MLP(Norm(x)))."""
    base = getattr(model, "transformer", None) or getattr(model, "model", None)
    layers = getattr(base, "h", None) if base is not None else None
    if layers is None and base is not None:
        layers = getattr(base, "layers", None)
    if layers is None:
        raise AnalysisError(f"{type(model).__name__}: no transformer.h or model.layers to hook")
    if all(hasattr(block, "mlps") and hasattr(block, "mlp_norms") for block in layers):
        return shapelm_taps(base)  # shapelm's own export (remote code): our Block's layout
    taps = []
    for i, block in enumerate(layers):
        if hasattr(block, "post_feedforward_layernorm"):
            raise AnalysisError(f"{type(model).__name__} layer {i}: a post-MLP norm (OLMo-2 / Gemma style) "
                                "is not supported; only pre-norm x + MLP(Norm(x)) decoders")
        norm = getattr(block, "ln_2", None) or getattr(block, "post_attention_layernorm", None)
        mlp = getattr(block, "mlp", None)
        if norm is None or mlp is None:
            raise AnalysisError(f"{type(model).__name__} layer {i}: expected ln_2/post_attention_layernorm "
                                "and mlp submodules")
        taps.append(LayerTaps(block, norm, mlp))
    return taps


def capture(model: nn.Module, taps: list[LayerTaps], run: Callable[[], Any]) -> Capture:
    """Run `run()` (one forward pass) with hooks on `taps`; the captured tensors, detached."""
    cap = Capture()
    handles = []

    def block_pre(i):
        def hook(module, args, kwargs):
            cap.h_in[i] = _hidden_input(args, kwargs).detach()
        return hook

    def block_post(i):
        def hook(module, args, kwargs, output):
            cap.h_out[i] = _first_tensor(output).detach()
        return hook

    def entry_pre(i):
        def hook(module, args):
            cap.z.setdefault(i, args[0].detach())  # the first call: a module reused later is not z
        return hook

    def mlp_post(i):
        def hook(module, args, output):
            cap.mlp[i] = _first_tensor(output).detach()
        return hook

    try:
        for i, t in enumerate(taps):
            handles.append(t.block.register_forward_pre_hook(block_pre(i), with_kwargs=True))
            handles.append(t.block.register_forward_hook(block_post(i), with_kwargs=True))
            if t.mlp_entry is not None:
                handles.append(t.mlp_entry.register_forward_pre_hook(entry_pre(i)))
            if t.mlp_out is not None:
                handles.append(t.mlp_out.register_forward_hook(mlp_post(i)))
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    missing = [i for i in range(len(taps)) if i not in cap.h_in or i not in cap.h_out]
    if missing:
        raise AnalysisError(f"layers {missing} were not run by the forward pass")
    return cap


def accumulate(cap: Capture, sums: list[LayerSums]) -> None:
    for i, s in enumerate(sums):
        h_in, h_out = cap.h_in[i], cap.h_out[i]
        s.block_cos += float(token_cosine(h_out - h_in, h_in).sum())
        s.block_ratio += float(_norm_ratio(h_out - h_in, h_in).sum())
        write = cap.mlp_write(i)
        if write is None:
            s.has_mlp = False
        else:
            s.mlp_cos += float(token_cosine(write, cap.z[i]).sum())
            s.mlp_ratio += float(_norm_ratio(write, cap.z[i]).sum())
        s.tokens += h_in[..., 0].numel()


def summarize(sums: list[LayerSums]) -> dict[str, Any]:
    """Per-layer rho and the Pearson r with layer index over layers 1..L-2 (first and last omitted)."""
    n = len(sums)
    rho_mlp = [s.mlp_cos / s.tokens if s.has_mlp and s.tokens else None for s in sums]
    rho_block = [s.block_cos / s.tokens if s.tokens else None for s in sums]
    inner = list(range(1, n - 1))
    return {
        "n_layers": n,
        "layers": list(range(n)),
        "rho_mlp": rho_mlp,
        "rho_block": rho_block,
        "mlp_norm_ratio": [s.mlp_ratio / s.tokens if s.has_mlp and s.tokens else None for s in sums],
        "block_norm_ratio": [s.block_ratio / s.tokens if s.tokens else None for s in sums],
        "pearson_layers": inner,
        "pearson_r_mlp": pearson(inner, [rho_mlp[i] for i in inner]),
        "pearson_r_block": pearson(inner, [rho_block[i] for i in inner]),
    }


def measure(model: nn.Module, taps: list[LayerTaps], forward: Callable[[torch.Tensor], Any],
            ids: torch.Tensor, seq_len: int) -> dict[str, Any]:
    """rho per layer over the token stream `ids` (1-D), fed as consecutive windows of seq_len."""
    if ids.ndim != 1 or ids.numel() == 0:
        raise AnalysisError("novelty needs a non-empty 1-D token stream")
    sums = [LayerSums() for _ in taps]
    for start in range(0, ids.numel(), seq_len):
        window = ids[start:start + seq_len].unsqueeze(0)
        accumulate(capture(model, taps, lambda w=window: forward(w)), sums)
    out = summarize(sums)
    out["n_tokens"] = int(ids.numel())
    out["seq_len"] = int(seq_len)
    return out
