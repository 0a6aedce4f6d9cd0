"""`shapelm cluster check-submit`: would this cluster accept every job of the plan?

A dry run (`snakemake -n`) checks the DAG, not the requests: a job can plan fine and still be
refused by `sbatch` ("Requested node configuration is not available") after everything before
it has run. This command takes every job of a dry run with the resources Snakemake resolved for
it, turns them into the sbatch command the installed executor plugin would submit (the
plugin's own `get_submit_command`), and asks the cluster with `sbatch --test-only`, which
schedules nothing. Identical requests are asked once.

    shapelm cluster check-submit -- --profile slurm            # the paper plan
    shapelm cluster check-submit -- --profile slurm scale_8B   # one target
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shapelm.errors import ShapelmError

_JOB_HEAD = re.compile(r"^(local)?rule (\S+):$")


@dataclass
class PlannedJob:
    rule: str
    local: bool
    wildcards: str = ""
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.rule}[{self.wildcards}]" if self.wildcards else self.rule


def _value(text: str) -> Any:
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def parse_dry_run(text: str) -> list[PlannedJob]:
    """The jobs of `snakemake -n` output, with their resolved resources (local rules as the
    Snakefile lists them under SHAPELM_PRINT_LOCALRULES=1)."""
    jobs: list[PlannedJob] = []
    current: PlannedJob | None = None
    local: set[str] = set()
    for line in text.splitlines():
        if line.startswith("shapelm-localrules:"):
            local.update(line.split(":", 1)[1].split())
            continue
        head = _JOB_HEAD.match(line.strip())
        if head:
            current = PlannedJob(rule=head.group(2), local=bool(head.group(1)))
            jobs.append(current)
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("wildcards:"):
            current.wildcards = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("resources:"):
            for item in stripped.split(":", 1)[1].split(", "):
                key, _, val = item.strip().partition("=")
                if key and "<TBD>" not in val:
                    current.resources[key] = _value(val)
    for job in jobs:
        job.local = job.local or job.rule in local
    return jobs


class _Resources(dict):
    """What the plugin reads from `job.resources`: .get() and attribute access."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def sbatch_command(job: PlannedJob) -> list[str]:
    """The sbatch call snakemake-executor-plugin-slurm makes for this job (without --wrap)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    res = _Resources(job.resources)
    fake = SimpleNamespace(resources=res, threads=int(res.get("_cores", 1)), name=job.rule,
                           is_group=lambda: False)
    partition = f"-p {shlex.quote(str(res['slurm_partition']))}" if res.get("slurm_partition") else ""
    account = f"-A {shlex.quote(str(res['slurm_account']))}" if res.get("slurm_account") else ""
    params = {"run_uuid": f"check-{job.rule}", "slurm_logfile": "/dev/null",
              "comment_str": f"rule_{job.rule}", "account": account, "partition": partition,
              "workdir": None}
    call = get_submit_command(fake, params) + set_gres_string(fake)
    return shlex.split(call)


def check_jobs(jobs: list[PlannedJob], sbatch: str = "sbatch") -> list[dict[str, Any]]:
    """One row per distinct request: the command, the jobs that make it, and the answer."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for job in jobs:
        if job.local:
            continue
        argv = sbatch_command(job)
        key = tuple(a for a in argv if not a.startswith(("--job-name", "--comment", "check-", "rule_")))
        row = rows.setdefault(key, {"argv": argv, "jobs": []})
        row["jobs"].append(job.label)
    for row in rows.values():
        cmd = [sbatch, "--test-only", *row["argv"][1:], "--wrap", "true"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        row["accepted"] = proc.returncode == 0
        row["answer"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        row["answer"] = row["answer"][0]
    return list(rows.values())


def _snakemake_dry_run(args: list[str], cwd: Path) -> str:
    import os

    cmd = [str(Path(sys.executable).parent / "snakemake"), "-n", *args]
    env = {**os.environ, "SHAPELM_PRINT_LOCALRULES": "1"}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ShapelmError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout + proc.stderr


def _check_submit(args) -> int:
    extra = list(args.snakemake_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    jobs = parse_dry_run(_snakemake_dry_run(extra or ["--profile", "slurm"], Path(args.directory)))
    rows = check_jobs(jobs)
    refused = [r for r in rows if not r["accepted"]]
    remote = sum(len(r["jobs"]) for r in rows)
    for row in rows:
        mark = "ok     " if row["accepted"] else "REFUSED"
        print(f"{mark} {len(row['jobs']):4d} job(s)  {' '.join(row['argv'][1:])}")
        if not row["accepted"] or args.verbose:
            print(f"        {row['answer']}\n        e.g. {', '.join(row['jobs'][:4])}")
    local = sum(1 for j in jobs if j.local)
    print(f"{remote} cluster jobs in {len(rows)} distinct requests, {local} local jobs: "
          f"{len(refused)} request(s) refused")
    return 1 if refused else 0


def add_commands(subparsers) -> None:
    top = subparsers.add_parser("cluster", help="checks against the SLURM cluster")
    sub = top.add_subparsers(dest="cluster_command", required=True)
    p = sub.add_parser("check-submit", help="sbatch --test-only for every job of a dry run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--directory", default=".", help="the workflow directory (default: .)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every answer")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, metavar="-- SNAKEMAKE_ARGS",
                   help="Snakemake's arguments, after --")
    p.set_defaults(func=_check_submit)
