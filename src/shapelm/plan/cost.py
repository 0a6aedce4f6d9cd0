"""GPU-hours of an experiment, every stage counted (`shapelm cost`): training FLOPs at each
scale's measured MFU (benchmarks/gpu_check.py's files in benchmarks/results) or its assumed one,
evaluation and decode at their jobs' requested GPU time (`shapelm.plan.jobs.STAGE_RUNTIME_MIN`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shapelm.shapes.accounting import flops_per_token
from shapelm.config import Experiment
from shapelm.model.config import run_model_config
from shapelm.plan.jobs import STAGE_RUNTIME_MIN, run_resources, total_train_flops

#: Where benchmarks/gpu_check.py writes its measurements (one JSON file per GPU and run).
MEASUREMENTS_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
#: benchmarks/mixer_throughput.py on the CPU: each mixer's FLOP rate relative to softmax
#: attention's, the assumption for Titans / Hope runs until gpu_check measures it on a GPU.
MIXER_CPU_BENCHMARK = MEASUREMENTS_DIR / "mixer_throughput-cpu.json"
#: The gpu_check JSON layout this reader understands (benchmarks/gpu_check.py SCHEMA).
GPU_CHECK_SCHEMA = 2

#: The stages counted, in pipeline order. Compute-counted ones are FLOPs at the scale's MFU; the
#: others are their jobs' requested GPU time (STAGE_RUNTIME_MIN: evaluation and decode latency
#: are short, latency-bound jobs that FLOPs do not describe).
COST_STAGES = ("pretraining", "yarn_finetune", "evaluation", "proofpile", "ruler", "decode")


def gpu_check_rows(directory: str | os.PathLike | None = None) -> list[tuple[dict[str, Any], str, str]]:
    """(row, gpu, file name) of every measured (status ok) row of the GPU runs of
    benchmarks/gpu_check.py in `directory`, files in name order; CPU smoke runs are left out."""
    directory = Path(directory) if directory is not None else MEASUREMENTS_DIR
    out = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict) or data.get("schema") != GPU_CHECK_SCHEMA or data.get("smoke"):
            continue  # another benchmark's file, or a CPU smoke run: nothing about a GPU
        out += [(row, data.get("gpu", "?"), path.name) for row in data.get("rows", [])
                if row.get("status") == "ok"]
    return out


def measured_mfu(directory: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """{scale: {"mfu", "gpu", "file", "settings"}}: the training MFU gpu_check measured for a scale
    at its paper settings (micro-batch, recompute, several micro-batches per step; the block-only
    MFU of a slice, whose output layer is a far larger share than the whole model's). Rows at the
    paper's FP8 first; bf16 rows stand in where FP8 was not measured, and `settings` says so."""
    exact: dict[str, list] = {}
    bf16: dict[str, list] = {}
    for row, gpu, name in gpu_check_rows(directory):
        if row.get("plan_mfu") and row.get("scale"):
            pick = exact if row.get("paper_settings") else bf16 if row.get("paper_settings_but_bf16") else None
            if pick is not None:
                pick.setdefault(row["scale"], []).append((float(row["plan_mfu"]), gpu, name, row))
    found: dict[str, dict[str, Any]] = {}
    for scale in {*exact, *bf16}:
        values = exact.get(scale) or bf16[scale]
        row = values[-1][3]
        what = "block-only MFU of a slice" if row.get("slice") else "MFU"
        precision = "FP8" if row.get("fp8") else "bf16" + ("" if scale in exact else ", the paper's FP8 not measured")
        found[scale] = {"mfu": sum(v[0] for v in values) / len(values), "gpu": values[-1][1],
                        "file": values[-1][2], "settings": f"{what}, {precision}, micro-batch {row['micro_batch']}"}
    return found


def mixer_flop_rates(directory: str | os.PathLike | None = None) -> dict[str, dict[str, Any]]:
    """{mixer: {"ratio", "source"}}: a mixer's FLOP rate relative to softmax attention's at equal
    width: measured by gpu_check's mixers rows, else assumed from the CPU mixer benchmark."""
    found: dict[str, dict[str, Any]] = {}
    try:
        cpu = json.loads(MIXER_CPU_BENCHMARK.read_text())
    except (OSError, json.JSONDecodeError):
        cpu = {}
    for row in cpu.get("rows", []):
        if row.get("fwd_bwd_flop_rate_ratio"):
            found[row["mixer"]] = {"ratio": float(row["fwd_bwd_flop_rate_ratio"]),
                                   "source": f"assumed from the CPU mixer benchmark ({MIXER_CPU_BENCHMARK.name})"}
    for row, gpu, name in gpu_check_rows(directory):
        if row.get("section") == "mixers" and row.get("flop_rate_ratio_to_attention"):
            found[row["mixer"]] = {"ratio": float(row["flop_rate_ratio_to_attention"]),
                                   "source": f"measured on {gpu} ({name})"}
    return found


def run_mixer(run: dict[str, Any]) -> str:
    """The token mixer a run's cost depends on: its first layer mixer other than attention."""
    others = sorted({layer.mixer for layer in run_model_config(run).layers} - {"attention", "none"})
    return others[0] if others else "attention"


def _mfu(exp: Experiment, run: dict[str, Any], measured: dict[str, dict[str, Any]],
         mixers: dict[str, dict[str, Any]] | None = None) -> tuple[float, str]:
    """(MFU, where it comes from) of one run: its scale's, times its mixer's FLOP-rate ratio."""
    res = run_resources(exp, run)
    if run["scale"] in measured:
        m = measured[run["scale"]]
        mfu, source = m["mfu"], f"measured {m['mfu']:.3f} on {m['gpu']} ({m['file']}; {m['settings']})"
    else:
        mfu = float(res.get("assumed_mfu", 0.4))
        source = f"assumed {mfu:.2f} (resources.assumed_mfu; no measurement)"
    mixer = run_mixer(run)
    if mixer == "attention":
        return mfu, source
    ratio = (mixers or {}).get(mixer, {"ratio": 1.0, "source": "assumed equal: no benchmark of it"})
    return mfu * ratio["ratio"], f"{source} x {ratio['ratio']:.2f} for {mixer} ({ratio['source']})"


def mfu_key(run: dict[str, Any]) -> str:
    """A run's MFU line in `shapelm cost`: its scale, and its mixer when that is not attention."""
    mixer = run_mixer(run)
    return run["scale"] if mixer == "attention" else f"{run['scale']} {mixer}"


def run_stage_gpu_hours(exp: Experiment, name: str, measured: dict[str, dict[str, Any]],
                        mixers: dict[str, dict[str, Any]] | None = None) -> dict[str, float]:
    """GPU-hours of every stage of one run (0 for the stages it does not have)."""
    run = exp.run(name)
    res = run_resources(exp, run)
    if not int(res.get("gpus", 0)):
        return dict.fromkeys(COST_STAGES, 0.0)
    mfu, _ = _mfu(exp, run, measured, mixers)
    per_gpu = float(res.get("gpu_peak_tflops", 989)) * 1e12 * mfu
    cfg = run_model_config(run)
    hours = dict.fromkeys(COST_STAGES, 0.0)
    hours["pretraining"] = total_train_flops(run) / per_gpu / 3600
    downstream = STAGE_RUNTIME_MIN["downstream"] if run["eval"].get("tasks", ["olmo"]) else 0
    hours["evaluation"] = (STAGE_RUNTIME_MIN["eval_ppl"] + downstream) / 60
    decode = exp.raw["runs"].get(name, {}).get("decode")  # a later seed: decoded on its first only
    if decode:  # a Table 12 run shares its pair's job; a run naming its baseline has one of its own
        hours["decode"] = STAGE_RUNTIME_MIN["decode_pair"] / 60 / (2 if decode is True else 1)
    if run.get("longctx"):
        from shapelm.longctx.plan import longctx_settings, run_lengths

        lc, lengths = longctx_settings(exp), run_lengths(exp, name)
        seq = lengths["seq_len"]
        tokens = int(lc["finetune_steps"]) * int(lc["finetune_batch"]) * seq
        hours["yarn_finetune"] = flops_per_token(cfg, seq).train * tokens / per_gpu / 3600
        evaluated = [int(x) for x in lc["lengths"]]
        pp = sum(flops_per_token(cfg, L).forward * L for L in evaluated) * int(lc["proofpile_num_docs"])
        hours["proofpile"] = pp / per_gpu / 3600
        prefill = sum(flops_per_token(cfg, L).forward * L for L in evaluated)
        hours["ruler"] = prefill * int(lc["ruler_samples"]) * len(lc["ruler_tasks"]) / per_gpu / 3600
    return hours


def cost_rows(exp: Experiment, measurements: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """GPU-hours per table, every stage counted (COST_STAGES), each scale at its measured MFU
    (benchmarks/results) or its assumed one, a Titans / Hope run at that times its mixer's FLOP
    rate; rows carry the per-stage split and `mfu_source` ({scale or "scale mixer": source})."""
    measured, mixers = measured_mfu(measurements), mixer_flop_rates(measurements)
    per_table: dict[str, dict[str, Any]] = {}

    def empty(table: str) -> dict[str, Any]:
        return {"table": table, "runs": 0, "flops": 0.0, "gpu_hours": 0.0,
                "stages": dict.fromkeys(COST_STAGES, 0.0)}

    total = empty("TOTAL (each run once)")
    sources: dict[str, str] = {}
    for name, run in exp.runs.items():
        flops = total_train_flops(run)
        stages = run_stage_gpu_hours(exp, name, measured, mixers)
        sources[mfu_key(run)] = _mfu(exp, run, measured, mixers)[1]
        for table in [*(run["tables"] or ["(untabled)"]), None]:
            row = total if table is None else per_table.setdefault(table, empty(table))
            row["runs"] += 1
            row["flops"] += flops
            row["gpu_hours"] += sum(stages.values())
            for stage, h in stages.items():
                row["stages"][stage] += h
    rows = sorted(per_table.values(), key=lambda r: r["table"])
    rows.append(total)
    for row in rows:
        row["mfu_source"] = sources
    return rows
