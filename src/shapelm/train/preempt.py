"""When a job must stop: a preemption signal, or its wall-clock limit coming close.

SLURM warns a job before its time limit with `--signal=USR1@LEAD` (the profile asks for it)
and sends SIGTERM on preemption or at the limit itself. A job that knows its own limit does not
have to rely on the signal arriving (it is delivered with up to a minute's slack, and a cluster
may strip it): `time_limit_min` starts a clock at construction, and `should_stop` says stop when
the time left is below `margin_s` (room for the checkpoint) plus two steps of the measured pace.

Either way the caller checkpoints at the next step boundary and exits 128 + signal number
(138 for SIGUSR1 and for a time-limit stop, 143 for SIGTERM); the workflow resubmits and the
run resumes from the checkpoint. A user's Ctrl-C (SIGINT, 130) and a closed terminal (SIGHUP,
129) stop the same way, with no traceback; a second Ctrl-C while the checkpoint is written
interrupts at once (the half-written checkpoint is discarded at the next start). A signal
that was ignored when training started (`nohup`, a background job of a script) stays ignored.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from shapelm import files

log = logging.getLogger(__name__)

#: Signals that request "checkpoint at the next step boundary, then exit 128 + signum".
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
#: Of those, the ones a user sends (a terminal); left alone when the launcher ignores them.
USER_SIGNALS = (signal.SIGINT, signal.SIGHUP)


@dataclass
class Preemption:
    time_limit_min: float | None = None
    margin_s: float = 120.0
    signum: int | None = None
    started: float = field(default_factory=lambda: time.monotonic())
    previous: dict = field(default_factory=dict)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in PREEMPT_SIGNALS:
            if sig in USER_SIGNALS and signal.getsignal(sig) == signal.SIG_IGN:
                continue
            self.previous[sig] = signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait
        if self.signum is None:
            log.warning("received %s: checkpoint at the next step boundary, then exit %d",
                        signal.Signals(signum).name, 128 + signum)
        self.signum = signum

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def time_left_s(self) -> float | None:
        if self.time_limit_min is None:
            return None
        return self.time_limit_min * 60.0 - (time.monotonic() - self.started)

    def should_stop(self, step_seconds: float = 0.0) -> bool:
        """A signal arrived, or the time left no longer holds two more steps and the margin."""
        if self.signum is not None:
            return True
        left = self.time_left_s()
        if left is not None and left < self.margin_s + 2.0 * max(step_seconds, 0.0):
            log.warning("%.0f s left of the %.0f-minute limit (margin %.0f s, step %.1f s): "
                        "checkpoint now, then exit %d", left, self.time_limit_min, self.margin_s,
                        step_seconds, 128 + signal.SIGUSR1)
            self.signum = signal.SIGUSR1
            return True
        return False

    def hold_for_signal(self, run_name: str, step: int, marker) -> None:
        """Rehearsal hook: with SHAPELM_HOLD_AT=RUN:STEP, wait at that step boundary (writing
        `marker`) until a signal arrives, so a test can preempt the job through SLURM at a
        known step instead of racing a run that takes seconds."""
        spec = os.environ.get("SHAPELM_HOLD_AT", "")
        if not spec or spec != f"{run_name}:{step}" or self.signum is not None:
            return
        from pathlib import Path

        if Path(marker).exists():  # held once already: the resubmitted job runs through
            return
        files.write_text(marker, f"{os.getpid()}\n")
        log.warning("SHAPELM_HOLD_AT=%s: holding before step %d until a signal arrives", spec, step)
        deadline = time.monotonic() + 900
        while self.signum is None and time.monotonic() < deadline:
            time.sleep(0.1)

    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0
