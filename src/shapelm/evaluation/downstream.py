"""`shapelm eval downstream`: lm-eval's simple_evaluate on shapelm's tasks, flattened to the
paper's metrics per task plus Avg Acc and Avg PPL as Table 7 computes them.

* Avg Acc: mean of the primary metric (acc or acc_norm) over the accuracy tasks present;
* Avg PPL: mean of OLMo's ce_loss over the ce tasks present (TriviaQA, NQ), no exp
  (the paper's 1.524 = (1.645 + 1.404) / 2).

Word/byte perplexities (WikiText) and LAMBADA's ppl are reported per task, outside both means.
lm-eval's own output (per-task configs, versions, sample counts, standard errors) and its
samples are saved beside the summary (``save_lm_eval_output``). Standard errors: lm-eval's
analytic one for mean metrics (acc, acc_norm, ce_loss), a bootstrap of ``bootstrap_iters`` for
perplexities (LAMBADA); none for WikiText's weighted perplexities.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

from shapelm import files
from shapelm.evaluation.loading import EvalError
from shapelm.evaluation.standins import is_standin
from shapelm.evaluation.tasks import SPECS, expand_task_names, spec_for, write_tasks
from shapelm.records import DownstreamRecord

log = logging.getLogger(__name__)


def _primary(spec, vals: dict) -> tuple[str, str]:
    """(metric, kind) of a task: its spec's, or for another stock task its accuracy if reported."""
    if spec.primary:
        return spec.primary, spec.kind
    for metric in ("acc_norm", "acc"):
        if metric in vals:
            return metric, "acc"
    first = next((m for m in vals if not m.endswith("_stderr")), None)
    if first is None:
        raise EvalError(f"task {spec.name}: lm-eval reported no metric")
    return first, "ppl"


def flatten_results(results: dict, task_names: list[str], lm_names: list[str] | None = None) -> dict:
    """lm-eval's ``results`` -> {"metrics": {task: primary}, "details": ..., averages};
    ``lm_names``: the names lm-eval ran the tasks under (``piqa_standin``), in the same order."""
    per_task = results.get("results", {})
    details: dict[str, dict] = {}
    metrics: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for name, lm_name in zip(task_names, lm_names or [spec_for(n).lm_eval_name for n in task_names]):
        spec = spec_for(name)
        raw = per_task.get(lm_name)
        if raw is None:
            raise EvalError(f"lm-eval returned no result for task {lm_name}")
        vals = {}
        for key, value in raw.items():
            metric, _, filt = key.partition(",")
            if filt and not metric.endswith("_stderr") and isinstance(value, (int, float)):
                vals[metric] = float(value)
                se = raw.get(f"{metric}_stderr,{filt}")
                if isinstance(se, (int, float)):
                    vals[metric + "_stderr"] = float(se)
        primary, kinds[name] = _primary(spec, vals)
        if primary not in vals:
            raise EvalError(f"task {name}: metric {primary} missing from lm-eval output {sorted(vals)}")
        n = results.get("n-samples", {}).get(lm_name, {})
        details[name] = {"primary": primary, "kind": kinds[name], "lm_eval_task": lm_name,
                         "n": n.get("effective"), **vals}
        metrics[name] = vals[primary]
        if name == "lambada" and "perplexity" in vals:
            metrics["lambada_ppl"] = vals["perplexity"]
    acc_tasks = [n for n in task_names if kinds[n] == "acc"]
    ce_tasks = [n for n in task_names if kinds[n] == "ce"]
    acc = [metrics[n] for n in acc_tasks]
    ce = [metrics[n] for n in ce_tasks]
    summary = {
        "Avg Acc": sum(acc) / len(acc) if acc else None,
        "Avg PPL": sum(ce) / len(ce) if ce else None,
        "acc_tasks": acc_tasks,
        "ce_tasks": ce_tasks,
    }
    return {"metrics": metrics, **summary, "details": details}


def save_lm_eval_output(results: dict, out_dir: str | os.PathLike) -> list[Path]:
    """lm-eval's own results (``results.json``: configs, versions, n-samples, stderr) and its
    per-task samples (``samples_<task>.jsonl``), written as its ``--output_path`` would."""
    from lm_eval.utils import handle_non_serializable

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    body = {k: v for k, v in results.items() if k != "samples"}
    path = out / "results.json"
    files.write_json(path, body, default=handle_non_serializable, ensure_ascii=False, newline=False)
    written.append(path)
    for task, samples in (results.get("samples") or {}).items():
        path = out / f"samples_{task}.jsonl"
        with files.atomic_open(path) as f:
            f.writelines(json.dumps(sample, default=handle_non_serializable, ensure_ascii=False) + "\n" for sample in samples)
        written.append(path)
    return written


def run_downstream(
    lm,
    tasks: list[str],
    task_data: dict[str, str] | None = None,
    tasks_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    log_samples: bool = False,
    bootstrap_iters: int = 1000,
) -> tuple[dict, dict]:
    """Write the task YAMLs, run lm-eval on ``lm`` (an ``LM`` or model name), flatten.

    ``bootstrap_iters`` only matters for perplexity metrics (mean metrics get lm-eval's analytic
    standard error whatever it is, as long as it is > 0); 0 switches standard errors off.
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    names = expand_task_names(tasks)
    tmp = None
    if tasks_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="shapelm-tasks-")
        tasks_dir = tmp.name
    try:
        lm_names = write_tasks(tasks_dir, names, task_data)
        # lm-eval's own task directory is indexed only when a task runs from it unchanged
        tm = TaskManager(include_path=str(tasks_dir), include_defaults=any(n not in SPECS for n in names))
        t0 = time.time()
        results = lm_eval.simple_evaluate(
            model=lm, tasks=lm_names, task_manager=tm, limit=limit, log_samples=log_samples,
            num_fewshot=0, bootstrap_iters=bootstrap_iters,
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    flat = flatten_results(results, names, lm_names)
    flat["seconds"] = round(time.time() - t0, 3)
    return flat, results


def lm_eval_output_dir(out: str | os.PathLike) -> Path:
    """Where lm-eval's own results go for a summary at ``out``: ``downstream.json`` ->
    ``downstream_lm_eval/``."""
    out = Path(out)
    return out.with_name(out.stem + "_lm_eval")


def run_downstream_cli(args) -> int:
    from shapelm.evaluation.lm_eval_model import ShapelmLM
    from shapelm.evaluation.tasks import parse_task_data

    task_data = parse_task_data(args.task_data)
    names = expand_task_names(args.tasks)
    lm = ShapelmLM(pretrained=args.model, tokenizer=args.tokenizer, device=args.device,
                   dtype=args.dtype, batch_size=args.batch_size, max_length=args.max_length)
    flat, raw = run_downstream(lm, names, task_data, tasks_dir=args.tasks_dir, limit=args.limit,
                               log_samples=not args.no_samples, bootstrap_iters=args.bootstrap_iters)
    lm_eval_dir = Path(args.lm_eval_output) if args.lm_eval_output else lm_eval_output_dir(args.out)
    save_lm_eval_output(raw, lm_eval_dir)
    flat = {"model": str(args.model), "tokenizer": str(args.tokenizer), "tasks": names,
            "task_data": {n: task_data.get(n, spec_for(n).hub or spec_for(n).lm_eval_name) for n in names},
            "standin_tasks": [n for n in names if is_standin(task_data.get(n))],
            "lm_eval_output": str(lm_eval_dir), **flat}
    DownstreamRecord.from_dict(flat, args.out).write(args.out)
    for name, value in flat["metrics"].items():
        se = flat["details"].get(name, {}).get(flat["details"].get(name, {}).get("primary", "") + "_stderr")
        print(f"{name:<16} {value:.4f}" + (f" ± {se:.4f}" if se is not None else ""))
    for key in ("Avg Acc", "Avg PPL"):
        if flat[key] is not None:
            print(f"{key:<16} {flat[key]:.4f}")
    print(f"-> {Path(args.out)} (lm-eval's results and samples: {lm_eval_dir})")
    return 0
