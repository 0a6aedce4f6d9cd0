"""A corpus of malformed experiment configs: each is refused when the config is loaded and
planned (what `snakemake -n` does), with one ConfigError naming the key, never a traceback;
valid controls (the shipped configs and edited variants) still load.

Each case edits configs/default.yaml (the tiny default) in one place, or its text for YAML-level
faults. A handful run through `snakemake -n` as a user would.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shapelm.plan.checks import plan_experiment
from shapelm.config import load_yaml
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError, ShapelmError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_yaml(ROOT / "configs" / "default.yaml")
DEFAULT_TEXT = (ROOT / "configs" / "default.yaml").read_text()
RUN = "hg906m_hg"  # a longctx + decode run of the default
LWS = {"kind": "lws", "variant": "baseline", "d_model": 64, "n_layers": 12, "head_dim": 16, "groups": 2}
VW = {"kind": "variable_width", "d_model": 64, "n_layers": 6, "n_heads": 2, "max_layer": 4, "bottleneck": 0.5,
      "multiple": 8}
HEADS = {"kind": "head_schedule", "d_model": 64, "n_layers": 4, "heads": [2, 2, 4, 8], "d_h": 256}

MISSING = object()


def edit(path: str, value=MISSING):
    """A change to the default config: set `path` (dots; created as needed), or delete it."""
    def apply(cfg):
        *head, last = path.split(".")
        node = cfg
        for key in head:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node
        if value is MISSING:
            node.pop(last)
        else:
            node[last] = copy.deepcopy(value)
        return cfg

    return apply


def edits(*changes):
    def apply(cfg):
        for change in changes:
            cfg = change(cfg)
        return cfg

    return apply


def rename(path: str, new_key: str):
    """Rename the key at `path` (a misspelled run, scale or section name)."""
    def apply(cfg):
        *head, last = path.split(".")
        node = cfg
        for key in head:
            node = node[key]
        node[new_key] = node.pop(last)
        if head == ["scales"]:
            for run in cfg["runs"].values():
                run["scale"] = new_key if run["scale"] == last else run["scale"]
        return cfg

    return apply


def replace_text(old: str, new: str):
    def apply(text):
        assert old in text, old
        return text.replace(old, new, 1)

    return apply


# (id, edit of the default mapping, text substring the message must contain)
CASES: list[tuple[str, object, str]] = []


def case(case_id: str, change, key: str) -> None:
    CASES.append((case_id, change, key))


# -- a misspelled key in every section ---------------------------------------------------------
MISSPELLED = {
    "top": ("", "runz"),
    "model_defaults": ("model_defaults", "rope_thetta"),
    "train_defaults": ("train_defaults", "weight_decy"),
    "scale": ("scales.tiny", "nheads"),
    "scale_train": ("scales.tiny.train", "warmup_token"),
    "scale_data": ("scales.tiny.data", "validation_set"),
    "scale_resources": ("scales.tiny.resources", "gpu"),
    "run": (f"runs.{RUN}", "tabels"),
    "run_arch": (f"runs.{RUN}.arch", "d_modle"),
    "run_train": (f"runs.{RUN}.train", "lr_peak"),
    "run_eval": (f"runs.{RUN}.eval", "taks"),
    "data": ("data", "sources"),
    "data_default_corpus": ("data.default_corpus", "vocab"),
    "data_olmo": ("data.olmo", "roots"),
    "data_retokenize": ("data.retokenize", "overslice"),
    "eval": ("eval", "batchsize"),
    "longctx": ("longctx", "finetune_step"),
    "longctx_resources": ("longctx.resources", "gpus_per_node"),
    "decode": ("decode", "lenghts"),
    "results": ("results", "figures"),
    "resources": ("resources", "mem"),
    "cluster": ("cluster", "max_runtime"),
    "cluster_node": ("cluster.node", "gpu_mem"),
}
for section, (where, typo) in MISSPELLED.items():
    case(f"misspelled-{section}", edit(f"{where}.{typo}" if where else typo, 1), typo)

# -- names that become paths, rule names or wildcards ---------------------------------------------
BAD_NAMES = {
    "dot": ".", "dotdot": "..", "escape": "../../victim", "absolute": "/tmp/victim",
    "semicolon": "t;touch X", "space": "a b", "subst": "$(id)", "slash": "a/b", "dash_first": "-x",
    "empty": "", "newline": "a\nb", "glob": "a*",
}
for label, bad in BAD_NAMES.items():
    case(f"name-experiment-{label}", edit("name", bad), "name")
    case(f"name-scale-{label}", rename("scales.tiny", bad), "scales")
    case(f"name-table-{label}", edit(f"runs.{RUN}.tables", ["hourglass_table2", bad]), f"runs.{RUN}.tables")
    case(f"name-valset-{label}", edit("data.validation_sets", ["default_web", bad]), "data.validation_sets")
    case(f"name-task-{label}", edit("eval.tasks", [bad]), "eval.tasks")
for label in ("dotdot", "escape", "semicolon", "dash_first", "space"):
    case(f"name-run-{label}", rename(f"runs.{RUN}", BAD_NAMES[label]), "runs")
    case(f"name-task-data-{label}", edit("eval.task_data", {BAD_NAMES[label]: "x.jsonl"}), "eval.task_data")
case("name-run-uppercase", rename(f"runs.{RUN}", "HG906M"), "runs")
case("name-experiment-number", edit("name", 5), "name")

# -- model keys: typed and ranged ----------------------------------------------------------------
MODEL = {
    "qk_norm-string": ("qk_norm", "no"), "qk_norm-int": ("qk_norm", 1),
    "rope_theta-negative": ("rope_theta", -1), "rope_theta-zero": ("rope_theta", 0),
    "rope_theta-string": ("rope_theta", "big"), "vocab_size-zero": ("vocab_size", 0),
    "vocab_size-float": ("vocab_size", 2048.5), "vocab_size-string": ("vocab_size", "2048; rm -rf /"),
    "max_seq_len-string": ("max_seq_len", "long"), "norm_eps-zero": ("norm_eps", 0),
    "norm_placement-post": ("norm_placement", "post"), "init_std-negative": ("init_std", -0.02),
    "attention-string": ("attention", "false"), "rope_scaling-string": ("rope_scaling", "yarn"),
}
for label, (key, value) in MODEL.items():
    case(f"model_defaults-{label}", edit(f"model_defaults.{key}", value), f"model_defaults.{key}")
ARCH = {
    "d_model-string": ("d_model", "64"), "d_model-zero": ("d_model", 0), "n_layers-float": ("n_layers", 3.5),
    "n_heads-zero": ("n_heads", 0), "k-negative": ("k", -1), "d_h-bool": ("d_h", True),
    "kind-unknown": ("kind", "mamba"), "qk_norm-string": ("qk_norm", "yes"),
    "head_dim-odd": ("head_dim", 7), "d_attn-indivisible": ("d_attn", 66),
}
for label, (key, value) in ARCH.items():
    case(f"arch-{label}", edit(f"runs.{RUN}.arch.{key}", value), f"runs.{RUN}.arch")
case("arch-no-kind", edit(f"runs.{RUN}.arch.kind"), "kind")
case("arch-not-mapping", edit(f"runs.{RUN}.arch", "hourglass"), f"runs.{RUN}.arch")
case("arch-key-of-other-kind", edit(f"runs.{RUN}.arch.variant", "baseline"), "variant")

# -- train keys ----------------------------------------------------------------------------------
TRAIN = {
    "betas-above-one": ("betas", [1.5, 0.95]), "betas-one": ("betas", [0.9, 1.0]),
    "betas-negative": ("betas", [-0.1, 0.95]), "betas-one-value": ("betas", [0.9]),
    "betas-strings": ("betas", ["a", "b"]), "batch_tokens-fraction": ("batch_tokens", 2048.9),
    "batch_tokens-fraction-string": ("batch_tokens", "2048.9"), "batch_tokens-word": ("batch_tokens", "lots"),
    "total_tokens-negative": ("total_tokens", -5), "warmup_tokens-bad-exponent": ("warmup_tokens", "1e"),
    "total_tokens-bool": ("total_tokens", True), "seq_len-zero": ("seq_len", 0),
    "seq_len-float": ("seq_len", 1.5), "lr-zero": ("lr", 0), "lr-string": ("lr", "fast"),
    "final_lr_ratio-two": ("final_lr_ratio", 2), "eps-zero": ("eps", 0),
    "weight_decay-negative": ("weight_decay", -1), "grad_clip-negative": ("grad_clip", -1),
    "seed-float": ("seed", 1.5), "frozen_lm_head-string": ("frozen_lm_head", "yes"),
    "precision-fp16": ("precision", "fp16"), "compile-string": ("compile", "no"),
    "distributed-zero": ("distributed", "zero3"), "checkpoint_every-zero": ("checkpoint_every", 0),
    "keep_last-zero": ("keep_last", 0), "log_every-zero": ("log_every", 0),
    "micro_batch_size-zero": ("micro_batch_size", 0), "loss_chunk_tokens-negative": ("loss_chunk_tokens", -1),
    "repetition_filter-string": ("repetition_filter", "no"),
}
for label, (key, value) in TRAIN.items():
    case(f"train-{label}", edit(f"scales.tiny.train.{key}", value), f"train.{key}")
case("train_defaults-betas", edit("train_defaults.betas", [0.9, 1.5]), "train_defaults.betas")
case("run-train-batch_tokens-fraction", edit(f"runs.{RUN}.train.batch_tokens", 2048.5), "batch_tokens")

# -- data ----------------------------------------------------------------------------------------
DATA = {
    "corpus-vocab-injection": ("data.default_corpus.vocab_size", "2048 --help; touch X; exit 1 #"),
    "corpus-vocab-small": ("data.default_corpus.vocab_size", 100),
    "corpus-vocab-float": ("data.default_corpus.vocab_size", 2048.5),
    "corpus-max-tokens-zero": ("data.default_corpus.max_train_tokens", 0),
    "corpus-max-tokens-injection": ("data.default_corpus.max_train_tokens", "1000; id"),
    "source-unknown": ("data.source", "hf"),
    "validation_sets-string": ("data.validation_sets", "default_web"),
    "validation_sets-duplicate": ("data.validation_sets", ["default_web", "default_web"]),
    "vocab_size-zero": ("data.vocab_size", 0),
    "tokenizer-empty": ("data.tokenizer", ""),
    "retokenize-zero": ("data.retokenize", {"over_slice": 0}),
    "olmo-root-number": ("data.olmo", {"root": 5}),
    "scale-data-source": ("scales.tiny.data", {"source": 3}),
}
for label, (key, value) in DATA.items():
    case(f"data-{label}", edit(key, value), key)

# -- eval ----------------------------------------------------------------------------------------
EVAL = {
    "ppl_seq_len-zero": ("ppl_seq_len", 0), "batch_size-zero": ("batch_size", 0),
    "heldout_examples-two": ("heldout_examples", 2), "limit-zero": ("limit", 0),
    "ppl_max_instances-zero": ("ppl_max_instances", 0), "tasks-string": ("tasks", "heldout"),
    "task_data-number": ("task_data", {"heldout_mc": 5}), "ppl_seq_len-string": ("ppl_seq_len", "256"),
}
for label, (key, value) in EVAL.items():
    case(f"eval-{label}", edit(f"eval.{key}", value), f"eval.{key}")

# -- long context, decode ------------------------------------------------------------------------
LONGCTX = {
    "factor-negative": ("factor", -4), "factor-one": ("factor", 1), "factor-half": ("factor", 0.5),
    "factor-string": ("factor", "16"), "lengths-empty": ("lengths", []), "lengths-one": ("lengths", [1]),
    "lengths-string": ("lengths", "512"), "finetune_steps-zero": ("finetune_steps", 0),
    "finetune_batch-zero": ("finetune_batch", 0), "micro_batch-zero": ("micro_batch", 0),
    "checkpoint_every-zero": ("checkpoint_every", 0), "proofpile_min_tokens-one": ("proofpile_min_tokens", 1),
    "proofpile_num_docs-zero": ("proofpile_num_docs", 0), "ruler_samples-zero": ("ruler_samples", 0),
    "ruler_tasks-unknown": ("ruler_tasks", ["niah_single_9"]), "ruler_tasks-empty": ("ruler_tasks", []),
    "pg19-number": ("pg19", 5), "original_length-zero": ("original_length", 0), "seq_len-one": ("seq_len", 1),
    "resources-gpus": ("resources", {"gpus": -1}),
}
for label, (key, value) in LONGCTX.items():
    case(f"longctx-{label}", edit(f"longctx.{key}", value), f"longctx.{key}")
DECODE = {
    "mixers-unknown": ("mixers", ["mqa"]), "mixers-empty": ("mixers", []), "mixers-string": ("mixers", "mha"),
    "mixers-twice": ("mixers", ["mha", "mha"]), "lengths-zero": ("lengths", [0]),
    "lengths-empty": ("lengths", []), "peer_length-zero": ("peer_length", 0),
    "peer_length-string": ("peer_length", "4096; id"),
}
for label, (key, value) in DECODE.items():
    case(f"decode-{label}", edit(f"decode.{key}", value), f"decode.{key}")

# -- resources, cluster --------------------------------------------------------------------------
RESOURCES = {
    "gpus-negative": ("gpus", -1), "nodes-zero": ("nodes", 0), "mem_mb-string": ("mem_mb", "4G"),
    "runtime_min-zero": ("runtime_min", 0), "assumed_mfu-above-one": ("assumed_mfu", 1.5),
    "segments-zero": ("segments", 0), "cpus-zero": ("cpus", 0), "gpu_peak_tflops-zero": ("gpu_peak_tflops", 0),
}
for label, (key, value) in RESOURCES.items():
    case(f"resources-{label}", edit(f"resources.{key}", value), f"resources.{key}")
    case(f"scale-resources-{label}", edit(f"scales.tiny.resources.{key}", value), f"resources.{key}")
CLUSTER = {
    "max_runtime_min-five": ("max_runtime_min", 5), "signal_lead_s-negative": ("signal_lead_s", -1),
    "startup_min-negative": ("startup_min", -1), "node-gpus-negative": ("node", {"gpus": -1}),
    "node-gpu_mem_gb-zero": ("node", {"gpu_mem_gb": 0}), "node-cpus-string": ("node", {"cpus": "many"}),
}
for label, (key, value) in CLUSTER.items():
    case(f"cluster-{label}", edit(f"cluster.{key}", value), f"cluster.{key}")

# -- structure -----------------------------------------------------------------------------------
STRUCTURE = {
    "runs-empty": (edit("runs", {}), "runs"),
    "runs-list": (edit("runs", ["a"]), "runs"),
    "scales-empty": (edit("scales", {}), "scales"),
    "scale-null": (edit("scales.tiny", None), "scales.tiny"),
    "model_defaults-list": (edit("model_defaults", [1]), "model_defaults"),
    "name-missing": (edit("name"), "name"),
    "run-no-scale": (edit(f"runs.{RUN}.scale"), "scale"),
    "run-no-arch": (edit(f"runs.{RUN}.arch"), "arch"),
    "run-unknown-scale": (edit(f"runs.{RUN}.scale", "huge"), f"runs.{RUN}.scale"),
    "run-tables-string": (edit(f"runs.{RUN}.tables", "hourglass_table2"), f"runs.{RUN}.tables"),
    "run-longctx-string": (edit(f"runs.{RUN}.longctx", "yes"), f"runs.{RUN}.longctx"),
    "run-decode-int": (edit(f"runs.{RUN}.decode", 1), f"runs.{RUN}.decode"),
    "run-label-number": (edit(f"runs.{RUN}.label", 5), f"runs.{RUN}.label"),
    "run-null": (edit(f"runs.{RUN}", None), f"runs.{RUN}"),
    "rehearsal-no-inputs": (edit("rehearsal", {"url": "http://x"}), "rehearsal"),
    "results-list": (edit("results", []), "results"),
}
for label, (change, key) in STRUCTURE.items():
    case(f"structure-{label}", change, key)

# -- cross-field: found today only inside jobs ---------------------------------------------------
CROSS = {
    "max_seq_len-below-seq_len": (edit("model_defaults.max_seq_len", 64), "model_defaults.max_seq_len"),
    "run-max_seq_len-below-seq_len": (edit(f"runs.{RUN}.arch.max_seq_len", 100), f"runs.{RUN}.arch.max_seq_len"),
    "model-vocab-below-data": (edit("model_defaults.vocab_size", 1000), "model_defaults.vocab_size"),
    "run-vocab-below-data": (edit(f"runs.{RUN}.arch.vocab_size", 512), f"runs.{RUN}.arch.vocab_size"),
    "eval-task-unknown": (edit("eval.tasks", ["no_such_task"]), "eval.tasks"),
    "run-eval-task-unknown": (edit(f"runs.{RUN}.eval", {"tasks": ["no_such_task"]}), f"runs.{RUN}.eval.tasks"),
    "valset-not-produced": (edit("data.validation_sets", ["default_web", "dolma_stack"]), "validation_sets"),
    "batch-not-multiple": (edit("scales.tiny.train.batch_tokens", 2000), "batch_tokens"),
    "total-below-batch": (edit("scales.tiny.train.total_tokens", 1024), "total_tokens"),
    "micro-batch-indivisible": (edit("train_defaults.micro_batch_size", 3), "micro_batch_size"),
    "longctx-lengths-beyond-target": (edit("longctx.lengths", [512, 4096]), "longctx.lengths"),
    "longctx-original-beyond-train": (edit("longctx.original_length", 256), "longctx.original_length"),
    "heads-do-not-divide": (edit(f"runs.{RUN}.arch.n_heads", 3), "n_heads"),
    "kv-heads-do-not-divide": (edit(f"runs.{RUN}.arch.n_kv_heads", 3), "n_kv_heads"),
    "lws-unknown-variant": (edit(f"runs.{RUN}.arch", {**LWS, "variant": "diamond"}), "variant"),
    "variable-width-unreachable-bottleneck": (edit(f"runs.{RUN}.arch", {**VW, "bottleneck": 0.01}),
                                              f"runs.{RUN}.arch.bottleneck"),
    "variable-width-heads-do-not-divide": (edit(f"runs.{RUN}.arch", {**VW, "n_heads": 3}), f"runs.{RUN}.arch.n_heads"),
    # the embeddings at a layer's own width exist only where layers have their own widths
    "embedding-width-option-for-hourglass": (edit(f"runs.{RUN}.arch.original_input_width", False),
                                             f"runs.{RUN}.arch.original_input_width"),
    "variable-width-output-width-not-boolean": (edit(f"runs.{RUN}.arch", {**VW, "original_output_width": "no"}),
                                                f"runs.{RUN}.arch.original_output_width"),
    "loops-below-one": (edit(f"runs.{RUN}.arch.loops", 0), f"runs.{RUN}.arch.loops"),
    "loops-negative": (edit(f"runs.{RUN}.arch.loops", -2), f"runs.{RUN}.arch.loops"),
    "head-schedule-heads-do-not-divide": (edit(f"runs.{RUN}.arch", HEADS | {"heads": [3, 3, 3, 3]}),
                                          f"runs.{RUN}.arch.heads"),
    "head-schedule-odd-head-size": (edit(f"runs.{RUN}.arch", HEADS | {"heads": [2, 64]}), f"runs.{RUN}.arch.heads"),
    "variable-width-multiple-splits-no-heads": (edit(f"runs.{RUN}.arch", {**VW, "n_heads": 8}),
                                                f"runs.{RUN}.arch.n_heads"),
    "variable-width-turning-layer-beyond-depth": (edit(f"runs.{RUN}.arch", {**VW, "max_layer": 7}),
                                                  f"runs.{RUN}.arch.max_layer"),
    "corpus-vocab-above-model": (edit("data.default_corpus.vocab_size", 4096), "vocab_size"),
    "gpus-beyond-node": (edit("resources", {"gpus": 16, "runtime_min": 30}), "gpus"),
    "runtime-beyond-partition": (edit("resources.runtime_min", 5000), "runtime_min"),
}
for label, (change, key) in CROSS.items():
    case(f"cross-{label}", change, key)

# -- YAML text: duplicate keys, templates, syntax ------------------------------------------------
TEXT_CASES = {
    "duplicate-top-key": (replace_text("eval:\n", "eval: {}\neval:\n"), "duplicate key 'eval'"),
    "duplicate-run": (replace_text("  hg906m_hg:", "  hg906m_conv: {scale: tiny, arch: {kind: conventional}}\n  hg906m_hg:"),
                      "duplicate key 'hg906m_conv'"),
    "duplicate-nested-key": (replace_text("  factor: 8\n", "  factor: 8\n  factor: 4\n"), "duplicate key 'factor'"),
    "duplicate-flow-key": (replace_text("{vocab_size: 2048, max_train_tokens: 1000000,",
                                        "{vocab_size: 2048, vocab_size: 4096, max_train_tokens: 1000000,"),
                           "duplicate key 'vocab_size'"),
    "yte-template": (replace_text("name: default\n", "__use_yte__: true\nname: default\n"), "__use_yte__"),
    "tab-indent": (replace_text("  factor: 8\n", "\tfactor: 8\n"), "not valid YAML"),
    "python-tag": (replace_text("name: default", "name: !!python/object/apply:os.system [id]"), "not valid YAML"),
    "top-level-list": (lambda text: "- a\n- b\n", "mapping at the top level"),
    "empty-file": (lambda text: "", "mapping at the top level"),
}
assert len(CASES) + len(TEXT_CASES) >= 150, len(CASES) + len(TEXT_CASES)

# == round two: the keys added since, attacked as above ============================================
# Each refused at load, naming the key; counted apart (NEW_CASES, NEW_TEXT_CASES).
FIRST_NEW = len(CASES)
TITANS, HOPE = "tp760m_titans_uniform", "tp760m_hope_uniform"
NAN, INF = float("nan"), float("inf")

# -- NaN and infinities: JSON Schema bounds compare false with NaN, and .inf passes exclusiveMinimum
FLOATS = {
    "lr": "scales.tiny.train.lr", "final_lr_ratio": "train_defaults.final_lr_ratio",
    "eps": "train_defaults.eps", "weight_decay": "scales.tiny.train.weight_decay",
    "grad_clip": "scales.tiny.train.grad_clip", "z_loss": "scales.tiny.train.z_loss",
    "rope_theta": "model_defaults.rope_theta", "norm_eps": "model_defaults.norm_eps",
    "init_std": "model_defaults.init_std", "cms_lr": f"runs.{HOPE}.arch.cms_lr",
    "ffn_ratio": f"runs.{RUN}.arch.ffn_ratio", "assumed_mfu": "resources.assumed_mfu",
    "gpu_peak_tflops": "resources.gpu_peak_tflops", "longctx-factor": "longctx.factor",
    "startup_min": "cluster.startup_min", "gpu_mem_gb": "cluster.node.gpu_mem_gb",
    "over_slice": "data.retokenize.over_slice",
}
for label, key in FLOATS.items():
    for tag, value in (("nan", NAN), ("inf", INF), ("-inf", -INF)):
        case(f"nonfinite-{label}-{tag}", edit(key, value), key)
case("nonfinite-betas-nan", edit("train_defaults.betas", [NAN, 0.95]), "train_defaults.betas.0")
case("nonfinite-betas-inf", edit("scales.tiny.train.betas", [0.9, INF]), "scales.tiny.train.betas.1")
case("nonfinite-rope_scaling-factor", edit("model_defaults.rope_scaling",
                                          {"type": "yarn", "factor": INF, "original_max_position_embeddings": 128}),
     "model_defaults.rope_scaling.factor")
case("nonfinite-ratios", edit(f"runs.{RUN}.arch.ratios", [1.0, NAN]), f"runs.{RUN}.arch.ratios.1")
case("nonfinite-ffn_multipliers", edit(f"runs.{RUN}.arch.ffn_multipliers", INF), f"runs.{RUN}.arch.ffn_multipliers")
case("nonfinite-token-count", edit("scales.tiny.train.total_tokens", INF), "total_tokens")

# -- above a documented ceiling (the schema's $defs: width, depth, length, count, seed, tokens)
CEILINGS = {
    "seed-2**64": ("scales.tiny.train.seed", 2**64), "seed-2**32": ("scales.tiny.train.seed", 2**32),
    "seeds-2**40": (f"runs.{RUN}.seeds", [1, 2**40]), "d_model-2**70": (f"runs.{RUN}.arch.d_model", 2**70),
    "vocab_size-2**40": ("model_defaults.vocab_size", 2**40), "n_layers-100000": (f"runs.{RUN}.arch.n_layers", 100000),
    "k-10**6": (f"runs.{RUN}.arch.k", 10**6), "d_h-2**30": (f"runs.{RUN}.arch.d_h", 2**30),
    "n_heads-2**30": ("scales.tiny.n_heads", 2**30), "max_seq_len-2**40": ("model_defaults.max_seq_len", 2**40),
    "memory_hidden-10**9": (f"runs.{TITANS}.arch.memory_hidden", 10**9),
    "decode-lengths-10**12": ("decode.lengths", [1024, 10**12]), "decode-peer_length": ("decode.peer_length", 2**40),
    "heldout_examples-10**9": ("eval.heldout_examples", 10**9), "ppl_max_instances": ("eval.ppl_max_instances", 10**12),
    "ppl_seq_len-2**40": ("eval.ppl_seq_len", 2**40), "max_runtime_min-10**9": ("cluster.max_runtime_min", 10**9),
    "runtime_min-10**9": ("resources.runtime_min", 10**9), "mem_mb-2**50": ("resources.mem_mb", 2**50),
    "gpus-10**6": ("resources.gpus", 10**6), "node-gpus": ("cluster.node.gpus", 10**6),
    "seq_len-2**30": ("scales.tiny.train.seq_len", 2**30), "total_tokens-10**18": ("scales.tiny.train.total_tokens", 10**18),
    "checkpoint_every-10**12": ("scales.tiny.train.checkpoint_every", 10**12),
    "keep_last-10**6": ("scales.tiny.train.keep_last", 10**6), "lr-100": ("scales.tiny.train.lr", 100),
    "rope_theta-1e20": ("model_defaults.rope_theta", 1e20), "longctx-factor-10**6": ("longctx.factor", 10**6),
    "longctx-lengths": ("longctx.lengths", [2**40]), "finetune_steps": ("longctx.finetune_steps", 10**12),
    "corpus-vocab": ("data.default_corpus.vocab_size", 2**40),
    # the papers' longest context (131,072) and 10-16x their counts and batches
    "longctx-lengths-beyond-128k": ("longctx.lengths", [512, 262144]), "longctx-seq_len": ("longctx.seq_len", 262144),
    "proofpile_min_tokens": ("longctx.proofpile_min_tokens", 262144), "proofpile_num_docs": ("longctx.proofpile_num_docs", 10**5),
    "ruler_samples": ("longctx.ruler_samples", 10**5), "finetune_batch": ("longctx.finetune_batch", 4096),
}
for label, (key, value) in CEILINGS.items():
    case(f"ceiling-{label}", edit(key, value), key)
# a count as YAML 1.1 reads 1e18 (a string): checked when the run's recipe is resolved
case("ceiling-total_tokens-string-1e18", edit("scales.tiny.train.total_tokens", "1e18"), "train.total_tokens")

# -- integers written as floats (JSON Schema's own `integer` accepts 1.0 and 1.0e30)
FLOAT_INTS = {
    "seed-1e30": ("scales.tiny.train.seed", 1.0e30), "seed-1.0": ("scales.tiny.train.seed", 1.0),
    "seeds-floats": (f"runs.{RUN}.seeds", [1.0, 2.0]), "d_model": (f"runs.{RUN}.arch.d_model", 64.0),
    "n_layers": (f"runs.{RUN}.arch.n_layers", 3.0), "vocab_size": ("model_defaults.vocab_size", 2048.0),
    "decode-lengths": ("decode.lengths", [1024.0]), "heldout_examples": ("eval.heldout_examples", 100.0),
    "ppl_seq_len": ("eval.ppl_seq_len", 256.0), "keep_last": ("scales.tiny.train.keep_last", 2.0),
    "max_runtime_min": ("cluster.max_runtime_min", 1.0e9), "gpus": ("resources.gpus", 0.0),
}
for label, (key, value) in FLOAT_INTS.items():
    case(f"float-int-{label}", edit(key, value), key)
# as `--config cluster={...}` gives them: strings, read back as numbers
case("cli-max_runtime_min-1.0e9", edit("cluster", {"max_runtime_min": "1.0e9"}), "cluster.max_runtime_min")
case("cli-gpu_mem_gb-nan", edit("cluster", {"node": {"gpu_mem_gb": "nan"}}), "cluster.node.gpu_mem_gb")
case("cli-gpu_mem_gb-inf", edit("cluster", {"node": {"gpu_mem_gb": "inf"}}), "cluster.node.gpu_mem_gb")

# -- names ending in a newline (`$` under re.search matches before it)
NEWLINE = "tnl\n"
case("newline-experiment", edit("name", NEWLINE), "name")
case("newline-scale", rename("scales.tiny", NEWLINE), "scales")
case("newline-run", rename(f"runs.{RUN}", NEWLINE), "runs")
case("newline-table", edit(f"runs.{RUN}.tables", ["hourglass_table2", NEWLINE]), f"runs.{RUN}.tables")
case("newline-valset", edit("data.validation_sets", ["default_web", NEWLINE]), "data.validation_sets")
case("newline-task", edit("eval.tasks", [NEWLINE]), "eval.tasks")
case("newline-task_data", edit("eval.task_data", {NEWLINE: "x.jsonl"}), "eval.task_data")
case("newline-token-count", edit("scales.tiny.train.total_tokens", "245760\n"), "total_tokens")

# -- rope_scaling: closed and typed
ROPE = {"type": "yarn", "factor": 4, "original_max_position_embeddings": 128}
ROPE_BAD = {
    "unknown-key": {**ROPE, "bogus": 1}, "type-linear": {**ROPE, "type": "linear"},
    "factor-negative": {**ROPE, "factor": -4}, "factor-half": {**ROPE, "factor": 0.5},
    "factor-string": {**ROPE, "factor": "4"}, "no-original": {"type": "yarn", "factor": 4},
    "original-zero": {**ROPE, "original_max_position_embeddings": 0},
    "original-float": {**ROPE, "original_max_position_embeddings": 128.0},
    "beta_fast-negative": {**ROPE, "beta_fast": -1}, "attention_factor-zero": {**ROPE, "attention_factor": 0},
    "list": [ROPE],
}
for label, value in ROPE_BAD.items():
    case(f"rope_scaling-{label}", edit("model_defaults.rope_scaling", value), "model_defaults.rope_scaling")
case("rope_scaling-run", edit(f"runs.{RUN}.arch.rope_scaling", {**ROPE, "factor": -4}), f"runs.{RUN}.arch.rope_scaling")

# -- mixer parameters against the model and the run
MIXERS = {
    "titans-no-attention": (f"runs.{TITANS}.arch.attention", False, f"runs.{TITANS}.arch.mixer"),
    "gated-no-attention": ("runs.tp760m_ga_uniform.arch.attention", False, "runs.tp760m_ga_uniform.arch.mixer"),
    "window-beyond-seq_len": (f"runs.{TITANS}.arch.window", 4096, f"runs.{TITANS}.arch.window"),
    "memory_chunk-not-dividing": (f"runs.{TITANS}.arch.memory_chunk", 48, f"runs.{TITANS}.arch.memory_chunk"),
    "memory_chunk-beyond": (f"runs.{TITANS}.arch.memory_chunk", 256, f"runs.{TITANS}.arch.memory_chunk"),
    "cms_chunks-repeated": (f"runs.{HOPE}.arch.cms_chunks", [16, 16], f"runs.{HOPE}.arch.cms_chunks"),
    "cms_chunks-beyond": (f"runs.{HOPE}.arch.cms_chunks", [1000], f"runs.{HOPE}.arch.cms_chunks"),
    "cms_chunks-floats": (f"runs.{HOPE}.arch.cms_chunks", [16.0, 64.0], f"runs.{HOPE}.arch.cms_chunks"),
    "cms_chunks-many": (f"runs.{HOPE}.arch.cms_chunks", list(range(1, 18)), f"runs.{HOPE}.arch.cms_chunks"),
    "window-float": (f"runs.{TITANS}.arch.window", 32.0, f"runs.{TITANS}.arch.window"),
}
for label, (key, value, named) in MIXERS.items():
    case(f"mixer-{label}", edit(key, value), named)

# -- decode pairs and output names: collisions (case too) and cycles
def twin_scale(new: str):
    """A second scale, a copy of `tiny`, with one run moved to it."""
    def apply(cfg):
        cfg["scales"][new] = copy.deepcopy(cfg["scales"]["tiny"])
        cfg["runs"]["hg113m_conv"]["scale"] = new
        return cfg

    return apply


DECODE_NAMES = {
    "decode-true-unpaired": (edit("runs.hg906m_conv.decode"), f"runs.{RUN}.decode"),
    "decode-true-third": (edit("runs.hg113m_conv.decode", True), f"runs.{RUN}.decode"),
    "decode-true-two-conventional": (edits(edit("runs.hg906m_conv.decode"), edit("runs.hg113m_conv.decode", True),
                                           edit("runs.tp760m_uniform.decode", True)), "decode"),
    "decode-cycle": (edit("runs.tp760m_uniform.decode", "tp760m_ga_uniform"), "runs.tp760m_uniform.decode"),
    "decode-cycle-three": (edits(edit("runs.tp760m_uniform.decode", "tp760m_titans_uniform"),
                                 edit(f"runs.{TITANS}.decode", "tp760m_ga_uniform")), "cycle"),
    "scale-case-collision": (twin_scale("Tiny"), "scales.tiny"),
    "scale-named-like-run": (twin_scale("tp760m_ga_uniform"), "runs.tp760m_ga_uniform"),
    "table-case-collision": (edit(f"runs.{RUN}.tables", ["hourglass_table2", "Hourglass_table2"]), f"runs.{RUN}.tables"),
    "valset-case-collision": (edit("data.validation_sets", ["default_web", "Default_web"]), "data.validation_sets"),
    "warmup-beyond-run": (edit("scales.tiny.train.warmup_tokens", 10**7), "warmup_tokens"),
    "warmup-beyond-run-in-run": (edit(f"runs.{RUN}.train.warmup_tokens", 250000), "warmup_tokens"),
    # 120 whole steps of 2048 train 245,760 of the 246,000 tokens: a warm-up ending in the rest never ends
    "warmup-beyond-whole-steps": (edits(edit("scales.tiny.train.total_tokens", 246000),
                                        edit("scales.tiny.train.warmup_tokens", 245900)),
                                  "warmup_tokens=245900 is beyond the run's 245760 trained tokens"),
    # eval keys no job reads from a run's own eval: refused, not silently left at the top-level value
    "run-eval-ppl_seq_len": (edit(f"runs.{RUN}.eval.ppl_seq_len", 512), f"runs.{RUN}.eval.ppl_seq_len: 512"),
    "run-eval-ppl_max_instances": (edit(f"runs.{RUN}.eval.ppl_max_instances", 4),
                                   f"runs.{RUN}.eval.ppl_max_instances: 4"),
    "run-eval-limit": (edit(f"runs.{RUN}.eval.limit", 10), f"runs.{RUN}.eval.limit: 10"),
}
for label, (change, key) in DECODE_NAMES.items():
    case(f"cross2-{label}", change, key)
NEW_CASES = CASES[FIRST_NEW:]

# -- YAML text: aliases, merge keys
def alias_bomb(where: str, levels: int = 9) -> str:
    """10**levels values from a few hundred bytes: each level lists the one below ten times."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{where}: *a{levels - 1}\n"


NEW_TEXT_CASES = {
    "alias-bomb-rope_scaling": (lambda text: alias_bomb("bomb") + text.replace(
        "  rope_theta: 10000\n", "  rope_theta: 10000\n  rope_scaling: {type: yarn, factor: *a8}\n"), "aliases expand"),
    "alias-bomb-top": (lambda text: text + alias_bomb("description"), "aliases expand"),
    "alias-recursive-list": (lambda text: text + "description: &r [1, *r]\n", "recursive alias"),
    "alias-recursive-mapping": (replace_text("results: {}\n", "results: &r {x: *r}\n") if "results: {}\n" in DEFAULT_TEXT
                                else (lambda text: text + "results: &r {x: *r}\n"), "recursive alias"),
    "nested-too-deeply": (lambda text: text + "description: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "merge-key-duplicate-own-key": (lambda text: text + "base: &b {lr: 1}\nmore: {<<: *b, x: 1, x: 2}\n", "duplicate key 'x'"),
}
TEXT_CASES.update(NEW_TEXT_CASES)
assert len(NEW_CASES) + len(NEW_TEXT_CASES) >= 100, len(NEW_CASES) + len(NEW_TEXT_CASES)


# -- round three: no config string reaches a generated file (task YAML, shell line, JSON, path)
# with a line break or other control character; task data is a local file or a hub id; names
# are full-matched. Each string a job writes into a file, with each payload.
ROUND3_FIRST = len(CASES)
CONTROL_PAYLOADS = {
    "newline-jinja": 'x\ndoc_to_text: "{{ cycler.__init__.__globals__.os.system(\'touch X\') }}"',
    "newline-stmt": "x\n{% for c in [].__class__.__base__.__subclasses__() %}{% endfor %}",
    "cr": "x\rinclude: /etc/passwd", "tab": "x\ty", "nul": "x\x00y", "escape": "x\x1b[2Jy",
    "line-separator": "x\u2028y", "del": "x\x7fy",
}
STRING_VALUES = {  # key -> what a job writes it into
    "eval.task_data.piqa": "task YAML", f"runs.{RUN}.eval.task_data.arc_easy": "task YAML",
    "description": "plan JSON", f"runs.{RUN}.label": "plan JSON and tables",
    "data.tokenizer": "shell line", "data.olmo.root": "shell line", "data.olmo.tokenizer": "shell line",
    "longctx.proofpile": "shell line", "longctx.essays": "shell line", "longctx.pg19": "shell line",
    "rehearsal.url": "JSON",
}
for key in STRING_VALUES:
    for label, payload in CONTROL_PAYLOADS.items():
        case(f"r3-{key}-{label}", edit(key, payload), key)
# a control character in a name (a key) is named too
for label in ("newline-jinja", "tab", "nul"):
    case(f"r3-task_data-key-{label}", edit("eval.task_data", {CONTROL_PAYLOADS[label]: "allenai/piqa"}), "eval.task_data")
# quotes and templates without a line break: task data is a local file or a hub id, nothing else
TEMPLATE_PAYLOADS = {"quote": 'allenai/piqa"x', "single-quote": "allenai/piqa'x", "jinja-expr": "{{ 7 * 7 }}",
                     "jinja-stmt": "{% if true %}x{% endif %}", "yaml-flow": "a: {b: c}", "shell": "org/x;touch X",
                     "space": "allenai/piqa x", "three-parts": "a/b/c", "missing-file": "/nonexistent/piqa.jsonl",
                     "missing-relative": "./nope.json"}
for key in ("eval.task_data.piqa", f"runs.{RUN}.eval.task_data.arc_easy"):
    for label, payload in TEMPLATE_PAYLOADS.items():
        case(f"r3-{key}-{label}", edit(key, payload), key)
# names: quotes and templates in every kind of name are refused by the full-match pattern
for label, payload in {"quote": 'a"b', "jinja": "{{x}}", "stmt": "{%x%}"}.items():
    case(f"r3-table-name-{label}", edit(f"runs.{RUN}.tables", [payload]), f"runs.{RUN}.tables")
    case(f"r3-valset-name-{label}", edit("data.validation_sets", [payload]), "data.validation_sets")
    case(f"r3-task-name-{label}", edit("eval.tasks", [payload]), "eval.tasks")
    case(f"r3-standin-name-{label}", edit("eval.standin_tasks", [payload]), "eval.standin_tasks")
    case(f"r3-run-scale-{label}", edit(f"runs.{RUN}.scale", payload), f"runs.{RUN}.scale")
# a job would end in a traceback: refused at load instead
case("r3-validation_sets-empty", edit("data.validation_sets", []), "data.validation_sets")
case("r3-scale-validation_sets-empty", edit("scales.tiny.data.validation_sets", []), "scales.tiny.data.validation_sets")
# accepted wrong: a key that does nothing, a length no paper scores
case("r3-recipe_waive-without-official", edit("recipe_waive", ["tie_embeddings"]), "recipe_waive")
case("r3-ppl_seq_len-million", edit("eval.ppl_seq_len", 1048576), "eval.ppl_seq_len")
ROUND3_CASES = CASES[ROUND3_FIRST:]

# config files no reader can take: one line naming the file, never a traceback
UNREADABLE = {
    "json-nested-100000": (lambda p: p.with_suffix(".json").write_text("[" * 100000 + "]" * 100000), "nested too deeply"),
    "json-nested-500": (lambda p: p.with_suffix(".json").write_text('{"a": ' + "[" * 500 + "]" * 500 + "}"),
                        "nested too deeply"),
    "yaml-nested-500": (lambda p: p.write_text("a: " + "[" * 500 + "]" * 500 + "\n"), "nested too deeply"),
    "latin-1": (lambda p: p.write_bytes(DEFAULT_TEXT.encode() + b"description: caf\xe9\n"), "not UTF-8"),
    "json-latin-1": (lambda p: p.with_suffix(".json").write_bytes(b'{"name": "caf\xe9"}'), "not UTF-8"),
    "directory": (lambda p: p.mkdir(), "cannot read the config"),
}


@pytest.mark.parametrize(("make", "message"), [pytest.param(m, k, id=i) for i, (m, k) in UNREADABLE.items()])
def test_unreadable_config_file_is_one_line(tmp_path, make, message):
    path = tmp_path / "bad.yaml"
    make(path)
    path = next(tmp_path.iterdir())
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def refused(config) -> ConfigError:
    """The error loading and planning `config` raises (an unexpected exception fails the test:
    it would reach the user as a traceback)."""
    try:
        plan_experiment(config)
    except ShapelmError as err:
        assert isinstance(err, ConfigError), f"{type(err).__name__}: {err}"
        return err
    raise AssertionError("accepted")


@pytest.mark.parametrize(("change", "key"), [pytest.param(c, k, id=i) for i, c, k in CASES])
def test_malformed_config_is_refused_naming_the_key(change, key):
    err = refused(change(copy.deepcopy(DEFAULT)))
    assert key in str(err), str(err)
    assert "Traceback" not in str(err)


@pytest.mark.parametrize(("change", "key"), [pytest.param(c, k, id=i) for i, (c, k) in TEXT_CASES.items()])
def test_malformed_config_file_is_refused(tmp_path, change, key):
    path = tmp_path / "bad.yaml"
    path.write_text(change(DEFAULT_TEXT))
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert key in str(info.value) and str(path) in str(info.value)
    # and as a file Snakemake merged into its config (read again by the planner)
    with pytest.raises(ConfigError, match=key.split("'")[0]):
        plan_experiment(DEFAULT, configfiles=[path])


@pytest.mark.parametrize("bad", ["..", "../../victim", "a/../../b", "/tmp/victim", "x/.."])
def test_output_paths_stay_in_their_folder(bad):
    """Behind the name pattern: each output path a name becomes is resolved and confined (here
    on names the schema never saw, e.g. set by code after loading)."""
    from shapelm.plan.experiment import check_output_paths

    exp = load_experiment(DEFAULT)
    assert check_output_paths(exp) == []
    exp.raw["data"]["validation_sets"] = ["default_web", bad]
    (err,) = check_output_paths(exp)
    assert err.startswith(f"data.validation_sets: {bad!r} would put outputs at ")
    exp.raw["data"]["validation_sets"] = ["default_web"]
    exp.runs[RUN]["tables"] = [bad]  # results/EXP/.targets/table_NAME.done
    target = (Path("results") / "default" / ".targets" / f"table_{bad}.done").resolve()
    expected = f"runs.{RUN}.tables: {bad!r} would put outputs at {target}, outside results/default/"
    assert check_output_paths(exp)[:1] == ([] if "/" not in bad else [expected])


def test_duplicate_key_names_its_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(replace_text("  factor: 8\n", "  factor: 8\n  factor: 4\n")(DEFAULT_TEXT))
    line = path.read_text().splitlines().index("  factor: 4") + 1
    with pytest.raises(ConfigError, match=f"duplicate key 'factor' \\(line {line}; first given on line {line - 1}\\)"):
        load_yaml(path)


def test_duplicate_json_key_is_refused(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_yaml(path)


# -- valid controls ------------------------------------------------------------------------------
VALID = {
    "lws-run-under-scale-with-n_heads": edit(f"runs.{RUN}.arch", LWS),
    "token-counts-as-strings": edits(edit("scales.tiny.train.total_tokens", "2.4576e5"),
                                     edit("scales.tiny.train.warmup_tokens", "20480")),
    "token-count-whole-float": edit("scales.tiny.train.batch_tokens", 2048.0),
    "max_seq_len-above-seq_len": edit("model_defaults.max_seq_len", 256),
    # scored beyond max_seq_len (128 here) on purpose: RoPE has no length limit (check_contexts)
    "ppl_seq_len-beyond-max_seq_len": edit("eval.ppl_seq_len", 512),
    "warmup-within-whole-steps": edits(edit("scales.tiny.train.total_tokens", 246000),
                                       edit("scales.tiny.train.warmup_tokens", 245760)),
    "decode-peer-length": edit("decode.peer_length", 1024),
    "results-empty": edit("results", {}),
    "task_data-hub-id": edit("eval.task_data.piqa", "allenai/ai2_arc:ARC-Easy@test"),
    "task_data-local-file": edit("eval.task_data.piqa", str(ROOT / "tests" / "pins" / "run_pins.json")),
    "label-with-quotes-and-braces": edit(f"runs.{RUN}.label", 'Hourglass "k=5" {{ not a template }}'),
    "dashed-names": edits(edit("name", "tiny-demo_2"), rename("scales.tiny", "tiny-cpu")),
    "task-set-and-task": edit(f"runs.{RUN}.eval", {"tasks": ["heldout_mc", "shapelm_heldout_ce"]}),
    "variable-width": edit(f"runs.{RUN}.arch", VW),
    "variable-width-embeddings-at-layer-widths": edit(
        f"runs.{RUN}.arch", {**VW, "original_input_width": False, "original_output_width": False}),
}


@pytest.mark.parametrize("change", [pytest.param(c, id=i) for i, c in VALID.items()])
def test_valid_variant_is_accepted(change):
    plan_experiment(change(copy.deepcopy(DEFAULT)))


def test_inputs_may_lie_outside_the_repository(tmp_path):
    """An input (here RULER's essays) is read, never written: any absolute path is fine."""
    essays = tmp_path / "PaulGrahamEssays.json"
    essays.write_text(json.dumps({"text": "An essay. " * 200}))
    exp = plan_experiment(edit("longctx.essays", str(essays))(copy.deepcopy(DEFAULT)))
    assert exp.section("longctx")["essays"] == str(essays)


def test_lws_run_takes_no_n_heads_from_its_scale():
    exp = plan_experiment(edit(f"runs.{RUN}.arch", LWS)(copy.deepcopy(DEFAULT)))
    run = exp.run(RUN)
    assert "n_heads" not in run["arch"]
    assert {layer["attention"]["head_dim"] for layer in run["model"]["layers"]} == {16}
    assert exp.run("hg906m_conv")["arch"]["n_heads"] == 4  # kinds that take heads still do


@pytest.mark.parametrize("name", ["default", "ci", "paper"])
def test_shipped_configs_validate(name, monkeypatch):
    monkeypatch.setenv("SHAPELM_ALLOW_MISSING_INPUTS", "1")  # paper's inputs are not on CI
    exp = plan_experiment(ROOT / "configs" / f"{name}.yaml")
    assert exp.runs


def test_loader_fills_section_defaults_the_rules_read():
    exp = load_experiment(ROOT / "configs" / "ci.yaml")
    assert exp.section("decode") == {"mixers": ["mha", "gqa", "mla"],
                                     "lengths": [4096, 8192, 16384, 32768, 65536, 131072], "peer_length": None}
    assert exp.section("longctx")["factor"] == 16 and exp.section("longctx")["finetune_steps"] == 400
    given = load_experiment(ROOT / "configs" / "default.yaml")
    assert given.section("longctx")["factor"] == 8  # what the config says wins


# -- through snakemake -n, as a user would -------------------------------------------------------
SNAKEMAKE_CASES = {
    "injection-in-corpus-vocab": (edit("data.default_corpus.vocab_size", "2048 --help; touch X; exit 1 #"),
                                  "data.default_corpus.vocab_size"),
    "valset-escapes-output-tree": (edit("data.validation_sets", ["../../../../../../victim"]), "data.validation_sets"),
    # a line break in task data would add a Jinja `doc_to_text` to the task YAML lm-eval renders
    "task_data-injection": (edit("eval.task_data.piqa", CONTROL_PAYLOADS["newline-jinja"]), "eval.task_data.piqa"),
    "task_data-jinja": (edit("eval.task_data.piqa", TEMPLATE_PAYLOADS["jinja-expr"]), "eval.task_data.piqa"),
    # the field's shapes (issue's bad input): one line naming the key at `snakemake -n`
    "variable-width-unreachable-bottleneck": (edit(f"runs.{RUN}.arch", {**VW, "bottleneck": 0.01}),
                                              f"runs.{RUN}.arch.bottleneck"),
    "head-count-does-not-divide-width": (edit(f"runs.{RUN}.arch", HEADS | {"heads": [3, 3, 3, 3]}),
                                         f"runs.{RUN}.arch.heads"),
    "loops-below-one": (edit(f"runs.{RUN}.arch.loops", 0), f"runs.{RUN}.arch.loops"),
}


@pytest.mark.parametrize(("change", "key"), [pytest.param(c, k, id=i) for i, (c, k) in SNAKEMAKE_CASES.items()])
def test_snakemake_dry_run_refuses_without_traceback(tmp_path, change, key):
    path = tmp_path / "bad.json"  # JSON is YAML: Snakemake and shapelm read it alike
    path.write_text(json.dumps(change(copy.deepcopy(DEFAULT))))
    proc = _dry_run(tmp_path, path)
    assert proc.returncode != 0
    assert f"shapelm: error: {path}: " in proc.stderr and key in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and 'File "' not in proc.stderr, proc.stderr
    assert not (tmp_path / "X").exists()


# Round two through snakemake -n: Snakemake reads these files itself before the Snakefile runs.
SNAKEMAKE_TEXT_CASES = {
    "alias-bomb": (lambda text: text + alias_bomb("description"), "aliases expand"),
    "gpu_mem_gb-nan": (lambda text: text + "cluster: {node: {gpu_mem_gb: .nan}}\n", "cluster.node.gpu_mem_gb"),
    "seeds-floats": (replace_text("  hg906m_hg:   {scale: tiny, ", "  hg906m_hg:   {scale: tiny, seeds: [1.0, 2.0], "),
                     "runs.hg906m_hg.seeds"),
}


@pytest.mark.parametrize(("change", "key"), [pytest.param(c, k, id=i) for i, (c, k) in SNAKEMAKE_TEXT_CASES.items()])
def test_snakemake_dry_run_refuses_round_two(tmp_path, change, key):
    path = tmp_path / "bad.yaml"
    path.write_text(change(DEFAULT_TEXT))
    proc = _dry_run(tmp_path, path)
    assert proc.returncode != 0
    assert f"shapelm: error: {path}" in proc.stderr and key in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and 'File "' not in proc.stderr, proc.stderr


def test_snakemake_dry_run_refuses_a_duplicate_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(replace_text("  hg906m_hg:", "  hg906m_conv: {scale: tiny, arch: {kind: conventional}}\n"
                                 "  hg906m_hg:")(DEFAULT_TEXT))
    proc = _dry_run(tmp_path, path)
    assert proc.returncode != 0 and "duplicate key 'hg906m_conv'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def _dry_run(workdir: Path, configfile: Path) -> subprocess.CompletedProcess:
    snakemake = Path(sys.executable).with_name("snakemake")
    return subprocess.run(
        [str(snakemake), "-n", "--quiet", "rules", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(workdir), "--configfile", str(configfile)],
        check=False, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_snakemake_dry_run_runs_no_yte_template(tmp_path):
    """Snakemake reads --configfile before the Snakefile runs, evaluating YTE templates: the
    environment's strict loader (shapelm.commands.yte_guard) refuses the file before any of it runs."""
    marker = tmp_path / "ran"
    path = tmp_path / "template.yaml"
    path.write_text("__use_yte__: true\n" + replace_text(
        "name: default\n", f"name: ?__import__('os').system('touch {marker}') or 'default'\n")(DEFAULT_TEXT))
    proc = _dry_run(tmp_path, path)
    assert not marker.exists(), "a YTE template ran at snakemake -n"
    assert proc.returncode != 0 and f"shapelm: error: {path}: __use_yte__" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_workflow_refuses_to_plan_without_the_strict_loader(monkeypatch, tmp_path):
    import types

    from shapelm.commands import yte_guard

    unguarded = types.SimpleNamespace(_load_configfile=lambda path, filetype="Config": {"ran": True})
    monkeypatch.setitem(sys.modules, yte_guard.TARGET, unguarded)
    with pytest.raises(SystemExit, match="shapelm.commands.yte_guard install"):
        yte_guard.workflow_check()
    yte_guard.patch(unguarded)
    yte_guard.workflow_check()
    template = tmp_path / "t.yaml"
    template.write_text("__use_yte__: true\nname: ?1\n")
    with pytest.raises(SystemExit, match="__use_yte__"):
        unguarded._load_configfile(template)


def test_merge_keys_are_accepted(tmp_path):
    """`<<: *base` (YAML 1.1 merge keys, which Snakemake's loader takes too): the mapping's own
    keys win over the merged ones; a key given twice among its own is still an error."""
    path = tmp_path / "merge.yaml"
    text = DEFAULT_TEXT.replace("  hg906m_hg:   {scale: tiny, ",
                                "  hg906m_hg:   {<<: *tiny_defaults, label: own label, ").replace(
        "  hg906m_conv: {scale: tiny, ", "  hg906m_conv: &tiny_defaults {scale: tiny, label: merged, ", 1)
    path.write_text(text)
    exp = load_experiment(path)
    spec = exp.raw["runs"][RUN]
    assert spec["label"] == "own label" and spec["scale"] == "tiny"
    assert spec["arch"]["kind"] == "hourglass"  # its own arch, not the merged conventional one
    assert exp.raw["runs"]["hg906m_conv"]["label"] == "merged"
    plan_experiment(exp.raw, configfiles=[path])
