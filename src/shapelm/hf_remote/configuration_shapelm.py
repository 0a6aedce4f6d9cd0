"""Hugging Face config for shapelm's per-layer-shape decoder (trust_remote_code export)."""

from transformers import PretrainedConfig


class ShapelmConfig(PretrainedConfig):
    """`layers`: one dict per layer, {"attention": {"n_heads", "n_kv_heads", "head_dim"} | None,
    "ffn_widths": [int, ...]}: the shapelm ModelConfig layer list, verbatim."""

    model_type = "shapelm"

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=512,
        layers=None,
        loops=1,
        original_input_width=True,
        original_output_width=True,
        resize="zero",
        max_position_embeddings=4096,
        rope_theta=500000.0,
        rope_scaling=None,
        rms_norm_eps=1e-6,
        qk_norm=True,
        norm_placement="pre",
        initializer_range=0.02,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.layers = list(layers or [])
        self.loops = loops  # looped blocks: the stored layers run `loops` rounds
        # variable residual width: false puts the input embedding (the unembedding) at the first
        # (last) layer's width instead of hidden_size
        self.original_input_width = original_input_width
        self.original_output_width = original_output_width
        self.resize = resize  # how the stream widens between layers: "zero" or "move_up"
        self.num_hidden_layers = len(self.layers)
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.shapelm_rope_scaling = rope_scaling
        self.rms_norm_eps = rms_norm_eps
        self.qk_norm = qk_norm
        self.norm_placement = norm_placement
        self.initializer_range = initializer_range
        attn = [layer.get("attention") for layer in self.layers if layer.get("attention")]
        self.num_attention_heads = attn[0]["n_heads"] if attn else 1
        self.num_key_value_heads = attn[0]["n_kv_heads"] if attn else 1
        kwargs.setdefault("use_cache", True)  # the export says False for recurrent models
        super().__init__(
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
