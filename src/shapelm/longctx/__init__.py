"""Long-context extension and evaluation (arXiv 2602.06471 section 4.6; docs/PAPER_NOTES.md protocol 9).

* :mod:`~shapelm.longctx.finetune`: YaRN context-extension finetuning (Peng et al. recipe),
  FSDP over one process per GPU, resumable, preemptible, vocabulary-chunked loss, per-block
  activation checkpointing.
* :mod:`~shapelm.longctx.proofpile`: Proof-pile perplexity at several lengths, one window per
  document, PPL = exp(mean over documents of the per-document mean NLL).
* :mod:`~shapelm.longctx.ruler`: offline generator and scorer for RULER's 13 synthetic tasks.
* :mod:`~shapelm.model.generate`: greedy decoding with a KV cache.
* :mod:`~shapelm.longctx.inputs`: PG19 / Proof-pile / RULER inputs as local paths or dataset
  repos in the local HF cache; :mod:`~shapelm.longctx.plan`: settings and ``check_longctx``;
  :mod:`~shapelm.longctx.rehearsal`: small inputs in the real formats.

The long-context table and figure are the results' ``hourglass_longctx`` (shapelm.results);
this package writes the per-run proofpile.json and ruler.json they read. See docs/LONG_CONTEXT.md.
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
        from shapelm.model.generate import greedy_generate

        return greedy_generate
    raise AttributeError(name)


__all__ = [
    "yarn_scaling",
    "yarn_finetune",
    "FinetuneConfig",
    "proofpile_perplexity",
    "load_documents",
    "greedy_generate",
]
