# Tables and figures beside the paper's printed values; rows not yet run show as pending.
import os
import re

from shapelm.results import artifacts as result_artifacts


def run_outputs(run):
    outs = [
        model_file(run),
        f"{run_results(run)}/ppl.json",
        f"{run_results(run)}/provenance.json",
    ]
    # `eval: {tasks: []}`: a run without downstream tasks (LWS)
    if EXP.run(run)["eval"].get("tasks", ["olmo"]):
        outs.append(f"{run_results(run)}/downstream.json")
    if run in LONGCTX_RUNS:
        outs += [
            f"{run_results(run)}/proofpile.json",
            f"{run_results(run)}/ruler.json",
        ]
    if run in NOVELTY_RUNS:
        outs.append(f"{run_results(run)}/novelty.json")
    if run in DEPTH_RUNS:
        outs.append(f"{run_results(run)}/{analysis_plan.DEPTH_FILE}")
    return outs


ALL_RUN_OUTPUTS = [p for r in RUNS for p in run_outputs(r)]
DECODE_OUTPUTS = [f"{RESULTS}/decode/decode.json"] if DECODE_RUNS else []
ARTIFACTS = result_artifacts(PLAN)
ARTIFACT_PATHS = [a["path"] for a in ARTIFACTS]


def _report_item(name):
    """The report's label of an artifact, which it sorts by: numbers zero-padded, so within a
    paper Table 2 comes before Table 10 ("table02" < "table10"), the paper's prefix dropped.
    """
    short = (
        name.split("_", 1)[1]
        if name.startswith(("hourglass_", "tapered_", "lws_"))
        else name
    )
    return re.sub(r"\d+", lambda m: f"{int(m.group()):02d}", short)


def _report(artifact):
    # Caption paths are relative to this rules file.
    return report(
        artifact["path"],
        caption=os.path.relpath(artifact["caption_path"], "workflow/rules"),
        category=artifact["category"],
        labels={"item": f"{_report_item(artifact['name'])} ({artifact['kind']})"},
    )


# The folders `shapelm results build` reads and writes (functions: folders of the job's files,
# not path prefixes to hard-code).
RESULTS_BUILD_DIRS = dict(
    results=lambda w: RESULTS,
    figures=lambda w: FIGURES,
    work=lambda w, input: os.path.dirname(input.plan),
)


rule results:
    """Every table (CSV, Markdown, LaTeX) and figure (PNG, PDF) of the three papers."""
    input:
        plan=f"{WORK}/plan.json",
        runs=ALL_RUN_OUTPUTS,
        decode=DECODE_OUTPUTS,
        novelty=NOVELTY_HF_OUTPUTS,
    output:
        [_report(a) if a.get("report", True) else a["path"] for a in ARTIFACTS],
    log:
        f"{LOGS}/results.log",
    localrule: True
    params:
        **RESULTS_BUILD_DIRS,
    shell:
        "shapelm results build {input.plan:q} --results-dir {params.results:q} "
        "--figures-dir {params.figures:q} --work-dir {params.work:q} > {log:q} 2>&1"
