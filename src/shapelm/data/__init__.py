"""Token files, OLMo-2 stage-1 order slicing, validation sets, tokenizers, default corpus.

See docs/DATA.md. Public entry points::

    from shapelm.data import TokenStore, write_token_dir, slice_olmo, fetch_validation
    from shapelm.data import load_tokenizer, train_bpe, build_default_corpus, load_olmo_config
    from shapelm.data import check_data

Also: ``shapelm.data.retokenize`` (re-encoding a token dir with another tokenizer, same order),
``shapelm.data.choices`` (data choices per scale, plan-time data checks) and ``shapelm.data.rehearsal``
(CPU-sized inputs in the real formats, a Range-capable server).
"""

from shapelm.data.tokens import TokenStore, read_manifest, write_token_dir
from shapelm.data.olmo_order import (
    global_order,
    n_instances_for_tokens,
    parse_tokens,
    plan_slice,
    slice_olmo,
)


def __getattr__(name):  # lazy: these pull in tokenizers / yaml
    if name in ("load_olmo_config", "fetch_validation", "validation_sources", "PAPER_VAL_SETS"):
        from shapelm.data import validation

        return getattr(validation, name)
    if name in ("load_tokenizer", "train_bpe"):
        from shapelm.data import tokenizer

        return getattr(tokenizer, name)
    if name == "check_data":
        from shapelm.data.choices import check_data

        return check_data
    if name in ("build_default_corpus", "default_documents"):
        from shapelm.data import corpus

        return getattr(corpus, name)
    raise AttributeError(name)


__all__ = [
    "TokenStore",
    "read_manifest",
    "write_token_dir",
    "global_order",
    "n_instances_for_tokens",
    "parse_tokens",
    "plan_slice",
    "slice_olmo",
    "load_olmo_config",
    "fetch_validation",
    "validation_sources",
    "PAPER_VAL_SETS",
    "load_tokenizer",
    "train_bpe",
    "build_default_corpus",
    "default_documents",
    "check_data",
]
