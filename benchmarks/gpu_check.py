"""One GPU, one command, under 10 minutes: what the paper-scale runs will get from a GPU.

    bash benchmarks/gpu_check.sh                  # on one H100/H200 (writes benchmarks/results/)
    .venv/bin/python benchmarks/gpu_check.py --cpu-smoke   # the same code path, tiny, on CPU

Measures, through the trainer's own build (shapelm.train.parallel.build_parallel: meta build,
per-shard seeded init, activation checkpointing, compiled blocks, torchao float8):

* training tokens/s, MFU and peak memory of the 906M conventional and hourglass shapes and of
  an 8B-shaped slice (the first 4 layers of each 8B shape, full vocabulary): the paper setting
  of each scale first (configs/paper.yaml: compiled, FP8, its activation checkpointing; rows
  marked paper_settings, which `shapelm plan` reads), then eager vs compiled, bf16 vs FP8 and
  each activation-checkpointing mode, and the largest micro-batch that fits;
* checkpoint save / load seconds of the 906M conventional model and AdamW state (the
  trainer's fsynced torch.save);
* decode latency for Table 12 (906M pair, MHA/GQA/MLA, 32k/64k/128k; shapelm.decode.bench).

Every part runs against one time budget (`--budget-s`, default 540 s) in that order of
importance; what does not fit is recorded as skipped. The JSON (GPU name, versions, every row)
goes to benchmarks/results/gpu_check-<gpu>.json and a table is printed. `--cpu-smoke` runs
every part on tiny shapes (compile with the eager backend; FP8 is refused off CUDA and says
so) and writes nothing under benchmarks/results unless --out says so.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.accounting import flops_per_token
from shapelm.config import TrainRecipe, run_model_config, run_recipe
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ShapelmError
from shapelm.model.config import RECOMPUTE_MODES, ModelConfig
from shapelm.train.distributed import DistEnv
from shapelm.train.observe import peak_flops_for

ROOT = Path(__file__).resolve().parents[1]
SHAPES = (("hg906m_conv", None), ("hg906m_hg", None), ("hg8b_conv", 4), ("hg8b_hg", 4))
SEQ_LEN = 4096
LOSS_CHUNK = 4096


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def shape_config(run: dict, layers: int | None, smoke: bool) -> ModelConfig:
    cfg = run_model_config(run)
    if layers:
        cfg.layers = cfg.layers[:layers]
    if smoke:  # same kinds of layers, tiny widths
        scale = 64 / cfg.d_model
        shrink = [_shrink_layer(layer, scale) for layer in cfg.layers[:2]]
        cfg = ModelConfig(vocab_size=512, d_model=64, layers=shrink, max_seq_len=128)
    return cfg


def _shrink_layer(layer, scale: float):
    from shapelm.model.config import AttentionShape, LayerShape

    attn = layer.attention and AttentionShape(n_heads=2, n_kv_heads=2, head_dim=16)
    return LayerShape(attn, tuple(max(16, 16 * round(w * scale / 16)) for w in layer.ffn_widths))


def train_row(cfg, scale: str, name: str, *, compile_: bool, fp8: bool, recompute: str,
              micro_batch: int, seq_len: int, device: torch.device, steps: int, smoke: bool) -> dict:
    """tokens/s, MFU and peak memory of `steps` timed updates after 2 warm-up ones."""
    from shapelm.train.parallel import autocast_dtype, build_parallel, make_optimizer

    row = {"run": name, "scale": scale, "layers": cfg.n_layers, "compile": compile_, "fp8": fp8,
           "activation_checkpointing": recompute, "micro_batch": micro_batch, "seq_len": seq_len}
    recipe = TrainRecipe.from_dict({
        "batch_tokens": micro_batch * seq_len, "seq_len": seq_len, "total_tokens": 2 * micro_batch * seq_len,
        "micro_batch_size": micro_batch, "compile": compile_ and not smoke, "fp8": fp8,
        "activation_checkpointing": recompute, "loss_chunk_tokens": LOSS_CHUNK, "precision": "auto"})
    env = DistEnv(device=device)
    model = optimizer = None
    try:
        # each row's model compiles afresh: the recompile limit counts one model's shapes, and
        # rows of other shapes and recompute modes in this process must not use it up
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        amp = autocast_dtype(recipe, device)
        model, _ = build_parallel(cfg, recipe, env, None, amp)
        if compile_ and smoke:  # the grouping code path, without a C++ toolchain's minutes
            from shapelm.model.compile import compile_blocks

            compile_blocks(model, backend="eager")
        optimizer = make_optimizer(model, recipe, env, fsdp=False)
        x = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len), device=device)
        labels = x.roll(-1, 1)

        def step():
            with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                out = model(x, labels, z_loss_multiplier=1e-5, return_logits=False,
                            loss_chunk_tokens=LOSS_CHUNK)
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        t0 = time.perf_counter()
        for _ in range(2):
            step()
        _sync(device)
        row["warmup_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        seconds = time.perf_counter() - t0
        tps = steps * micro_batch * seq_len / seconds
        peak = peak_flops_for(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        row.update(tokens_per_s=round(tps, 1), step_s=round(seconds / steps, 4),
                   mfu=round(flops_per_token(cfg, seq_len).train * tps / peak, 4) if peak else None,
                   peak_mem_gib=round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                   if device.type == "cuda" else None)
    except torch.cuda.OutOfMemoryError:
        row["error"] = "out of memory"
    except ShapelmError as err:  # e.g. FP8 refused off CUDA / below SM89
        row["error"] = str(err)
    finally:
        model = optimizer = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def checkpoint_seconds(cfg, device: torch.device, out_dir: Path) -> dict:
    """Save and load of the full model + AdamW state with the trainer's fsynced torch.save."""
    from shapelm.train import checkpoint as ckpt
    from shapelm.train.parallel import build_parallel, make_optimizer

    recipe = TrainRecipe.from_dict({"batch_tokens": SEQ_LEN, "seq_len": SEQ_LEN, "total_tokens": 2 * SEQ_LEN})
    env = DistEnv(device=device)
    model, _ = build_parallel(cfg, recipe, env, None, None)
    optimizer = make_optimizer(model, recipe, env, fsdp=False)
    for p in model.parameters():  # AdamW state exists after a first step
        p.grad = torch.zeros_like(p)
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    path = out_dir / "state.pt"
    t0 = time.perf_counter()
    cpu = {"model": {k: v.detach().cpu() for k, v in state["model"].items()},
           "optimizer": state["optimizer"]}
    ckpt.save_torch(cpu, path)
    saved = time.perf_counter() - t0
    size = path.stat().st_size
    t0 = time.perf_counter()
    loaded = ckpt.load_torch(path)
    model.load_state_dict(loaded["model"])
    _sync(device)
    load = time.perf_counter() - t0
    del model, optimizer, state, cpu, loaded
    gc.collect()
    return {"save_s": round(saved, 2), "load_s": round(load, 2), "bytes": size,
            "method": "gathered torch.save (fsynced) + load_state_dict"}


def decode_table12(smoke: bool) -> dict:
    from shapelm.decode.bench import BenchSettings, run_benchmark
    from shapelm.decode.specs import PAIRS, resolve_spec

    pair = "cpu" if smoke else "906m"
    lengths = [256, 512] if smoke else [32768, 65536, 131072]
    settings = BenchSettings(warmup=2 if smoke else 5, iters=3 if smoke else 20)
    arms = [resolve_spec(name) for name in PAIRS[pair]]
    return run_benchmark(arms, ["mha", "gqa", "mla"], lengths, settings)


def plan_variants(paper: dict) -> list[tuple[str, dict]]:
    """(group, settings) in order of importance; paper = the scale's own settings."""
    out = [("paper", paper), ("eager", {**paper, "compile": False, "fp8": False}),
           ("bf16", {**paper, "fp8": False})]
    for mode in RECOMPUTE_MODES:  # against the "bf16" row: compiled, bf16
        if mode != paper["recompute"]:
            out.append(("recompute", {**paper, "fp8": False, "recompute": mode}))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: checks the script")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--steps", type=int, default=None, help="timed updates per row (default 5; smoke 1)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/gpu_check-<gpu>.json)")
    args = ap.parse_args(argv)
    smoke = args.cpu_smoke or not torch.cuda.is_available()
    if smoke and not args.cpu_smoke:
        print("no CUDA device: running the CPU smoke mode (measures nothing about a GPU)")
    device = torch.device("cpu" if smoke else "cuda")
    gpu = "cpu-smoke" if smoke else torch.cuda.get_device_name(device)
    steps = args.steps or (1 if smoke else 5)
    seq = 64 if smoke else SEQ_LEN
    budget = Budget(args.budget_s)
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    result = {"gpu": gpu, "smoke": smoke, "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "seq_len": seq, "training": [], "max_micro_batch": {}, "skipped": []}
    shapes = []
    for name, layers in SHAPES:
        run = exp.run(name)
        recipe = run_recipe(run)
        paper = {"compile": True, "fp8": recipe.fp8, "recompute": recipe.activation_checkpointing,
                 "micro_batch": 1 if smoke else recipe.micro_batch_size}
        label = f"{name}[:{layers}]" if layers else name
        shapes.append((label, run["scale"], shape_config(run, layers, smoke), paper))

    def train(label, scale, cfg, settings, group):
        if budget.left() < (5 if smoke else 45):
            result["skipped"].append(f"{label} {group} {settings}")
            return None
        row = train_row(cfg, scale, label, compile_=settings["compile"], fp8=settings["fp8"],
                        recompute=settings["recompute"], micro_batch=settings["micro_batch"],
                        seq_len=seq, device=device, steps=steps, smoke=smoke)
        row["group"], row["paper_settings"] = group, group == "paper"
        result["training"].append(row)
        print(_format_row(row), flush=True)
        return row

    print(f"{'run':<16} {'group':<9} {'compile':>7} {'fp8':>5} {'recompute':>9} {'mb':>3} "
          f"{'tokens/s':>10} {'MFU':>6} {'peak GiB':>8}  note")
    for label, scale, cfg, paper in shapes:  # 1. the settings the paper runs will use
        train(label, scale, cfg, paper, "paper")
    with tempfile.TemporaryDirectory() as tmp:  # 2. checkpoint I/O
        if budget.left() > 30:
            result["checkpoint"] = {"run": "hg906m_conv", **checkpoint_seconds(shapes[0][2], device, Path(tmp))}
            print(f"checkpoint 906M conv: save {result['checkpoint']['save_s']} s, load "
                  f"{result['checkpoint']['load_s']} s, {result['checkpoint']['bytes'] / 1e9:.2f} GB", flush=True)
    if budget.left() > (5 if smoke else 150):  # 3. Table 12 decode latency
        from shapelm.decode.bench import format_table

        result["decode"] = decode_table12(smoke)
        print(format_table(result["decode"]), flush=True)
    else:
        result["skipped"].append("decode table 12")
    for label, scale, cfg, paper in shapes:  # 4. eager vs compiled, bf16 vs FP8, recompute modes
        for group, settings in plan_variants(paper)[1:]:
            train(label, scale, cfg, settings, group)
    for label, scale, cfg, paper in shapes:  # 5. the largest micro-batch that fits (eager bf16)
        fits, mb = None, paper["micro_batch"]
        while mb <= (2 if smoke else 16):
            row = train(label, scale, cfg, {**paper, "compile": False, "fp8": False, "micro_batch": mb},
                        "max_mb")
            if row is None or "error" in row:
                break
            fits, mb = mb, mb * 2
        result["max_micro_batch"][label] = fits
    out = Path(args.out) if args.out else None
    if out is None and not smoke:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
        out = ROOT / "benchmarks" / "results" / f"gpu_check-{slug}.json"
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"wrote {out}")
    print(f"largest micro-batch (eager bf16, the scale's recompute): {result['max_micro_batch']}")
    if result["skipped"]:
        print(f"skipped for time: {len(result['skipped'])} item(s)")
    return 0


def _format_row(row: dict) -> str:
    mfu = f"{row['mfu']:.3f}" if row.get("mfu") else "-"
    peak = f"{row['peak_mem_gib']:.1f}" if row.get("peak_mem_gib") else "-"
    tps = f"{row['tokens_per_s']:.0f}" if row.get("tokens_per_s") else "-"
    return (f"{row['run']:<16} {row['group']:<9} {row['compile']!s:>7} {row['fp8']!s:>5} "
            f"{row['activation_checkpointing']:>9} {row['micro_batch']:>3} {tps:>10} {mfu:>6} {peak:>8}"
            f"  {row.get('error', '')[:60]}")


if __name__ == "__main__":
    sys.exit(main())
