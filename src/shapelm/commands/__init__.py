"""The front ends that read the plan or span stages: one module a command family.

A stage's own commands live in `STAGE/cli.py` (`shapelm data`, `train`, `eval`, `longctx`,
`analyze`); a command that reads an experiment's plan or crosses stages lives here (`results`,
`bench`, `shapes`/`solve`, `resolve`/`cost`, `recipe diff`, `cluster check`, `launch`, `rehearse`,
`fetch`), beside the workflow's config checks (`checks`) and Snakemake's strict config loader
(`yte_guard`). `shapelm.cli` lists them; nothing below this wing imports it.
"""
