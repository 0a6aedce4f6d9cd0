# The fetch stage (shapelm.commands.fetch): every external input of the experiment (tokenizers, PG19,
# Proof-pile, RULER's files, lm-eval's task datasets, the GPT-2 family) as one `fetch` job, run
# on the host running Snakemake (where the network is) into the HF cache the jobs read offline.
# Each job that reads an input depends on its record, so nothing reads an input not fetched;
# the tiny default and a rehearsal have no fetch jobs (their inputs are made here).
import re

from shapelm.commands import fetch as fetch_stage

FETCH_INPUTS = fetch_stage.experiment_inputs(EXP)


def fetched(*inputs):
    """The records of the fetch jobs of `inputs` (Input objects or None), for a rule's `input:`."""
    return [
        str(fetch_stage.record_path(WORK, i))
        for i in inputs
        if i is not None and i.name in FETCH_INPUTS
    ]


def fetched_tokenizer(spec, who="a job"):
    return fetched(fetch_stage.tokenizer_input(spec, who))


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
        [str(fetch_stage.record_path(WORK, name)) for name in FETCH_INPUTS],
    localrule: True
