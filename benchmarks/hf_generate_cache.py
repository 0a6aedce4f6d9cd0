"""`generate` of a Hugging Face remote-code export, with the KV cache vs without: the speedup.

    .venv/bin/python benchmarks/hf_generate_cache.py                     # CPU, 1 thread
    .venv/bin/python benchmarks/hf_generate_cache.py --prompt 512 --new 128 --out /tmp/hf_cache.json

Not a unit test: wall-clock timings. A randomly initialised hourglass (K=2 sub-MLPs per layer,
GQA, QK-norm, pre-norm: a shape no stock class loads, so the export is remote code) is exported
with `shapelm.evaluation.export_hf` and loaded with `trust_remote_code=True`; greedy `generate`
runs with `use_cache=True` and `use_cache=False` in turn (interleaved, so a shared machine's load
hits both alike), and the median of each is reported with their ratio. The two must give the
same tokens (checked). Without the cache every step recomputes the whole prefix, so the ratio
grows with prompt + new tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402


def build_export(out: Path, d_model: int, n_layers: int, vocab: int, max_len: int) -> None:
    from shapelm.evaluation.export_hf import export_hf
    from shapelm.model import build_model, save_pretrained
    from shapelm.model.config import ModelConfig

    layer = {"attention": {"n_heads": 8, "n_kv_heads": 2, "head_dim": d_model // 8}, "ffn_widths": [2 * d_model] * 2}
    cfg = ModelConfig(vocab_size=vocab, d_model=d_model, layers=[layer] * n_layers, max_seq_len=max_len,
                      qk_norm=True, norm_placement="pre")
    torch.manual_seed(0)
    save_pretrained(build_model(cfg).eval(), out / "run" / "final")
    info = export_hf(out / "run", out / "hf")
    assert info["architecture"] == "ShapelmForCausalLM", info["architecture"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    ap.add_argument("--new", type=int, default=64, help="new tokens generated")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3, help="timed repeats of each arm")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="results JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        build_export(Path(tmp), args.d_model, args.layers, args.vocab, args.prompt + args.new)
        model = AutoModelForCausalLM.from_pretrained(Path(tmp) / "hf", trust_remote_code=True,
                                                     dtype=torch.float32).eval()
    x = torch.randint(0, args.vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(x)

    def run(use_cache: bool) -> tuple[float, list]:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                                 do_sample=False, use_cache=use_cache)
        return time.perf_counter() - t0, out.tolist()

    run(True), run(False)  # warm-up
    times: dict[bool, list[float]] = {True: [], False: []}
    tokens = {}
    for _ in range(args.iters):
        for arm in (True, False):
            dt, tokens[arm] = run(arm)
            times[arm].append(dt)
    assert tokens[True] == tokens[False], "generate with the cache gave other tokens than without it"
    cached, uncached = statistics.median(times[True]), statistics.median(times[False])
    result = {"d_model": args.d_model, "layers": args.layers, "prompt": args.prompt, "new": args.new,
              "batch": args.batch, "threads": args.threads, "iters": args.iters,
              "with_cache_s": cached, "without_cache_s": uncached, "speedup": uncached / cached,
              "same_tokens": True, "torch": torch.__version__}
    print(f"generate {args.new} tokens after {args.prompt} (batch {args.batch}, {args.threads} thread(s)): "
          f"with cache {cached:.3f} s, without {uncached:.3f} s -> speedup {uncached / cached:.2f}x "
          "(same tokens)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
