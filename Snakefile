# shapelm: every table and figure of the three papers from one DAG.
#   snakemake --cores 2                      tiny default on CPU (configs/default.yaml)
#   snakemake --profile slurm                the papers at full scale (configs/paper.yaml)
#   snakemake --profile slurm scale_906M     one scale;   table_hourglass_table2: one table;
#   snakemake --profile slurm run_hg906m_hg  one run (train + every evaluation of it)
# Rules only call `shapelm` entry points; the logic lives in src/shapelm and is unit-tested.

# The tiny default unless a config is given: --configfile replaces it (several files given
# are merged in order, a later file's keys winning).
if not config:

    configfile: "configs/default.yaml"


# `snakemake --lint` reports two kinds of item on purpose (tests/test_rules.py allows only these):
#  * "Specify a conda environment or container for each rule": every rule calls the `shapelm`
#    CLI of the one environment running Snakemake, pinned by requirements.lock (envs/README.md;
#    envs/cluster.yaml for conda sites), not a copy of it per rule.
#  * "Mixed rules and functions in same snakefile": each rules file keeps the input functions
#    of its rules beside them (which token directory a run reads, which segment comes before).
# The HTML report's first page (`snakemake --report report.html`): what the workflow does.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/signals.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/longctx.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/results.smk"
include: "workflow/rules/recipes.smk"
include: "workflow/rules/targets.smk"


rule all:
    """Every table and figure of the experiment (the default target)."""
    default_target: True
    input:
        ARTIFACT_PATHS,
        RECIPE_DIFF_OUTPUTS,
        # the merged config a run of the workflow used (no rule reads it: they read the plan)
        rules.experiment_config.output,
        [hf_export_dir(r) for r in RUNS],


# `shapelm cluster check-submit` asks sbatch about every job the executor would submit: it
# needs to know which rules run on the submit host instead.
if os.environ.get("SHAPELM_PRINT_LOCALRULES"):
    print("shapelm-localrules:", " ".join(sorted(workflow._localrules)))
