"""Planning: everything derived from an experiment config before anything runs.

    shapelm.plan.paths   where each experiment's and run's files live (work/, results/, paper_figures/)
    shapelm.plan.decode  the decode benchmark's pairs and baselines, and the tables that read its output

The submodules import the standard library only (an experiment is read through its `runs` and
`raw` attributes), so `shapelm.results` may read them without importing config, model or
accounting code. Job shapes, segments and resources are planned in `shapelm.workflow`.
"""
