"""`shapelm results build CONFIG ...` and `shapelm results list CONFIG`: CONFIG is an experiment
config (YAML, or the merged work/EXP/experiment.json), whose plan is built here through the
plan layer, or a plan document (work/EXP/plan.json, what the rules pass). A front end beside
`shapelm.results`, which reads plans only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shapelm.results.readers import ResultsError


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("results", help="tables and figures beside the papers' printed values")
    sub = p.add_subparsers(dest="results_command", metavar="SUBCOMMAND", required=True)

    b = sub.add_parser("build", help="regenerate every table, figure and the derived claims")
    b.add_argument("config", help="experiment config (configs/*.yaml) or its plan (work/EXP/plan.json)")
    b.add_argument("--results-dir", help="results/EXP (per-run JSONs in, tables out); default from the config name")
    b.add_argument("--figures-dir", help="paper_figures/EXP; default from the config name")
    b.add_argument("--work-dir", help="work/EXP (metrics.jsonl of each run); default from the config name")
    b.add_argument("--report-dir", default=None,
                   help="also write one .rst caption per artifact here (e.g. workflow/report)")
    b.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="just this table/figure (repeatable; the targets table_NAME use it)")
    b.set_defaults(func=run_build)

    ls = sub.add_parser("list", help="print every artifact build writes (deterministic)")
    ls.add_argument("config", help="the experiment config (YAML) or its plan (work/EXP/plan.json)")
    ls.add_argument("--results-dir", help="results folder (default: the experiment's)")
    ls.add_argument("--figures-dir", help="figures folder (default: the experiment's)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line, with captions")
    ls.set_defaults(func=run_list)

    cmp = sub.add_parser("compare", help="every number of two results trees, with its relative "
                         "difference and tolerance (exit 1 when one is beyond it)")
    cmp.add_argument("a", help="a results tree (results/EXP)")
    cmp.add_argument("b", nargs="?", default=None,
                     help="another results tree; default: A as committed (git HEAD)")
    cmp.add_argument("--exact", action="store_true",
                     help="every number must be equal bit for bit, whatever the provenance")
    cmp.set_defaults(func=run_compare)

    pv = sub.add_parser("provenance", help="copy a trained run's provenance record into the results tree")
    pv.add_argument("run_dir", help="the run's directory (work/EXP/runs/RUN)")
    pv.add_argument("--out", required=True, help="results/EXP/runs/RUN/provenance.json")
    pv.set_defaults(func=run_provenance)

    c = sub.add_parser("captions", help="write the .rst captions of every artifact (for snakemake --report)")
    c.add_argument("config", help="the experiment config (YAML) or its plan (work/EXP/plan.json)")
    c.add_argument("--report-dir", default="workflow/report", help="where the report's captions go")
    c.set_defaults(func=run_captions)


def _plan(path: str):
    from shapelm.plan.build import load_plan

    return load_plan(path)


def run_build(args: argparse.Namespace) -> int:
    from shapelm.results import build_results

    plan = _plan(args.config)
    rdir = args.results_dir or plan.paths["results"]
    if Path(rdir).exists() and not Path(rdir).is_dir():
        raise ResultsError(f"--results-dir {rdir}: exists and is not a directory")
    fdir = args.figures_dir or plan.paths["figures"]
    written = build_results(plan, rdir, fdir, args.work_dir or plan.paths["work"], report_dir=args.report_dir,
                            only=set(args.only) if args.only else None)
    print(f"wrote {len(written)} files: tables in {Path(rdir) / 'tables'}, figures in {fdir}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from shapelm.results import artifacts

    for a in artifacts(_plan(args.config), args.results_dir, args.figures_dir):
        print(json.dumps(a, ensure_ascii=False) if args.json else f"{a['kind']:6} {a['name']:32} {a['path']}")
    return 0


def run_captions(args: argparse.Namespace) -> int:
    from shapelm.results import write_captions

    paths = write_captions(_plan(args.config), args.report_dir)
    print(f"wrote {len(paths)} captions in {args.report_dir}")
    return 0


def run_provenance(args: argparse.Namespace) -> int:
    from shapelm.records import ProvenanceRecord

    src = Path(args.run_dir) / "provenance.json"
    record = ProvenanceRecord.read(src)
    if record is None:
        raise ResultsError(f"{src}: no provenance record (the run was trained before they were written)")
    record.write(args.out)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    import subprocess
    import tarfile
    import tempfile

    from shapelm.results.compare import compare

    if args.b is not None:
        lines, failures = compare(Path(args.a), Path(args.b), args.exact)
    else:  # A as committed: `git archive HEAD A` unpacked in a scratch directory
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "committed.tar"
            proc = subprocess.run(["git", "archive", "-o", str(archive), "HEAD", args.a],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise ResultsError(f"{args.a}: not in git HEAD ({proc.stderr.strip()})")
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            lines, failures = compare(Path(args.a), Path(tmp) / args.a, args.exact)
    print("\n".join(lines))
    return 1 if failures else 0
