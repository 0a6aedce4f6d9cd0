"""`shapelm longctx prepare | finetune | proofpile | ruler-generate | ruler`.

Exit status of `finetune`: 0 done (or already done); 2 a user error; 138 / 143 after writing a
checkpoint when stopped by SIGUSR1 / SIGTERM, and 138 when --time-limit is about to run out
(pretraining's contract: rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from shapelm.config import section_defaults
from shapelm.records import ProofpileRecord, RulerRecord

#: The schema's `longctx:` defaults (config.schema.yaml): the options below default to them,
#: and the finetune's others to FinetuneConfig's (an option without a default is not passed on).
DEFAULTS = section_defaults("longctx")
#: `finetune` options that are FinetuneConfig fields of the same name.
FINETUNE_OPTIONS = ("steps", "lr", "batch", "micro_batch", "seq_len", "factor", "original", "warmup",
                    "schedule", "seed", "loss_chunk_tokens", "checkpoint_every", "device")


def _ints(s: str) -> list[int]:
    try:
        vals = [int(x) for x in s.replace(" ", "").split(",") if x]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from e
    if not vals:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return vals


def _names(s: str) -> list[str]:
    return [x for x in s.replace(" ", "").split(",") if x]


def _tokenizer(spec):
    if spec is None:
        return None
    from shapelm.data.tokenizer import load_tokenizer

    return load_tokenizer(spec)


def _eos(tok, spec=None):
    """The tokenizer's EOS id: its tokenizer_config.json's eos_token when ``spec`` names a file
    or cached repo (Llama's </s>), else the usual names (<|endoftext|>, ...); None without one."""
    from shapelm.data.tokenizer import resolve_tokenizer_file, tokenizer_eos_id
    from shapelm.errors import DataError

    if tok is None:
        return None
    try:
        path = resolve_tokenizer_file(spec) if spec and not str(spec).startswith("default") else None
    except DataError:
        path = None
    try:
        return tokenizer_eos_id(tok, path)
    except DataError:
        return None


def load_model_for_eval(path, device: str = "auto", dtype: str = "auto", factor=None, original=None):
    """Load ``path`` (or ``path/final``); optionally switch to YaRN (factor, original length)."""
    import torch

    from shapelm.longctx.yarn import apply_yarn, yarn_scaling
    from shapelm.model import load_pretrained

    p = Path(path)
    if (p / "final" / "model_config.json").is_file():
        p = p / "final"
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    if dtype == "auto":
        dt = torch.bfloat16 if str(dev).startswith("cuda") else torch.float32
    else:
        dt = getattr(torch, dtype)
    model = load_pretrained(p, device=dev, dtype=dt)
    if factor is not None:
        apply_yarn(model, yarn_scaling(factor, original or model.config.max_seq_len))
    model.eval()
    return model


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model dir (save_pretrained output, or a run dir with final/)")
    p.add_argument("--run", default=None, help="run name in the results (default: the model dir name)")
    p.add_argument("--factor", type=float, default=None,
                   help="apply YaRN with this scale before evaluating (a finetuned model already carries it)")
    p.add_argument("--original", type=int, default=None, help="original context length for --factor")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA where available)")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16")


def _run_name(args) -> str:
    if args.run:
        return args.run
    p = Path(args.model).resolve()
    return p.parent.name if p.name == "final" else p.name


def finetune_config(args):
    """The FinetuneConfig of `shapelm longctx finetune ARGS`: the options given, its defaults
    for the others."""
    from shapelm.longctx.finetune import FinetuneConfig

    given = {k: getattr(args, k) for k in FINETUNE_OPTIONS if getattr(args, k) is not None}
    return FinetuneConfig(**given, activation_checkpointing=not args.no_activation_checkpointing)


def cmd_finetune(args) -> int:
    from shapelm.longctx.finetune import yarn_finetune

    cfg = finetune_config(args)
    result = yarn_finetune(args.model, args.data, args.out, cfg, tokenizer=_tokenizer(args.tokenizer),
                           split=args.split or None, max_steps_this_call=args.max_steps_this_call,
                           time_limit_min=args.time_limit, stop_margin_s=args.stop_margin)
    if os.environ.get("RANK", "0") == "0":  # set by torchrun, or from SLURM_PROCID under srun
        print(f"{result.status} at step {result.step}/{result.steps}: {result.path}")
    return result.exit_code


def cmd_prepare(args) -> int:
    from shapelm.longctx.finetune import prepare_segments

    tok = _tokenizer(args.tokenizer)
    out = prepare_segments(args.source, tok, args.seq_len, args.out, _eos(tok, args.tokenizer),
                           split=args.split or None, max_segments=args.max_segments)
    print(out)
    return 0


def cmd_proofpile(args) -> int:
    from shapelm.longctx.proofpile import proofpile_perplexity
    from shapelm.longctx.sources import load_documents

    tok = _tokenizer(args.tokenizer)
    docs = load_documents(args.docs, tok, min_tokens=args.min_tokens, num_docs=args.num_docs, text_key=args.text_key,
                          split=args.split or None)
    model = load_model_for_eval(args.model, args.device, args.dtype, args.factor, args.original)
    res = proofpile_perplexity(model, docs, args.lengths, loss_chunk_tokens=args.loss_chunk_tokens,
                               partial=Path(f"{args.out}.partial"))
    res.update(kind="proofpile", run=_run_name(args), model=str(args.model), docs=str(args.docs),
               min_tokens=args.min_tokens, num_docs=args.num_docs, rope_scaling=model.config.rope_scaling)
    ProofpileRecord.from_dict(res, args.out).write(args.out)
    for L in res["lengths"]:
        print(f"{L}\t{res['ppl'][str(L)]:.4f}")
    return 0


def cmd_ruler_generate(args) -> int:
    from shapelm.longctx.ruler.run import generate_ruler, load_resources

    tok = _tokenizer(args.tokenizer)
    res = load_resources(essays=args.essays, squad=args.squad, hotpotqa=args.hotpotqa, qa_text=args.qa_text,
                         words=args.words, word_lists=args.word_lists, tokenizer=tok)
    m = generate_ruler(args.out, tok, args.lengths, args.samples, tasks=args.tasks, resources=res,
                       seed=args.seed, tokenizer_name=str(args.tokenizer))
    print(json.dumps(m["counts"]))
    return 0


def cmd_ruler(args) -> int:
    from shapelm.longctx.ruler.run import evaluate_ruler

    tok = _tokenizer(args.tokenizer)
    model = load_model_for_eval(args.model, args.device, args.dtype, args.factor, args.original)
    # predictions beside the result, per task and length: a rerun resumes where a job stopped
    pred_dir = args.pred_dir or f"{args.out}.preds"
    res = evaluate_ruler(model, tok, args.data, lengths=args.lengths, tasks=args.tasks, pred_dir=pred_dir,
                         max_samples=args.max_samples, eos_id=_eos(tok, args.tokenizer), prefill_chunk=args.prefill_chunk)
    res.update(kind="ruler", run=_run_name(args), model=str(args.model), rope_scaling=model.config.rope_scaling)
    RulerRecord.from_dict(res, args.out).write(args.out)
    for L, s in res["scores"].items():
        print(f"{L}\tmean {s['mean']:.2f}")
    return 0


def add_commands(subparsers) -> None:
    top = subparsers.add_parser("longctx", help="YaRN context extension, Proof-pile PPL, RULER")
    sub = top.add_subparsers(dest="longctx_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("prepare", help="tokenize a text source (PG19) into finetune segments")
    p.add_argument("--source", required=True, help="PG19: hf:emozilla/pg19/data, a dir of .txt/.parquet/.jsonl, ...")
    p.add_argument("--split", default="train", help="split to read when the source holds several ('' for all)")
    p.add_argument("--tokenizer", required=True,
                   help="tokenizer: a tokenizer.json, a directory holding one, or a cached hub id")
    p.add_argument("--seq-len", type=int, default=65_536, help="tokens per segment (the extended context)")
    p.add_argument("--max-segments", type=int, default=None, help="stop after this many (steps x batch)")
    p.add_argument("--out", required=True, help="where to write")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("finetune", help="YaRN finetune (Peng et al. recipe), resumable, FSDP over srun/torchrun ranks")
    p.add_argument("--model", required=True, help="the checkpoint to extend (a run's final/)")
    p.add_argument("--data", required=True,
                   help="token dir, or text source (dir of .txt/.parquet/.jsonl, hf:OWNER/NAME) with --tokenizer")
    p.add_argument("--split", default="train", help="split of a text source holding several ('' for all)")
    p.add_argument("--out", required=True, help="where to write")
    p.add_argument("--tokenizer", default=None, help="model tokenizer spec (needed for text sources)")
    p.add_argument("--time-limit", type=float, default=None, metavar="MIN",
                   help="this job's wall-clock limit: checkpoint and exit 138 before it runs out")
    p.add_argument("--stop-margin", type=float, default=120.0, metavar="S",
                   help="seconds kept free before --time-limit for the checkpoint (default 120)")
    # Defaults: the schema's longctx ones (as FinetuneConfig's); an option without one here
    # takes FinetuneConfig's (None: not passed on).
    p.add_argument("--steps", type=int, default=DEFAULTS["finetune_steps"], help="optimizer steps")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the paper's)")
    p.add_argument("--batch", type=int, default=DEFAULTS["finetune_batch"], help="global batch (segments)")
    p.add_argument("--micro-batch", type=int, default=DEFAULTS["micro_batch"],
                   help="segments per forward pass and process")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per segment (the extended context; default: the paper's)")
    p.add_argument("--factor", type=float, default=float(DEFAULTS["factor"]), help="YaRN scale s")
    p.add_argument("--original", type=int, default=None,
                   help="original context length L0 (default: the paper's)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the paper's)")
    p.add_argument("--schedule", choices=["linear", "constant"], default=None,
                   help="after warm-up: linear decay to 0 (yarn's DeepSpeed WarmupDecayLR; the "
                        "default) or constant")
    p.add_argument("--seed", type=int, default=None, help="random seed")
    p.add_argument("--loss-chunk-tokens", type=int, default=None,
                   help="tokens per chunk of the cross-entropy (bounds the logits' memory)")
    p.add_argument("--checkpoint-every", type=int, default=DEFAULTS["checkpoint_every"],
                   help="steps between checkpoints")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (the default: CUDA where available)")
    p.add_argument("--no-activation-checkpointing", action="store_true",
                   help="keep every block's activations (faster, more memory)")
    p.add_argument("--max-steps-this-call", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("proofpile", help="perplexity of long documents at several lengths")
    _model_args(p)
    p.add_argument("--docs", required=True,
                   help="token dir, .jsonl(.gz), .parquet, .json, .txt, a dir of them, or hf:OWNER/NAME[/DIR]")
    p.add_argument("--split", default="test", help="split to read when the source holds several ('' for all)")
    p.add_argument("--tokenizer", default=None, help="needed for text sources")
    p.add_argument("--lengths", type=_ints, default=DEFAULTS["lengths"],
                   help="context lengths, comma-separated")
    p.add_argument("--min-tokens", type=int, default=DEFAULTS["proofpile_min_tokens"],
                   help="documents shorter than this are skipped")
    p.add_argument("--num-docs", type=int, default=DEFAULTS["proofpile_num_docs"], help="documents scored")
    p.add_argument("--text-key", default="text", help="the JSON field holding a document's text")
    p.add_argument("--loss-chunk-tokens", type=int, default=4096,
                   help="tokens per chunk of the cross-entropy (bounds the logits' memory)")
    p.add_argument("--out", required=True, help="result JSON")
    p.set_defaults(func=cmd_proofpile)

    p = sub.add_parser("ruler-generate", help="write RULER samples for every task and length")
    p.add_argument("--tokenizer", required=True,
                   help="tokenizer: a tokenizer.json, a directory holding one, or a cached hub id")
    p.add_argument("--lengths", type=_ints, default=DEFAULTS["lengths"],
                   help="context lengths, comma-separated")
    p.add_argument("--samples", type=int, default=DEFAULTS["ruler_samples"], help="samples per task and length")
    p.add_argument("--tasks", type=_names, default=None, help="comma-separated (default: all 13)")
    p.add_argument("--essays", default=None, help="PaulGrahamEssays.json, .txt, dir of .txt or token dir")
    p.add_argument("--squad", default=None, help="SQuAD v2 dev JSON, or its HF rows (hf:rajpurkar/squad_v2/squad_v2)")
    p.add_argument("--hotpotqa", default=None,
                   help="HotpotQA dev distractor JSON, or its HF rows (hf:hotpotqa/hotpot_qa/distractor)")
    p.add_argument("--qa-text", default=None, help="text source for substitute QA when --squad/--hotpotqa are absent")
    p.add_argument("--words", default=None, help="extra word list (one per line, or english_words.json)")
    p.add_argument("--word-lists", choices=["builtin", "wonderwords"], default="builtin",
                   help="the noun/adjective/verb lists of the needles and cwe: wonderwords' (NVIDIA's RULER) or "
                        "the built-in ones (default)")
    p.add_argument("--seed", type=int, default=42, help="random seed")
    p.add_argument("--out", required=True, help="where to write")
    p.set_defaults(func=cmd_ruler_generate)

    p = sub.add_parser("ruler", help="greedy-decode and score a RULER sample set")
    _model_args(p)
    p.add_argument("--data", required=True, help="output dir of ruler-generate")
    p.add_argument("--tokenizer", required=True,
                   help="tokenizer: a tokenizer.json, a directory holding one, or a cached hub id")
    p.add_argument("--lengths", type=_ints, default=None, help="context lengths, comma-separated")
    p.add_argument("--tasks", type=_names, default=None, help="RULER tasks, comma-separated (default: those generated)")
    p.add_argument("--max-samples", type=int, default=None,
                   help="at most this many samples per task and length (default: all)")
    p.add_argument("--prefill-chunk", type=int, default=8192, help="prompt tokens per forward pass of the prefill")
    p.add_argument("--pred-dir", default=None, help="where to write each prediction (default: none)")
    p.add_argument("--out", required=True, help="result JSON")
    p.set_defaults(func=cmd_ruler)
