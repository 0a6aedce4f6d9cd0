"""`shapelm eval ppl|downstream|make-tasks` and `shapelm export-hf`."""

from __future__ import annotations


def _ppl(args):
    from shapelm.evaluation.ppl import run_ppl

    return run_ppl(args)


def _downstream(args):
    from shapelm.evaluation.downstream import run_downstream_cli

    return run_downstream_cli(args)


def _make_tasks(args):
    from shapelm.evaluation.make_tasks import make_tasks

    info = make_tasks(args.text, args.out, tokenizer=args.tokenizer, n_mc=args.n_mc,
                      n_ce=args.n_ce, n_choices=args.n_choices, seed=args.seed, standins=args.standins)
    if info["standin_data"]:
        print(f"stand-in data (held-out text in each task's hub schema) for {', '.join(info['standin_data'])} "
              f"({args.out}/standin_data.json)")
    print(f"{info['n_mc']} multiple-choice and {info['n_ce']} ce examples; tasks "
          f"{', '.join(info['lm_eval_tasks'])} in {args.out} (task data: {args.out}/task_data.json)")
    return 0


def _export(args):
    from shapelm.evaluation.export_hf import export_hf

    info = export_hf(args.checkpoint, args.out, tokenizer=args.tokenizer, force_remote=args.remote_code,
                     dtype=args.dtype)
    print(f"exported as {info['architecture']} ({info['kind']}) -> {args.out}")
    return 0


def add_commands(subparsers) -> None:
    ev = subparsers.add_parser("eval", help="held-out perplexity and downstream tasks")
    sub = ev.add_subparsers(dest="eval_command", metavar="EVAL_COMMAND", required=True)

    p = sub.add_parser("ppl", help="held-out perplexity over token directories")
    p.add_argument("--model", required=True, help="run directory (DIR/final) or weights dir")
    p.add_argument("--data", nargs="+", required=True, help="held-out token directories")
    p.add_argument("--seq-len", type=int, default=4096, help="instance length (default 4096)")
    p.add_argument("--max-instances", type=int, default=None, help="per set (default: all)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per forward pass")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA where available)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, help="results JSON (written atomically)")
    p.set_defaults(func=_ppl)

    p = sub.add_parser("downstream", help="lm-eval tasks under OLMo's protocol")
    p.add_argument("--model", required=True, help="a checkpoint: a run directory or its final/")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json or transformers dir")
    p.add_argument("--tasks", nargs="+", default=["olmo"],
                   help="task names (shapelm's, or any lm-eval task) or sets: olmo, tapered, heldout "
                        "(default olmo)")
    p.add_argument("--task-data", nargs="*", default=None,
                   help="NAME=FILE.jsonl or NAME=HUB_ID[:CONFIG][@SPLIT], or a JSON/YAML mapping file")
    p.add_argument("--tasks-dir", default=None, help="where to write the task YAMLs (default: temp)")
    p.add_argument("--limit", type=int, default=None, help="examples per task (debugging)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass")
    p.add_argument("--max-length", type=int, default=None, help="context window (default: the model's max_seq_len)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA where available)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--bootstrap-iters", type=int, default=1000,
                   help="lm-eval's bootstrap for perplexity standard errors (accuracies: analytic); "
                        "0 = no standard errors")
    p.add_argument("--lm-eval-output", default=None,
                   help="where lm-eval's own results.json and samples go (default: OUT's stem + _lm_eval)")
    p.add_argument("--no-samples", action="store_true", help="do not save lm-eval's per-example samples")
    p.add_argument("--out", required=True, help="where to write")
    p.set_defaults(func=_downstream)

    p = sub.add_parser("make-tasks", help="small downstream tasks from held-out text")
    p.add_argument("--text", nargs="+", required=True,
                   help="held-out token directories, text files or directories of text files")
    p.add_argument("--tokenizer", default=None, help="needed to decode token directories")
    p.add_argument("--out", required=True, help="where to write")
    p.add_argument("--n-mc", type=int, default=200, help="multiple-choice examples")
    p.add_argument("--n-ce", type=int, default=200, help="continuation (CE) examples")
    p.add_argument("--n-choices", type=int, default=4, help="choices per multiple-choice example")
    p.add_argument("--seed", type=int, default=1234, help="random seed of the example selection")
    p.add_argument("--standins", nargs="*", default=[], metavar="TASK",
                   help="tasks or sets (olmo, tapered) to write stand-in data for: --n-mc items each, "
                        "cut from the same text in the task's hub schema (docs/EVALUATION.md)")
    p.set_defaults(func=_make_tasks)

    p = subparsers.add_parser("export-hf", help="a Hugging Face model directory from a checkpoint")
    p.add_argument("checkpoint", help="run directory (DIR/final) or weights dir")
    p.add_argument("out", help="the Hugging Face model directory to write")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json or transformers dir to include")
    p.add_argument("--remote-code", action="store_true",
                   help="always use the trust_remote_code architecture")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of the exported weights")
    p.set_defaults(func=_export)
