"""`shapelm train RUN_CONFIG --out DIR`: pretrain (or resume) one run.

Exit status: 0 done (or already done, or stopped at --max-steps); 2 a user error (bad config,
bad or corrupt data, an unwritable or full disk, another trainer on --out, non-finite loss),
printed as one line naming the file; 128 + signal number when stopped by SIGTERM (143),
SIGUSR1 (138), Ctrl-C / SIGINT (130) or SIGHUP (129) after writing a checkpoint, or when
--time-limit is about to run out (138). Run the same command again to resume.

Bitwise-equal resumption needs the same CPU thread count: pass --threads (or set
SHAPELM_THREADS); the count used is recorded in DIR/manifest.json.
"""

from __future__ import annotations

import argparse


def _train(args) -> int:
    from shapelm import files
    from shapelm.config import load_run_config
    from shapelm.errors import ConfigError, ShapelmError
    from shapelm.model.config import run_model_config
    from shapelm.train.loop import train

    run = load_run_config(args.run_config)
    try:
        run_model_config(run)  # a bad model config is a user error naming the file, before any work
    except (ConfigError, TypeError) as err:
        raise ConfigError(f"{args.run_config}: model: {err}") from None
    try:
        result = _run(train, run, args)
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's checkpoint was written
        raise ShapelmError(
            f"{args.out}: interrupted before the checkpoint was complete; run the same command "
            "again to resume from the previous one"
        ) from None
    if args.state_out and result.exit_code == 0 and _is_rank_zero():
        files.write_json(args.state_out, {"status": result.status, "step": result.step,
                                           "total_steps": result.total_steps,
                                           "run": run.get("name"), "config_hash": run.get("hash")}, **files.RUN_FILE)
    return result.exit_code


def _run(train, run, args):
    return train(
        run,
        args.out,
        data_dir=args.data,
        max_steps=args.max_steps,
        device=args.device,
        peak_flops=args.peak_flops,
        progress=not args.no_progress,
        time_limit_min=args.time_limit,
        stop_margin_s=args.stop_margin,
        threads=args.threads,
        val_dirs=args.val if args.val is not None else run.get("validation_dirs"),
    )


def _is_rank_zero() -> bool:
    import os

    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) == 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="pretrain one run (resumes from the latest checkpoint in --out)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_config", metavar="RUN_CONFIG", help="resolved run config (JSON or YAML)")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory")
    p.add_argument("--data", metavar="DIR", default=None,
                   help="training token directory (default: the run config's data.train_dir)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop after update N with a checkpoint (the schedule still spans the run)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="cpu, cuda, cuda:N or auto (CUDA where available)")
    p.add_argument("--peak-flops", type=float, default=None, metavar="F",
                   help="peak FLOP/s per device for MFU (default: by GPU name; none on CPU)")
    p.add_argument("--time-limit", type=float, default=None, metavar="MIN",
                   help="this job's wall-clock limit: checkpoint and exit 138 before it runs out")
    p.add_argument("--stop-margin", type=float, default=120.0, metavar="S",
                   help="seconds kept free before --time-limit for the checkpoint (default 120)")
    p.add_argument("--state-out", default=None, metavar="JSON",
                   help="after a clean exit (done, or stopped at --max-steps), write where the run stands")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads (default: SHAPELM_THREADS, else OMP_NUM_THREADS, else torch's "
                        "choice); resume at the same count for bitwise-equal results")
    p.add_argument("--val", nargs="*", default=None, metavar="DIR",
                   help="held-out token directories scored every train.eval_every tokens (beside "
                        "the held-out split of the training stream; docs/TRAINING.md); default: "
                        "the run config's validation_dirs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)
