# The fetch stage: every external input of the experiment (tokenizers, PG19, Proof-pile, RULER's
# files, lm-eval's task datasets, the GPT-2 family; listed by shapelm.plan.inputs) as one `fetch`
# job (`shapelm fetch`), run on the host running Snakemake (where the network is) into the HF cache the jobs read offline.
# Each job that reads an input depends on its record, so nothing reads an input not fetched;
# the tiny default and a rehearsal have no fetch jobs (their inputs are made here).
import re

from shapelm.plan import inputs as planned_inputs

FETCH_INPUTS = planned_inputs.experiment_inputs(EXP)


def fetched(*inputs):
    """The records of the fetch jobs of `inputs` (Input objects or None), for a rule's `input:`."""
    return [
        str(planned_inputs.record_path(WORK, i))
        for i in inputs
        if i is not None and i.name in FETCH_INPUTS
    ]


def fetched_tokenizer(spec, who="a job"):
    return fetched(planned_inputs.tokenizer_input(spec, who))


rule fetch:
    """One external input into the local HF cache (huggingface_hub / datasets); a gated
    repository without a token, or HF_HUB_OFFLINE=1 with the input not cached, is one line.
    """
    output:
        f"{WORK}/inputs/{{input}}.json",
    log:
        f"{LOGS}/inputs/{{input}}.log",
    wildcard_constraints:
        input="|".join(re.escape(n) for n in FETCH_INPUTS) or "NONE",
    localrule: True
    params:
        args=lambda w: FETCH_INPUTS[w.input].args(),
    shell:
        "shapelm fetch {params.args:q} --out {output:q} 2>&1 | tee {log:q}"


rule inputs:
    """Every external input of the experiment, fetched (`snakemake --profile slurm inputs`, on
    the login node: fetch jobs are local rules)."""
    input:
        [str(planned_inputs.record_path(WORK, name)) for name in FETCH_INPUTS],
    localrule: True
