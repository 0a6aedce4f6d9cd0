"""`shapelm analyze novelty` and `shapelm analyze depth`."""

from __future__ import annotations


def _novelty(args):
    from shapelm.analysis.run import novelty_cli

    return novelty_cli(args)


def _depth(args):
    from shapelm.analysis.run import depth_cli

    return depth_cli(args)


def add_commands(subparsers) -> None:
    an = subparsers.add_parser("analyze", help="analyses of trained models (layer-wise novelty, depth)")
    sub = an.add_subparsers(dest="analyze_command", metavar="ANALYZE_COMMAND", required=True)
    p = sub.add_parser("novelty", help="how aligned each layer's MLP / block output is with the residual "
                                       "(Tapered LMs Section 4)")
    p.add_argument("model", metavar="MODEL",
                   help="a run directory (DIR/final) or weights dir of ours, a Hugging Face model directory, "
                        "or a hub id in the local cache (offline: never downloaded)")
    p.add_argument("--text", required=True,
                   help="a token directory (a validation set), a .txt/.jsonl file or a directory of them")
    p.add_argument("--tokens", type=int, default=2048, help="first N tokens of the text (default 2048, the paper's)")
    p.add_argument("--seq-len", type=int, default=1024,
                   help="tokens per forward pass (default 1024; capped at a Hugging Face model's context)")
    p.add_argument("--tokenizer", default=None, help="the model's tokenizer, for text files (default: the "
                                                     "one saved with the model)")
    p.add_argument("--text-tokenizer", default=None,
                   help="the tokenizer a token directory's ids are in, to decode it for a Hugging Face model")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA where available)")
    p.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16", "float16"],
                   help="dtype the model runs in")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run a Hugging Face model's own modeling code (config.json's auto_map), as shapelm's "
                        "exports of non-stock shapes need; without it such a model is refused, never prompted for")
    p.add_argument("--out", required=True, help="results JSON (written atomically)")
    p.set_defaults(func=_novelty)
    d = sub.add_parser("depth", help="residual-stream norm per layer and the loss when each layer is skipped "
                                     "(arXiv 2606.16112, 2606.26538)")
    d.add_argument("model", metavar="MODEL", help="a run directory (DIR/final) or weights dir of ours")
    d.add_argument("--text", required=True,
                   help="a token directory (a validation set), a .txt/.jsonl file or a directory of them")
    d.add_argument("--tokens", type=int, default=2048, help="first N tokens of the text (default 2048)")
    d.add_argument("--seq-len", type=int, default=256, help="tokens per window (default 256)")
    d.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA where available)")
    d.add_argument("--out", required=True, help="results JSON (written atomically)")
    d.set_defaults(func=_depth)
