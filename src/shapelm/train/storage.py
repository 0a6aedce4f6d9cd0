"""Disk and permission failures of a training run, as one error line naming the file.

A run finds out at start whether it can write its directory (`probe_writable`), not when the
first checkpoint is due; a failure later (a full disk during a checkpoint) is translated by
`storage_error` into a `StorageError` naming the file instead of a traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from shapelm.files import new_file_mode
from shapelm.errors import ShapelmError


class StorageError(ShapelmError):
    """The run directory (or a file in it) cannot be created or written; the message names it."""


#: OS errors that mean "this file system refuses the write", not a bug or a network failure.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO,
                  errno.EFBIG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR}


def is_storage_failure(err: OSError) -> bool:
    return err.errno in STORAGE_ERRNOS


def storage_error(err: OSError, path: str | os.PathLike | None = None) -> StorageError:
    """`err` as a StorageError naming `path` (else the file the OS error names)."""
    where = path if path is not None else (err.filename or "(unknown file)")
    reason = err.strerror or str(err) or type(err).__name__
    hint = ""
    if err.errno == errno.ENOSPC:
        hint = "; free space (or lower train.keep_last) and run the same command again to resume"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "; make it writable or choose another --out"
    return StorageError(f"{where}: cannot write ({reason}){hint}")


def probe_writable(directory: Path) -> None:
    """Create `directory` and write, fsync and remove a small file in it."""
    probe = directory / f".write-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"shapelm\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise storage_error(err, err.filename or directory) from None


def make_group_readable(directory: Path) -> None:
    """Give every file in `directory` the mode a plain `open()` would (0644 under umask 022):
    some writers (safetensors, mkstemp) create 0600 files, which the group cannot read."""
    mode = new_file_mode()
    for p in directory.iterdir():
        if p.is_file():
            os.chmod(p, mode)
