"""The plan document built from a loaded experiment (`work/EXP/plan.json`; its reader and
layout: shapelm.plan.document).

Everything `shapelm.results` needs that is computed from the config is computed here, once:
each run's accounting row, its per-layer widths as built, a tapered run's schedules, the
scales' merged recipes, the decode pairs, table membership and the experiment's folders.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shapelm import files
from shapelm.shapes.accounting import PEAK_BF16_FLOPS, flops_per_token, kv_cache_bytes_per_token, param_counts
from shapelm.config import Experiment, TrainRecipe, group_of, merge, run_recipe
from shapelm.errors import ConfigError
from shapelm.model.config import run_model_config
from shapelm.model.schedules import tapered_raw, tapered_widths
from shapelm.plan import paths
from shapelm.plan.decode import decode_baselines, decode_pairs
from shapelm.plan.experiment import load_experiment
from shapelm.plan.document import PLAN_FILE, PLAN_VERSION, Plan, is_plan_document, read_plan
from shapelm.reference.recipes import run_recipe_name

#: The decay schedules Tapered Figure 3 draws side by side at one run's shape.
TAPERED_SCHEDULES = ("linear", "cosine", "sigmoid")


def accounting(run: dict[str, Any]) -> dict[str, Any]:
    """Every shape/accounting number a table may show for one resolved run config."""
    cfg = run_model_config(run)
    recipe = run_recipe(run)
    p = param_counts(cfg)
    per_token = flops_per_token(cfg, recipe.seq_len).train
    attn_layers = [layer.attention for layer in cfg.layers if layer.attention is not None]
    d_h = cfg.uniform("ffn_d_h")
    return {
        "kind": run.get("arch", {}).get("kind"),
        "d_model": cfg.d_model,
        "n_layers": cfg.n_layers,
        "d_attn": cfg.uniform("d_attn") if cfg.has_attention else 0,
        "k": cfg.uniform("ffn_k"),
        "d_h": d_h,
        "ffn_ratio": (d_h / cfg.d_model) if d_h else None,
        "n_heads": attn_layers[0].n_heads if attn_layers else 0,
        "n_attn_layers": len(attn_layers),
        "attn_params": p.attention,
        "ffn_params": p.ffn,
        "matrices": p.attention + p.ffn,
        "non_embedding": p.non_embedding,
        "total_params": p.total,
        "vocab_size": cfg.vocab_size,
        "flops_per_token": per_token,
        "flops_step": per_token * recipe.batch_tokens,
        "total_compute": per_token * recipe.total_steps * recipe.batch_tokens,
        "kv_bytes_per_token": kv_cache_bytes_per_token(cfg),
        "seq_len": recipe.seq_len,
        "batch_tokens": recipe.batch_tokens,
        "batch_sequences": recipe.batch_sequences,
        "total_tokens": recipe.total_tokens,
        "total_steps": recipe.total_steps,
        "lr": recipe.lr,
        "warmup_tokens": recipe.warmup_tokens,
        "weight_decay": recipe.weight_decay,
    }


def layer_widths(run: dict[str, Any]) -> dict[str, list[int]]:
    """Per layer, as built: the FFN width (all its branches) and the query and KV head counts."""
    cfg = run_model_config(run)
    return {"ffn_width": [sum(layer.ffn_widths) for layer in cfg.layers],
            "n_heads": [layer.attention.n_heads if layer.attention else 0 for layer in cfg.layers],
            "n_kv_heads": [layer.attention.n_kv_heads if layer.attention else 0 for layer in cfg.layers]}


def tapered_schedules(run: dict[str, Any]) -> dict[str, Any] | None:
    """A tapered run's shape and, for each schedule of TAPERED_SCHEDULES at that shape, the
    unrounded widths d_ff(l) and the integer widths the builder uses; None for any other run."""
    a = run.get("arch", {})
    if a.get("kind") != "tapered":
        return None
    d_ff, n_layers, start, end = int(a["d_ff"]), int(a["n_layers"]), float(a["start"]), float(a["end"])
    multiple, k = int(a.get("multiple", 16)), float(a.get("sigmoid_k", 10))
    return {"d_ff": d_ff, "n_layers": n_layers, "start": start, "end": end, "multiple": multiple, "sigmoid_k": k,
            "raw": {s: tapered_raw(start * d_ff, end * d_ff, n_layers, s, k) for s in TAPERED_SCHEDULES},
            "widths": {s: tapered_widths(d_ff, n_layers, s, start, end, multiple, k) for s in TAPERED_SCHEDULES}}


def scale_recipe(exp: Experiment, scale: str) -> dict[str, Any] | None:
    """A scale's merged training recipe and heads (Table 4 / Tapered recipe rows); None when the
    scale's recipe is incomplete (its rows stay pending)."""
    spec = exp.raw["scales"][scale]
    try:
        recipe = TrainRecipe.from_dict(merge(exp.raw.get("train_defaults", {}), spec.get("train", {})))
    except Exception:  # an incomplete scale recipe
        return None
    runs = [r for r in exp.runs.values() if r["scale"] == scale]
    return {"lr": recipe.lr, "batch_tokens": recipe.batch_tokens, "batch_sequences": recipe.batch_sequences,
            "total_tokens": recipe.total_tokens, "warmup_tokens": recipe.warmup_tokens,
            "seq_len": recipe.seq_len, "weight_decay": recipe.weight_decay, "n_heads": spec.get("n_heads"),
            "vocab_size": runs[0]["model"]["vocab_size"] if runs else None}


def scale_peak_flops(exp: Experiment, scale: str) -> float | None:
    """The scale's configured GPU peak (`resources.gpu_peak_tflops`, the scale's over the experiment's)."""
    res = {**exp.raw.get("resources", {}), **exp.raw["scales"][scale].get("resources", {})}
    return float(res["gpu_peak_tflops"]) * 1e12 if "gpu_peak_tflops" in res else None


def build_plan(exp: Experiment) -> dict[str, Any]:
    """The plan document of a loaded experiment (layout: shapelm.plan.document)."""
    runs = {name: {"config": run, "accounting": accounting(run), "layers": layer_widths(run),
                   "tapered_schedules": tapered_schedules(run), "instances": exp.instances(name),
                   "primary": exp.is_primary(name),
                   # a seed instance follows its config entry's recipe
                   "recipe": run_recipe_name(exp.raw, group_of(run))}
            for name, run in exp.runs.items()}
    tables: dict[str, list[str]] = {}
    for name, run in exp.runs.items():
        for table in run["tables"]:
            members = tables.setdefault(table, [])
            if exp.is_primary(name):
                members.append(name)
    return {
        "version": PLAN_VERSION,
        "name": exp.name,
        "recipe": exp.raw.get("recipe", "paper"),
        "runs": runs,
        "scale_recipes": {s: scale_recipe(exp, s) for s in exp.raw["scales"]},
        "scale_peak_flops": {s: scale_peak_flops(exp, s) for s in exp.raw["scales"]},
        "device_peak_flops": [[k, v] for k, v in PEAK_BF16_FLOPS],
        "decode": {"pairs": decode_pairs(exp), "baselines": decode_baselines(exp)},
        "tables": tables,
        "paths": {"work": paths.work_dir(exp.name), "results": paths.results_dir(exp.name),
                  "figures": paths.figures_dir(exp.name)},
    }


def write_plan(exp: Experiment, path: str | os.PathLike) -> Path:
    return files.write_json(path, build_plan(exp))


def plan_of(exp: Experiment) -> Plan:
    """The plan of a loaded experiment, as its reader sees it (through JSON: what a table reads
    is the same whether the plan was written to plan.json or built in memory)."""
    return Plan.from_document(json.loads(json.dumps(build_plan(exp))), f"experiment {exp.name}")


def load_plan(source: str | os.PathLike | Experiment | Plan) -> Plan:
    """A plan from a plan document (work/EXP/plan.json), an experiment config (YAML, or the merged
    work/EXP/experiment.json) or a loaded experiment."""
    if isinstance(source, Plan):
        return source
    if isinstance(source, Experiment):
        return plan_of(source)
    if not Path(source).exists():
        raise ConfigError(f"{source}: config or plan file not found")
    # a file named plan.json is a plan document however unreadable it is (its error says so)
    plan_named = Path(source).name == PLAN_FILE
    return read_plan(source) if plan_named or is_plan_document(source) else plan_of(load_experiment(source))
