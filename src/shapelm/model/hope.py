"""Hope-attention's continuum memory system (CMS): a chain of fast-weight SwiGLU levels.

Behrouz et al. 2025c ("Nested learning", arXiv 2512.24695, Eqs. 30-31) replace a layer's FFN by
a chain y = MLP^(f_K)(... MLP^(f_1)(x)), level l's weights changing every C_l tokens. Here each
level is one residual sub-MLP of the block (x = x + level(Norm(x))), and its weights are fast
weights of the sequence (docs/SHAPES.md, "Hope-attention"):

    W_0        = the level's learned (slow) weights, trained by backprop through everything below
    chunk j    : every token t of chunk j reads y_t = SwiGLU(x_t; W_j)            (causal: W_j
                 only holds chunks < j)
    after it   : G_j = grad_W (1/C) sum_t 1/2 ||SwiGLU(x_t; W) - v_t||^2 at W = W_j,   v_t = W_v x_t
                 M_j = momentum * M_{j-1} + G_j
                 W_{j+1} = (1 - decay) * W_j - (lr / d) * M_j

The step is lr / d_model: the key is the RMS-normalised level input (||x||^2 ~ d), so for a
linear memory lr < 2 keeps a step from overshooting whatever the width. The local objective is
associative memory (Titans/Hope's ||M(k) - v||^2) with the level's input as key and a learned
value projection W_v. G_j is written out by hand (three matmul pairs), so
training differentiates through it with ordinary autograd and no double backward.

Training runs chunk-parallel: all tokens of a chunk in one batched matmul, the loop over chunks
sequential. Decoding runs the same code one token at a time: a token's gradient is added to the
chunk's accumulator (all tokens of a chunk see the same W_j, so the sum is exact) and the update
is applied when the chunk fills. The state of a sequence (`FastWeights`) lives in the cache's
`state` dict under (layer, level) when a cache is passed, and is dropped otherwise.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

# (gate and up stacked [B, 2w, d], down [B, d, w]): one matmul reads both input projections
Weights = tuple[torch.Tensor, torch.Tensor]


class FastWeights(NamedTuple):
    """One level's per-sequence state: weights, the open chunk's gradient sum, momentum."""

    weights: Weights
    grad: Weights | None  # sum over the open chunk's tokens so far (None: chunk empty)
    momentum: Weights | None
    filled: int  # tokens of the open chunk already seen


class CMSLevel(nn.Module):
    """One CMS level of width `width`, updating its fast weights every `chunk` tokens."""

    def __init__(
        self, d_model: int, width: int, chunk: int, lr: float, momentum: float = 0.0, decay: float = 0.0,
        key: tuple[int, int] = (0, 0),
    ) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)
        self.value_proj = nn.Linear(d_model, d_model, bias=False)  # the local objective's target
        self.chunk, self.momentum, self.decay = chunk, momentum, decay
        self.lr = lr / d_model  # the step actually taken (see the module docstring)
        self.key = key  # (layer, level): where a cache keeps this level's state

    def initial_state(self, batch: int) -> FastWeights:
        w = (torch.cat([self.gate_proj.weight, self.up_proj.weight]), self.down_proj.weight)
        return FastWeights(tuple(p.expand(batch, *p.shape) for p in w), None, None, 0)

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        store = None if cache is None else getattr(cache, "state", None)
        if cache is not None and store is None:
            raise TypeError(f"{type(cache).__name__} holds no `state` dict for Hope-attention's fast weights")
        state = store.get(self.key) if store is not None else None
        y, state = self.scan(x, state if state is not None else self.initial_state(x.shape[0]),
                             keep_state=store is not None)
        if store is not None:
            store[self.key] = state
        return y

    def scan(self, x: torch.Tensor, state: FastWeights, keep_state: bool = True):
        """Outputs for x [B, S, d] from `state`, and the state after it."""
        values = self.value_proj(x)
        outs, pos, seq = [], 0, x.shape[1]
        while pos < seq:
            n = min(self.chunk - state.filled, seq - pos)
            closes = state.filled + n == self.chunk
            xs, vs = x[:, pos : pos + n], values[:, pos : pos + n]
            if not keep_state and pos + n == seq:  # the last chunk's update: nobody reads it
                outs.append(_read(state.weights, xs)[0])
                break
            y, grad = _read_and_grad(state.weights, xs, vs, self.chunk)
            outs.append(y)
            if state.grad is not None:
                grad = tuple(a + g for a, g in zip(state.grad, grad))
            if closes:
                state = self._updated(state.weights, grad, state.momentum)
            else:
                state = FastWeights(state.weights, grad, state.momentum, state.filled + n)
            pos += n
        return torch.cat(outs, dim=1), state

    def _updated(self, weights: Weights, grad: Weights, momentum: Weights | None) -> FastWeights:
        if self.momentum:
            grad = grad if momentum is None else tuple(self.momentum * m + g for m, g in zip(momentum, grad))
        if self.decay:
            weights = tuple((1.0 - self.decay) * w for w in weights)
        new = tuple(torch.add(w, g, alpha=-self.lr) for w, g in zip(weights, grad))
        return FastWeights(new, None, grad if self.momentum else None, 0)


def _read(w: Weights, x: torch.Tensor):
    w_in, w_down = w
    a, b = torch.matmul(x, w_in.mT).chunk(2, dim=-1)
    sig = torch.sigmoid(a)
    silu = a * sig
    h = silu * b
    return torch.matmul(h, w_down.mT), (a, b, sig, silu, h)


def _read_and_grad(w: Weights, x: torch.Tensor, v: torch.Tensor, chunk: int):
    """SwiGLU(x; w) and the gradient wrt w of sum_t 1/2 ||SwiGLU(x_t; w) - v_t||^2 / chunk."""
    y, (a, b, sig, silu, h) = _read(w, x)
    e = (y - v) / chunk
    g_down = torch.matmul(e.mT, h)
    dh = torch.matmul(e, w[1])
    da = dh * b * sig * (1 + a * (1 - sig))  # d silu(a) / da = sig (1 + a (1 - sig))
    g_in = torch.matmul(torch.cat([da, dh * silu], dim=-1).mT, x)
    return y, (g_in, g_down)
