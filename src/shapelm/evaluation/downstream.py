"""`shapelm eval downstream`: lm-eval's simple_evaluate on shapelm's tasks, flattened to the
paper's metrics per task plus Avg Acc and Avg PPL as Table 7 computes them.

* Avg Acc: mean of the primary metric (acc or len_norm) over the accuracy tasks present;
* Avg PPL: mean of OLMo's ce_loss over the ce tasks present (TriviaQA, NQ), no exp
  (the paper's 1.524 = (1.645 + 1.404) / 2).

Word/byte perplexities (WikiText) and LAMBADA's ppl are reported per task, outside both means.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

from shapelm.evaluation.loading import EvalError, atomic_write_json
from shapelm.evaluation.tasks import PREFIX, SPECS, expand_task_names, write_tasks

log = logging.getLogger(__name__)


def flatten_results(results: dict, task_names: list[str]) -> dict:
    """lm-eval's ``results`` -> {"metrics": {task: primary}, "details": ..., averages}."""
    per_task = results.get("results", {})
    details: dict[str, dict] = {}
    metrics: dict[str, float] = {}
    for name in task_names:
        raw = per_task.get(PREFIX + name)
        if raw is None:
            raise EvalError(f"lm-eval returned no result for task {PREFIX + name}")
        vals = {}
        for key, value in raw.items():
            metric, _, filt = key.partition(",")
            if filt and not metric.endswith("_stderr") and isinstance(value, (int, float)):
                vals[metric] = float(value)
                se = raw.get(f"{metric}_stderr,{filt}")
                if isinstance(se, (int, float)):
                    vals[metric + "_stderr"] = float(se)
        spec = SPECS[name]
        if spec.primary not in vals:
            raise EvalError(f"task {name}: metric {spec.primary} missing from lm-eval output {sorted(vals)}")
        n = results.get("n-samples", {}).get(PREFIX + name, {})
        details[name] = {"primary": spec.primary, "kind": spec.kind, "n": n.get("effective"), **vals}
        metrics[name] = vals[spec.primary]
        if name == "lambada" and "ppl" in vals:
            metrics["lambada_ppl"] = vals["ppl"]
    acc = [metrics[n] for n in task_names if SPECS[n].kind == "acc"]
    ce = [metrics[n] for n in task_names if SPECS[n].kind == "ce"]
    summary = {
        "Avg Acc": sum(acc) / len(acc) if acc else None,
        "Avg PPL": sum(ce) / len(ce) if ce else None,
        "acc_tasks": [n for n in task_names if SPECS[n].kind == "acc"],
        "ce_tasks": [n for n in task_names if SPECS[n].kind == "ce"],
    }
    return {"metrics": metrics, **summary, "details": details}


def run_downstream(
    lm,
    tasks: list[str],
    task_data: dict[str, str] | None = None,
    tasks_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    log_samples: bool = False,
) -> tuple[dict, dict]:
    """Write the task YAMLs, run lm-eval on ``lm`` (an ``LM`` or model name), flatten."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    names = expand_task_names(tasks)
    tmp = None
    if tasks_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="shapelm-tasks-")
        tasks_dir = tmp.name
    try:
        lm_names = write_tasks(tasks_dir, names, task_data)
        tm = TaskManager(include_path=str(tasks_dir), include_defaults=False)
        t0 = time.time()
        results = lm_eval.simple_evaluate(
            model=lm, tasks=lm_names, task_manager=tm, limit=limit, log_samples=log_samples,
            num_fewshot=0, bootstrap_iters=0,
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    flat = flatten_results(results, names)
    flat["seconds"] = round(time.time() - t0, 3)
    return flat, results


def run_downstream_cli(args) -> int:
    from shapelm.evaluation.lm_eval_model import ShapelmLM
    from shapelm.evaluation.tasks import parse_task_data

    task_data = parse_task_data(args.task_data)
    names = expand_task_names(args.tasks)
    lm = ShapelmLM(pretrained=args.model, tokenizer=args.tokenizer, device=args.device,
                   dtype=args.dtype, batch_size=args.batch_size, max_length=args.max_length)
    flat, _ = run_downstream(lm, names, task_data, tasks_dir=args.tasks_dir, limit=args.limit)
    flat = {"model": str(args.model), "tokenizer": str(args.tokenizer), "tasks": names,
            "task_data": {n: task_data.get(n, SPECS[n].hub) for n in names}, **flat}
    atomic_write_json(args.out, flat)
    for name, value in flat["metrics"].items():
        print(f"{name:<16} {value:.4f}")
    for key in ("Avg Acc", "Avg PPL"):
        if flat[key] is not None:
            print(f"{key:<16} {flat[key]:.4f}")
    print(f"-> {Path(args.out)}")
    return 0
