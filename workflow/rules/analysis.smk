# Layer-wise novelty (Tapered Section 4, Figure 4): rho per layer of the final models of the runs
# whose `tables:` name the figure, and of the GPT-2 family where its weights are cached here.
import os
import re

from shapelm.plan import analyses as analysis_plan

NOVELTY_FIGURE = "tapered_fig4_novelty"
NOVELTY_RUNS = [r for r in RUNS if NOVELTY_FIGURE in EXP.run(r)["tables"]]
# The GPT-2 family, each model fetched by a `fetch` job (the tiny default and a rehearsal, which
# fetch nothing: the members already cached here).
NOVELTY_HF = planned_inputs.novelty_models(EXP)
NOVELTY_HF_OUTPUTS = [f"{RESULTS}/analysis/novelty/{m}.json" for m in NOVELTY_HF]


def novelty_text(manifests):
    """The validation set the paper's WikiText-2 maps to: the first one named *wiki*
    (default_wiki; wikitext_103, whose validation split is WikiText-2's), else the first.
    """
    wiki = [m for m in manifests if "wiki" in os.path.basename(os.path.dirname(m))]
    return (wiki or manifests)[:1]


rule novelty:
    input:
        model=lambda w: model_file(w.run),
        text=lambda w: novelty_text(val_data(w.run)),
    output:
        f"{RUN_RESULTS}/novelty.json",
    log:
        f"{LOGS}/runs/{{run}}/novelty.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/novelty.tsv"
    resources:
        **stage_resources("eval_ppl"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        text=lambda w, input: os.path.dirname(input.text[0]),
    shell:
        "shapelm analyze novelty {params.model_dir:q} --text {params.text:q} "
        "--out {output:q} > {log:q} 2>&1"


# A GPT-2 XL in float32 holds ~6 GB: at least 16 GB of host memory, whatever the CPU job size.
_HF_JOB = jobs.stage_job(EXP, None, "eval_ppl")["resources"]
NOVELTY_HF_JOB = {**_HF_JOB, "mem_mb": max(16000, int(_HF_JOB.get("mem_mb") or 0))}


rule novelty_hf:
    """A cached Hugging Face model on the experiment's wiki validation text, decoded with the
    experiment's tokenizer and re-encoded with the model's."""
    input:
        text=novelty_text(val_data(None)),
        tokenizer=[TOKENIZER] if DEFAULT_SOURCE else [],
        fetched=lambda w: fetched(
            planned_inputs.model_input(NOVELTY_HF[w.hf_model], "")
        )
        + fetched_tokenizer(TOKENIZER),
    output:
        f"{RESULTS}/analysis/novelty/{{hf_model}}.json",
    log:
        f"{LOGS}/analysis/novelty_{{hf_model}}.log",
    wildcard_constraints:
        hf_model="|".join(re.escape(m) for m in NOVELTY_HF) or "NONE",
    resources:
        **NOVELTY_HF_JOB,
    params:
        repo=lambda w: NOVELTY_HF[w.hf_model],
        text=lambda w, input: os.path.dirname(input.text[0]),
        tokenizer=tokenizer_of_job,
    shell:
        "shapelm analyze novelty {params.repo:q} --text {params.text:q} "
        "--text-tokenizer {params.tokenizer:q} --out {output:q} > {log:q} 2>&1"


# Depth analyses (residual-stream norm per layer, loss with each layer skipped) of the runs whose
# `tables:` name the depth table (shapelm.plan.analyses), on the same wiki text as novelty.
DEPTH_RUNS = analysis_plan.depth_runs({r: EXP.run(r)["tables"] for r in RUNS})


rule depth:
    input:
        model=lambda w: model_file(w.run),
        text=lambda w: novelty_text(val_data(w.run)),
    output:
        f"{RUN_RESULTS}/{analysis_plan.DEPTH_FILE}",
    log:
        f"{LOGS}/runs/{{run}}/depth.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/depth.tsv"
    resources:
        **stage_resources("eval_ppl"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        text=lambda w, input: os.path.dirname(input.text[0]),
        seq_len=lambda w: EXP.run(w.run)["eval"]["ppl_seq_len"],
    shell:
        "shapelm analyze depth {params.model_dir:q} --text {params.text:q} "
        "--seq-len {params.seq_len:q} --out {output:q} > {log:q} 2>&1"
