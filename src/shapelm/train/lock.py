"""One trainer per run directory: `RUN/train.lock`.

The lock is an `fcntl.flock` on the file, so the kernel releases it when its holder dies (also
by SIGKILL): a lock left by a dead trainer is taken over without anyone deleting it. The file
records the holder's pid and host for the error message of a second trainer. On a file
system without flock support the recorded pid decides: a holder on this host that is no
longer running is stale and taken over. The file itself stays (unlinking a locked file would
let a third trainer lock a new file of the same name while the second holds the old one).

Only global rank 0 takes it: every rank writes into the same (shared) run directory.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
from pathlib import Path
from typing import Self

from shapelm.errors import ShapelmError
from shapelm.train.storage import storage_error

log = logging.getLogger(__name__)

LOCK_NAME = "train.lock"
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunLockedError(ShapelmError):
    """Another trainer is running on the same run directory."""


def _holder(path: Path) -> dict:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class RunLock:
    """`with RunLock(run_dir): ...` holds `run_dir/train.lock` or raises RunLockedError."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None
        self.flocked = False

    def acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise storage_error(err, self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.flocked = True
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise self._locked(_holder(self.path)) from None
            if err.errno not in _NO_FLOCK:
                os.close(fd)
                raise storage_error(err, self.path) from None
            holder = _holder(self.path)  # no flock here: the recorded pid decides
            if holder and holder != me and not self._stale(holder):
                os.close(fd)
                raise self._locked(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())
        os.fsync(fd)
        self.fd = fd

    def _stale(self, holder: dict) -> bool:
        if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
            return False  # another host's process cannot be checked from here
        if _pid_alive(holder["pid"]):
            return False
        log.warning("%s: taking over the lock of pid %d, which is no longer running",
                    self.path, holder["pid"])
        return True

    def _locked(self, holder: dict) -> RunLockedError:
        who = (f"pid {holder.get('pid')} on host {holder.get('host')}" if holder
               else "another process")
        return RunLockedError(
            f"{self.path.parent}: another trainer ({who}) is training in this run directory "
            f"(it holds {self.path}); wait for it to finish or stop it, or use another --out"
        )

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)  # before unlocking: the next holder writes its own pid
            if self.flocked:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd, self.flocked = None, False

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
