"""Byte sources: local files or http(s) URLs, read by byte range.

Sizes come from ``os.stat`` (local) or an HTTP ``HEAD`` (URLs); URL sizes are cached in a JSON
file so a slice plan needs the network once. Reads are ``os.pread`` (local) or HTTP ``Range``
requests through ``urllib`` (URLs), retried a few times; every error names the source.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shapelm.errors import DataError
from shapelm.files import write_json

RETRIES = 3
TIMEOUT_S = 60


def is_url(src: str) -> bool:
    return str(src).startswith(("http://", "https://"))


def retry(what: str, fn):
    last = None
    for attempt in range(RETRIES):
        try:
            return fn()
        except urllib.error.HTTPError as e:  # 4xx will not get better
            if 400 <= e.code < 500:
                raise DataError(f"{what}: HTTP {e.code} {e.reason}") from e
            last = e
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        if attempt + 1 < RETRIES:
            time.sleep(0.2 * 2**attempt)
    raise DataError(f"{what}: {type(last).__name__}: {last}") from last


def source_size(src: str) -> int:
    """Byte size of a local file or URL (HTTP HEAD, Content-Length)."""
    if is_url(src):

        def head():
            req = urllib.request.Request(src, method="HEAD")
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                n = r.headers.get("Content-Length")
                if n is None:
                    raise DataError(f"{src}: HEAD response has no Content-Length")
                return int(n)

        return retry(src, head)
    try:
        return os.stat(src).st_size
    except FileNotFoundError as e:
        raise DataError(f"{src}: source file not found") from e
    except OSError as e:
        raise DataError(f"{src}: {e}") from e


def source_sizes(
    sources: Sequence[str], cache_path: str | os.PathLike | None = None, workers: int = 16
) -> list[int]:
    """Sizes of all sources, in order. URL sizes are read from / added to ``cache_path``."""
    cache: dict[str, int] = {}
    if cache_path is not None and Path(cache_path).is_file():
        try:
            cache = {k: int(v) for k, v in json.loads(Path(cache_path).read_text()).items()}
        except (json.JSONDecodeError, ValueError, AttributeError) as e:
            raise DataError(f"{cache_path}: corrupt size cache ({e}); delete it") from e
    todo = [s for s in sources if not (is_url(s) and s in cache)]
    if todo:
        with ThreadPoolExecutor(max(1, min(workers, len(todo)))) as ex:
            got = dict(zip(todo, ex.map(source_size, todo)))
    else:
        got = {}
    new_urls = {s: n for s, n in got.items() if is_url(s) and cache.get(s) != n}
    if cache_path is not None and new_urls:
        cache.update(new_urls)
        Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(cache_path, dict(sorted(cache.items())), indent=1)
    return [got[s] if s in got else cache[s] for s in sources]


class RangeReader:
    """Reads byte ranges of one source into caller-provided buffers."""

    def __init__(self, src: str):
        self.src = src
        self.fd: int | None = None
        if not is_url(src):
            try:
                self.fd = os.open(src, os.O_RDONLY)
            except FileNotFoundError as e:
                raise DataError(f"{src}: source file not found") from e
            except OSError as e:
                raise DataError(f"{src}: {e}") from e

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def readinto(self, offset: int, bufs: list[memoryview]) -> None:
        """Scatter-read bytes ``[offset, offset + sum(len(b)))`` into the writable byte views
        ``bufs`` in order (one ``preadv`` locally, one ``Range`` request for a URL)."""
        n = sum(len(b) for b in bufs)
        if self.fd is not None:
            k = os.preadv(self.fd, bufs, offset)
            if k == n:
                return
            # short read (rare for regular files): finish buffer by buffer
            pos = offset
            for b in bufs:
                done = min(len(b), max(0, k - (pos - offset)))
                while done < len(b):
                    got = os.preadv(self.fd, [b[done:]], pos + done)
                    if got == 0:
                        raise DataError(
                            f"{self.src}: unexpected end of file at byte {pos + done} "
                            f"(wanted [{offset}, {offset + n}))"
                        )
                    done += got
                pos += len(b)
            return

        def get():
            req = urllib.request.Request(
                self.src, headers={"Range": f"bytes={offset}-{offset + n - 1}"}
            )
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                if r.status != 206:
                    raise DataError(
                        f"{self.src}: server answered {r.status} to a Range request "
                        "(byte ranges unsupported)"
                    )
                for b in bufs:
                    done = 0
                    while done < len(b):
                        k = r.readinto(b[done:])
                        if not k:
                            raise DataError(
                                f"{self.src}: short read in bytes [{offset}, {offset + n})"
                            )
                        done += k

        retry(f"{self.src} bytes [{offset}, {offset + n})", get)


def stream_source(src: str, chunk_bytes: int = 1 << 24):
    """Yield the whole content of a source in chunks (sequential read or a plain GET)."""
    if not is_url(src):
        try:
            f = open(src, "rb")
        except FileNotFoundError as e:
            raise DataError(f"{src}: source file not found") from e
        with f:
            while b := f.read(chunk_bytes):
                yield b
        return
    try:
        r = urllib.request.urlopen(src, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise DataError(f"{src}: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DataError(f"{src}: {type(e).__name__}: {e}") from e
    with r:
        while b := r.read(chunk_bytes):
            yield b
