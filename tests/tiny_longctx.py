"""Small deterministic fixtures for the long-context tests (tiny model, text, tokenizer)."""

from __future__ import annotations

import random
from functools import lru_cache

import torch

from shapelm.longctx.ruler.words import ADJECTIVES, NOUNS, VERBS


def english_text(n_sentences: int = 400, seed: int = 0) -> str:
    """Simple English-like sentences from the built-in word lists, in paragraphs."""
    rng = random.Random(seed)
    sents = []
    for i in range(n_sentences):
        s = (
            f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} will {rng.choice(VERBS)} "
            f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} near the {rng.choice(NOUNS)}."
        )
        sents.append(s)
    paras = [" ".join(sents[i : i + 8]) for i in range(0, len(sents), 8)]
    return "\n\n".join(paras)


@lru_cache(maxsize=2)
def tiny_tokenizer(vocab_size: int = 600):
    from shapelm.data.tokenizer import train_bpe

    return train_bpe([english_text(600, seed=s) for s in range(3)], vocab_size)


def tiny_model(vocab_size: int = 600, max_seq_len: int = 64, seed: int = 0, n_layers: int = 2):
    from shapelm.model import ModelConfig, build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab_size,
        d_model=32,
        layers=[{"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64]}] * n_layers,
        max_seq_len=max_seq_len,
        rope_theta=10_000.0,
    )
    return build_model(cfg)
