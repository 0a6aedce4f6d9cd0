"""Evaluation: held-out perplexity, the lm-eval model, downstream tasks, Hugging Face export.

Modules: `metrics` (definitions), `ppl` (`shapelm eval ppl`), `lm_eval_model` (`ShapelmLM`,
registered in lm-eval as "shapelm"), `lm_eval_cli` (`shapelm-lm-eval`: lm-eval's command line with it registered),
`tasks` (task YAML templates and writer), `make_tasks` (tasks cut from held-out text),
`downstream` (`shapelm eval downstream`), `export_hf` (`shapelm export-hf`), `kv_cache`.
Heavy imports (lm_eval, transformers) happen inside the modules that need them.
"""
