"""One way to write a file: a temp file in the same directory, fsynced, given the mode a plain
`open()` would give (group-readable under the usual umask), then renamed over the target.

A killed writer leaves the old file (or none) and at most a hidden `.NAME.*.tmp` beside it, never
a half-written file that a later stage would read; concurrent writers of one file (table jobs
each rewrite the shared claims table) each get their own temp name.

    write_text / write_bytes / write_json   a whole file at once
    atomic_open(path, mode)                 a file object, for writers that stream rows
    atomic_path(path)                       a temp path, for libraries that want a file name
                                            (safetensors, matplotlib, tokenizers)
    open_temp(tmp) + publish(tmp, path)     a temp file the caller streams itself (token parts)
    copy(src, path)                         a shipped file copied as it is
    open_log(path)                          an append-only log (metrics.jsonl), line by line
    rename(src, dst)                        a finished directory into place

The training checkpoints (`shapelm.train.checkpoint`) seal whole step directories their own way.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


def new_file_mode() -> int:
    """The mode `open()` gives a new file (0666 less the umask: 0644 under the usual 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's or a directory's entry to disk (quietly skipped where a file system refuses)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Make the finished temp file `tmp` the file `path`: group-readable, fsynced, renamed, and
    the rename itself flushed."""
    path = Path(path)
    os.chmod(tmp, new_file_mode())  # mkstemp and safetensors create 0600; outputs are shared
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)
    return path


def rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename a finished file or directory over `dst` (an empty directory or none) and flush it."""
    os.replace(src, dst)
    fsync_path(Path(dst).parent)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A fresh temp path beside `path` to write; published as `path` when the block ends without
    an error, removed otherwise. `suffix`: for writers that pick the format by extension."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """`open(path, mode)` that publishes the file when the block ends without an error."""
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def open_temp(tmp: str | os.PathLike) -> IO[bytes]:
    """A temp file of the caller's own name, streamed and then `publish`ed: the token parts keep a
    fixed name (`.part-00003.u32.tmp`) so a resumed job overwrites a killed writer's leftover."""
    return open(tmp, "wb")


def open_log(path: str | os.PathLike) -> IO[str]:
    """An append-only log (metrics.jsonl): records added a line at a time and never rewritten in
    place, so it cannot go through a rename; its reader drops a line torn by a kill."""
    return open(path, "a", encoding="utf-8")


def copy(src: str | os.PathLike, path: str | os.PathLike) -> Path:
    """A shipped file (remote-code modules, task functions) copied as it is."""
    return write_bytes(path, Path(src).read_bytes())


def write_bytes(path: str | os.PathLike, data: bytes | memoryview) -> Path:
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


#: The format of run configs, manifests and state files (`write_json(path, obj, **RUN_FILE)`):
#: sorted keys, any other value as its str(), no final newline.
RUN_FILE: dict[str, Any] = {"sort_keys": True, "default": str, "newline": False}


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2, sort_keys: bool = False,
               default: Any = None, ensure_ascii: bool = True, newline: bool = True) -> Path:
    """`obj` as JSON; the keyword arguments are `json.dumps`'s, `newline`: end with one."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=default, ensure_ascii=ensure_ascii)
    return write_text(path, text + ("\n" if newline else ""))
