"""Analytic parameter, FLOP and KV-cache accounting for any per-layer shape.

Parameters: every weight the built module has (tests assert equality with the built model).
Training FLOPs per token follow arXiv 2602.06471 Appendix A.8 (Gemstones' `flops_per_token_gqa`), the
formula that reproduces all 14 printed values (docs/PAPER_NOTES.md protocol 2):

  forward, per attention layer: QKV projections 2*d*(q + 2*kv), RoPE 3.5*(q + kv),
    QK^T 1.0*S*q (causal half), softmax 3*S*H, scores x V 2.0*S*q, output projection 2*d*q
  forward, per sub-MLP of width w: 6*d*w matrices + 10*w elementwise + 2*d residual add
  forward, per RMSNorm over d_model: 7*d (pre-attention, each sub-MLP, final)
  forward LM head: 2*d*V (embedding lookups are free)
  backward: 2x forward, except the three score terms, which take 2.5x.
  gated attention (Qiu et al. 2025) adds, per layer, the gate projection 2*d*g and the sigmoid
    and product 5*q (g = q elementwise, H headwise; sigmoid counted as 4 FLOPs per gate value,
    like the SiLU in the sub-MLP term); it caches nothing, so KV bytes are unchanged.

  Titans (mixer "titans") is its sliding-window attention (the score terms at the mean number
    of keys a query sees, 2w - w^2/S for S >= w in place of S, plus the persistent tokens) plus
    the memory (`titans_memory_flops`: every matmul and convolution the chunk-parallel form
    does, exactly, and an elementwise estimate) and the variant's wiring (`titans_layer_flops`:
    MAG two RMSNorms 14*d and the gate 5*d; MAL a second RMSNorm 7*d and two residual adds 4*d).
    The persistent tokens' own key/value projections are per call, not per token: not counted.
    Its decoding state is `recurrent_state_bytes` (the memory's chunk-start weights, weights
    and momentum and the convolution's last inputs per sequence), in addition to the
    attention's KV (the static cache keeps every key; only the last `window` are read).
  Hope-attention (Behrouz et al. 2025c; shapelm.model.hope): each sub-MLP is a CMS level of
    width w with chunk C. Its parameters are the sub-MLP's 3*d*w slow weights plus the local
    objective's value projection d*d (counted as ffn). Forward per token adds, besides the
    sub-MLP terms: the value projection 2*d*d, the in-context gradient 8*d*w matrices (four
    outer products / matmuls of the hand-written SwiGLU gradient) + 7*w + d elementwise, and
    the update 3*d*w * (2 + 2 per momentum or decay term) / C amortised over the chunk. The
    backward of the update counts 2x like the rest. Its state per sequence (the fast weights,
    the open chunk's gradient sum and, with momentum, the momentum) sits next to the KV cache:
    `fast_weight_state_bytes`.

For MHA (q = kv = d_attn) the QKV and RoPE terms are the paper's 6*d*a and 7*a.

Variable residual width (arXiv 2606.18246, LayerShape.d_model): every per-layer term takes the
layer's own width as d; the input embedding `cfg.input_width` and the LM head `cfg.output_width`
(d_model, or with `original_input_width` / `original_output_width` false the first / last layer's
width), the final norm the last layer's width (`cfg.final_norm_width`: the stream is resized to
the LM head after it). The resizes between layers (truncation, zero-padding, "move_up") hold no
parameters and are counted as 0 FLOPs. The KV cache follows each layer's attention shape
(kv_width = n_kv_heads * head_dim, so it scales with the layer's width when its heads do).

Looped blocks (arXiv 2607.13491, ModelConfig.loops): parameters are the stored layers', counted
once; FLOPs and KV bytes are the unrolled depth's (every round of every layer).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from shapelm.model.config import TITANS_CONV_KERNEL, LayerShape, ModelConfig


@dataclass(frozen=True)
class ParamCounts:
    embedding: int  # input embedding + LM head (two matrices; one when tied)
    attention: int  # the token mixers: Q, K, V, O (+ gated attention's gate, Titans' memory)
    ffn: int  # all sub-MLP matrices
    norm: int  # every RMSNorm weight: pre-attention, QK-norms, one per sub-MLP, final

    @property
    def non_embedding(self) -> int:
        return self.attention + self.ffn + self.norm

    @property
    def total(self) -> int:
        return self.embedding + self.non_embedding

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "non_embedding": self.non_embedding, "total": self.total}


def param_counts(cfg: ModelConfig, tie_embeddings: bool | None = None) -> ParamCounts:
    """`tie_embeddings` counts one shared input/output matrix (default: the config's setting;
    the released Hourglass code ties them, shapelm.reference.recipes)."""
    tied = cfg.tie_embeddings if tie_embeddings is None else tie_embeddings
    attention = ffn = norm = 0
    for layer in cfg.layers:
        d = layer.d_model or cfg.d_model  # a variable-width layer's own residual width
        attn = layer.attention
        if attn is not None:
            attention += d * (attn.d_attn + 2 * attn.kv_width) + attn.d_attn * d + d * gate_width(layer)
            norm += d + ((attn.d_attn + attn.kv_width) if cfg.qk_norm else 0)
            if layer.mixer == "titans":
                attention += titans_memory_params(d, layer) + layer.persistent_tokens * d
                norm += d * (1 if layer.titans_variant == "mal" else 2)  # MAL's second norm; MAG/MAC's output norms
        for width in layer.ffn_widths:
            ffn += 3 * d * width + (d * d if layer.hope else 0)
            norm += d
    norm += cfg.final_norm_width  # final norm, at the last layer's width
    # untied: the input embedding and the unembedding, each at its own width (a variable-width
    # model's may be its first / last layer's); tied: one matrix (the reference recipes, one width)
    embedding = cfg.vocab_size * (cfg.d_model if tied else cfg.input_width + cfg.output_width)
    return ParamCounts(embedding=embedding, attention=attention, ffn=ffn, norm=norm)


def gate_width(layer: LayerShape) -> int:
    """Outputs of a gated-attention layer's gate projection (0 for other mixers)."""
    if not layer.gated:
        return 0
    return layer.attention.d_attn if layer.gate == "elementwise" else layer.attention.n_heads


def titans_memory_params(d_model: int, layer: LayerShape) -> int:
    """The memory's q, k, v, o projections and output gate (d_attn wide), its theta/eta/alpha
    gates (one per head each), the q/k/v depthwise convolution, the output norm's weight and its
    initial weights W1 [H, m, hd], W2 [H, hd, m]."""
    a = layer.attention
    return (5 * d_model * a.d_attn + 3 * d_model * a.n_heads + 3 * a.d_attn * TITANS_CONV_KERNEL + a.d_attn
            + 2 * a.n_heads * layer.memory_hidden * a.head_dim)


def titans_memory_flops(d_model: int, layer: LayerShape, seq_len: int) -> tuple[float, float]:
    """(matmul, elementwise) forward FLOPs per token of the memory, chunk c = min(chunk, S).

    Matmuls, per head (shapelm.model.titans.chunk_memory, exact when c divides S): the gradients
    at the chunk-start weights 6*m*hd; retrieval through both layers with the chunk-start weights
    and momentum 8*m*hd plus the within-chunk attention-like terms 4*c*(m + hd); the chunk-end
    weights and momentum 8*m*hd; the decay/momentum coefficient matrices 2*c^2 + 2*c. Plus the
    projections and output gate 10*d*d_attn + 6*d*H and the depthwise convolution
    2*3*d_attn*TITANS_CONV_KERNEL. Elementwise (an estimate): 20*m + 10*hd + 8*c per head (SiLU and its
    derivative, the error, the combinations), 12*d_attn (q/k/v SiLU, q/k L2 norms), 15*H
    (gates), 11*d_attn (output RMSNorm, sigmoid gate and product).
    """
    a = layer.attention
    h, hd, m = a.n_heads, a.head_dim, layer.memory_hidden
    c = min(layer.memory_chunk, seq_len)
    matmul = (10 * d_model * a.d_attn + 6 * d_model * h + 6 * a.d_attn * TITANS_CONV_KERNEL
              + h * (22 * m * hd + 4 * c * (m + hd) + 2 * c * c + 2 * c))
    elementwise = h * (20 * m + 10 * hd + 8 * c) + 23 * a.d_attn + 15 * h
    return float(matmul), float(elementwise)


def titans_layer_flops(d_model: int, layer: LayerShape, seq_len: int) -> float:
    """Forward FLOPs per token a Titans layer adds to its attention's: the memory and the
    variant's wiring (MAG and MAC: two RMSNorms and the sigmoid gate; MAL: a norm, two residual
    adds). MAC also makes one retrieved token h per input token: its query (projection and
    convolution of the q channels), the retrieval through the segment-start memory 4*m*hd per
    head, its output gate and projection, and the attention's key/value projections and RoPE."""
    a = layer.attention
    wiring = 11 * d_model if layer.titans_variant == "mal" else 19 * d_model
    extra = 0.0
    if layer.titans_variant == "mac":
        extra = (2 * d_model * a.d_attn + 2 * a.d_attn * TITANS_CONV_KERNEL + 4 * layer.memory_hidden * a.d_attn
                 + 4 * d_model * a.d_attn + 4 * d_model * a.kv_width + 3.5 * a.kv_width)
    return sum(titans_memory_flops(d_model, layer, seq_len)) + wiring + extra


def attended_keys(layer: LayerShape, seq_len: int) -> float:
    """Twice the mean number of keys a query attends to: S for causal attention (the A.8 'causal
    half' convention), 2w - w^2/S under a sliding window w < S; plus twice Titans' persistent
    tokens, which every query sees."""
    w = layer.window
    persistent = 2.0 * (layer.persistent_tokens or 0)
    if layer.titans_variant == "mac":  # query i of a segment: h_j and x_j for j <= i of it
        return 2.0 * (min(layer.memory_chunk, seq_len) + 1) + persistent
    if w is None or w >= seq_len:
        return float(seq_len) + persistent
    return 2.0 * w - w * w / seq_len + persistent


def recurrent_state_bytes(cfg: ModelConfig, bytes_per_element: int = 4) -> int:
    """Per sequence, Titans' memory state carried while decoding: W0, W, S (two matrices each)
    and the q/k/v convolution's last TITANS_CONV_KERNEL - 1 inputs per titans layer (float32 by
    default: the memory is computed in float32)."""
    return sum(titans_state_elements(layer) * bytes_per_element for layer in cfg.layers if layer.mixer == "titans")


def titans_state_elements(layer: LayerShape) -> int:
    """One titans layer's decoding state per sequence: the memory's W0, W, S and convolution
    inputs; MAC adds the open segment's retrieved tokens' keys and values (a chunk of each; the
    input tokens' keys are in the KV cache) and its retrieval query's convolution inputs."""
    a = layer.attention
    n = 3 * 2 * layer.memory_hidden * a.d_attn + (TITANS_CONV_KERNEL - 1) * 3 * a.d_attn
    if layer.titans_variant == "mac":
        n += 2 * layer.memory_chunk * a.kv_width + (TITANS_CONV_KERNEL - 1) * a.d_attn
    return n


@dataclass(frozen=True)
class FlopsPerToken:
    """Forward FLOPs per token split into the score terms (2.5x backward) and the rest (2x)."""

    forward_dense: float
    forward_scores: float

    @property
    def forward(self) -> float:
        return self.forward_dense + self.forward_scores

    @property
    def train(self) -> float:
        return 3.0 * self.forward_dense + 3.5 * self.forward_scores


def flops_per_token(cfg: ModelConfig, seq_len: int, vocab_size: int | None = None) -> FlopsPerToken:
    """Per-token FLOPs by the paper's A.8 accounting at sequence length `seq_len`."""
    dense = scores = 0.0
    for layer in cfg.unrolled_layers:  # looped blocks: FLOPs per round, parameters once
        d = layer.d_model or cfg.d_model
        attn = layer.attention
        if attn is not None:
            q, kv = attn.d_attn, attn.kv_width
            dense += 2 * d * (q + 2 * kv) + 3.5 * (q + kv) + 2 * d * q
            if layer.gated:
                dense += 2 * d * gate_width(layer) + 5 * q
            keys = attended_keys(layer, seq_len)
            scores += 1.0 * keys * q + 3 * keys * attn.n_heads + 2.0 * keys * q
            dense += 7 * d  # pre-attention norm
            if layer.mixer == "titans":
                dense += titans_layer_flops(d, layer, seq_len)
        for j, width in enumerate(layer.ffn_widths):
            dense += 6 * d * width + 10 * width + 2 * d + 7 * d
            if layer.hope:
                dense += cms_update_flops_per_token(layer, d, j)
    dense += output_layer_forward_flops(cfg, vocab_size)
    return FlopsPerToken(forward_dense=dense, forward_scores=scores)


def output_layer_forward_flops(cfg: ModelConfig, vocab_size: int | None = None) -> float:
    """Forward FLOPs per token of the final norm and LM head (A.8; dense: 3x in training)."""
    vocab = cfg.vocab_size if vocab_size is None else vocab_size
    return 7 * cfg.final_norm_width + 2 * cfg.output_width * vocab


def cms_update_flops_per_token(layer: LayerShape, d: int, level: int) -> float:
    """Forward FLOPs per token of a CMS level's in-context memory: value target, gradient, update."""
    w, chunk = layer.ffn_widths[level], layer.cms_chunks[level]
    per_weight = 2 + (2 if layer.cms_momentum else 0) + (2 if layer.cms_decay else 0)
    return 2 * d * d + 8 * d * w + 7 * w + d + per_weight * 3 * d * w / chunk


def fast_weight_state_bytes(cfg: ModelConfig, bytes_per_element: int = 4) -> int:
    """Bytes of Hope-attention state per sequence (constant in length; 0 without CMS levels):
    each level's fast weights and the open chunk's gradient sum, plus momentum when used."""
    total = 0
    for layer in cfg.layers:
        if layer.hope:
            copies = 2 + (1 if layer.cms_momentum else 0)
            total += sum(copies * 3 * (layer.d_model or cfg.d_model) * w for w in layer.ffn_widths)
    return total * bytes_per_element


def decoding_state_bytes(cfg: ModelConfig) -> int:
    """Per sequence, every recurrent state a decoding model carries beside its KV cache: Titans'
    memories and Hope-attention's fast weights (0 for softmax attention alone)."""
    return recurrent_state_bytes(cfg) + fast_weight_state_bytes(cfg)


def train_flops_per_step(cfg: ModelConfig, seq_len: int, tokens_per_step: int, vocab_size: int | None = None) -> float:
    return flops_per_token(cfg, seq_len, vocab_size).train * tokens_per_step


def approx_forward_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """The paper's Section 3.2 approximation C_fwd/T = L(8 d a + 2 S a + 6 K d_h d) + 2 d V.

    Generalised to per-layer shapes by summing the per-layer terms. Training FLOPs are about
    3x this; docs/PAPER_NOTES.md (protocol facts) notes the x3 misses the printed values by 2-9%.
    """
    total = 2.0 * cfg.output_width * cfg.vocab_size
    for layer in cfg.unrolled_layers:
        d = layer.d_model or cfg.d_model
        if layer.attention is not None:
            a = layer.attention.d_attn
            total += 8 * d * a + 2 * attended_keys(layer, seq_len) * a + 2 * d * gate_width(layer)
            if layer.mixer == "titans":
                total += titans_memory_flops(d, layer, seq_len)[0]
        total += sum(6 * d * w for w in layer.ffn_widths)
        if layer.hope:  # the approximation's matmul terms of the in-context memory
            total += sum(2 * d * d + 8 * d * w for w in layer.ffn_widths)
    return total


def kv_cache_bytes_per_token(cfg: ModelConfig, bytes_per_element: int = 2) -> int:
    """M_KV / S = 2 * beta * sum over attention layers of the K (= V) width."""
    return sum(
        2 * bytes_per_element * layer.attention.kv_width for layer in cfg.unrolled_layers if layer.attention
    )


def kv_cache_bytes(cfg: ModelConfig, seq_len: int, bytes_per_element: int = 2) -> int:
    return kv_cache_bytes_per_token(cfg, bytes_per_element) * seq_len


def mla_group_factor(d_attn: int, r_kv: int, d_rope: int) -> float:
    """Effective grouping g of MLA: caches r_KV + d_rope numbers instead of 2 * d_attn."""
    return 2 * d_attn / (r_kv + d_rope)


SHAPE_COLUMNS = [
    "run", "d_model", "n_layers", "d_attn", "ffn_k", "ffn_d_h",
    "params_embedding", "params_attention", "params_ffn", "params_norm",
    "params_non_embedding", "params_total", "tokens_per_step", "seq_len",
    "train_flops_per_token", "train_flops_per_step", "train_flops_per_step_approx",
    "kv_bytes_per_token", "state_bytes_per_seq", "layer_widths", "loops", "embedding_widths",
]


def shape_row(run: str, cfg: ModelConfig, seq_len: int, tokens_per_step: int) -> dict[str, object]:
    """One accounting row; per-layer fields are empty ("") when they vary across layers, and
    `layer_widths` lists the residual widths of a variable-width model, `embedding_widths` its
    input embedding's and unembedding's widths when either is not d_model."""
    p = param_counts(cfg)
    per_token = flops_per_token(cfg, seq_len).train

    def uniform(attr: str) -> object:
        value = cfg.uniform(attr)
        return "" if value is None else value

    return {
        "run": run,
        "d_model": cfg.d_model,
        "n_layers": cfg.n_layers,
        "d_attn": uniform("d_attn"),
        "ffn_k": uniform("ffn_k"),
        "ffn_d_h": uniform("ffn_d_h"),
        "params_embedding": p.embedding,
        "params_attention": p.attention,
        "params_ffn": p.ffn,
        "params_norm": p.norm,
        "params_non_embedding": p.non_embedding,
        "params_total": p.total,
        "tokens_per_step": tokens_per_step,
        "seq_len": seq_len,
        "train_flops_per_token": per_token,
        "train_flops_per_step": per_token * tokens_per_step,
        "train_flops_per_step_approx": 3 * approx_forward_flops_per_token(cfg, seq_len) * tokens_per_step,
        "kv_bytes_per_token": kv_cache_bytes_per_token(cfg),
        "state_bytes_per_seq": decoding_state_bytes(cfg),
        # variable residual width: each layer's width, first to last ("" when all are d_model)
        "layer_widths": " ".join(str(cfg.width(i)) for i in range(cfg.n_layers)) if cfg.variable_width else "",
        "loops": cfg.loops,  # rounds over the n_layers stored layers (FLOPs and KV unrolled)
        # "input output" when a variable-width model's embeddings sit at its first / last layer's width
        "embedding_widths": (f"{cfg.input_width} {cfg.output_width}"
                             if (cfg.input_width, cfg.output_width) != (cfg.d_model,) * 2 else ""),
    }


# Dense bf16 peak FLOP/s per device (no sparsity), by substring of torch.cuda.get_device_name.
# Ordered: the first matching key wins (so "H100 PCIe" precedes "H100").
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("B100", 1.75e15),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("A6000", 155e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("V100", 125e12),  # fp16 tensor cores; V100 has no bf16
    ("MI300X", 1307e12),
    ("MI250X", 383e12),
]


def peak_flops_for(device_name: str) -> float | None:
    for key, value in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return value
    return None
