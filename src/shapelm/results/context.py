"""What a table cell can ask for: a run's accounting and config (from the plan document,
shapelm.plan.document) and its results files."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from shapelm import records, reference
from shapelm.plan.document import Plan
from shapelm.plan.paths import run_under
from shapelm.results import readers, seeds

# The context lengths the papers print (Hourglass Figure 5 / Table 12 for decode latency, its
# long-context table for Proof-pile and RULER): a table whose result files are not written yet
# shows the paper's columns. Once written, the lengths come from the files themselves. The plan
# document does not carry the configured decode.lengths / longctx.lengths, and taking a run's
# configured lengths here would change the columns of the tables built before any file exists.
DECODE_LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
LONGCTX_LENGTHS = [4096, 8192, 16384, 32768, 65536]
# MLA setting of arXiv 2602.06471 B.1 (and of shapelm.decode.bench's defaults).
MLA_R_KV, MLA_D_ROPE = 256, 32


class Context:
    """One experiment's plan plus where its results live; every lookup is cached.

    A run with `seeds:` is one row: its results (ppl, downstream, long context, throughput) are
    the mean over the seeds that finished. `single` is the same context without that averaging,
    for one seed's own values (their spread: shapelm.results.seeds)."""

    def __init__(self, plan: Plan, results_dir: str | os.PathLike, work_dir: str | os.PathLike,
                 aggregate: bool = True):
        self.plan = plan
        self.results_dir = Path(results_dir)
        self.work_dir = Path(work_dir)
        self.aggregate = aggregate
        self.aggregated: Context = self  # the averaging context (a `single` points back to it)

    @functools.cached_property
    def single(self) -> "Context":
        if not self.aggregate:
            return self
        one = Context(self.plan, self.results_dir, self.work_dir, aggregate=False)
        one.aggregated = self
        return one

    def instances(self, name: str | None) -> list[str]:
        """The seed instances behind a row (`seeds:`); [name] for a run without seeds."""
        return self.plan.instances(name) if self.has_run(name) else ([name] if name else [])

    def _over_seeds(self, run: str | None, read, combine):
        """`read(instance)` of one run, or `combine` of its finished seeds' values."""
        if not run:
            return None
        names = self.instances(run) if self.aggregate else [run]
        if len(names) == 1:
            return read(names[0])
        found = [v for v in (read(n) for n in names) if v]
        return combine(found) if found else None

    # ---- configuration
    def has_run(self, name: str | None) -> bool:
        return bool(name) and name in self.plan.runs

    def acc(self, name: str | None) -> dict[str, Any] | None:
        if not self.has_run(name):
            return None
        return self.plan.accounting[name]

    def scale_recipe(self, scale: str) -> dict[str, Any] | None:
        """A scale's merged training recipe and heads (Table 4 / Tapered recipe rows)."""
        return self.plan.scale_recipes.get(scale)

    def runs_for_table(self, table: str) -> list[str]:
        """The runs listing `table`; a run's later seeds are not rows of their own."""
        return self.plan.runs_for_table(table)

    @property
    def decode_pairs(self) -> dict[str, tuple[str, str]]:
        """Scale (lower case) -> (conventional run, hourglass run) of the runs marked `decode: true`."""
        return self.plan.decode_pairs

    @property
    def decode_baselines(self) -> dict[str, str]:
        """run -> the run its `decode:` names (shapelm.plan.decode.decode_baselines)."""
        return self.plan.decode_baselines

    # ---- results
    def run_file(self, run: str, name: str) -> Path:
        return run_under(self.results_dir, run) / name

    # The result files whose numbers a non-finite value makes "diverged" rather than pending.
    DIVERGENCE_FILES = ("ppl.json", "downstream.json", "proofpile.json", "ruler.json")

    @functools.lru_cache(maxsize=None)
    def divergence(self, run: str | None) -> str | None:
        """"diverged at step N" where the run (or one of its seeds, each named) diverged: its
        metrics.jsonl logs a non-finite training or validation loss (N: the first such step) or a
        result file holds a non-finite number (N: the last step metrics.jsonl logged; "step
        unknown" without one). None for a run that has not diverged (or has no results yet)."""
        if not run:
            return None
        found = []
        for inst in self.instances(run):
            recs = (readers.read_metrics_jsonl(run_under(self.work_dir, inst) / "metrics.jsonl")
                    if self.has_run(inst) else None) or []
            step = readers.first_non_finite_step(recs)
            if step is None and any(readers.file_has_non_finite(self.run_file(inst, name))
                                    for name in self.DIVERGENCE_FILES):
                step = readers.last_step(recs)
                step = "unknown" if step is None else step
            if step is not None:
                found.append((inst, step))
        if not found:
            return None
        if len(found) == 1 and len(self.instances(run)) == 1:
            return f"diverged at step {found[0][1]}"
        return "diverged: " + ", ".join(f"{inst} at step {step}" for inst, step in found)

    def missing(self, run: str | None) -> str:
        """What stands where a run's number is absent: its divergence, else "pending"."""
        return self.divergence(run) or "pending"

    @functools.lru_cache(maxsize=None)
    def ppl(self, run: str | None) -> readers.PPL | None:
        return self._over_seeds(run, lambda r: readers.read_ppl(self.run_file(r, "ppl.json")),
                                seeds.mean_ppl)

    @functools.lru_cache(maxsize=None)
    def downstream(self, run: str | None) -> readers.Downstream | None:
        return self._over_seeds(run, lambda r: readers.read_downstream(self.run_file(r, "downstream.json")),
                                seeds.mean_downstream)

    @functools.lru_cache(maxsize=None)
    def downstream_json(self, run: str) -> dict[str, Any]:
        """One run's downstream.json as written (details, standin_tasks); {} when absent."""
        rec = records.DownstreamRecord.read(self.run_file(run, "downstream.json"))
        return rec.to_dict() if rec is not None else {}

    @functools.lru_cache(maxsize=None)
    def proofpile(self, run: str | None) -> dict[int, float] | None:
        return self._over_seeds(run, lambda r: readers.read_proofpile(self.run_file(r, "proofpile.json")),
                                seeds.mean_by_length)

    @functools.lru_cache(maxsize=None)
    def ruler(self, run: str | None) -> dict[int, float] | None:
        return self._over_seeds(run, lambda r: readers.read_ruler(self.run_file(r, "ruler.json")),
                                seeds.mean_by_length)

    @functools.lru_cache(maxsize=None)
    def throughput(self, run: str | None) -> dict[str, Any] | None:
        """Training throughput of a run (mean over its seeds): {"tokens_per_s" (all devices),
        "tokens_per_s_device", "model_flops_device" (analytic train FLOPs x tokens/s per device),
        "mfu", "device_type", "world_size"}. MFU is the logged one (the trainer's peak for the
        GPU by name, or --peak-flops) or, on a GPU run logged without one, the analytic FLOP/s
        over `resources.gpu_peak_tflops`; on CPU None (no meaningful peak)."""
        return self._over_seeds(run, self._throughput_one, _mean_throughput)

    def _throughput_one(self, run: str) -> dict[str, Any] | None:
        if not self.has_run(run):
            return None
        found = readers.throughput(readers.read_metrics_jsonl(run_under(self.work_dir, run) / "metrics.jsonl") or [])
        if not found:
            return None
        hw = readers.run_hardware(run_under(self.work_dir, run) / "manifest.json")
        world = int(hw.get("world_size") or 1)
        device = hw.get("device_type")
        per_device = found["tokens_per_s"] / world
        flops = self.acc(run)["flops_per_token"] * per_device
        mfu = found["mfu"]
        if mfu is None and device == "cuda":
            peak = self.plan.peak_flops(run, (hw.get("devices") or [""])[0])
            mfu = flops / peak if peak else None
        return {"tokens_per_s": found["tokens_per_s"], "tokens_per_s_device": per_device,
                "model_flops_device": flops, "mfu": mfu, "device_type": device, "world_size": world}

    @functools.cached_property
    def decode_rows(self) -> list[dict[str, Any]]:
        return readers.read_decode(self.results_dir / "decode" / "decode.json") or []

    def latency(self, run: str, mixer: str, length: int) -> float | None:
        return readers.decode_latency(self.decode_rows, run, mixer, length)

    def speedup(self, scale: str, mixer: str, length: int) -> float | None:
        """Conventional latency / hourglass latency at one context length (Table 12's speedup)."""
        pair = self.decode_pairs.get(scale.lower())
        if not pair:
            return None
        a, b = self.latency(pair[0], mixer, length), self.latency(pair[1], mixer, length)
        return a / b if a and b else None

    def latency_ratio_iqr(self, scale: str, mixer: str, length: int) -> tuple[float, float] | None:
        """The range of hourglass / conventional latency (Figure 5's y) that the two runs' recorded
        interquartile ranges allow: (Q1_hg / Q3_conv, Q3_hg / Q1_conv). It spreads as either run's
        timings do; None where a run has no quartiles."""
        pair = self.decode_pairs.get(scale.lower())
        if not pair:
            return None
        conv = readers.decode_quartiles(self.decode_rows, pair[0], mixer, length)
        hg = readers.decode_quartiles(self.decode_rows, pair[1], mixer, length)
        return (hg[0] / conv[1], hg[1] / conv[0]) if conv and hg else None

    def decode_lengths(self) -> list[int]:
        found = sorted({int(r["length"]) for r in self.decode_rows})
        return found or DECODE_LENGTHS

    @functools.lru_cache(maxsize=None)
    def curve(self, run: str) -> tuple[list[float], list[float]] | None:
        records = readers.read_metrics_jsonl(run_under(self.work_dir, run) / "metrics.jsonl")
        if not records or not self.has_run(run):
            return None
        xs, ys = readers.loss_curve(records, self.plan.runs[run]["train"]["batch_tokens"])
        return (xs, ys) if xs else None

    # ---- evaluations during training (train.eval_every; "val" records of metrics.jsonl)
    @functools.lru_cache(maxsize=None)
    def metrics_records(self, run: str | None) -> list[dict[str, Any]] | None:
        if not self.has_run(run):
            return None
        return readers.read_metrics_jsonl(run_under(self.work_dir, run) / "metrics.jsonl")

    def val_records(self, run: str | None) -> list[dict[str, Any]]:
        return readers.val_records(self.metrics_records(run) or [])

    def final_val(self, run: str | None) -> dict[str, Any] | None:
        """The evaluation after the run's last update (None until the run has finished with
        train.eval_every set)."""
        recs = self.val_records(run)
        if not recs or readers._num(recs[-1].get("step")) != self.acc(run)["total_steps"]:
            return None
        return recs[-1]

    def val_curve(self, run: str, which: str = readers.HELDOUT_SPLIT, key: str = "ppl"):
        xs, ys = readers.val_curve(self.metrics_records(run) or [], which, key,
                                   self.plan.runs[run]["train"]["batch_tokens"])
        return (xs, ys) if xs else None

    def ce_curve(self, run: str):
        xs, ys = readers.ce_curve(self.metrics_records(run) or [], self.plan.runs[run]["train"]["batch_tokens"])
        return (xs, ys) if xs else None

def _mean_throughput(found: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: seeds.spread(f[k] for f in found).mean
                           for k in ("tokens_per_s", "tokens_per_s_device", "model_flops_device", "mfu")}
    devices = {f["device_type"] for f in found}
    out["device_type"] = devices.pop() if len(devices) == 1 else "mixed"
    out["world_size"] = found[0]["world_size"]
    return out


def is_scaled_down(ctx: Context, table: str, run: str) -> bool:
    """True when the experiment runs this row at another depth or vocabulary (the tiny default).

    Width alone does not count: the paper's unpublished widths (Table 5) are our own choices at
    the paper's scale, and their differences are documented, not scaled."""
    if not ctx.has_run(run):
        return False
    paper_shape: dict = {}
    for name in [table, *reference.runs().get(run, [])]:  # the row's own table first, then any other
        if name in reference.tables():
            try:
                paper_shape = reference.row(name, run).get("shape") or {}
            except KeyError:
                continue
            if paper_shape:
                break
    arch = ctx.plan.runs[run]["arch"]
    if any(key in paper_shape and key in arch and paper_shape[key] != arch[key] for key in ("n_layers", "vocab_size")):
        return True
    # Some paper shapes name the vocabulary `vocab` (LWS); the run's is in its resolved model.
    vocab = paper_shape.get("vocab_size", paper_shape.get("vocab"))
    return vocab is not None and vocab != ctx.plan.runs[run]["model"]["vocab_size"]
