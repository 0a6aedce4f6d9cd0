"""The paper at CPU size: `shapelm rehearse -- --profile slurm [TARGET]`.

A rehearsal is configs/paper.yaml with everything kept but size: the same 74 runs, rules, SLURM
resource shapes (1 GPU, 8 GPUs, 2 and 4 nodes, one process per GPU), segment chains (at most 2
jobs), recipes and data source kinds, with widths / 32, heads / 8, layers / 4, sequences / 64,
vocabularies those of small stand-in tokenizers and 6 optimizer steps per run. Its inputs are real formats made from the
embedded corpus: OLMo-2 uint32 shards read over HTTP byte ranges, the v3-small validation
files, tokenizers in a Hugging Face cache under the paper's repo ids, PG19 / Proof-pile / essay /
QA files (shapelm.data.rehearsal, shapelm.longctx.rehearsal). Jobs see no GPU: each "GPU" is a
gloo process on the CPU.

`shapelm rehearse` writes the inputs (once), serves them over HTTP, and runs Snakemake with
`--config rehearsal={inputs: DIR, url: URL}`; the Snakefile then plans `rehearsal_config(...)`
instead of the config it was given (outputs under work/rehearsal, results/rehearsal).

What differs from the paper besides size (documented in docs/TRAINING.md): each run's own task
set (OLMo's, Tapered's) runs through lm-eval on stand-in data cut from the validation text (the
hub's datasets are out of reach; docs/EVALUATION.md "Stand-in data"), beside the held-out tasks.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shapelm.errors import ConfigError

WIDTH_DIVISOR = 32
HEAD_DIVISOR = 8
SEQ_DIVISOR = 64
WIDTH_KEYS = ("d_model", "d_h", "d_ff", "d_attn")
HEAD_KEYS = ("n_heads", "n_kv_heads")
SEQ_KEYS = ("window",)  # Titans' attention window: / SEQ_DIVISOR with the sequences it spans
LAYER_DIVISOR = 4  # 32 layers x 32 gloo ranks of FSDP collectives on two cores take minutes a step
MIN_STEPS = 6
MAX_SEGMENTS = 2  # a chain's two kinds of job (train_segment, then train) at the fewest 32-rank starts
OVERRIDES_FILE = "overrides.json"


def _round_to(value: float, multiple: int) -> int:
    return max(multiple, multiple * round(value / multiple))


def shrink_arch(arch: dict[str, Any], scale_heads: int | None) -> dict[str, Any]:
    """Widths / 32 (multiples of 8, and of 8 x heads where a width sets the head size), heads
    / 8, explicit head_dim / 8 (even, for RoPE), layers / 4 (at least 3, a multiple of the
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


def write_inputs(inputs: Path) -> dict[str, Any]:
    """Every input the rehearsal reads, in its real format; the overrides file last."""
    from shapelm.data.rehearsal import write_data_inputs
    from shapelm.longctx.rehearsal import write_longctx_inputs
    from shapelm.config import merge, write_json_atomic

    inputs.mkdir(parents=True, exist_ok=True)
    overrides = merge(write_data_inputs(inputs), write_longctx_inputs(inputs))
    write_json_atomic(inputs / OVERRIDES_FILE, overrides)
    return overrides


def _rehearse(args) -> int:
    from shapelm.data.rehearsal import serve  # byte-range requests, as the OLMo data host serves
    inputs = Path(args.inputs).resolve()
    if args.rewrite or not (inputs / OVERRIDES_FILE).exists():
        print(f"shapelm rehearse: writing inputs to {inputs}", file=sys.stderr, flush=True)
        write_inputs(inputs)
    # The same port every time for the same inputs: the URL is part of the slices' plan, so a
    # rerun on another port would redo (and first refuse) the slices already written.
    port = args.port if args.port else 20000 + int.from_bytes(str(inputs).encode(), "big") % 20000
    try:
        server, url = serve(inputs, port=port, host=args.host)
    except OSError as err:
        raise ConfigError(f"rehearse: cannot serve on {args.host}:{port} ({err}); pass --port") from None
    print(f"shapelm rehearse: serving {inputs} at {url}", file=sys.stderr, flush=True)
    extra = list(args.snakemake_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    cmd = [str(Path(sys.executable).parent / "snakemake"), *extra,
           "--config", f"rehearsal={{inputs: {inputs}, url: '{url}'}}"]
    print("shapelm rehearse: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        return subprocess.call(cmd)
    finally:
        server.shutdown()
        server.server_close()


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("rehearse", help="run the paper's DAG at CPU size (inputs made here)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", default="work/rehearsal-inputs", help="where the inputs are written")
    p.add_argument("--host", default="127.0.0.1", help="address the compute nodes reach this host at")
    p.add_argument("--port", type=int, default=0, help="HTTP port (default: one fixed per --inputs)")
    p.add_argument("--rewrite", action="store_true", help="write the inputs again")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, metavar="-- SNAKEMAKE_ARGS",
                   help="Snakemake's arguments, after --")
    p.set_defaults(func=_rehearse)
