"""Long-context extension and evaluation (seed 000 section 4.6; PROTOCOLS.md section 9).

* :mod:`~shapelm.longctx.finetune`: YaRN context-extension finetuning (Peng et al. recipe),
  resumable, vocabulary-chunked loss, per-block activation checkpointing.
* :mod:`~shapelm.longctx.proofpile`: Proof-pile perplexity at several lengths, one window per
  document, PPL = exp(mean over documents of the per-document mean NLL).
* :mod:`~shapelm.longctx.ruler`: offline generator and scorer for RULER's 13 synthetic tasks.
* :mod:`~shapelm.longctx.generate`: greedy decoding with a KV cache.
* :mod:`~shapelm.longctx.report`: the long-context table and figure.

See docs/LONG_CONTEXT.md.
"""

from shapelm.longctx.yarn import yarn_scaling


def __getattr__(name):  # lazy: keep `import shapelm.longctx` cheap
    if name in ("yarn_finetune", "FinetuneConfig"):
        from shapelm.longctx import finetune

        return getattr(finetune, name)
    if name in ("proofpile_perplexity", "load_documents"):
        from shapelm.longctx import proofpile, sources

        return getattr(proofpile if name == "proofpile_perplexity" else sources, name)
    if name == "greedy_generate":
        from shapelm.longctx.generate import greedy_generate

        return greedy_generate
    if name == "write_longctx_report":
        from shapelm.longctx.report import write_longctx_report

        return write_longctx_report
    raise AttributeError(name)


__all__ = [
    "yarn_scaling",
    "yarn_finetune",
    "FinetuneConfig",
    "proofpile_perplexity",
    "load_documents",
    "greedy_generate",
    "write_longctx_report",
]
