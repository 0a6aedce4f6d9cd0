"""`shapelm launch --nodes N --procs-per-node G -- COMMAND ...`: one process per GPU, one step.

The training and finetune rules put this in front of their `shapelm` command. Inside a SLURM
allocation it becomes a single `srun` job step with G tasks on each of N nodes (one task per
GPU; each task reads its rank from SLURM_PROCID/SLURM_LOCALID and the rendezvous host from
SLURM_STEP_NODELIST, see shapelm.train.distributed). The rule runs with Snakemake's `mpi`
resource, so the executor does not wrap the job in a step of its own: this is the only step,
and `--signal=USR1@LEAD` (which SLURM sends to job steps, not to the batch shell) reaches every
rank directly. No torchrun in between means no agent with its own shutdown grace to outlast.

Outside SLURM: one process runs as is; several on one machine go through `torchrun
--standalone`; several machines without SLURM are an error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from shapelm.errors import ConfigError


def launch_command(nodes: int, procs_per_node: int, command: list[str], *,
                   cpus_per_task: int | None = None, environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    if nodes < 1 or procs_per_node < 1:
        raise ConfigError(f"launch: --nodes {nodes} and --procs-per-node {procs_per_node} must be >= 1")
    module = [sys.executable, "-m", "shapelm.cli", *command]
    if nodes * procs_per_node == 1:
        return module
    if env.get("SLURM_JOB_ID"):
        srun = ["srun", f"--nodes={nodes}", f"--ntasks-per-node={procs_per_node}",
                f"--ntasks={nodes * procs_per_node}", "--kill-on-bad-exit=1", "--cpu-bind=none"]
        if cpus_per_task:
            srun.append(f"--cpus-per-task={cpus_per_task}")
        return [*srun, *module]
    if nodes > 1:
        raise ConfigError(
            f"launch: {nodes} nodes need a SLURM allocation (no SLURM_JOB_ID here); run through "
            "`snakemake --profile slurm`, or on one machine with resources.nodes: 1")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={procs_per_node}", "-m", "shapelm.cli", *command]


def _launch(args) -> int:
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError("launch: nothing to run after --")
    argv = launch_command(args.nodes, args.procs_per_node, command, cpus_per_task=args.cpus_per_task)
    if args.print:
        print(" ".join(argv))
        return 0
    print("shapelm launch: " + " ".join(argv), file=sys.stderr, flush=True)
    if argv[0] == "srun" and shutil.which("srun") is None:
        raise ConfigError("launch: SLURM_JOB_ID is set but srun is not on PATH")
    os.execvp(argv[0], argv)
    return 0  # not reached


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("launch", help="start one process per GPU (srun in SLURM, else torchrun)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1, help="nodes of the job (one process per GPU on each)")
    p.add_argument("--procs-per-node", type=int, default=1, help="processes (GPUs) per node")
    p.add_argument("--cpus-per-task", type=int, default=None, help="CPUs of each process (srun)")
    p.add_argument("--print", action="store_true", help="print the command instead of running it")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="-- then a shapelm command and its arguments")
    p.set_defaults(func=_launch)
