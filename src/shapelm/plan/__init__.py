"""Planning: everything derived from an experiment config before anything runs.

    shapelm.plan.runs        run resolution: a run's scale, recipe and seed merged, its model config built
    shapelm.plan.experiment  an experiment loaded as the workflow plans it: validated, every run
                             resolved, checked across fields and for where its outputs go
    shapelm.plan.paths       where each experiment's and run's files live (work/, results/, paper_figures/)
    shapelm.plan.decode      the decode benchmark's pairs and baselines, and the tables reading its output
    shapelm.plan.build       the plan document (work/EXP/plan.json) built from a loaded experiment
    shapelm.plan.document    its one reader: `read_plan(path) -> Plan`
    shapelm.plan.jobs        the SLURM jobs: job shapes, training segments, resources, launch prefixes,
                             the run configs each training job reads
    shapelm.plan.cost        GPU-hours per table and stage (`shapelm cost`)

`paths`, `decode` and `document` import the standard library only (an experiment is read through
its `runs` and `raw` attributes), so `shapelm.results` reads them, and builds every table and
figure from a `Plan`, without importing config, model or accounting code.
"""
