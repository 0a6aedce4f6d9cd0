"""Single-token decode latency against a cache built directly at the target length (arXiv 2602.06471 B.1).

For each arm (a `ModelConfig`), mixer and context length S:
- a `StaticKVCache` is allocated for exactly S tokens and filled with random keys/values (or, with
  `fill="tiled"`, a short real prefill repeated to S), so no O(S^2) prefill is ever run;
- each step rewinds the cache to S - 1 tokens and decodes one token at position S - 1, so every
  step attends over S keys and writes into the last slot: identical work every step;
- 5 warm-up and 20 timed steps (batch 1; bf16 on CUDA, float32 on CPU); CUDA is timed with
  events around each step after a synchronize, CPU with perf_counter; optionally the CUDA step is
  captured once as a CUDA graph (same kernels, no launch overhead) for both arms alike;
- KV bytes are the bytes of the cache's buffers (allocated at exactly S) and must equal Eq. 8's
  M_KV = 2 beta L S d_attn / g.
"""

from __future__ import annotations

import gc
import logging
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from shapelm.shapes.accounting import decoding_state_bytes
from shapelm.model.cache import MLASpec
from shapelm.decode.model import (
    build_decode_model,
    group_factor,
    make_cache,
    pin_rope_tables,
    predicted_kv_bytes,
)
from shapelm.errors import DataError, ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.records import DecodeRecord

log = logging.getLogger(__name__)


@dataclass
class BenchSettings:
    warmup: int = 5
    iters: int = 20
    batch: int = 1
    device: str = "auto"  # auto: cuda when present
    dtype: str = "auto"  # auto: bf16 on cuda, float32 on cpu
    n_kv_heads: int | None = None  # GQA; default n_heads // 4
    r_kv: int = 256
    d_rope: int = 32
    fill: str = "random"  # random | tiled
    cuda_graph: bool = True  # on CUDA only
    seed: int = 0
    interleave: bool = False  # time the arms step by step in turn (for shared CPUs)
    threads: int | None = None  # CPU intra-op threads (None: torch's default)

    def resolved_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def resolved_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if self.resolved_device().type == "cuda" else torch.float32
        return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}[self.dtype]


def summarize(times_ms: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times_ms, n=4, method="inclusive") if len(times_ms) > 1 else [times_ms[0]] * 3
    return {
        "latency_ms_median": statistics.median(times_ms),
        "latency_ms_mean": statistics.fmean(times_ms),
        "latency_ms_q1": q[0],
        "latency_ms_q3": q[2],
        "latency_ms_iqr": q[2] - q[0],
        "latency_ms_min": min(times_ms),
        "latency_ms_max": max(times_ms),
    }


def time_steps(step: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> list[float]:
    """Per-step wall times in ms, device-synchronized."""
    for _ in range(warmup):
        step()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def decode_step_fn(model, cache, length: int, device: torch.device, use_graph: bool):
    """A callable doing one decode step at position length - 1; (fn, mode)."""
    vocab = model.config.vocab_size
    token = torch.randint(0, vocab, (cache.batch, 1), device=device)

    def step():
        # Recurrent layers (Titans, Hope-attention) keep advancing their state: a step's work is
        # the same whatever the state holds, and it cannot be rewound with the positions.
        cache.set_length(length - 1, keep_state=True)
        return model(token, kv_cache=cache, start_pos=length - 1).logits

    recurrent = decoding_state_bytes(model.config) > 0
    if not (use_graph and device.type == "cuda") or recurrent:  # their state is rebound each step
        return step, "eager"
    try:
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                step()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        cache.set_length(length - 1, keep_state=True)
        with torch.cuda.graph(graph):
            model(token, kv_cache=cache, start_pos=length - 1)
        cache.set_length(length - 1, keep_state=True)

        def replay():
            graph.replay()

        replay()
        torch.cuda.synchronize(device)
        return replay, "cuda_graph"
    except Exception as err:  # fall back to eager: same kernels, with launch overhead
        log.warning("CUDA graph capture failed (%s); timing eagerly", err)
        torch.cuda.synchronize(device)
        return step, "eager"


class Arm:
    """One architecture under one mixer: the model, built once, and its per-length caches."""

    def __init__(self, cfg: ModelConfig, run: str, mixer: str, settings: BenchSettings) -> None:
        self.cfg, self.run, self.mixer, self.settings = cfg, run, mixer, settings
        self.device, self.dtype = settings.resolved_device(), settings.resolved_dtype()
        self.mla = MLASpec(settings.r_kv, settings.d_rope)
        self.model = build_decode_model(
            cfg, mixer, n_kv_heads=settings.n_kv_heads, mla=self.mla, device=self.device,
            dtype=self.dtype, seed=settings.seed,
        )
        pin_rope_tables(self.model, self.device)
        self.beta = torch.empty((), dtype=self.dtype).element_size()
        self.cache = None
        self.step = None
        self.mode = None

    def prepare(self, length: int) -> None:
        """Allocate the cache at exactly `length`, fill it without a prefill, check Eq. 8."""
        self.release()
        s = self.settings
        cache = make_cache(self.model, s.batch, length)
        if s.fill == "tiled":
            ids = torch.randint(0, self.cfg.vocab_size, (s.batch, min(64, length)), device=self.device)
            with torch.inference_mode():
                self.model(ids, kv_cache=cache, start_pos=0)
            cache.fill_tiled(length)
        else:
            gen = torch.Generator(device=self.device).manual_seed(s.seed + length)
            cache.fill_random(length, generator=gen)
        self.kv_bytes = cache.nbytes()
        self.kv_pred = predicted_kv_bytes(self.model.config, self.mixer, length, self.beta, s.batch, self.mla)
        if self.kv_bytes != self.kv_pred:
            raise ShapelmError(
                f"{self.run}/{self.mixer}/{length}: cache holds {self.kv_bytes} bytes, Eq. 8 predicts {self.kv_pred}"
            )
        self.cache, self.length = cache, length
        with torch.inference_mode():
            self.step, self.mode = decode_step_fn(self.model, cache, length, self.device, s.cuda_graph)

    def release(self) -> None:
        self.cache = self.step = None
        _free(self.device)

    def row(self, times: list[float]) -> dict[str, Any]:
        s = self.settings
        row = {
            "mixer": self.mixer,
            "length": self.length,
            "run": self.run,
            "n_layers": self.cfg.n_layers,
            "n_attention_layers": sum(1 for layer in self.cfg.layers if layer.attention),
            "d_model": self.cfg.d_model,
            "g": group_factor(self.model.config, self.mixer, self.mla),
            **summarize(times),
            "times_ms": times,
            "kv_bytes": self.kv_bytes,
            "kv_bytes_predicted": self.kv_pred,
            # recurrent layers' per-sequence state (Titans memories, Hope fast weights), and what the
            # accounting predicts for it in float32 (the dtype those layers keep their state in on CPU)
            "state_bytes": self.cache.state_nbytes(),
            "state_bytes_predicted": s.batch * decoding_state_bytes(self.model.config),
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "mode": self.mode,
            "batch": s.batch,
            "warmup": s.warmup,
            "iters": s.iters,
            "fill": s.fill,
        }
        log.info("%s %s S=%d: %.3f ms (IQR %.3f), KV %.1f MiB", self.run, self.mixer, self.length,
                 row["latency_ms_median"], row["latency_ms_iqr"], self.kv_bytes / 2**20)
        return row


def bench_arm(
    cfg: ModelConfig, run: str, mixer: str, lengths: list[int], settings: BenchSettings
) -> list[dict[str, Any]]:
    """Latency rows for one architecture and mixer at every length (the model is built once)."""
    arm = Arm(cfg, run, mixer, settings)
    rows = []
    for length in lengths:
        arm.prepare(length)
        with torch.inference_mode():
            times = time_steps(arm.step, arm.device, settings.warmup, settings.iters)
        rows.append(arm.row(times))
    arm.release()
    del arm
    _free(settings.resolved_device())
    return rows


def bench_interleaved(
    arms: list[tuple[str, ModelConfig]], mixer: str, lengths: list[int], settings: BenchSettings
) -> list[dict[str, Any]]:
    """All arms side by side, one step of each in turn: on a shared (noisy) machine every arm sees
    the same background load, so their latency ratio is stable even when absolute times are not."""
    built = [Arm(cfg, run, mixer, settings) for run, cfg in arms]
    device = settings.resolved_device()
    rows = []
    for length in lengths:
        for arm in built:
            arm.prepare(length)
        times: list[list[float]] = [[] for _ in built]
        with torch.inference_mode():
            for i in range(settings.warmup + settings.iters):
                for j, arm in enumerate(built):
                    t = time_steps(arm.step, device, 0, 1)[0]
                    if i >= settings.warmup:
                        times[j].append(t)
        rows.extend(arm.row(t) for arm, t in zip(built, times))
        for arm in built:
            arm.release()
    del built
    _free(device)
    return rows


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def layer_ratio(cfg_a: ModelConfig, cfg_b: ModelConfig) -> float:
    count = lambda c: sum(1 for layer in c.layers if layer.attention)  # noqa: E731
    return count(cfg_a) / count(cfg_b)


def compare(rows: list[dict[str, Any]], run_a: str, run_b: str) -> list[dict[str, Any]]:
    """Speedup a/b (latency_a / latency_b) and KV reduction 1 - kv_b/kv_a per (mixer, length)."""
    index = {(r["run"], r["mixer"], r["length"]): r for r in rows}
    out = []
    for (run, mixer, length), a in index.items():
        if run != run_a or (run_b, mixer, length) not in index:
            continue
        b = index[(run_b, mixer, length)]
        out.append({
            "mixer": mixer,
            "length": length,
            "run_a": run_a,
            "run_b": run_b,
            "speedup": a["latency_ms_median"] / b["latency_ms_median"],
            "speedup_best": a["latency_ms_min"] / b["latency_ms_min"],
            "layer_ratio": a["n_attention_layers"] / b["n_attention_layers"],
            "kv_reduction": 1 - b["kv_bytes"] / a["kv_bytes"],
            "kv_reduction_predicted": 1 - b["n_attention_layers"] / a["n_attention_layers"]
            if _same_kv_width(a, b) else None,
        })
    return out


def _same_kv_width(a: dict, b: dict) -> bool:
    return a["kv_bytes"] * b["n_attention_layers"] == b["kv_bytes"] * a["n_attention_layers"]


def run_benchmark(
    arms: list[tuple[str, ModelConfig]],
    mixers: list[str],
    lengths: list[int],
    settings: BenchSettings,
) -> dict[str, Any]:
    """Rows for every arm x mixer x length, and the first-over-second comparisons."""
    previous_threads = torch.get_num_threads()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    try:
        rows = []
        for mixer in mixers:
            if settings.interleave:
                rows.extend(bench_interleaved(arms, mixer, lengths, settings))
                continue
            for run, cfg in arms:
                rows.extend(bench_arm(cfg, run, mixer, lengths, settings))
        comparisons = compare(rows, arms[0][0], arms[1][0]) if len(arms) == 2 else []
        return {"rows": rows, "comparisons": comparisons, "meta": environment(settings)}
    finally:
        torch.set_num_threads(previous_threads)


def environment(settings: BenchSettings) -> dict[str, Any]:
    device = settings.resolved_device()
    meta = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "dtype": str(settings.resolved_dtype()).removeprefix("torch."),
        "settings": {k: v for k, v in vars(settings).items()},
    }
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
    return meta


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'mixer':5} {'length':>7} {'run':>14} {'median ms':>10} {'IQR':>7} {'min':>8} {'max':>8} {'KV MiB':>9}"]
    for r in result["rows"]:
        lines.append(
            f"{r['mixer']:5} {r['length']:7d} {r['run']:>14} {r['latency_ms_median']:10.3f} "
            f"{r['latency_ms_iqr']:7.3f} {r['latency_ms_min']:8.3f} {r['latency_ms_max']:8.3f} "
            f"{r['kv_bytes'] / 2**20:9.1f}"
        )
    if result["comparisons"]:
        lines.append("")
        lines.append(f"{'mixer':5} {'length':>7} {'speedup':>8} {'L_a/L_b':>8} {'ratio':>6} {'KV red.':>8}")
        for c in result["comparisons"]:
            lines.append(
                f"{c['mixer']:5} {c['length']:7d} {c['speedup']:8.3f} {c['layer_ratio']:8.3f} "
                f"{c['speedup'] / c['layer_ratio']:6.1%} {c['kv_reduction']:8.1%}"
            )
    return "\n".join(lines)


def merge_results(paths: list[str]) -> DecodeRecord:
    """One result (decode.json) from several `shapelm bench decode` runs (the workflow runs one
    per pair)."""
    merged = DecodeRecord(rows=[], comparisons=[], extra={"sources": []})
    for path in paths:
        result = DecodeRecord.read(path)
        if result is None:
            raise DataError(f"{path}: no decode benchmark result")
        merged.rows.extend(result.rows)
        merged.comparisons.extend(result.comparisons)
        if "peer" in result.extra:
            merged.extra.setdefault("peers", []).append(result.extra["peer"])
        merged.extra["sources"].append({"path": str(path), "meta": result.extra.get("meta", {})})
    return merged
