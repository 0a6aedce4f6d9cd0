"""The long-context stage at plan time: its settings with defaults, and `check_longctx`.

`longctx_settings(exp)` is the experiment's `longctx:` section with the paper's defaults filled in
(Peng et al.'s finetune, arXiv 2602.06471's evaluation); `run_lengths(exp, run)` the per-run context
lengths (YaRN's original length L0 is the run's pretraining `train.seq_len` unless
`longctx.original_length` says otherwise). The workflow rules and the checks read the same values.

`check_longctx(exp)` lists every problem of the long-context inputs and settings that would
otherwise surface hours into a job (`snakemake -n` reports them); it reads no data: a local input
is stat'ed (a directory listed), a hub input is looked up in the local HF cache only.
"""

from __future__ import annotations

from typing import Any, Callable

from shapelm.config import Experiment, section_defaults
from shapelm.longctx.inputs import INPUT_SPLITS
from shapelm.longctx.sources import input_problem

#: The paper's settings (docs/PAPER_NOTES.md protocol 9), kept as the schema's `default:` values of the
#: `longctx:` section (the loader fills them in; the section overrides them).
DEFAULTS: dict[str, Any] = section_defaults("longctx")

#: Below this many tokens RULER's templates and generation budgets (up to 128 tokens) leave no
#: room for most tasks: with 600- to 2,048-id tokenizers 10 of the 13 fail at 256, none at 512.
RULER_MIN_LENGTH = 512

#: The longest context at which cwe's built-in word lists (762 words) need no invented word, even for
#: a tokenizer that writes a list entry in one or two tokens (measured: 610 words at 8,192, 1,212 at
#: 16,384; tests/longctx/test_longctx_ruler_words.py). Longer ones are refused at plan time on those lists.
BUILTIN_WORDS_MAX_LENGTH = 8192

#: The input keys, and what reads them.
INPUTS = {
    "pg19": "the YaRN finetune's training text",
    "proofpile": "the Proof-pile perplexity documents",
    "essays": "RULER's essay haystack (niah_single_2/3, niah_multikey_1, niah_multivalue, niah_multiquery)",
    "squad": "RULER qa_1 (SQuAD v2 dev)",
    "hotpotqa": "RULER qa_2 (HotpotQA dev distractor)",
    "words": "RULER cwe's extra word list",
}


def ruler_tasks(settings: dict[str, Any]) -> list[str]:
    from shapelm.longctx.ruler.tasks import TASK_NAMES

    return list(settings.get("ruler_tasks") or TASK_NAMES)


def longctx_settings(exp: Experiment) -> dict[str, Any]:
    """The `longctx:` section over :data:`DEFAULTS` (`ruler_tasks` filled: all 13 by default)."""
    settings = {**DEFAULTS, **exp.section("longctx")}
    settings["ruler_tasks"] = ruler_tasks(settings)
    return settings


def run_lengths(exp: Experiment, run_name: str) -> dict[str, int | float]:
    """`original` (L0), `factor`, `target` (s x L0) and the finetune's `seq_len` of one run."""
    settings = longctx_settings(exp)
    original = int(settings.get("original_length") or exp.run(run_name)["train"]["seq_len"])
    factor = float(settings["factor"])
    target = int(round(factor * original))
    return {"original": original, "factor": factor, "target": target,
            "seq_len": int(settings.get("seq_len") or target)}


def needed_inputs(settings: dict[str, Any]) -> dict[str, str]:
    """{input key: what needs it} for the stages this config runs."""
    from shapelm.longctx.ruler.tasks import TASK_CONFIGS

    tasks = settings["ruler_tasks"]
    need = {"pg19": INPUTS["pg19"], "proofpile": INPUTS["proofpile"]}
    essay = [t for t in tasks if TASK_CONFIGS[t]["args"].get("type_haystack") == "essay"]
    if essay:
        need["essays"] = f"RULER's essay haystack ({', '.join(essay)})"
    if "qa_1" in tasks:
        need["squad"] = INPUTS["squad"]
    if "qa_2" in tasks:
        need["hotpotqa"] = INPUTS["hotpotqa"]
    return need


def substitutes_inputs(exp: Experiment) -> bool:
    """The default corpus stands in for missing inputs (the tiny default; docs/LONG_CONTEXT.md)."""
    return exp.section("data").get("source", "default") == "default"


def finetune_world_size(exp: Experiment, run_name: str) -> int:
    """Processes of the run's finetune job: `longctx.resources` over its pretraining resources
    (what shapelm.plan.jobs.stage_job sizes); one on CPU."""
    scale = exp.raw["scales"][exp.run(run_name)["scale"]]
    res = {**exp.raw.get("resources", {}), **scale.get("resources", {}),
           **(exp.section("longctx").get("resources") or {})}
    gpus = int(res.get("gpus", 0))
    return max(1, gpus) * int(res.get("nodes", 1)) if gpus else 1


def _runs(names: list[str]) -> str:
    return f"run{'s' if len(names) > 1 else ''} {', '.join(names)}"


def check_longctx(exp: Experiment, fetched_by_job: Callable[[Experiment, str, str], bool] | None = None
                  ) -> list[str]:
    """Errors (each naming its key and the `longctx: true` runs concerned); [] when all is well.
    `fetched_by_job(exp, key, spec)` says whether a `fetch` job stands for an input
    (shapelm.plan.inputs.fetched_by_job, passed in by the plan-time checks above this layer): such an
    input is not looked for yet."""
    runs = [r for r in exp.runs if exp.run(r)["longctx"]]
    if not runs:
        return []
    settings = longctx_settings(exp)
    who = _runs(runs)
    errors = _input_errors(exp, settings, who, fetched_by_job or (lambda *_: False))
    factor = float(settings["factor"])
    if factor <= 1:
        errors.append(f"longctx.factor: {factor:g} must be > 1 (YaRN extends the context s-fold; {who})")
    for run in runs:
        errors += _length_errors(exp, settings, run)
    short = [L for L in settings["lengths"] if int(L) < RULER_MIN_LENGTH]
    if short:
        errors.append(
            f"longctx.lengths: {short} are below {RULER_MIN_LENGTH} tokens, where RULER's templates and "
            f"generation budgets (128 tokens for niah) leave no room for most tasks ({who})"
        )
    longest = max(settings["lengths"])
    if ("cwe" in settings["ruler_tasks"] and settings["ruler_word_lists"] == "builtin" and not settings.get("words")
            and int(longest) > BUILTIN_WORDS_MAX_LENGTH):
        errors.append(
            f"longctx.ruler_word_lists: builtin holds cwe up to {BUILTIN_WORDS_MAX_LENGTH} tokens; at {longest} it "
            "would list invented pseudo-words: set it to wonderwords (NVIDIA's RULER lists) or give longctx.words "
            f"({who})"
        )
    if int(settings["proofpile_min_tokens"]) < longest:
        errors.append(
            f"longctx.proofpile_min_tokens: {settings['proofpile_min_tokens']} is below the longest of "
            f"longctx.lengths ({longest}): each document is scored at its first L tokens ({who})"
        )
    for run in runs:
        world = finetune_world_size(exp, run)
        per_pass = int(settings["micro_batch"]) * world
        if int(settings["finetune_batch"]) % per_pass:
            errors.append(
                f"longctx.finetune_batch: {settings['finetune_batch']} segments are not divisible by "
                f"longctx.micro_batch {settings['micro_batch']} x {world} processes of the finetune job "
                f"(longctx.resources) of run {run}"
            )
    return errors



def _input_errors(exp: Experiment, settings: dict[str, Any], who: str,
                  fetched_by_job: Callable[[Experiment, str, str], bool]) -> list[str]:
    errors = []
    need = needed_inputs(settings)
    optional = substitutes_inputs(exp)
    for key in INPUTS:
        spec = settings.get(key)
        if not spec:
            if key in need and not optional:
                errors.append(f"longctx.{key}: not set; {who} (longctx: true) need it for {need[key]}")
            continue
        if key not in need and key != "words":
            continue  # given but unused (e.g. squad with qa_1 left out of ruler_tasks)
        if fetched_by_job(exp, key, spec):
            continue  # a `fetch` job gets it, or says in one line why it cannot (shapelm.commands.fetch)
        problem = input_problem(spec, INPUT_SPLITS.get(key))  # a hub miss names the caches searched
        if problem:
            errors.append(f"longctx.{key}: {problem}; needed by {who} for {need.get(key, INPUTS[key])}")
    return errors


def _length_errors(exp: Experiment, settings: dict[str, Any], run: str) -> list[str]:
    lens = run_lengths(exp, run)
    errors = []
    pretrain = int(exp.run(run)["train"]["seq_len"])
    if lens["original"] > pretrain:
        errors.append(
            f"longctx.original_length: {lens['original']} exceeds run {run}'s pretraining "
            f"train.seq_len {pretrain} (YaRN's L0 is the context the model was trained at)"
        )
    over = [L for L in settings["lengths"] if int(L) > lens["target"]]
    if over:
        errors.append(
            f"longctx.lengths: {over} exceed run {run}'s extended context original_length "
            f"{lens['original']} x factor {lens['factor']:g} = {lens['target']}"
        )
    if not 2 <= lens["seq_len"] <= lens["target"]:
        errors.append(
            f"longctx.seq_len: {lens['seq_len']} must lie in [2, {lens['target']}] (run {run}'s "
            f"original_length {lens['original']} x factor {lens['factor']:g})"
        )
    return errors
