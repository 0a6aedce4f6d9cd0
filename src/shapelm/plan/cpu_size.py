"""An experiment at CPU size: what `shapelm rehearse` plans instead of the config it is given.

`rehearsal_config(config)` is the config with everything kept but size (the runs, rules, SLURM
resource shapes, segment chains, recipes and data source kinds; widths, heads, layers, sequences,
vocabularies and steps shrunk as the constants below say), its inputs the stand-ins `shapelm
rehearse` writes and serves (shapelm.commands.rehearse, whose docstring tells the whole
rehearsal). `apply_environment` sets what the rehearsal's jobs need in the environment. The
Snakefile calls both through `shapelm.plan.checks.plan_experiment` when its config holds a
`rehearsal:` section.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
from pathlib import Path
from typing import Any

from shapelm.errors import ConfigError

WIDTH_DIVISOR = 32
HEAD_DIVISOR = 8
SEQ_DIVISOR = 64
WIDTH_KEYS = ("d_model", "d_h", "d_ff", "d_attn")
HEAD_KEYS = ("n_heads", "n_kv_heads")
SEQ_KEYS = ("window",)  # Titans' attention window: / SEQ_DIVISOR with the sequences it spans
# FSDP's collectives go layer by layer: at layers / 4 a step of the 4-node run's 32 gloo ranks on
# two cores cost ~8 CPU-seconds a rank, most of the rehearsal's time.
LAYER_DIVISOR = 8
MIN_STEPS = 4  # two segments of two steps: a resume, a preemption before step 3, a validation in each
MAX_SEGMENTS = 2  # a chain's two kinds of job (train_segment, then train) at the fewest 32-rank starts
OVERRIDES_FILE = "overrides.json"


def _round_to(value: float, multiple: int) -> int:
    return max(multiple, multiple * round(value / multiple))


def shrink_arch(arch: dict[str, Any], scale_heads: int | None) -> dict[str, Any]:
    """Widths / 32 (multiples of 8, and of 8 x heads where a width sets the head size), heads
    / 8, explicit head_dim / 8 (even, for RoPE), layers / 8 (at least 3, a multiple of the
    block count for `blocks`; LWS keeps its 12 / 18), Titans' window / 64 with the sequences;
    K, kinds, schedules and ratios unchanged."""
    out = copy.deepcopy(arch)
    for key in SEQ_KEYS:
        if key in out:
            out[key] = max(1, int(out[key]) // SEQ_DIVISOR)
    if "n_layers" in out and out.get("kind") != "lws":  # LWS variants exist at 12 and 18 only
        blocks = len(out.get("ratios", [])) or 1
        layers = max(3, round(int(out["n_layers"]) / LAYER_DIVISOR))
        out["n_layers"] = blocks * math.ceil(layers / blocks)
    heads = out.get("n_heads", scale_heads)
    small_heads = max(1, int(heads) // HEAD_DIVISOR) if heads else None
    for key in HEAD_KEYS:
        if key in out:
            out[key] = max(1, int(out[key]) // HEAD_DIVISOR)
    if "n_kv_heads" in out and small_heads and small_heads % out["n_kv_heads"]:
        out["n_kv_heads"] = 1
    if "head_dim" in out:
        out["head_dim"] = max(4, 2 * round(int(out["head_dim"]) / HEAD_DIVISOR / 2))
    sets_head_size = "d_attn" if "d_attn" in out else "d_model"
    for key in WIDTH_KEYS:
        if key in out:
            # Tapered widths start at start x d_ff in multiples of 16 (start 1.375 = 11/8).
            multiple = 128 if key == "d_ff" else 8
            if key == sets_head_size and small_heads and "head_dim" not in out:
                multiple = math.lcm(8, 2 * small_heads)
            out[key] = _round_to(int(out[key]) / WIDTH_DIVISOR, multiple)
    return out


@functools.lru_cache(maxsize=None)
def _tokenizer_vocab(inputs: Path, spec: str) -> int | None:
    """The vocabulary of a stand-in tokenizer in the rehearsal's HF cache, padded to 64."""
    from shapelm.data.tokenizer import load_tokenizer

    old = os.environ.get("HF_HUB_CACHE")
    os.environ["HF_HUB_CACHE"] = str(inputs / "hf" / "hub")
    try:
        size = load_tokenizer(spec).get_vocab_size(with_added_tokens=True)
    except Exception:  # noqa: BLE001 - not a stand-in: keep the config's value
        return None
    finally:
        if old is None:
            os.environ.pop("HF_HUB_CACHE", None)
        else:
            os.environ["HF_HUB_CACHE"] = old
    return 64 * math.ceil(size / 64)


def _substitute(obj: Any, root: str, url: str) -> Any:
    if isinstance(obj, dict):
        return {k: _substitute(v, root, url) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_substitute(v, root, url) for v in obj]
    if isinstance(obj, str):
        return obj.replace("{url}", url).replace("{root}", root)
    return obj


def load_overrides(inputs: str | os.PathLike, url: str | None = None) -> dict[str, Any]:
    inputs = Path(inputs).resolve()
    path = inputs / OVERRIDES_FILE
    if not path.exists():
        raise ConfigError(f"rehearsal.inputs: {path} not found; write it with `shapelm rehearse`")
    return _substitute(json.loads(path.read_text()), str(inputs), url or str(inputs))


def rehearsal_config(config: dict[str, Any]) -> dict[str, Any]:
    """The CPU-sized copy of an experiment config (see the module docstring)."""
    from shapelm.config import merge
    from shapelm.plan.jobs import train_plan

    settings = config["rehearsal"]
    inputs = Path(settings["inputs"]).resolve()
    paper = {k: v for k, v in copy.deepcopy(config).items() if k != "rehearsal"}
    overrides = load_overrides(inputs, settings.get("url"))
    out = copy.deepcopy(paper)
    out["name"] = "rehearsal"
    out["description"] = f"CPU rehearsal of {paper.get('name', 'the experiment')} (shapelm.commands.rehearse)"

    # Segment counts as the paper's time limits make them, so the chains are rehearsed too.
    from shapelm.plan.experiment import load_experiment

    paper_exp = load_experiment(paper)
    segments: dict[str, int] = {}
    for name, run in paper_exp.runs.items():
        segments[run["scale"]] = max(segments.get(run["scale"], 1), train_plan(paper_exp, name).segments)

    out["cluster"] = {**paper.get("cluster", {}), "signal_lead_s": 60, "startup_min": 1}
    # Checkpoints at segment ends and on signals only: gathering a full FSDP state over 32
    # gloo ranks on two cores takes a minute.
    out["train_defaults"] = {**paper.get("train_defaults", {}), "checkpoint_every": 1000,
                             "log_every": 1, "precision": "auto"}
    shrunk_train: dict[str, dict[str, int]] = {}
    for scale_name, scale in out["scales"].items():
        if "n_heads" in scale:
            scale["n_heads"] = max(1, int(scale["n_heads"]) // HEAD_DIVISOR)
        res = scale.setdefault("resources", {})
        world = int(res.get("gpus", 1) or 1) * int(res.get("nodes", 1))
        train = scale.setdefault("train", {})
        merged = merge(paper.get("train_defaults", {}), train)
        seq = max(8, int(merged.get("seq_len", 4096)) // SEQ_DIVISOR)
        micro = int(merged.get("micro_batch_size", 1))
        batch_seqs = max(8, world * micro)
        steps = max(MIN_STEPS, 2 * min(MAX_SEGMENTS, segments.get(scale_name, 1)))
        train.update(seq_len=seq, batch_tokens=batch_seqs * seq, total_tokens=steps * batch_seqs * seq,
                     warmup_tokens=batch_seqs * seq)
        if merged.get("eval_every"):  # two evaluations during training, a few instances each
            train.update(eval_every=max(1, steps // 2) * batch_seqs * seq,
                         eval_heldout_sequences=min(int(merged.get("eval_heldout_sequences", 0)), batch_seqs),
                         eval_max_instances=4)
        train.pop("fp8", None)  # float8 needs a CUDA GPU (SM89+); the rehearsal runs on CPU
        shrunk_train[scale_name] = {k: train[k] for k in ("seq_len", "batch_tokens", "total_tokens", "warmup_tokens")}
        res["segments"] = min(MAX_SEGMENTS, segments.get(scale_name, 1))
        res["runtime_min"] = 20
        res.pop("mem_mb", None)
    for scale in out["scales"].values():
        scale.pop("eval", None)  # every run is scored at the rehearsal's one length (eval below)
    data = out.setdefault("data", {})
    tokenizer_of = {name: merge(data, scale.get("data", {})).get("tokenizer")
                    for name, scale in out["scales"].items()}
    default_tasks = paper.get("eval", {}).get("tasks", ["olmo"])  # the runs without their own
    for run in out["runs"].values():
        scale = out["scales"][run["scale"]]
        arch = merge(paper.get("model_defaults", {}), run["arch"])
        small = shrink_arch(run["arch"], scale.get("n_heads") and scale["n_heads"] * HEAD_DIVISOR)
        tok = tokenizer_of[run["scale"]]
        vocab = _tokenizer_vocab(inputs, tok) if tok else None
        if vocab and "vocab_size" in arch:
            small["vocab_size"] = vocab
        run["arch"] = small
        paper_tasks = run.get("eval", {}).get("tasks", default_tasks)
        run["eval"] = {**run.get("eval", {}), "tasks": ["heldout", *paper_tasks]}
        if run.get("recipe", out.get("recipe", "paper")) != "paper":
            # a released-code recipe ranks above the scale's settings: the CPU sizes go on the run
            run["train"] = {**run.get("train", {}), **shrunk_train[run["scale"]], "fp8": False}
    if "vocab_size" in out.get("model_defaults", {}):
        tok = data.get("tokenizer")
        vocab = _tokenizer_vocab(inputs, tok) if tok else None
        if vocab:
            out["model_defaults"]["vocab_size"] = vocab
    out["eval"] = {**paper.get("eval", {}), "ppl_seq_len": 64, "ppl_max_instances": 8,
                   "batch_size": 8, "tasks": ["heldout", *default_tasks],
                   "standin_tasks": ["olmo", "tapered"], "heldout_examples": 40, "limit": 10}
    lc = out.setdefault("longctx", {})
    # The paper's s=16 from the rehearsal's 64-token pretraining: 1,024 tokens, the shortest
    # context where RULER's templates leave room for a haystack.
    # (finetuned on 512-token segments: one a rank on 32 ranks.)
    lc.update(factor=16, lengths=[512, 1024], seq_len=512, finetune_steps=2, finetune_batch=32,
              proofpile_min_tokens=1024, proofpile_num_docs=2, ruler_samples=2)
    lc.pop("original_length", None)
    if "resources" in lc:  # the finetune's job shape stays; its request is the rehearsal's
        lc["resources"] = {**lc["resources"], "runtime_min": 20}
    out["decode"] = {**paper.get("decode", {}), "lengths": [256, 512]}
    return merge(out, {k: v for k, v in overrides.items() if k != "env"})


def apply_environment(config: dict[str, Any]) -> None:
    """Environment the rehearsal's jobs need (the stand-in tokenizers' HF cache)."""
    settings = config.get("rehearsal")
    if settings:
        env = load_overrides(settings["inputs"], settings.get("url")).get("env", {})
        os.environ.update({k: str(v) for k, v in env.items()})
        # Up to 32 "GPUs" share this machine's cores: one thread each, not one per core each.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
