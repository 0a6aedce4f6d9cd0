"""One GPU, one command, under 5 minutes: what the paper-scale runs will get from a GPU.

    bash benchmarks/gpu_check.sh                     # on one H100/H200 (writes benchmarks/results/)
    bash benchmarks/gpu_check.sh --cpu-smoke --out F # every row, tiny, on CPU: checks the script

Sections, in order of importance (each row in its own try; the JSON is rewritten atomically
after every row, so a kill leaves every finished row):

1. slice_8b: the first 4 layers of hg8b_conv with the full vocabulary, built once on the GPU,
   compiled, selective recompute, 4 micro-batches per optimizer step: FP8 (torchao, switched in
   place) vs bf16 at micro-batch 1, 2 and 4, and one optimizer step per micro-batch. Beside
   the whole-slice MFU, a block-only MFU: the block FLOPs over the step time less the
   separately timed output layer and loss (the slice spends ~27% of its FLOPs there, the real
   8B ~5%), which is what `shapelm cost` uses for the 8B scale.
2. pair_906m: hg906m_conv vs hg906m_hg at equal settings (the paper's: compiled, selective,
   micro-batch 4), bf16 and FP8, and the hourglass/conventional MFU ratio.
3. checkpoint: the trainer's sharded save (torch.distributed.checkpoint, as 3B/8B use it) of the
   906M conventional model and AdamW state, with its file hashing, and the load.
4. decode: Table 12 (906M pair, batch 1) at 32k/64k/128k, one row per mixer (MHA, GQA, MLA).
5. mixers: tokens/s of Titans and Hope (and gated attention) against softmax attention at equal
   width (benchmarks/mixer_throughput.py's models), eager, bf16.

A pre-flight lists the optional packages that are missing and which rows each one costs. No
config schema validation on this path (the device image has no jsonschema): the shapes are read
from configs/paper.yaml with `shapelm.plan.runs.resolve_run`. Every row has `status` ok / skipped (with `reason`) /
error (with `error`: the exception's type and message); `--budget-s` (default 260) bounds the
whole run, and a row still running when it ends is stopped (an error row). `--cpu-smoke` runs
every row at tiny size on the CPU (eager, micro-batch 1; FP8 rows skipped) and writes
the same JSON schema; it measures nothing about a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from shapelm.shapes.accounting import flops_per_token, output_layer_forward_flops  # noqa: E402
from shapelm.config import TrainRecipe, run_recipe  # noqa: E402
from shapelm import files  # noqa: E402
from shapelm.model.config import AttentionShape, LayerShape, ModelConfig, run_model_config  # noqa: E402
from shapelm.plan.runs import resolve_run  # noqa: E402

#: Bumped when rows change meaning; `shapelm cost` (shapelm.plan.cost) reads this version.
SCHEMA = 2
SECTIONS = ("slice_8b", "pair_906m", "checkpoint", "decode", "mixers")
#: Share of the budget by which each section should have ended (a section's unused time passes on).
SECTION_END = {"slice_8b": 0.5, "pair_906m": 0.72, "checkpoint": 0.8, "decode": 0.9, "mixers": 1.0}
SLICE = ("hg8b_conv", 4)
PAIR = ("hg906m_conv", "hg906m_hg")
SEQ_LEN = 4096
LOSS_CHUNK = 4096
#: Optional packages: the module imported, and what its absence costs.
OPTIONAL = {
    "torchao": ("torchao.float8", "FP8 rows (slice_8b fp8 *, pair_906m fp8 *) are skipped"),
    "triton": ("triton", "compiled rows on CUDA fail (Inductor generates Triton kernels)"),
    "jsonschema": ("jsonschema", "nothing: the shapes are read without schema validation"),
}


class RowTimeout(Exception):
    """The run's time budget ended while this row was running."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise RowTimeout in the main thread after `seconds` (the Python-level watchdog; the
    shell wrapper's `timeout` is the last resort)."""
    def expire(signum, frame):
        raise RowTimeout(f"stopped after {seconds:.0f} s: the run's time budget ended")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def preflight(device: torch.device) -> dict:
    """What is installed, what is missing and which rows each missing package costs."""
    packages = {}
    for name, (module, cost) in OPTIONAL.items():
        try:
            mod = importlib.import_module(module)
            top = sys.modules.get(name, mod)
            packages[name] = {"available": True, "version": getattr(top, "__version__", "?")}
        except Exception as err:  # an ImportError, or a broken install raising anything
            packages[name] = {"available": False, "error": f"{type(err).__name__}: {err}"[:300],
                              "costs": cost}
    out = {"device": device.type, "packages": packages}
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        out["capability"] = f"{major}.{minor}"
    out["fp8"] = fp8_refusal(device, packages)
    return out


def fp8_refusal(device: torch.device, packages: dict) -> str | None:
    """Why FP8 rows cannot run here (None: they can)."""
    if device.type != "cuda":
        return "FP8 training needs a CUDA GPU of compute capability >= 8.9; this run is on the CPU"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return f"{torch.cuda.get_device_name(device)} has no float8 tensor cores (needs SM89+)"
    if not packages["torchao"]["available"]:
        return f"torchao is not importable ({packages['torchao']['error']}); see benchmarks/README.md"
    return None


@dataclass
class Run:
    """The run's settings, budget and JSON; `row` runs one measurement in its own try."""

    device: torch.device
    smoke: bool
    budget_s: float
    out: Path | None
    data: dict
    start: float = field(default_factory=time.perf_counter)
    section_end: float = float("inf")

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def begin_section(self, name: str) -> None:
        # the smoke run is there to run every row: only its whole budget applies
        self.section_end = self.budget_s * (1.0 if self.smoke else SECTION_END[name])
        print(f"== {name} ({self.left():.0f} s of the budget left)", flush=True)

    def write(self) -> None:
        if self.out is not None:
            files.write_json(self.out, self.data, **files.RUN_FILE)

    def row(self, section: str, name: str, fn, skip: str | None = None, **fields) -> dict:
        row = {"section": section, "name": name, **fields}
        elapsed = time.perf_counter() - self.start
        if skip is None and self.left() < (1 if self.smoke else 8):
            skip = f"time budget: {self.left():.0f} s of {self.budget_s:.0f} s left"
        elif skip is None and elapsed > self.section_end:
            skip = f"section time spent ({elapsed:.0f} s > {self.section_end:.0f} s): later sections first"
        if skip is not None:
            row.update(status="skipped", reason=skip)
        else:
            t0 = time.perf_counter()
            try:
                with deadline(self.left()):
                    row.update(fn() or {})
                row["status"] = "ok"
            except Exception as err:
                row.update(status="error", error=f"{type(err).__name__}: {err}"[:2000],
                           traceback=traceback.format_exc(limit=-4)[-3000:])
            finally:
                row["seconds"] = round(time.perf_counter() - t0, 2)
                free(self.device)
        self.data["rows"].append(row)
        self.write()
        print(format_row(row), flush=True)
        return row


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def format_row(row: dict) -> str:
    def num(key, fmt):
        return format(row[key], fmt) if isinstance(row.get(key), (int, float)) else "-"

    note = row.get("reason") or row.get("error") or ""
    return (f"{row['section']:<10} {row['name']:<24} {row['status']:<7} {num('tokens_per_s', '.0f'):>10} "
            f"{num('mfu', '.3f'):>6} {num('mfu_blocks', '.3f'):>6} {num('peak_mem_gib', '.1f'):>6} "
            f"{row.get('seconds', 0):>6}  {note[:70]}")


# ----------------------------------------------------------------------------- shapes


def read_shapes(smoke: bool) -> dict[str, tuple[dict, ModelConfig]]:
    """{label: (run, model config)} of the 8B slice and the 906M pair, from configs/paper.yaml
    without schema validation (resolve_run builds and checks each model config itself)."""
    import yaml

    path = ROOT / "configs" / "paper.yaml"
    data = yaml.safe_load(path.read_text())
    out = {}
    name, layers = SLICE
    run = resolve_run(data, name, str(path))
    cfg = run_model_config(run)
    cfg.layers = cfg.layers[:layers]
    out[f"{name}[:{layers}]"] = (run, cfg)
    for name in PAIR:
        run = resolve_run(data, name, str(path))
        out[name] = (run, run_model_config(run))
    if smoke:  # the same kinds of layers at tiny widths
        out = {label: (run, tiny(cfg)) for label, (run, cfg) in out.items()}
    return out


def tiny(cfg: ModelConfig) -> ModelConfig:
    scale = 64 / cfg.d_model
    layers = [LayerShape(layer.attention and AttentionShape(n_heads=2, n_kv_heads=2, head_dim=16),
                         tuple(max(16, 16 * round(w * scale / 16)) for w in layer.ffn_widths))
              for layer in cfg.layers[:2]]
    return ModelConfig(vocab_size=512, d_model=64, layers=layers, max_seq_len=128)


# ----------------------------------------------------------------------------- training rows


class Trainer:
    """One shape built once on the device (its seeded init drawn there, as each training rank
    does), compiled (not in the smoke run); bf16 / FP8 switched in place."""

    def __init__(self, cfg: ModelConfig, device: torch.device, smoke: bool, recompute: str):
        from shapelm.train.distributed import DistEnv
        from shapelm.train.parallel import autocast_dtype, build_parallel, make_optimizer

        self.cfg, self.device = cfg, device
        recipe = TrainRecipe.from_dict({
            "batch_tokens": SEQ_LEN, "seq_len": SEQ_LEN, "total_tokens": 2 * SEQ_LEN, "compile": not smoke,
            "fp8": False, "activation_checkpointing": recompute, "loss_chunk_tokens": LOSS_CHUNK,
            "precision": "auto"})
        self.recipe, self.env = recipe, DistEnv(device=device)
        env = self.env
        self.amp = autocast_dtype(recipe, device)
        self.model, self.forward = build_parallel(self.cfg, recipe, env, None, self.amp)
        self.new_optimizer = lambda: make_optimizer(self.model, recipe, env, fsdp=False)
        self.optimizer = self.new_optimizer()
        self.bf16_linears = {n: m for n, m in self.model.named_modules() if type(m) is torch.nn.Linear}
        self.fp8 = False

    def set_fp8(self, on: bool) -> None:
        """Swap the blocks' Linear layers for torchao's Float8Linear or back; compiled blocks
        recompile on the next call. A new optimizer: torchao wraps the weights in new Parameters
        (its float8 all-gather tensor), which the old one would not update."""
        from shapelm.train.parallel import convert_to_fp8

        if on and self.fp8:
            return
        if on:
            convert_to_fp8(self.model, self.device)
        else:  # every swapped layer back, also after a conversion that failed halfway
            swapped = [name for name, module in self.bf16_linears.items()
                       if self.model.get_submodule(name) is not module]
            if not swapped:
                return
            for name in swapped:
                parent, _, child = name.rpartition(".")
                setattr(self.model.get_submodule(parent), child, self.bf16_linears[name])
        torch._dynamo.reset()  # a fresh compile for the new module types (the recompile limit counts)
        self.optimizer = self.new_optimizer()
        self.fp8 = on

    def measure(self, micro_batch: int, accum: int, steps: int, seq: int) -> dict:
        """tokens/s over `steps` optimizer steps of `accum` micro-batches, after one warm-up step."""
        from shapelm.train.observe import peak_flops_for

        from shapelm.train.steps import update as trainer_update

        device = self.device
        x = torch.randint(0, self.cfg.vocab_size, (micro_batch, seq), device=device)
        labels = x.roll(-1, 1)
        batches = [(x, labels)] * accum
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        amp_ctx = (lambda: torch.autocast(device.type, dtype=self.amp)) if self.amp else contextlib.nullcontext

        def update():  # the trainer's own update: loss scaling, z-loss, clipping, AdamW, as training runs it
            trainer_update(self.model, self.forward, self.optimizer, trainable, batches, accum * x.numel(),
                           self.recipe.lr, self.recipe, self.env, amp_ctx,
                           lambda loss, norm: RuntimeError(f"non-finite loss {loss} / grad norm {norm}"))

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        update()
        sync(device)
        warmup = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(steps):
            update()
        sync(device)
        seconds = time.perf_counter() - t0
        micro_s = seconds / (steps * accum)
        head_s = self.output_layer_seconds(micro_batch, seq)
        tokens = micro_batch * seq
        flops = flops_per_token(self.cfg, seq).train
        head_flops = 3 * output_layer_forward_flops(self.cfg)
        peak = peak_flops_for(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        block_s = max(micro_s - head_s, 1e-9)
        return {
            "warmup_s": round(warmup, 2), "step_s": round(seconds / steps, 4),
            "tokens_per_s": round(tokens / micro_s, 1),
            "output_layer_s": round(head_s, 5), "output_layer_flop_share": round(head_flops / flops, 4),
            "train_flops_per_token": flops,
            "mfu": round(flops * tokens / micro_s / peak, 4) if peak else None,
            "mfu_blocks": round((flops - head_flops) * tokens / block_s / peak, 4) if peak else None,
            "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            if device.type == "cuda" else None,
        }

    def output_layer_seconds(self, micro_batch: int, seq: int, iters: int = 3) -> float:
        """Forward + backward of the final hidden states through the LM head and the chunked
        loss alone (the trainer's own loss code), per micro-batch."""
        from shapelm.model.transformer import _chunked_loss_sums

        weight, device = self.model.lm_head.weight, self.device
        dtype = self.amp or torch.float32
        h = torch.randn(micro_batch * seq, self.cfg.d_model, device=device, dtype=dtype, requires_grad=True)
        labels = torch.randint(0, self.cfg.vocab_size, (micro_batch * seq,), device=device)

        def once():
            with torch.autocast(device.type, dtype=self.amp, enabled=self.amp is not None):
                ce, z, count = _chunked_loss_sums(h, weight, labels, LOSS_CHUNK)
            ((ce + 1e-5 * z) / count).backward()

        once()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        sync(device)
        weight.grad = None
        return (time.perf_counter() - t0) / iters


def paper_settings(run: dict) -> dict:
    recipe = run_recipe(run)
    return {"fp8": recipe.fp8, "activation_checkpointing": recipe.activation_checkpointing,
            "micro_batch": recipe.micro_batch_size}


def training_rows(ctx: Run, section: str, label: str, run: dict, cfg: ModelConfig, variants, *,
                  slice_: bool, fp8_refusal: str | None, keep: dict | None = None) -> list[dict]:
    """Build `label` once, then one row per (precision, micro_batch, accum) variant."""
    smoke, device = ctx.smoke, ctx.device
    paper = paper_settings(run)
    holder: dict = {}
    seq = 64 if smoke else SEQ_LEN
    steps = 1 if smoke else 2

    def build():
        t0 = time.perf_counter()
        holder["trainer"] = Trainer(cfg, device, smoke, paper["activation_checkpointing"])
        sync(device)
        return {"build_s": round(time.perf_counter() - t0, 2),
                "params": sum(p.numel() for p in holder["trainer"].model.parameters()),
                "on_device": str(next(holder["trainer"].model.parameters()).device)}

    common = {"run": run["name"], "scale": run["scale"], "shape": label, "slice": slice_,
              "layers": cfg.n_layers, "compile": not smoke, "seq_len": seq}
    built = ctx.row(section, f"{label} build", build, **common)
    rows = []
    for precision, micro_batch, accum in variants:
        fp8 = precision == "fp8"
        mb, acc = (1, min(accum, 2)) if smoke else (micro_batch, accum)
        skip = (fp8_refusal if fp8 else None) or (None if built["status"] == "ok" else "the build failed")
        settings = {"fp8": fp8, "activation_checkpointing": paper["activation_checkpointing"],
                    "micro_batch": mb, "accum": acc}
        exact = (accum > 1 and micro_batch == paper["micro_batch"]
                 and paper["activation_checkpointing"] == settings["activation_checkpointing"])

        def measure(fp8=fp8, mb=mb, accum=acc):
            trainer = holder["trainer"]
            trainer.set_fp8(fp8)
            result = trainer.measure(mb, accum, steps, seq)
            result["plan_mfu"] = result["mfu_blocks"] if slice_ else result["mfu"]
            return result

        rows.append(ctx.row(section, f"{label} {precision} mb{micro_batch} x{accum}", measure, skip=skip,
                            **common, **settings, paper_settings=exact and fp8 == paper["fp8"],
                            paper_settings_but_bf16=exact and paper["fp8"] and not fp8))
    if keep is not None and "trainer" in holder:
        keep[label] = holder["trainer"]
    holder.clear()
    return rows


# ----------------------------------------------------------------------------- other sections


def checkpoint_row(ctx: Run, trainer_of) -> dict:
    """The trainer's sharded save (shapelm.train.checkpoint.save_sharded: dcp.save, then the
    sha256 of every file written) and load of the model + AdamW state."""
    from shapelm.train import checkpoint as ckpt

    def run():
        trainer = trainer_of()
        trainer.set_fp8(False)  # plain parameters, as the trainer saves them
        model, opt = trainer.model, trainer.optimizer
        if not opt.state:  # AdamW's moments exist after a first step
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            opt.step()
            opt.zero_grad(set_to_none=True)
        with tempfile.TemporaryDirectory(prefix="gpu-check-ckpt-") as tmp:
            sync(ctx.device)
            t0 = time.perf_counter()
            written = ckpt.save_sharded(model, opt, Path(tmp), rank=0)
            saved = time.perf_counter() - t0
            hashes = written()
            hashed = time.perf_counter() - t0 - saved
            size = sum(p.stat().st_size for p in (Path(tmp) / ckpt.DCP_DIR).iterdir())
            t0 = time.perf_counter()
            ckpt.load_sharded(Path(tmp), model, opt)
            sync(ctx.device)
            loaded = time.perf_counter() - t0
        return {"save_s": round(saved, 2), "hash_s": round(hashed, 2), "load_s": round(loaded, 2),
                "bytes": size, "files": len(hashes), "write_gb_per_s": round(size / saved / 1e9, 3),
                "method": "train.checkpoint.save_sharded (torch.distributed.checkpoint), one process"}

    return ctx.row("checkpoint", "906M conv dcp save+load", run, run="hg906m_conv")


def decode_rows(ctx: Run) -> None:
    from shapelm.decode.bench import BenchSettings, run_benchmark
    from shapelm.decode.specs import PAIRS, resolve_spec

    pair = "cpu" if ctx.smoke else "906m"
    lengths = [64, 128] if ctx.smoke else [32768, 65536, 131072]
    settings = BenchSettings(warmup=1 if ctx.smoke else 3, iters=1 if ctx.smoke else 10)
    for mixer in ("mha", "gqa", "mla"):
        def run(mixer=mixer):
            arms = [resolve_spec(name) for name in PAIRS[pair]]
            result = run_benchmark(arms, [mixer], lengths, settings)
            return {"comparisons": result["comparisons"], "arms": result["rows"]}

        ctx.row("decode", f"table12 {mixer}", run, pair=pair, mixer=mixer, lengths=lengths)


def mixer_rows(ctx: Run) -> None:
    """Tokens/s (forward + backward) of every token mixer at equal width, attention first."""
    from mixer_throughput import BENCH_MIXERS, build, train_flops

    smoke, device = ctx.smoke, ctx.device
    size = SimpleNamespace(d_model=64, heads=2, layers=1, batch=1, seq=64) if smoke else \
        SimpleNamespace(d_model=1536, heads=12, layers=2, batch=2, seq=2048)
    amp = torch.bfloat16 if device.type == "cuda" else None
    base: dict = {}
    for mixer in BENCH_MIXERS:
        def run(mixer=mixer):
            model = build(mixer, size.d_model, size.heads, size.layers, device, size.seq)
            ids = torch.randint(0, 256, (size.batch, size.seq), device=device)

            def step():
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = model(ids, labels=ids).loss
                loss.backward()
                model.zero_grad(set_to_none=True)

            step()
            sync(device)
            iters = 1 if smoke else 3
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            sync(device)
            tps = iters * size.batch * size.seq / (time.perf_counter() - t0)
            flops = train_flops(model, size.seq)
            if mixer == "attention":
                base.update(tps=tps, flops=flops)
            out = {"tokens_per_s": round(tps, 1), "train_flops_per_token": flops}
            if base:
                out["ratio_to_attention"] = round(tps / base["tps"], 4)
                out["flop_rate_ratio_to_attention"] = round(tps * flops / (base["tps"] * base["flops"]), 4)
            return out

        ctx.row("mixers", mixer, run, mixer=mixer, **vars(size), compile=False)


# ----------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-smoke", action="store_true", help="every row at tiny size on the CPU")
    ap.add_argument("--budget-s", type=float, default=None, help="whole-run budget (default 260; smoke 170)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, of {','.join(SECTIONS)}")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/gpu_check-<gpu>.json)")
    args = ap.parse_args(argv)
    only = tuple(s for s in args.only.split(",") if s)
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        ap.error(f"--only: unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    smoke = args.cpu_smoke or not torch.cuda.is_available()
    if smoke and not args.cpu_smoke:
        print("no CUDA device: running the CPU smoke mode (measures nothing about a GPU)")
    if smoke:
        torch.set_num_threads(min(2, torch.get_num_threads()))
    device = torch.device("cpu" if smoke else "cuda")
    gpu = "cpu-smoke" if smoke else torch.cuda.get_device_name(device)
    out = Path(args.out) if args.out else None
    if out is None and not smoke:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
        part = "" if only == SECTIONS else "-" + "-".join(only)  # a rerun of some sections keeps the first file
        out = ROOT / "benchmarks" / "results" / f"gpu_check-{slug}{part}.json"
    pre = preflight(device)
    data = {"schema": SCHEMA, "gpu": gpu, "smoke": smoke, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "budget_s": args.budget_s or (170 if smoke else 260), "sections": list(only),
            "preflight": pre, "rows": [], "finished": False}
    ctx = Run(device=device, smoke=smoke, budget_s=data["budget_s"], out=out, data=data)
    print(f"{gpu}: torch {torch.__version__} cuda {torch.version.cuda}; budget {ctx.budget_s:.0f} s")
    for name, info in pre["packages"].items():
        print(f"  {name}: " + (info["version"] if info["available"] else f"MISSING: {info['costs']}"))
    if pre["fp8"]:
        print(f"  FP8 rows skipped: {pre['fp8']}")
    ctx.write()
    if not smoke:  # each micro-batch size its own static compile, as in training
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 512)
    # the imported modules' objects out of every later collection: each row frees its models with
    # gc.collect (as does the decode benchmark per arm), which otherwise rescans them (~0.7 s each)
    gc.freeze()
    kept: dict = {}
    shapes: dict = {}

    def load_shapes():
        shapes.update(read_shapes(smoke))
        return {"shapes": list(shapes)}

    def slice_8b():
        run, cfg = shapes[f"{SLICE[0]}[:{SLICE[1]}]"]
        # the paper's FP8 first, bf16 beside it, then larger micro-batches; a row that only
        # changes the accumulation reuses the compiled graphs (a precision switch recompiles)
        training_rows(ctx, "slice_8b", f"{SLICE[0]}[:{SLICE[1]}]", run, cfg, [
            ("fp8", 1, 4), ("bf16", 1, 4), ("bf16", 1, 1), ("fp8", 2, 4), ("fp8", 4, 4),
            ("bf16", 2, 4), ("bf16", 4, 4)], slice_=True, fp8_refusal=pre["fp8"])

    def pair_906m():
        rows = {}
        for label in PAIR:
            run, cfg = shapes[label]
            mb = paper_settings(run)["micro_batch"]
            rows[label] = training_rows(
                ctx, "pair_906m", label, run, cfg, [("fp8", mb, 2), ("bf16", mb, 2)], slice_=False,
                fp8_refusal=pre["fp8"], keep=kept if label == PAIR[0] else None)
        ratios = {}
        for a, b in zip(*(rows[label] for label in PAIR)):
            if a["status"] == b["status"] == "ok":
                key = "fp8" if a["fp8"] else "bf16"
                ratios[key] = round(b["mfu"] / a["mfu"], 4) if a.get("mfu") and b.get("mfu") else None
                ratios[f"{key}_tokens_per_s"] = round(b["tokens_per_s"] / a["tokens_per_s"], 4)
        ctx.row("pair_906m", "hourglass/conventional", lambda: {"hourglass_over_conventional": ratios},
                skip=None if ratios else "no conventional and hourglass rows both measured")

    def checkpoint():
        def conv_trainer():  # the pair's, when it ran
            if PAIR[0] not in kept:
                run, cfg = shapes[PAIR[0]]
                kept[PAIR[0]] = Trainer(cfg, device, smoke, paper_settings(run)["activation_checkpointing"])
            return kept[PAIR[0]]

        checkpoint_row(ctx, conv_trainer)

    if {"slice_8b", "pair_906m", "checkpoint"} & set(only):
        ctx.row("setup", "read shapes", load_shapes)
    sections = {"slice_8b": slice_8b, "pair_906m": pair_906m, "checkpoint": checkpoint,
                "decode": lambda: decode_rows(ctx), "mixers": lambda: mixer_rows(ctx)}
    for name in SECTIONS:
        if name in only and (shapes or name in ("decode", "mixers")):
            ctx.begin_section(name)
            sections[name]()
            if name != "pair_906m" or "checkpoint" not in only:  # the pair's conventional model is saved next
                kept.clear()
            free(device)

    data["finished"] = True
    data["wall_s"] = round(time.perf_counter() - ctx.start, 1)
    ctx.write()
    counts = {s: sum(r["status"] == s for r in data["rows"]) for s in ("ok", "skipped", "error")}
    print(f"{len(data['rows'])} rows: {counts} in {data['wall_s']} s" + (f"; wrote {out}" if out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
