"""`shapelm export-hf CHECKPOINT OUT`: a Hugging Face model directory (safetensors).

Conventional shapes (every layer: attention of one shape + exactly one FFN block of one width)
export as a stock transformers architecture:

* ``Olmo2ForCausalLM`` when qk_norm and norm_placement == "reordered" (OLMo-2);
* ``LlamaForCausalLM`` when no qk_norm and norm_placement == "pre" (LLaMA);

with RoPE/YaRN as transformers' ``rope_parameters`` (rope_type "yarn"); transformers < 5 does not
read that key (a stock export would silently get rope_theta 10000), hence the bound in
pyproject.toml and the check in ``export_hf``; ``rope_theta`` is also written at the top level
for tools that read only that (converters, servers). Every other shape
(hourglass K>1, per-layer widths, attention-free layers, gated attention, pre-norm + qk_norm,
reordered without qk_norm) exports with trust_remote_code: `modeling_shapelm.py` + `configuration_shapelm.py`
copied from `shapelm/hf_remote/` and ``auto_map`` in config.json.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from shapelm import files
from shapelm.evaluation.loading import EvalError, TextTokenizer, load_model
from shapelm.model.config import ModelConfig

REMOTE_DIR = Path(__file__).resolve().parent.parent / "hf_remote"
REMOTE_FILES = ("configuration_shapelm.py", "modeling_shapelm.py")


def is_conventional(cfg: ModelConfig) -> bool:
    first = cfg.layers[0]
    return (
        first.mixer == "attention"  # stock Llama/OLMo-2 attention has no output gate
        and len(first.ffn_widths) == 1
        and first.d_model in (None, cfg.d_model)  # a stock model has one residual width
        and cfg.loops == 1
        and all(layer == first for layer in cfg.layers)
    )


def choose_architecture(cfg: ModelConfig, force_remote: bool = False) -> str:
    if not force_remote and is_conventional(cfg):
        if cfg.qk_norm and cfg.norm_placement == "reordered":
            return "Olmo2ForCausalLM"
        if not cfg.qk_norm and cfg.norm_placement == "pre":
            return "LlamaForCausalLM"
    return "ShapelmForCausalLM"


def _rope_parameters(cfg: ModelConfig) -> dict:
    params = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        s = cfg.rope_scaling
        params = {"rope_type": "yarn", "rope_theta": cfg.rope_theta, "factor": float(s["factor"]),
                  "original_max_position_embeddings": int(s["original_max_position_embeddings"])}
        for key in ("beta_fast", "beta_slow", "attention_factor"):
            if s.get(key) is not None:
                params[key] = float(s[key])
        params.setdefault("beta_fast", 32.0)
        params.setdefault("beta_slow", 1.0)
        params["truncate"] = True
    return params


def stock_config(cfg: ModelConfig, arch: str, eos_id: int | None = None):
    """A transformers LlamaConfig / Olmo2Config for a conventional shapelm config."""
    mixers = sorted({layer.mixer for layer in cfg.layers} - {"attention"})
    if mixers:
        raise EvalError(f"export: {arch} has plain softmax attention only; this model has mixer(s) "
                        f"{', '.join(mixers)}: export it with trust_remote_code (ShapelmForCausalLM)")
    layer = cfg.layers[0]
    attn = layer.attention
    common = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=layer.ffn_widths[0],
        num_hidden_layers=cfg.n_layers, num_attention_heads=attn.n_heads,
        num_key_value_heads=attn.n_kv_heads, max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps, hidden_act="silu", attention_bias=False,
        tie_word_embeddings=False, rope_parameters=_rope_parameters(cfg),
        initializer_range=cfg.init_std, bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id,
    )
    if arch == "LlamaForCausalLM":
        from transformers import LlamaConfig

        hf = LlamaConfig(head_dim=attn.head_dim, mlp_bias=False, **common)
    else:
        from transformers import Olmo2Config

        hf = Olmo2Config(**common)
        hf.head_dim = attn.head_dim  # Olmo2Attention reads getattr(config, "head_dim", ...)
    hf.architectures = [arch]
    hf.dtype = "float32"
    hf.rope_theta = cfg.rope_theta  # the same value as in rope_parameters, for readers of the old key
    return hf


MIN_TRANSFORMERS = (5, 0)


def check_transformers_version() -> None:
    """transformers < 5 ignores ``rope_parameters``: refuse to write an export it would misread."""
    import transformers

    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    if major_minor < MIN_TRANSFORMERS:
        raise EvalError(f"export-hf needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))} (found "
                        f"{transformers.__version__}): older versions ignore rope_parameters and would "
                        "load the export with rope_theta 10000")


def stock_state_dict(state: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """shapelm parameter names -> LlamaForCausalLM / Olmo2ForCausalLM names."""
    attn_norm = "input_layernorm" if arch == "LlamaForCausalLM" else "post_attention_layernorm"
    mlp_norm = "post_attention_layernorm" if arch == "LlamaForCausalLM" else "post_feedforward_layernorm"
    out = {}
    for name, t in state.items():
        parts = name.split(".")
        if name == "embed_tokens.weight":
            new = "model.embed_tokens.weight"
        elif name == "norm.weight":
            new = "model.norm.weight"
        elif name == "lm_head.weight":
            new = "lm_head.weight"
        elif parts[0] == "layers":
            i, rest = parts[1], parts[2:]
            if rest[0] == "attn":
                new = f"model.layers.{i}.self_attn." + ".".join(rest[1:])
            elif rest[0] == "attn_norm":
                new = f"model.layers.{i}.{attn_norm}.weight"
            elif rest[0] == "mlps" and rest[1] == "0":
                new = f"model.layers.{i}.mlp.{rest[2]}.weight"
            elif rest[0] == "mlp_norms" and rest[1] == "0":
                new = f"model.layers.{i}.{mlp_norm}.weight"
            else:
                raise EvalError(f"export: parameter {name} has no place in {arch}")
        else:
            raise EvalError(f"export: unexpected parameter {name}")
        out[new] = t
    return out


def remote_config(cfg: ModelConfig, eos_id: int | None = None) -> dict:
    d = cfg.to_dict()
    return {
        "architectures": ["ShapelmForCausalLM"],
        "model_type": "shapelm",
        "auto_map": {
            "AutoConfig": "configuration_shapelm.ShapelmConfig",
            "AutoModelForCausalLM": "modeling_shapelm.ShapelmForCausalLM",
        },
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "layers": d["layers"],
        "loops": cfg.loops,
        "original_input_width": cfg.original_input_width,
        "original_output_width": cfg.original_output_width,
        "resize": cfg.resize,
        "max_position_embeddings": cfg.max_seq_len,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "rms_norm_eps": cfg.norm_eps,
        "qk_norm": cfg.qk_norm,
        "norm_placement": cfg.norm_placement,
        "initializer_range": cfg.init_std,
        "tie_word_embeddings": False,
        "use_cache": not cfg.has_recurrent_state,  # Titans / Hope: a state the KV cache does not hold
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
        "dtype": "float32",
    }


def write_tokenizer(spec: str, out: Path) -> int:
    """Copy a tokenizer into the export in transformers' layout; return its EOS id."""
    tok = TextTokenizer.load(spec)
    if tok._hf is not None:
        tok._hf.save_pretrained(str(out))
        return tok.eos_id
    from transformers import PreTrainedTokenizerFast

    f = tok.tokenizer_file()
    if f is None:
        raise EvalError(f"tokenizer {spec}: cannot find its tokenizer.json to copy")
    eos = tok.decode([tok.eos_id])
    fast = PreTrainedTokenizerFast(tokenizer_file=str(f), eos_token=eos, pad_token=eos,
                                   model_max_length=int(1e30))
    fast.save_pretrained(str(out))
    return tok.eos_id


def export_hf(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, tokenizer: str | None = None,
              force_remote: bool = False, dtype: str = "float32") -> dict:
    check_transformers_version()
    model = load_model(checkpoint)
    cfg = model.config
    arch = choose_architecture(cfg, force_remote)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eos_id = write_tokenizer(tokenizer, out) if tokenizer else None
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    state = {k: v.detach().to(tdtype).contiguous() for k, v in model.state_dict().items()}
    if arch == "ShapelmForCausalLM":
        tensors = {("lm_head.weight" if k == "lm_head.weight" else "model." + k): v for k, v in state.items()}
        config = remote_config(cfg, eos_id)
        config["dtype"] = dtype
        for name in REMOTE_FILES:
            files.copy(REMOTE_DIR / name, out / name)
        files.write_json(out / "config.json", config)
        kind = "trust_remote_code"
    else:
        tensors = stock_state_dict(state, arch)
        hf = stock_config(cfg, arch, eos_id)
        hf.dtype = dtype
        hf.save_pretrained(str(out))
        kind = "stock"
    with files.atomic_path(out / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt", "producer": "shapelm export-hf"})
    gen = {"do_sample": False, "eos_token_id": eos_id, "pad_token_id": eos_id}
    if arch == "ShapelmForCausalLM":
        gen["use_cache"] = config["use_cache"]
    files.write_json(out / "generation_config.json", gen)
    info = {"architecture": arch, "kind": kind, "checkpoint": str(checkpoint),
            "shapelm_config": cfg.to_dict(), "tokenizer": tokenizer}
    files.write_json(out / "shapelm_export.json", info)
    return info
