"""TEST FIXTURES ONLY: fabricated per-run result files for the results tests.

Every number written here is invented (a deterministic function of the run name) so that tests
can check that values flow into the tables; none of it is a measurement.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

SETS = ["dolma_common-crawl", "dolma_stack", "m2d2_s2orc", "wikitext_103"]
TASKS = {"arc_easy": "acc", "hellaswag": "acc", "piqa": "acc", "sciq": "acc", "commonsense_qa": "acc",
         "trivia_qa": "ce", "natural_qs": "ce"}


def jitter(name: str, salt: str = "") -> float:
    """A fake but deterministic number in [0, 1) for a run."""
    h = hashlib.sha256((name + salt).encode()).hexdigest()
    return int(h[:8], 16) / 2**32


def fake_ppl(run: str) -> dict:
    sets = {}
    for i, s in enumerate(SETS):
        loss = 2.0 + 0.5 * i + 0.1 * jitter(run, s)
        sets[s] = {"path": f"/fake/{s}", "n_instances": 10, "n_tokens": 40950, "loss": loss, "ppl": math.exp(loss)}
    losses = [v["loss"] for v in sets.values()]
    agg = {"val_loss": sum(losses) / 4, "val_ppl": sum(math.exp(x) for x in losses) / 4,
           "exp_mean_loss": math.exp(sum(losses) / 4), "n_sets": 4}
    return {"model": "FAKE", "seq_len": 4096, "sets": sets, "aggregate": agg}


def fake_downstream(run: str, avg_acc: float | None = None) -> dict:
    metrics = {t: (0.4 + 0.3 * jitter(run, t) if k == "acc" else 1.0 + jitter(run, t)) for t, k in TASKS.items()}
    acc = [metrics[t] for t, k in TASKS.items() if k == "acc"]
    if avg_acc is not None:  # shift the accuracies so that their mean is avg_acc
        shift = avg_acc - sum(acc) / len(acc)
        for t, k in TASKS.items():
            if k == "acc":
                metrics[t] += shift
        acc = [metrics[t] for t, k in TASKS.items() if k == "acc"]
    ce = [metrics[t] for t, k in TASKS.items() if k == "ce"]
    return {"model": "FAKE", "metrics": metrics, "Avg Acc": sum(acc) / len(acc), "Avg PPL": sum(ce) / len(ce),
            "acc_tasks": [t for t, k in TASKS.items() if k == "acc"], "details": {}}


def fake_val(run: str, step: int, batch_tokens: int, frac: float) -> dict:
    """A "val" record of metrics.jsonl (evaluation during training) at `frac` of training."""
    def part(salt: str, base: float) -> dict:
        loss = base + 1.0 / (1.0 + 5 * frac) + 0.05 * jitter(run, salt)
        return {"loss": loss, "ppl": math.exp(loss), "n_instances": 8, "n_tokens": 8 * 4095}
    sets = {s: part(s, 2.0 + 0.5 * i) for i, s in enumerate(SETS)}
    losses = [v["loss"] for v in sets.values()]
    return {"kind": "val", "step": step, "tokens": step * batch_tokens, "train_heldout": part("id", 2.2),
            "sets": sets, "aggregate": {"val_loss": sum(losses) / 4,
                                        "val_ppl": sum(math.exp(x) for x in losses) / 4,
                                        "exp_mean_loss": math.exp(sum(losses) / 4), "n_sets": 4}}


def write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def fabricate(exp, results_dir: Path, work_dir: Path, runs=None) -> None:
    """Fake ppl/downstream JSONs for `runs` (default: every run), long-context and decode files,
    and metrics.jsonl curves."""
    from shapelm.config import run_recipe
    from shapelm.plan.build import load_plan
    from shapelm.results.context import Context

    ctx = Context(load_plan(exp), results_dir, work_dir)
    runs = list(exp.runs) if runs is None else runs
    for run in runs:
        write(results_dir / "runs" / run / "ppl.json", fake_ppl(run))
        write(results_dir / "runs" / run / "downstream.json", fake_downstream(run))
        if exp.runs[run].get("longctx"):
            lengths = [4096, 8192, 16384, 32768, 65536]
            write(results_dir / "runs" / run / "proofpile.json",
                  {"lengths": lengths, "ppl": {str(L): 3 + 0.1 * i + jitter(run) for i, L in enumerate(lengths)}})
            write(results_dir / "runs" / run / "ruler.json",
                  {"lengths": lengths, "scores": {str(L): {"niah_single_1": 90 - 5 * i, "mean": 90 - 5 * i - jitter(run)}
                                                  for i, L in enumerate(lengths)}})
        recs = [{"step": s, "loss": 10 * (s + 1) ** -0.3 + jitter(run),
                 "tokens_per_s": 1000.0 * (1 + jitter(run, f"tps{s}")), "mfu": None,
                 "ce_loss": 10 * (s + 1) ** -0.3 + jitter(run) - 1e-3} for s in range(0, 200, 10)]
        total, bt = run_recipe(exp.runs[run]).total_steps, exp.runs[run]["train"]["batch_tokens"]
        recs += [fake_val(run, max(1, round(total * k / 10)), bt, k / 10) for k in range(1, 11)]
        p = work_dir / "runs" / run / "metrics.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 999, "lo')  # torn last line
    rows = []
    for scale, (conv, hg) in ctx.decode_pairs.items():
        for mixer in ("mha", "gqa", "mla"):
            for L in (4096, 8192, 16384, 32768, 65536, 131072):
                lc = 1.0 + exp.runs[conv]["model"]["d_model"] * 1e-4 * L / 4096
                for run, lat in ((conv, lc), (hg, 0.2 + lc * ctx.acc(hg)["n_attn_layers"] / ctx.acc(conv)["n_attn_layers"])):
                    rows.append({"mixer": mixer, "length": L, "run": run, "latency_ms_median": lat,
                                 "latency_ms_min": lat, "kv_bytes": 1, "n_attention_layers": ctx.acc(run)["n_attn_layers"]})
    for run, base in ctx.decode_baselines.items():  # the Tapered backbones against the Transformer
        for L in (4096, 65536):
            for name, lat, state in ((base, 1.0, 0), (run, 2.0 + L / 65536, 1000 + len(run))):
                rows.append({"mixer": "native", "length": L, "run": name, "latency_ms_median": lat,
                             "kv_bytes": L, "state_bytes": state, "state_bytes_predicted": state})
    write(results_dir / "decode" / "decode.json", {"rows": rows, "comparisons": [], "meta": {"device": "FAKE"}})


def fabricated_context(config: str, base: Path, runs=None):
    """A results Context of configs/<config>.yaml whose runs (or `runs` of them) have fabricated
    result files under `base`."""
    from shapelm.plan.build import load_plan
    from shapelm.plan.experiment import load_experiment
    from shapelm.results.context import Context

    exp = load_experiment(Path(__file__).resolve().parents[1] / "configs" / f"{config}.yaml")
    fabricate(exp, base / "results", base / "work", runs=runs(exp) if callable(runs) else runs)
    return Context(load_plan(exp), base / "results", base / "work")
