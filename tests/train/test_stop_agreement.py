"""The ranks' agreement to stop at a step boundary (shapelm.train.steps.agree_to_stop), which
pretraining and the YaRN finetune share: a signal or time limit on one rank stops every rank,
each with the same signal number, so all checkpoint and exit 128 + signal alike.

Run as a script, this file is one rank of a 2-process gloo group (RANK / WORLD_SIZE set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train_helpers import free_port, child_env  # noqa: E402  (also sets up the bytecode cache)


def test_a_signal_on_one_rank_stops_every_rank_with_it():
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, __file__],
                              env=child_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    # no signal: every rank goes on, the counts summed; rank 1's SIGUSR1: both stop with it
    assert [r["calm"] for r in results] == [[0, [3]], [0, [3]]]
    assert [r["stopped"] for r in results] == [[signal.SIGUSR1, [3]]] * 2
    assert [r["own_signal"] for r in results] == [signal.SIGUSR1] * 2
    # SIGTERM on rank 0 and the time limit (as SIGUSR1) on rank 1: both take the larger, SIGTERM
    assert [r["both"] for r in results] == [signal.SIGTERM] * 2


def test_one_process_stops_on_its_own_signal_or_clock():
    from shapelm.train.distributed import DistEnv
    from shapelm.train.steps import agree_to_stop
    from shapelm.train.preempt import Preemption

    env = DistEnv()
    assert agree_to_stop(Preemption(), 1.0, env, 7, 2) == (0, [7, 2])
    clocked = Preemption(time_limit_min=1.0, margin_s=55.0)  # 60 s: no room for margin + 2 steps
    assert agree_to_stop(clocked, 5.0, env) == (signal.SIGUSR1, [])
    assert clocked.signum == signal.SIGUSR1


def _rank() -> int:
    from shapelm.train.distributed import process_group
    from shapelm.train.steps import agree_to_stop
    from shapelm.train.preempt import Preemption

    with process_group("cpu") as env:
        rank_count = env.rank + 1  # 1 + 2 = 3 summed
        calm = agree_to_stop(Preemption(), 0.0, env, rank_count)
        preempt = Preemption()
        if env.rank == 1:
            preempt.signum = signal.SIGUSR1  # as the handler records a signal
        stopped = agree_to_stop(preempt, 0.0, env, rank_count)
        both = Preemption(time_limit_min=None if env.rank == 0 else 0.0)
        if env.rank == 0:
            both.signum = signal.SIGTERM
        both_signal, _ = agree_to_stop(both, 0.0, env)
    print(json.dumps({"calm": list(calm), "stopped": list(stopped), "own_signal": preempt.signum,
                      "both": both_signal}))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(_rank())
