"""Titans' neural long-term memory (Behrouz et al. 2024, arXiv 2501.00663, Section 3), written
from the paper: per head, a 2-layer MLP  M(x) = W2 SiLU(W1 x)  whose weights are learned at test
time by gradient descent with momentum and forgetting on the associative-memory loss
l(M; x_t) = ||M(k_t) - v_t||^2:

    S_t = eta_t S_{t-1} - theta_t grad l(M_{t'}; x_t)      (momentum: "surprise")
    M_t = (1 - alpha_t) M_{t-1} + S_t                      (weight decay: forgetting)
    y_t = M_t(q_t)                                         (retrieval, no update)

theta_t (learning rate), eta_t (momentum) and alpha_t (forgetting) are per token and head, from
x. Section 3.2's chunk-parallel training: the gradient of every token of a chunk is taken at the
chunk-start weights M_{t'}, so all of a chunk's gradients are computed at once; momentum and decay
become within-chunk cumulative products. Chunk size 1 is plain online gradient descent.

Chunk-parallel form (`chunk_memory`): with u_s the gradient of token s at M0 (the chunk-start
weights), S0 the momentum at chunk start, and lower-triangular B[t,r] = prod_{r<q<=t}(1-alpha_q),
E[r,s] = prod_{s<q<=r} eta_q,

    M_t = beta_t M0 + gamma_t S0 - sum_{s<=t} C[t,s] u_s,   C[t,s] = (B @ E)[t,s] theta_s,
    beta_t = prod_{q<=t}(1-alpha_q),  E_r = prod_{q<=r} eta_q,  gamma_t = sum_{r<=t} B[t,r] E_r.

For a 2-layer MLP every u_s is a pair of rank-1 matrices (d1_s k_s^T, d2_s a_s^T), so M_t(q_t)
is computed without materialising per-token weights: W1_t q_t = beta_t W1_0 q_t + gamma_t S1_0 q_t
- sum_s C[t,s] (k_s . q_t) d1_s, an attention-like product over the chunk, and the same for W2.
`recurrent_step` is the token-by-token form (state M0, M, S and the position in the chunk) used
for decoding; tests/model/test_titans.py checks both against a token-by-token loop written from the
paper's equations (per-sample gradients by torch.func).

`NeuralMemory` wraps the memory as the paper's Section 4.4 builds it (q/k/v convolution and SiLU,
output norm and gate); `Titans`, the decoder layer, meets it with sliding-window attention as the
paper's MAG (a gate), MAL (a layer before attention) or MAC (memory as context).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from shapelm.model.config import TITANS_CONV_KERNEL, LayerShape, ModelConfig
from shapelm.model.layers import Attention, RMSNorm

#: Offsets on the gate logits, standing in for biases (the project's matrices have none), so an
#: untrained memory starts with momentum ~0.88, forgets ~0.7% per token and steps at half its
#: largest rate.
ETA_OFFSET = 2.0
#: theta_t's ceiling times memory_hidden (NeuralMemory's docstring says why not 1 / head_dim).
INNER_LR = 0.2
ALPHA_OFFSET = -5.0
NORM_EPS = 1e-6
#: The most a token's surprise may weigh: each per-token gradient (of W1 and of W2 separately)
#: is scaled down to this Frobenius norm. This hard cap is shapelm's own design: the paper has
#: none, and the reference implementation clamps softly (its `max_grad_norm`, off by default). With
#: gradients at the chunk-start weights and momentum, a chunk's summed step can exceed the
#: memory loss's stability limit (2 / curvature); the weights then grow geometrically (a trained
#: tiny layer: 23 -> 1.4e3 -> 1.9e6 -> 5.6e17 over four chunks, NaN at the fifth). The cap
#: makes that growth linear, which forgetting bounds. Untouched where the memory is stable:
#: the trained tiny default's per-token norms stay below 8 (docs/PAPER_NOTES.md, Titans).
MAX_SURPRISE_NORM = 10.0


@dataclass
class MemoryState:
    """One layer's memory for a batch: chunk-start weights, current weights and momentum, each a
    (W1 [B, H, m, hd], W2 [B, H, hd, m]) pair, how many tokens of the current chunk are in, and
    the last TITANS_CONV_KERNEL - 1 inputs of the q/k/v convolution [B, TITANS_CONV_KERNEL - 1, 3 * H * hd]."""

    w0: tuple[torch.Tensor, torch.Tensor]
    w: tuple[torch.Tensor, torch.Tensor]
    s: tuple[torch.Tensor, torch.Tensor]
    offset: int
    conv: torch.Tensor

    def nbytes(self) -> int:
        pairs = sum(t.numel() * t.element_size() for pair in (self.w0, self.w, self.s) for t in pair)
        return pairs + self.conv.numel() * self.conv.element_size()


def _dsilu(z: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def _grads(w1, w2, k, v):
    """The pieces of grad ||W2 SiLU(W1 k) - v||^2 at (w1, w2): G1 = d1 k^T, G2 = d2 a^T, each
    token's scaled to at most MAX_SURPRISE_NORM (||d k^T||_F = ||d|| ||k||).
    w1 [B,H,m,hd], w2 [B,H,hd,m], k/v [B,H,c,hd] -> a, d1 [B,H,c,m], d2 [B,H,c,hd]."""
    z = k @ w1.transpose(-1, -2)
    a = F.silu(z)
    d2 = 2 * (a @ w2.transpose(-1, -2) - v)
    d1 = (d2 @ w2) * _dsilu(z)
    return a, d1 * _surprise_scale(d1, k), d2 * _surprise_scale(d2, a)


def _surprise_scale(d, x):
    """min(1, MAX_SURPRISE_NORM / ||d x^T||_F) per token: [B,H,c,1]."""
    norm = d.norm(dim=-1, keepdim=True) * x.norm(dim=-1, keepdim=True)
    return (MAX_SURPRISE_NORM / norm).clamp(max=1.0)


def chunk_memory(state: MemoryState, q, k, v, theta, log_eta, log_keep):
    """One chunk (length c <= the chunk size, starting at a chunk boundary) in parallel.

    q/k/v [B,H,c,hd]; theta, log_eta = log eta, log_keep = log(1 - alpha): [B,H,c].
    Returns y [B,H,c,hd] and the state after the chunk (its weights become the next M0)."""
    (w1, w2), (s1, s2) = state.w, state.s
    c = q.shape[2]
    tril = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    cum_keep, cum_eta = log_keep.cumsum(-1), log_eta.cumsum(-1)
    # B[t,r] = exp(cum_keep_t - cum_keep_r), E[r,s] likewise; differences of within-chunk sums
    bm = torch.exp((cum_keep[..., :, None] - cum_keep[..., None, :]).masked_fill(~tril, -math.inf))
    em = torch.exp((cum_eta[..., :, None] - cum_eta[..., None, :]).masked_fill(~tril, -math.inf))
    beta, e = cum_keep.exp(), cum_eta.exp()
    gamma = (bm @ e.unsqueeze(-1)).squeeze(-1)  # [B,H,c]
    coef = (bm @ em) * theta.unsqueeze(-2)  # C[t,s]
    a, d1, d2 = _grads(w1, w2, k, v)
    h = beta[..., None] * (q @ w1.transpose(-1, -2)) + gamma[..., None] * (q @ s1.transpose(-1, -2))
    h = h - (coef * (q @ k.transpose(-1, -2))) @ d1
    a_q = F.silu(h)
    y = beta[..., None] * (a_q @ w2.transpose(-1, -2)) + gamma[..., None] * (a_q @ s2.transpose(-1, -2))
    y = y - (coef * (a_q @ a.transpose(-1, -2))) @ d2
    # the state at the chunk's last token: weights by row c-1 of C, momentum by row c-1 of E*theta
    last_w = coef[..., -1, :].unsqueeze(-1)  # [B,H,c,1]
    last_s = (em[..., -1, :] * theta).unsqueeze(-1)
    g1 = lambda wt: (d1 * wt).transpose(-1, -2) @ k  # noqa: E731  sum_s wt_s d1_s k_s^T
    g2 = lambda wt: (d2 * wt).transpose(-1, -2) @ a  # noqa: E731
    b_c, g_c, e_c = beta[..., -1, None, None], gamma[..., -1, None, None], e[..., -1, None, None]
    new_w = (b_c * w1 + g_c * s1 - g1(last_w), b_c * w2 + g_c * s2 - g2(last_w))
    new_s = (e_c * s1 - g1(last_s), e_c * s2 - g2(last_s))
    return y, MemoryState(w0=new_w, w=new_w, s=new_s, offset=0, conv=state.conv)


def recurrent_step(state: MemoryState, q, k, v, theta, log_eta, log_keep, chunk: int):
    """One token (q/k/v [B,H,1,hd], gates [B,H,1]): the gradient at the chunk-start weights
    state.w0, the momentum and decay recurrences, retrieval with the updated weights."""
    a, d1, d2 = _grads(*state.w0, k, v)
    u1, u2 = d1.transpose(-1, -2) @ k, d2.transpose(-1, -2) @ a
    th, eta, keep = theta[..., None], log_eta.exp()[..., None], log_keep.exp()[..., None]
    s = (eta * state.s[0] - th * u1, eta * state.s[1] - th * u2)
    w = (keep * state.w[0] + s[0], keep * state.w[1] + s[1])
    y = F.silu(q @ w[0].transpose(-1, -2)) @ w[1].transpose(-1, -2)
    offset = state.offset + 1
    w0 = state.w0
    if offset == chunk:
        w0, offset = w, 0
    return y, MemoryState(w0=w0, w=w, s=s, offset=offset, conv=state.conv)


class NeuralMemory(nn.Module):
    """The memory as a token mixer: d_model -> (q, k, v per head) -> M_t(q_t) -> d_model.

    Titans Section 4.4: q, k and v are linear projections followed by a causal depthwise
    convolution and SiLU; q and k are L2-normalised per head (which bounds the inner gradient).
    The retrieved values are normalised per head (RMSNorm) and gated by a linear projection of
    the input, sigmoid(W_g x), before the output projection. theta_t, eta_t, alpha_t come from x
    (one each per head and token). The initial weights W1, W2 are parameters: the outer loop
    learns where test-time learning starts (and so also what the persistent tokens would write
    into the memory before the sequence: they are input-independent, Section 3.3).

    The inner learning rate is theta_t = sigmoid(w_theta x_t) x INNER_LR / memory_hidden: the
    paper gives no range for its data-dependent theta_t. At a fixed expansion (memory_hidden =
    2 head_dim) the step is width-independent. The reference implementation's sigmoid(.) on the
    mean squared error (sigmoid(.) / head_dim here, 10x larger) diverged in training: every
    variant's loss was NaN within 4-8 updates of the tiny default, even at an outer rate of 4e-5
    (docs/PAPER_NOTES.md, Titans).
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int, hidden: int, chunk: int, layer_idx: int):
        super().__init__()
        self.n_heads, self.head_dim, self.hidden, self.chunk = n_heads, head_dim, hidden, chunk
        self.layer_idx = layer_idx
        width = n_heads * head_dim
        self.q_proj = nn.Linear(d_model, width, bias=False)
        self.k_proj = nn.Linear(d_model, width, bias=False)
        self.v_proj = nn.Linear(d_model, width, bias=False)
        self.o_proj = nn.Linear(width, d_model, bias=False)
        self.gate_proj = nn.Linear(d_model, 3 * n_heads, bias=False)  # theta, eta, alpha logits
        self.out_gate_proj = nn.Linear(d_model, width, bias=False)  # the output gate sigmoid(W_g x)
        self.conv = nn.Parameter(torch.empty(3 * width, TITANS_CONV_KERNEL))  # depthwise, q | k | v channels
        self.out_norm = nn.Parameter(torch.empty(width))  # per-head RMSNorm weight of the retrieval
        self.w1 = nn.Parameter(torch.empty(n_heads, hidden, head_dim))
        self.w2 = nn.Parameter(torch.empty(n_heads, head_dim, hidden))
        if not self.w1.is_meta:
            self.reset_memory()

    def init_std(self, name: str) -> float | None:
        """Fan-in scaled, not the model's N(0, 0.02): the memory must map unit keys to value-sized
        outputs from the start, else its inner gradients (and so what it stores) vanish. The
        convolution starts near the identity (tap on the current token 1, earlier taps small) and
        the output norm at 1 (None: set, not drawn)."""
        return {"w1": self.head_dim ** -0.5, "w2": self.hidden ** -0.5, "conv": None, "out_norm": None}[name]

    @torch.no_grad()
    def init_fixed(self, name: str, param: torch.Tensor) -> None:
        """The parameters with a fixed start: the convolution's identity tap, the norm's ones."""
        if name == "out_norm":
            param.fill_(1.0)
        else:
            param.zero_()
            param[:, -1] = 1.0

    @torch.no_grad()
    def reset_memory(self) -> None:
        for name in ("w1", "w2", "conv", "out_norm"):
            std, param = self.init_std(name), getattr(self, name)
            if std is None:
                self.init_fixed(name, param)
            else:
                nn.init.trunc_normal_(param, std=std, a=-3 * std, b=3 * std)

    def initial_state(self, batch: int) -> MemoryState:
        w = (self.w1.float().expand(batch, -1, -1, -1), self.w2.float().expand(batch, -1, -1, -1))
        zeros = (torch.zeros_like(w[0]), torch.zeros_like(w[1]))
        conv = torch.zeros(batch, TITANS_CONV_KERNEL - 1, self.conv.shape[0], device=self.w1.device)
        return MemoryState(w0=w, w=w, s=zeros, offset=0, conv=conv)

    def project(self, x: torch.Tensor, conv_tail: torch.Tensor | None = None):
        """q, k, v [B,H,T,hd] and the gates [B,H,T] of x, and the convolution's new tail.
        `conv_tail`: the previous call's last TITANS_CONV_KERNEL - 1 projections (zeros: none)."""
        b, t, _ = x.shape
        u = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        if conv_tail is None:
            conv_tail = u.new_zeros(b, TITANS_CONV_KERNEL - 1, u.shape[-1])
        padded = torch.cat([conv_tail.to(u.dtype), u], dim=1)
        u = F.silu(F.conv1d(padded.transpose(1, 2), self.conv.unsqueeze(1), groups=u.shape[-1]).transpose(1, 2))
        q, k, v = (p.reshape(b, t, self.n_heads, self.head_dim).transpose(1, 2) for p in u.chunk(3, dim=-1))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        g = self.gate_proj(x).float().view(b, t, 3, self.n_heads).permute(2, 0, 3, 1)  # [3,B,H,T]
        theta = torch.sigmoid(g[0]) * INNER_LR / self.hidden
        log_eta = F.logsigmoid(g[1] + ETA_OFFSET)
        log_keep = F.logsigmoid(-(g[2] + ALPHA_OFFSET))  # log(1 - alpha)
        return q, k, v, theta, log_eta, log_keep, padded[:, -(TITANS_CONV_KERNEL - 1):].float()

    def query(self, x: torch.Tensor, conv_tail: torch.Tensor):
        """q alone [B,H,T,hd] (float32) through the q channels of the convolution, and its new tail
        [B, TITANS_CONV_KERNEL - 1, H * hd]: MAC's retrieval query of the segment's input tokens,
        a second stream beside the memory's own (which reads the attention's output)."""
        b, t, _ = x.shape
        width = self.n_heads * self.head_dim
        padded = torch.cat([conv_tail.to(x.dtype), self.q_proj(x)], dim=1)
        u = F.silu(F.conv1d(padded.transpose(1, 2), self.conv[:width].unsqueeze(1), groups=width).transpose(1, 2))
        q = F.normalize(u.reshape(b, t, self.n_heads, self.head_dim).transpose(1, 2).float(), dim=-1)
        return q, padded[:, -(TITANS_CONV_KERNEL - 1):].float()

    def retrieve(self, state: MemoryState | None, q: torch.Tensor) -> torch.Tensor:
        """M(q) with the chunk-start weights (no update): MAC's h_t = M*_{t-1}(q_t)."""
        if state is None:
            w1, w2 = self.w1.float(), self.w2.float()
        else:
            w1, w2 = state.w0
        return F.silu(q @ w1.transpose(-1, -2)) @ w2.transpose(-1, -2)

    def output(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Retrievals y [B,H,T,hd] -> d_model: per-head RMSNorm, the gate sigmoid(W_g x), W_o."""
        b, _, t, _ = y.shape
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        y = y.transpose(1, 2).reshape(b, t, -1) * self.out_norm.float()
        return self.o_proj((y * torch.sigmoid(self.out_gate_proj(x).float())).to(x.dtype))

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        b, t, _ = x.shape
        states = None
        if cache is not None:
            states = getattr(cache, "state", None)
            if states is None:
                raise TypeError(f"{type(cache).__name__} holds no `state` dict for Titans' memory state")
        state = states.get(self.layer_idx) if states is not None else None
        if state is None:
            state = self.initial_state(b)
        q, k, v, theta, log_eta, log_keep, tail = self.project(x, state.conv)
        q, k, v = q.float(), k.float(), v.float()
        outs, pos = [], 0
        while pos < t and state.offset:  # finish a chunk a previous call began, token by token
            sl = slice(pos, pos + 1)
            y, state = recurrent_step(state, q[:, :, sl], k[:, :, sl], v[:, :, sl], theta[..., sl],
                                      log_eta[..., sl], log_keep[..., sl], self.chunk)
            outs.append(y)
            pos += 1
        while pos < t:
            sl = slice(pos, min(pos + self.chunk, t))
            y, new = chunk_memory(state, q[:, :, sl], k[:, :, sl], v[:, :, sl], theta[..., sl],
                                  log_eta[..., sl], log_keep[..., sl])
            n = sl.stop - sl.start
            # a partial last chunk keeps its start weights: the next call's tokens belong to it
            state = new if n == self.chunk else MemoryState(w0=state.w0, w=new.w, s=new.s, offset=n, conv=state.conv)
            outs.append(y)
            pos = sl.stop
        if states is not None:
            states[self.layer_idx] = dataclasses.replace(state, conv=tail)
        return self.output(x, torch.cat(outs, dim=2))


# ----------------------------------------------------------------------------- the decoder layer

@dataclasses.dataclass
class SegmentState:
    """MAC's per-sequence state beside the memory's and the KV cache's (which holds the input
    tokens' keys): the open segment's keys and values of the retrieved tokens h ([B, H_kv, chunk,
    hd] each, filled up to the memory's position in the chunk) and the retrieval query's
    convolution tail."""

    k_h: torch.Tensor
    v_h: torch.Tensor
    conv_q: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k_h, self.v_h, self.conv_q))


class _LocalState:
    """A cache stand-in holding only recurrent state: MAC carries the memory across segments
    within one forward even without a decode cache."""

    def __init__(self) -> None:
        self.state: dict = {}


class Titans(nn.Module):
    """Titans' neural memory beside sliding-window attention (Behrouz et al. 2024, Section 4).

    MAG (memory as a gate, Section 4.2): o = Norm(SWA(x)) * sigmoid(Norm(Memory(x))), the two
    branches read the same (block-normalised) input and each output is normalised by its own
    learnable RMSNorm before the gate. MAL (memory as a layer, Section 4.3): the memory's output
    is what the attention reads, each with a residual connection ("in all blocks, we use
    residual connections", Section 4.4): x' = x + Memory(Norm(x)), x'' = x' + SWA(Norm(x'))
    (`residual`, which the block calls with its own pre-attention norm)."""

    def __init__(self, cfg: ModelConfig, layer: LayerShape, layer_idx: int) -> None:
        super().__init__()
        self.shape = layer.attention
        self.variant = layer.titans_variant
        s = layer.attention
        self.memory = NeuralMemory(cfg.d_model, s.n_heads, s.head_dim, layer.memory_hidden, layer.memory_chunk, layer_idx)
        self.attn = Attention(cfg, layer, layer_idx)
        if self.variant in ("mac", "mag"):
            self.attn_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.memory_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        else:
            self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)  # the attention sublayer's pre-norm

    def forward(self, x, cos, sin, kv_cache=None):
        if self.variant == "mal":
            raise RuntimeError("Titans MAL is two residual sublayers: call `residual`")
        if self.variant == "mac":
            return self._mac(x, cos, sin, kv_cache)
        a, m = self.attn(x, cos, sin, kv_cache), self.memory(x, kv_cache)
        return self.attn_out_norm(a) * torch.sigmoid(self.memory_out_norm(m))

    def _mac(self, x, cos, sin, kv_cache=None):
        """MAC (Section 4.1), segments = the memory's chunks. For each segment, in order:
        h = M*(q) retrieved with the segment-start memory for every input token (no update);
        y = attention over [persistent tokens, h, segment], where token i sees h_j and x_j for
        j <= i of its segment only (a causal LM must not read the retrievals of later tokens,
        which the paper's equations leave open); the memory then learns from y and is read at y,
        o = Norm(y) * sigmoid(Norm(M(y))). The input tokens' keys go through the KV cache (a
        segment's are its last ones), the retrieved tokens' live in the segment state."""
        mem, attn, s = self.memory, self.attn, self.shape
        b, t, _ = x.shape
        cache = kv_cache if kv_cache is not None else _LocalState()
        idx = mem.layer_idx
        seg = cache.state.get((idx, "segment"))
        if seg is None:
            buf = x.new_zeros(b, s.n_kv_heads, mem.chunk, s.head_dim)
            tail = torch.zeros(b, TITANS_CONV_KERNEL - 1, s.d_attn, device=x.device)
            seg = SegmentState(buf, buf.clone(), tail)
        outs, pos = [], 0
        while pos < t:
            state = cache.state.get(idx)
            offset = state.offset if state is not None else 0
            n = min(mem.chunk - offset, t - pos)
            xs, cs, sn = x[:, pos:pos + n], cos[..., pos:pos + n, :], sin[..., pos:pos + n, :]
            q_m, seg.conv_q = mem.query(xs, seg.conv_q)
            h = mem.output(xs, mem.retrieve(state, q_m))  # [B, n, d]
            q, k_x, v_x = attn.project(xs, cs, sn)
            k_h, v_h = attn.project_kv(h, cs, sn)
            end = offset + n
            seg.k_h[:, :, offset:end], seg.v_h[:, :, offset:end] = k_h.to(seg.k_h.dtype), v_h.to(seg.v_h.dtype)
            if kv_cache is not None:  # the segment's input keys so far: the cache's last `end`
                k_x, v_x = kv_cache.update(idx, k_x, v_x)
                k_x, v_x = k_x[:, :, k_x.shape[2] - end:], v_x[:, :, v_x.shape[2] - end:]
            keys = torch.cat([seg.k_h[:, :, :end], k_x], 2)
            values = torch.cat([seg.v_h[:, :, :end], v_x], 2)
            causal = torch.arange(offset, end, device=x.device)[:, None] >= torch.arange(end, device=x.device)
            mask = torch.cat([causal, causal], -1)
            if attn.persistent is not None:
                keys, values, mask = attn._with_persistent(keys, values, mask)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=s.group_size > 1)
            y = attn.o_proj(y.transpose(1, 2).reshape(b, n, s.d_attn))
            m = mem(y, cache)
            outs.append(self.attn_out_norm(y) * torch.sigmoid(self.memory_out_norm(m)))
            pos += n
        if kv_cache is not None:
            kv_cache.state[(idx, "segment")] = seg
        return torch.cat(outs, 1)

    def residual(self, x, norm: RMSNorm, reordered: bool, cos, sin, kv_cache=None):
        """MAL: the residual stream after the memory sublayer and then the attention sublayer."""
        if reordered:
            x = x + norm(self.memory(x, kv_cache))
            return x + self.norm(self.attn(x, cos, sin, kv_cache))
        x = x + self.memory(norm(x), kv_cache)
        return x + self.attn(self.norm(x), cos, sin, kv_cache)
