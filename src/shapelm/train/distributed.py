"""Process-group setup for `torchrun` and `srun`, and small collective helpers.

Launch modes (checked in this order):

* torchrun (or any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT);
* srun: a job step sets SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID; MASTER_ADDR is
  taken from the environment if set, else the first host of SLURM_STEP_NODELIST /
  SLURM_JOB_NODELIST (`scontrol show hostnames`, falling back to a built-in parser), and
  MASTER_PORT defaults to 15000 + SLURM_JOB_ID % 20000;
* otherwise a single process (a batch script that runs `shapelm train` directly, a laptop).

NCCL is used on GPU, gloo on CPU.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    launcher: str = "single"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def expand_nodelist(nodelist: str) -> list[str]:
    """`node[01-03,07],gpu5` -> ['node01', 'node02', 'node03', 'node07', 'gpu5']."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            if "-" in r:
                lo, hi = r.split("-", 1)
                for i in range(int(lo), int(hi) + 1):
                    hosts.append(f"{prefix}{str(i).zfill(len(lo))}{suffix}")
            else:
                hosts.append(f"{prefix}{r}{suffix}")
    return hosts


def first_host(nodelist: str) -> str:
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return expand_nodelist(nodelist)[0]


def env_from_slurm(environ: dict[str, str] | None = None) -> dict[str, str]:
    """torch.distributed env variables derived from an srun step's SLURM variables ({} if
    this is not a multi-task srun step or a launcher already set RANK)."""
    env = os.environ if environ is None else environ
    if "RANK" in env or "SLURM_STEP_NUM_TASKS" not in env:
        return {}
    world = int(env["SLURM_STEP_NUM_TASKS"])
    if world <= 1:
        return {}
    out = {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
    }
    if "MASTER_ADDR" not in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        out["MASTER_ADDR"] = first_host(nodelist) if nodelist else "127.0.0.1"
    if "MASTER_PORT" not in env:
        out["MASTER_PORT"] = str(15000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    return out


def init_distributed(device: str | None = None) -> DistEnv:
    """Initialise the process group if launched with several processes; pick the device."""
    slurm = env_from_slurm()
    os.environ.update(slurm)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    launcher = "srun" if slurm else ("torchrun" if world > 1 else "single")
    use_cuda = torch.cuda.is_available() if device in (None, "auto") else device.startswith("cuda")
    if use_cuda:
        n = torch.cuda.device_count()
        # With --gpus-per-task each process may see exactly one GPU.
        dev = torch.device("cuda", local_rank if local_rank < n else 0)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        if rank == 0 and os.environ.get("CUDA_VISIBLE_DEVICES") and device in (None, "auto"):
            # A GPU job on a node torch cannot use (or the CPU rehearsal of one): say so once.
            logging.getLogger(__name__).warning(
                "CUDA_VISIBLE_DEVICES=%s but torch sees no CUDA device: running on CPU%s",
                os.environ["CUDA_VISIBLE_DEVICES"], " with gloo" if world > 1 else "")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if use_cuda else "gloo",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(minutes=30),
            device_id=dev if use_cuda else None,
        )
    return DistEnv(rank=rank, world_size=world, local_rank=local_rank, device=dev, launcher=launcher)


def barrier(env: DistEnv) -> None:
    if env.distributed:
        if env.device.type == "cuda":
            dist.barrier(device_ids=[env.device.index])
        else:
            dist.barrier()


def all_reduce_sum(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def broadcast_object(obj, env: DistEnv):
    if not env.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# How long a failed rank waits for its peers to meet it before it tears down anyway.
ERROR_BARRIER = datetime.timedelta(seconds=60)
# Set once a process group was torn down after an error: the front end then ends the process with
# os._exit after flushing, so no gloo/NCCL thread still winding down is destroyed by the
# interpreter's exit ("terminate called without an active exception", exit -6 instead of 2).
torn_down_after_error = False


def shutdown(env: DistEnv, *, synchronise: bool = True) -> None:
    """Destroy the process group. Every rank first meets at a barrier: a rank that tears gloo
    down while a peer still has a collective or its connection in flight can kill the peer at
    exit ("terminate called without an active exception"), and srun's --kill-on-bad-exit then
    ends the whole step. After an error (`synchronise=False`) the ranks agreed on, the barrier is
    bounded (`ERROR_BARRIER`, gloo's monitored barrier): a peer that never arrives costs that
    long, and the group is then left to the process's hard exit."""
    global torn_down_after_error
    if not (env.distributed and dist.is_initialized()):
        return
    if synchronise:
        barrier(env)
        dist.destroy_process_group()
        return
    torn_down_after_error = True
    try:
        if env.device.type == "cuda":
            return  # NCCL has no bounded barrier: the hard exit ends the process without one
        dist.monitored_barrier(timeout=ERROR_BARRIER, wait_all_ranks=True)
    except Exception:  # noqa: BLE001 - a peer that did not arrive: leave the group to the exit
        return
    dist.destroy_process_group()


def exit_after_error(code: int) -> int:
    """`code`, or, after a process group was torn down on an error, end the process with `code`
    now (stdout, stderr and logging flushed; see `torn_down_after_error`)."""
    if torn_down_after_error:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


@contextlib.contextmanager
def process_group(device: str | None = None):
    """`with process_group(device) as env:` - the process group for the body, torn down after."""
    env = init_distributed(device)
    try:
        yield env
    except BaseException:
        shutdown(env, synchronise=False)
        raise
    else:
        shutdown(env)


def hostname() -> str:
    return socket.gethostname()
