# Named targets: all, one scale (scale_906M), one table (table_hourglass_table2), one run (run_hg906m_hg).


for _scale in EXP.raw["scales"]:

    rule:
        name:
            f"scale_{_scale}"
        input:
            [p for r in EXP.runs_for(scale=_scale) for p in run_outputs(r)],
            [hf_export_dir(r) for r in EXP.runs_for(scale=_scale)],
        localrule: True


_TABLES = sorted({t for r in RUNS for t in EXP.run(r)["tables"]})
for _table in _TABLES:

    rule:
        name:
            f"table_{_table}"
        input:
            plan=f"{WORK}/plan.json",
            runs=[p for r in EXP.runs_for(table=_table) for p in run_outputs(r)],
            decode=DECODE_OUTPUTS if _table in decode_plan.DECODE_READERS else [],
            analysis=NOVELTY_HF_OUTPUTS if _table == NOVELTY_FIGURE else [],
        output:
            touch(f"{RESULTS}/.targets/table_{_table}.done"),
        log:
            f"{LOGS}/table_{_table}.log",
        localrule: True
        params:
            **RESULTS_BUILD_DIRS,
            table=_table,
        shell:
            "shapelm results build {input.plan:q} --only {params.table:q} "
            "--results-dir {params.results:q} --figures-dir {params.figures:q} "
            "--work-dir {params.work:q} > {log:q} 2>&1"


for _run in RUNS:

    rule:
        name:
            f"run_{_run}"
        input:
            run_outputs(_run),
            hf_export_dir(_run),
        localrule: True
