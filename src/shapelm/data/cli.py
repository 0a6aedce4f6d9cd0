"""``shapelm data ...`` subcommands; the main CLI calls :func:`add_data_commands`.

Each leaf parser sets ``func`` (``func(args) -> int``, the exit status); errors are raised as
``shapelm.errors.DataError`` for the main CLI to report.
"""

from __future__ import annotations

import argparse
import json
import sys


def source_ids(spec: str | None, cfg: dict) -> tuple[int, int]:
    """(vocab_size, eos_id) of the source data: from the tokenizer ``spec`` names when its files
    are found locally (a rehearsal's dolma2 stand-in has its own), else the shipped config's
    dolma2 values (the same numbers the real tokenizer files give)."""
    import sys

    from shapelm.data.tokenizer import load_tokenizer, resolve_tokenizer_file, tokenizer_eos_id, vocab_size_of
    from shapelm.errors import DataError

    if spec:
        try:
            f = resolve_tokenizer_file(spec)
        except DataError:
            print(f"tokenizer {spec} not found locally: vocab {cfg['vocab_size']}, EOS "
                  f"{cfg['eos_id']} (olmo2_stage1.yaml)", file=sys.stderr)
        else:
            tok = load_tokenizer(f)
            return vocab_size_of(tok), tokenizer_eos_id(tok, f)
    return int(cfg["vocab_size"]), int(cfg["eos_id"])


def _slice(args) -> int:
    from shapelm.data.olmo_order import slice_olmo
    from shapelm.data.validation import load_olmo_config, olmo_paths, read_path_list

    cfg = load_olmo_config()
    paths = read_path_list(args.paths, args.root) if args.paths else olmo_paths(args.root)
    vocab_size, eos_id = source_ids(args.tokenizer, cfg)
    m = slice_olmo(
        paths,
        args.tokens,
        args.out_dir,
        seed=cfg["seed"] if args.seed is None else args.seed,
        seq_len_out=args.seq_len_out,
        vocab_size=vocab_size,
        eos_id=eos_id,
        cache_dir=args.cache_dir,
        part_instances=args.part_instances,
        workers=args.workers,
        progress=not args.quiet,
    )
    print(f"{args.out_dir}: {m['n_tokens']:,} tokens, {m['n_instances']:,} instances")
    return 0


def _retokenize(args) -> int:
    from shapelm.data.olmo_order import parse_tokens
    from shapelm.data.retokenize import retokenize

    m = retokenize(
        args.source_dir,
        args.out_dir,
        args.source_tokenizer,
        args.tokenizer,
        n_tokens=None if args.tokens is None else parse_tokens(args.tokens),
        seq_len=args.seq_len,
        context=args.context or "",
        hint=args.hint or "",
        progress=not args.quiet,
    )
    used = m["source"]["tokens_used"]
    print(f"{args.out_dir}: {m['n_tokens']:,} tokens of {m['tokenizer']} (vocab {m['vocab_size']}) "
          f"from {used:,} source tokens")
    return 0


def _validation(args) -> int:
    from shapelm.data.validation import fetch_validation, load_olmo_config

    vocab_size, eos_id = source_ids(args.tokenizer, load_olmo_config())
    out = fetch_validation(args.sets, args.root, args.out_dir, overwrite=args.overwrite,
                           vocab_size=vocab_size, eos_id=eos_id)
    for name, d in out.items():
        print(f"{name}: {d}")
    return 0


def _default_corpus(args) -> int:
    from shapelm.data.corpus import build_default_corpus

    s = build_default_corpus(
        args.out_dir,
        vocab_size=args.vocab_size,
        max_train_tokens=args.max_train_tokens,
        cache_dir=args.cache_dir,
        books=not args.no_books,
    )
    for split, v in s["splits"].items():
        print(f"{split:<20} {v['documents']:>5} docs {v['bytes']:>10,} bytes {v['tokens']:>10,} tokens")
    print(f"corpus sha256 {s['corpus_sha256']}, tokenizer sha256 {s['tokenizer_sha256']}")
    for what, expected in (("corpus", args.expect_corpus_sha256),
                           ("tokenizer", args.expect_tokenizer_sha256)):
        got = s[f"{what}_sha256"]
        if expected and got != expected:
            print(f"warning: the {what} sha256 {got} is not the {expected} of the committed "
                  "results (data.default_corpus.sha256): every number trained on this corpus "
                  "will differ from them", file=sys.stderr)
    return 0


def _inspect(args) -> int:
    from shapelm.data.tokens import TokenStore

    store = TokenStore(args.token_dir, verify=args.verify, check_ids=not args.no_check_ids)
    print(store.summary())
    if args.json:
        m = dict(store.manifest)
        if isinstance(m.get("instance_ids"), list):
            m["instance_ids"] = f"[{len(m['instance_ids'])} ids]"
        print(json.dumps(m, indent=1)[:20000])
    print("ok: dtype, sizes, ids" + (", checksums" if args.verify else "") + " validated")
    return 0


def add_data_commands(subparsers) -> argparse.ArgumentParser:
    """Register ``data`` with subcommands slice, retokenize, validation, default-corpus, inspect."""
    p = subparsers.add_parser("data", help="token files: OLMo slices, validation sets, corpus")
    sub = p.add_subparsers(dest="data_command", metavar="COMMAND", required=True)

    s = sub.add_parser("slice", help="write the first N tokens of OLMo-2 stage 1 in training order")
    s.add_argument("out_dir", help="the token directory to write")
    s.add_argument("--tokens", required=True, help="token count: 2.5B, 7B, 18B, 60B, 160B, ...")
    s.add_argument("--paths", help="file or URL with one source (path or URL) a line (default: shipped list)")
    s.add_argument("--root", help="local dir / URL prefix replacing http://olmo-data.org (also in --paths)")
    s.add_argument("--tokenizer", help="tokenizer of the sources: vocab and EOS from its files if found locally")
    s.add_argument("--seed", type=int, default=None, help="default: 6198 (the config's)")
    s.add_argument("--seq-len-out", type=int, default=4096, help="window the run uses (2048: split each instance)")
    s.add_argument("--cache-dir", help="size/order cache (default $SHAPELM_CACHE_DIR or ~/.cache/shapelm)")
    s.add_argument("--part-instances", type=int, default=8192, help="instances per output part")
    s.add_argument("--workers", type=int, default=8, help="concurrent readers")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_slice)

    r = sub.add_parser("retokenize", help="re-encode a token dir with another tokenizer, same order")
    r.add_argument("source_dir", help="token dir (an OLMo slice or a validation set)")
    r.add_argument("out_dir", help="the token directory to write")
    r.add_argument("--source-tokenizer", required=True, help="tokenizer of the source ids (its EOS splits documents)")
    r.add_argument("--tokenizer", required=True, help="target tokenizer (file, dir or HF repo id in the local cache)")
    r.add_argument("--tokens", help="stop after ceil(N / seq-len) windows (default: the whole source)")
    r.add_argument("--seq-len", type=int, help="window length (default: the source manifest's)")
    r.add_argument("--context", help="what this is, for errors (e.g. 'scales.tapered440M')")
    r.add_argument("--hint", help="how to fix a too-short source, appended to that error")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_retokenize)

    v = sub.add_parser("validation", help="convert OLMo v3-small perplexity sets to token dirs")
    v.add_argument("out_dir", help="the token directory to write")
    v.add_argument("--sets", default="paper", help="'paper' (the four), 'all', or a comma list")
    v.add_argument("--root", help="local dir / URL prefix with <set>/val/part-0-00000.npy")
    v.add_argument("--tokenizer", help="tokenizer of the sets: vocab and EOS from its files if found locally")
    v.add_argument("--overwrite", action="store_true", help="replace existing sets")
    v.set_defaults(func=_validation)

    c = sub.add_parser("default-corpus", help="build the embedded default corpus + BPE")
    c.add_argument("out_dir", help="the token directory to write")
    c.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary of the default corpus")
    c.add_argument("--max-train-tokens", type=int, default=2_500_000, help="train split cut at this many tokens")
    c.add_argument("--cache-dir", help="where the pinned registry files are cached")
    c.add_argument("--no-books", action="store_true", help="skip Shakespeare")
    c.add_argument("--expect-corpus-sha256", default=None, metavar="SHA256",
                   help="warn when the corpus digest differs (the committed results' corpus)")
    c.add_argument("--expect-tokenizer-sha256", default=None, metavar="SHA256",
                   help="warn when the tokenizer.json digest differs")
    c.set_defaults(func=_default_corpus)

    i = sub.add_parser("inspect", help="print a token dir's manifest summary and validate it")
    i.add_argument("token_dir", help="a token directory (manifest.json + *.u32)")
    i.add_argument("--verify", action="store_true", help="also check every file's checksum (sha256 or xxh3-128)")
    i.add_argument("--no-check-ids", action="store_true", help="skip the id < vocab scan")
    i.add_argument("--json", action="store_true", help="print the manifest")
    i.set_defaults(func=_inspect)
    return p


#: the name the main CLI (``shapelm.cli.COMMAND_MODULES``) looks for
add_commands = add_data_commands


def main(argv=None) -> int:
    """Standalone entry (``python -m shapelm.data.cli``) until the main CLI wires it in."""
    import sys

    from shapelm.errors import ShapelmError

    ap = argparse.ArgumentParser(prog="shapelm")
    add_data_commands(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except ShapelmError as e:
        print(f"shapelm {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
