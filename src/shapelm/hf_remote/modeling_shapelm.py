"""shapelm's decoder as a Hugging Face `PreTrainedModel` (trust_remote_code export).

The same computation as `shapelm.model.transformer` (per-layer attention shape, K residual
SwiGLU sub-MLPs per layer, pre or reordered RMSNorm, optional QK-norm over full q/k widths,
RoPE with optional YaRN, gated attention, Titans (MAC, MAG, MAL), Hope-attention's fast-weight CMS levels),
written self-contained. Parameter names are shapelm's under ``model.``, so the export is a rename.
A KV cache (transformers' `DynamicCache`: keys and values per attention layer, in the layer's own
KV heads and head width) makes `generate` decode one token per step; its tokens are the ones
generation without the cache gives. Titans and Hope-attention models carry a recurrent state the
cache does not hold: they take no cache and recompute the prefix (correct, slower). An attention
mask handles right or left padding, except in Titans and Hope-attention models, whose memories
would learn the left padding (refused).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

try:
    from .configuration_shapelm import ShapelmConfig
except ImportError:  # loaded as a top-level module
    from configuration_shapelm import ShapelmConfig


def rope_inv_freq(head_dim, theta, scaling=None):
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    extrap = 1.0 / (theta**exponents)
    if not scaling:
        return extrap, 1.0
    factor = float(scaling["factor"])
    original = int(scaling["original_max_position_embeddings"])
    beta_fast = float(scaling.get("beta_fast", 32.0))
    beta_slow = float(scaling.get("beta_slow", 1.0))
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def corr(rot):
        return (head_dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(theta))

    interp = 1.0 / (factor * theta**exponents)
    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001
    ramp = (torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)
    w = 1.0 - ramp.clamp(0.0, 1.0)
    return interp * (1 - w) + extrap * w, float(attention_factor)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


class Attention(nn.Module):
    def __init__(self, config, shape, gate=None, window=None, persistent_tokens=0):
        super().__init__()
        self.window = window
        # Titans' persistent tokens: learned keys/values before the sequence, no position
        self.persistent = nn.Embedding(persistent_tokens, config.hidden_size) if persistent_tokens else None
        self.n_heads, self.n_kv_heads, self.head_dim = shape["n_heads"], shape["n_kv_heads"], shape["head_dim"]
        d, d_attn, kv = config.hidden_size, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d, d_attn, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(d_attn, d, bias=False)
        self.q_norm = RMSNorm(d_attn, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(kv, config.rms_norm_eps) if config.qk_norm else None
        # gated attention (Qiu et al. 2025, G1): sigmoid(x W_gate) scales the SDPA output
        self.gate_proj = None
        if gate is not None:
            self.gate_proj = nn.Linear(d, d_attn if gate == "elementwise" else self.n_heads, bias=False)

    def project(self, x, cos, sin, cache=None, cache_idx=None):
        """q, k, v [B, H, S, hd] (k, v repeated to the query heads), normed and rotated; with a
        cache, k and v are the cached keys and values before x's, then x's (appended to it)."""
        b, s, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(k, v, cache_idx)
        return (q, *self.repeat_kv(k, v))

    def repeat_kv(self, k, v):
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return k, v

    def persistent_kv(self, b, dtype):
        """Titans' persistent tokens as keys and values [B, H, N_p, hd] (no position)."""
        p = self.persistent.weight
        pk, pv = self.k_proj(p), self.v_proj(p)
        if self.k_norm is not None:
            pk = self.k_norm(pk)
        pk = pk.view(1, -1, self.n_kv_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        pv = pv.view(1, -1, self.n_kv_heads, self.head_dim).transpose(1, 2).expand(b, -1, -1, -1)
        pk, pv = self.repeat_kv(pk, pv)
        return pk.to(dtype), pv.to(dtype)

    def forward(self, x, cos, sin, mask, cache=None, cache_idx=None):
        b, s, _ = x.shape
        q, k, v = self.project(x, cos, sin, cache, cache_idx)
        if self.window is not None:  # sliding window (Titans): 0 <= i - j < window
            rel = torch.arange(s, device=x.device)[:, None] - torch.arange(s, device=x.device)
            band = ((rel >= 0) & (rel < self.window))[None, None]
            mask = band if mask is None else mask & band
        if self.persistent is not None:
            pk, pv = self.persistent_kv(b, k.dtype)
            k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
            mask = mask.expand(b, 1, s, s)
            mask = torch.cat([torch.ones(b, 1, s, pk.shape[2], dtype=torch.bool, device=x.device), mask], -1)
        if mask is None:  # no padding, no past (with a past, the mask is explicit unless s == 1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1 and k.shape[2] == s)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.transpose(1, 2)
        if self.gate_proj is not None:
            out = out * torch.sigmoid(self.gate_proj(x)).view(b, s, self.n_heads, -1)
        return self.o_proj(out.reshape(b, s, self.n_heads * self.head_dim))


def _dsilu(z):
    sig = torch.sigmoid(z)
    return sig * (1 + z * (1 - sig))


def _surprise_scale(d, x, max_norm=10.0):
    """Each token's memory gradient d x^T scaled to at most max_norm (shapelm.model.titans.MAX_SURPRISE_NORM)."""
    return (max_norm / (d.norm(dim=-1, keepdim=True) * x.norm(dim=-1, keepdim=True))).clamp(max=1.0)


class NeuralMemory(nn.Module):
    """Titans' memory (shapelm.model.titans): per head M(x) = W2 SiLU(W1 x) learned at test time on
    ||M(k) - v||^2 with momentum and forgetting, chunk-parallel (gradients at chunk-start weights);
    q/k/v through a causal depthwise convolution and SiLU, the retrieval RMS-normalised per head
    and gated by sigmoid(W_g x)."""

    def __init__(self, d, n_heads, head_dim, hidden, chunk, kernel=4):
        super().__init__()
        self.n_heads, self.head_dim, self.hidden, self.chunk = n_heads, head_dim, hidden, chunk
        width = n_heads * head_dim
        self.q_proj = nn.Linear(d, width, bias=False)
        self.k_proj = nn.Linear(d, width, bias=False)
        self.v_proj = nn.Linear(d, width, bias=False)
        self.o_proj = nn.Linear(width, d, bias=False)
        self.gate_proj = nn.Linear(d, 3 * n_heads, bias=False)
        self.out_gate_proj = nn.Linear(d, width, bias=False)
        self.conv = nn.Parameter(torch.zeros(3 * width, kernel))
        self.out_norm = nn.Parameter(torch.ones(width))
        self.w1 = nn.Parameter(torch.zeros(n_heads, hidden, head_dim))
        self.w2 = nn.Parameter(torch.zeros(n_heads, head_dim, hidden))

    def heads(self, u, b, t):
        return u.reshape(b, t, self.n_heads, self.head_dim).transpose(1, 2).float()

    def convolve(self, u, tail, weight):
        """Causal depthwise convolution and SiLU of u [B, T, C] after `tail` (the previous inputs)."""
        if tail is None:
            tail = u.new_zeros(u.shape[0], weight.shape[1] - 1, u.shape[2])
        padded = torch.cat([tail.to(u.dtype), u], dim=1)
        out = F.silu(F.conv1d(padded.transpose(1, 2), weight.unsqueeze(1), groups=u.shape[2])).transpose(1, 2)
        return out, padded[:, -(weight.shape[1] - 1):]

    def query(self, x, tail):
        """MAC's retrieval query of input tokens (the q channels, a stream of its own)."""
        u, tail = self.convolve(self.q_proj(x), tail, self.conv[: self.n_heads * self.head_dim])
        return F.normalize(self.heads(u, *x.shape[:2]), dim=-1), tail

    def output(self, x, y):
        b, _, t, _ = y.shape
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = y.transpose(1, 2).reshape(b, t, -1) * self.out_norm.float()
        return self.o_proj((y * torch.sigmoid(self.out_gate_proj(x).float())).to(x.dtype))

    def forward(self, x, state=None):
        """The memory's output for x and its state after x, (W1, W2, S1, S2, convolution tail);
        `state` continues a sequence at a chunk boundary."""
        b, t, _ = x.shape
        u = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        u, tail = self.convolve(u, state[4] if state is not None else None, self.conv)
        q, k, v = (self.heads(p, b, t) for p in u.chunk(3, dim=-1))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        g = self.gate_proj(x).float().view(b, t, 3, self.n_heads).permute(2, 0, 3, 1)
        theta = torch.sigmoid(g[0]) * 0.2 / self.hidden  # shapelm.model.titans.INNER_LR
        log_eta, log_keep = F.logsigmoid(g[1] + 2.0), F.logsigmoid(-(g[2] - 5.0))
        if state is None:
            w1, w2 = self.w1.float().expand(b, -1, -1, -1), self.w2.float().expand(b, -1, -1, -1)
            s1, s2 = torch.zeros_like(w1), torch.zeros_like(w2)
        else:
            w1, w2, s1, s2 = state[:4]
        outs = []
        for start in range(0, t, self.chunk):
            sl = slice(start, min(start + self.chunk, t))
            qc, kc, vc, th = q[:, :, sl], k[:, :, sl], v[:, :, sl], theta[..., sl]
            c = qc.shape[2]
            tril = torch.ones(c, c, dtype=torch.bool, device=x.device).tril()
            ck, ce = log_keep[..., sl].cumsum(-1), log_eta[..., sl].cumsum(-1)
            bm = torch.exp((ck[..., :, None] - ck[..., None, :]).masked_fill(~tril, -math.inf))
            em = torch.exp((ce[..., :, None] - ce[..., None, :]).masked_fill(~tril, -math.inf))
            beta, e = ck.exp(), ce.exp()
            gamma = (bm @ e.unsqueeze(-1)).squeeze(-1)
            coef = (bm @ em) * th.unsqueeze(-2)
            z = kc @ w1.transpose(-1, -2)
            a = F.silu(z)
            d2 = 2 * (a @ w2.transpose(-1, -2) - vc)
            d1 = (d2 @ w2) * _dsilu(z)
            d1, d2 = d1 * _surprise_scale(d1, kc), d2 * _surprise_scale(d2, a)
            h = beta[..., None] * (qc @ w1.transpose(-1, -2)) + gamma[..., None] * (qc @ s1.transpose(-1, -2))
            a_q = F.silu(h - (coef * (qc @ kc.transpose(-1, -2))) @ d1)
            y = beta[..., None] * (a_q @ w2.transpose(-1, -2)) + gamma[..., None] * (a_q @ s2.transpose(-1, -2))
            outs.append(y - (coef * (a_q @ a.transpose(-1, -2))) @ d2)
            lw, ls = coef[..., -1, :].unsqueeze(-1), (em[..., -1, :] * th).unsqueeze(-1)
            b_c, g_c, e_c = beta[..., -1, None, None], gamma[..., -1, None, None], e[..., -1, None, None]
            u1w, u2w = (d1 * lw).transpose(-1, -2) @ kc, (d2 * lw).transpose(-1, -2) @ a
            u1s, u2s = (d1 * ls).transpose(-1, -2) @ kc, (d2 * ls).transpose(-1, -2) @ a
            w1, w2, s1, s2 = b_c * w1 + g_c * s1 - u1w, b_c * w2 + g_c * s2 - u2w, e_c * s1 - u1s, e_c * s2 - u2s
        return self.output(x, torch.cat(outs, dim=2)), (w1, w2, s1, s2, tail)


class Titans(nn.Module):
    """MAG: Norm(SWA(x)) * sigmoid(Norm(Memory(x))); MAL: x + Memory(Norm(x)), then + SWA(Norm(.))."""

    def __init__(self, config, layer):
        super().__init__()
        shape = layer["attention"]
        d, eps = config.hidden_size, config.rms_norm_eps
        self.head_dim = shape["head_dim"]
        self.variant = layer.get("titans_variant", "mag")
        self.memory = NeuralMemory(d, shape["n_heads"], shape["head_dim"],
                                   layer.get("memory_hidden", 2 * shape["head_dim"]), layer.get("memory_chunk", 64))
        self.attn = Attention(config, shape, window=layer.get("window", 512),
                              persistent_tokens=layer.get("persistent_tokens", 4))
        if self.variant in ("mac", "mag"):
            self.attn_out_norm, self.memory_out_norm = RMSNorm(d, eps), RMSNorm(d, eps)
        else:
            self.norm = RMSNorm(d, eps)

    def forward(self, x, cos, sin, mask):
        if self.variant == "mac":
            return self.mac(x, cos, sin)
        a, m = self.attn(x, cos, sin, mask), self.memory(x)[0]
        return self.attn_out_norm(a) * torch.sigmoid(self.memory_out_norm(m))

    def mac(self, x, cos, sin):
        """Per segment (= memory chunk): attention over [persistent, M*(q) of the segment-start
        memory, segment], causal within the segment; the memory learns from its output y;
        o = Norm(y) * sigmoid(Norm(M(y))). Right padding is after every real token: no mask."""
        mem, attn = self.memory, self.attn
        b, t, _ = x.shape
        state, q_tail, outs = None, None, []
        for start in range(0, t, mem.chunk):
            xs = x[:, start:start + mem.chunk]
            n = xs.shape[1]
            q_m, q_tail = mem.query(xs, q_tail)
            w1, w2 = (state[0], state[1]) if state is not None else (mem.w1.float(), mem.w2.float())
            h = mem.output(xs, F.silu(q_m @ w1.transpose(-1, -2)) @ w2.transpose(-1, -2))
            cs, sn = cos[..., start:start + n, :], sin[..., start:start + n, :]
            q, k_x, v_x = attn.project(xs, cs, sn)
            _, k_h, v_h = attn.project(h, cs, sn)
            p_k, p_v = attn.persistent_kv(b, k_x.dtype)
            keys, values = torch.cat([p_k, k_h, k_x], 2), torch.cat([p_v, v_h, v_x], 2)
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            mask = torch.cat([torch.ones(n, p_k.shape[2], dtype=torch.bool, device=x.device), causal, causal], -1)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            y = attn.o_proj(y.transpose(1, 2).reshape(b, n, -1))
            m, state = mem(y, state)
            outs.append(self.attn_out_norm(y) * torch.sigmoid(self.memory_out_norm(m)))
        return torch.cat(outs, 1)

    def residual(self, x, norm, reordered, cos, sin, mask):
        if reordered:
            x = x + norm(self.memory(x)[0])
            return x + self.norm(self.attn(x, cos, sin, mask))
        x = x + self.memory(norm(x))[0]
        return x + self.attn(self.norm(x), cos, sin, mask)


class SwiGLU(nn.Module):
    def __init__(self, d, width):
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class CMSLevel(nn.Module):
    """Hope-attention's CMS level (shapelm.model.hope): a SwiGLU whose weights take one SGD step
    on 1/2 ||SwiGLU(x; W) - W_v x||^2 (mean over the chunk) after every `chunk` tokens; the
    tokens of a chunk read the weights left by the chunks before it."""

    def __init__(self, d, width, chunk, lr, momentum, decay):
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)
        self.value_proj = nn.Linear(d, d, bias=False)
        self.chunk, self.lr, self.momentum, self.decay = chunk, lr / d, momentum, decay

    def forward(self, x):
        b = x.shape[0]
        w_in = torch.cat([self.gate_proj.weight, self.up_proj.weight]).expand(b, -1, -1)
        w_out = self.down_proj.weight.expand(b, -1, -1)
        values, outs, mom = self.value_proj(x), [], None
        for start in range(0, x.shape[1], self.chunk):
            xs, vs = x[:, start : start + self.chunk], values[:, start : start + self.chunk]
            a, u = torch.matmul(xs, w_in.mT).chunk(2, dim=-1)
            sig = torch.sigmoid(a)
            h = a * sig * u
            y = torch.matmul(h, w_out.mT)
            outs.append(y)
            if xs.shape[1] < self.chunk:
                break
            e = (y - vs) / self.chunk
            dh = torch.matmul(e, w_out)
            da = dh * u * sig * (1 + a * (1 - sig))
            grads = (torch.matmul(torch.cat([da, dh * a * sig], dim=-1).mT, xs), torch.matmul(e.mT, h))
            if self.momentum:
                grads = grads if mom is None else tuple(self.momentum * m + g for m, g in zip(mom, grads))
                mom = grads
            w_in, w_out = ((1 - self.decay) * w - self.lr * g for w, g in zip((w_in, w_out), grads))
        return torch.cat(outs, dim=1)


def _ffn(d, layer, j):
    width = layer["ffn_widths"][j]
    if layer.get("mixer") != "hope_attention":
        return SwiGLU(d, width)
    return CMSLevel(d, width, layer["cms_chunks"][j], layer["cms_lr"], layer["cms_momentum"], layer["cms_decay"])


def resize(x, width, earlier=()):
    """Variable residual width: keep the stream's first `width` channels, or widen it: zero-pad
    ("zero"), or with `earlier` (the stream's earlier states, newest first: "move_up") take each
    added channel from the newest earlier state that has it, zeros where none has."""
    d = x.shape[-1]
    if d >= width:
        return x if d == width else x[..., :width]
    parts, filled = [x], d
    for state in earlier:
        if state.shape[-1] > filled:
            end = min(state.shape[-1], width)
            parts.append(state[..., filled:end])
            filled = end
            if filled == width:
                break
    if len(parts) == 1:
        return F.pad(x, (0, width - d))
    if filled < width:
        parts.append(x.new_zeros(*x.shape[:-1], width - filled))
    return torch.cat(parts, dim=-1)


class _LayerConfig:
    """The model config as one layer sees it: hidden_size is the layer's own residual width."""

    def __init__(self, config, width):
        self._config, self.hidden_size = config, width

    def __getattr__(self, key):
        return getattr(self._config, key)


class Block(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.width = layer.get("d_model") or config.hidden_size
        if self.width != config.hidden_size:
            config = _LayerConfig(config, self.width)
        attn = layer.get("attention")
        d, eps = config.hidden_size, config.rms_norm_eps
        self.reordered = config.norm_placement == "reordered"
        mixer = layer.get("mixer", "attention" if attn else "none")
        if mixer not in ("attention", "gated_attention", "titans", "hope_attention", "none"):
            raise ValueError(f"this remote code does not implement mixer {mixer!r}")
        gate = layer.get("gate", "elementwise") if mixer == "gated_attention" else None
        self.titans = mixer == "titans"
        if self.titans:
            self.attn = Titans(config, layer)
        else:
            self.attn = Attention(config, attn, gate) if attn else None
        self.attn_norm = RMSNorm(d, eps) if attn else None
        self.mlps = nn.ModuleList(_ffn(d, layer, j) for j in range(len(layer.get("ffn_widths", []))))
        self.mlp_norms = nn.ModuleList(RMSNorm(d, eps) for _ in layer.get("ffn_widths", []))

    def forward(self, x, rope, mask, cache=None, cache_idx=None):
        if self.attn is not None:
            cos, sin = rope[self.attn.head_dim]
            kv = {} if self.titans else {"cache": cache, "cache_idx": cache_idx}
            if self.titans and self.attn.variant == "mal":
                x = self.attn.residual(x, self.attn_norm, self.reordered, cos, sin, mask)
            elif self.reordered:
                x = x + self.attn_norm(self.attn(x, cos, sin, mask, **kv))
            else:
                x = x + self.attn(self.attn_norm(x), cos, sin, mask, **kv)
        for norm, mlp in zip(self.mlp_norms, self.mlps):
            x = x + (norm(mlp(x)) if self.reordered else mlp(norm(x)))
        return x


class ShapelmPreTrainedModel(PreTrainedModel):
    config_class = ShapelmConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]
    _supports_sdpa = True

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, NeuralMemory):
            for w, fan_in in ((module.w1, module.head_dim), (module.w2, module.hidden)):
                nn.init.trunc_normal_(w, std=fan_in ** -0.5, a=-3 * fan_in ** -0.5, b=3 * fan_in ** -0.5)
            nn.init.ones_(module.out_norm)
            with torch.no_grad():
                module.conv.zero_()
                module.conv[:, -1] = 1.0


def embedding_widths(config):
    """(input embedding, unembedding) widths: hidden_size, or with original_input_width /
    original_output_width false the first / last layer's own width (arXiv 2606.18246)."""
    first, last = (config.layers[i].get("d_model") or config.hidden_size for i in (0, -1))
    return (config.hidden_size if getattr(config, "original_input_width", True) else first,
            config.hidden_size if getattr(config, "original_output_width", True) else last)


class ShapelmModel(ShapelmPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        input_width, self.output_width = embedding_widths(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, input_width)
        self.layers = nn.ModuleList(Block(config, layer) for layer in config.layers)
        # the final norm at the last layer's width; the stream is resized to the unembedding after it
        self.norm = RMSNorm(config.layers[-1].get("d_model") or config.hidden_size, config.rms_norm_eps)
        self.post_init()

    @property
    def recurrent(self):
        """Titans' or Hope-attention's state, which a KV cache does not hold."""
        return any(block.titans or any(isinstance(m, CMSLevel) for m in block.mlps) for block in self.layers)

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None):
        """`cache`: a transformers Cache holding the keys and values of the tokens before
        input_ids (`attention_mask` then covers those tokens and input_ids)."""
        x = self.embed_tokens(input_ids)
        b, s = input_ids.shape
        if cache is not None and self.recurrent:
            raise ValueError("Titans and Hope-attention layers keep a recurrent state: no KV cache (use_cache=False)")
        past = 0
        if cache is not None:
            past = attention_mask.shape[1] - s if attention_mask is not None else cache.get_seq_length()
        mask = None
        if position_ids is None:
            if attention_mask is not None and not bool(attention_mask.all()):
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -s:]
            else:
                position_ids = (torch.arange(s, device=x.device) + past)[None].expand(b, s)
        if past and s > 1 and (attention_mask is None or bool(attention_mask.all())):
            # new tokens after cached ones: causal with the queries at the end
            mask = torch.ones(s, past + s, dtype=torch.bool, device=x.device).tril(past)[None, None]
        if attention_mask is not None and not bool(attention_mask.all()):
            if any(block.titans for block in self.layers) and bool((attention_mask.diff(dim=-1) > 0).any()):
                raise ValueError("Titans memory would learn the left padding: pad on the right")
            if any(isinstance(m, CMSLevel) for m in self.modules()) and bool(
                (attention_mask.long().diff(dim=-1) > 0).any()
            ):  # left padding would be written into the fast weights and shift the chunks
                raise ValueError("Hope-attention (CMS) layers need right padding, not left padding")
            causal = torch.ones(s, past + s, dtype=torch.bool, device=x.device).tril(past)
            keep = attention_mask.bool()[:, None, None, :]
            mask = causal[None, None] & keep
            diagonal = torch.arange(past + s, device=x.device) == past + torch.arange(s, device=x.device)[:, None]
            mask = mask | diagonal[None, None]  # no empty rows
        rope = {}
        widths = {layer.get("d_model") or self.config.hidden_size for layer in self.config.layers}
        earlier = [x] if widths != {self.config.hidden_size} else None  # the stream after each layer
        move_up = earlier is not None and getattr(self.config, "resize", "zero") == "move_up"
        cache_idx = 0  # the cache's layers are the attention layers as applied (a looped block's
        # every round has its own keys and values)
        for block in list(self.layers) * getattr(self.config, "loops", 1):  # looped blocks: round after round
            if block.attn is not None and block.attn.head_dim not in rope:
                inv, factor = rope_inv_freq(block.attn.head_dim, self.config.rope_theta,
                                            self.config.shapelm_rope_scaling)
                freqs = position_ids.to(torch.float32)[..., None] * inv.to(x.device)
                emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [b, 1, s, head_dim]
                rope[block.attn.head_dim] = ((emb.cos() * factor).to(x.dtype), (emb.sin() * factor).to(x.dtype))
            x = block(resize(x, block.width, earlier[::-1] if move_up else ()), rope, mask, cache, cache_idx)
            if earlier is not None:
                earlier.append(x)
            cache_idx += block.attn is not None
        return resize(self.norm(x), self.output_width, earlier[::-1] if earlier else ())


class ShapelmForCausalLM(ShapelmPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = ShapelmModel(config)
        self.lm_head = nn.Linear(self.model.output_width, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, cache=None, past_key_values=None,
                                      next_sequence_length=None, use_cache=None, **kwargs):
        """The tokens the cache does not hold yet (all of them without a cache)."""
        cache = cache if cache is not None else past_key_values
        if cache is None or use_cache is False or self.model.recurrent:
            return {"input_ids": input_ids, "attention_mask": attention_mask}
        if next_sequence_length is None:
            next_sequence_length = input_ids.shape[1] - cache.get_seq_length()
        return {"input_ids": input_ids[:, -next_sequence_length:], "attention_mask": attention_mask,
                "cache": cache, "use_cache": True}

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None, cache=None,
                past_key_values=None, use_cache=None, **kwargs):
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache and not self.model.recurrent:
            from transformers import DynamicCache

            cache = DynamicCache()
        if self.model.recurrent:
            cache = None
        h = self.model(input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache)
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                ignore_index=-100,
            )
        out = CausalLMOutputWithPast(loss=loss, logits=logits)
        if cache is not None:  # transformers >= 5.x names it `cache`, before that `past_key_values`
            out["cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"] = cache
        return out


