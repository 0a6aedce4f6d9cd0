"""Re-tokenizing a token directory: the same fixed-order text in another tokenizer's ids.

Tapered (arXiv 2606.23670) trains with a 32K vocabulary and LWS (arXiv 2509.06518) with GPT-NeoX-OLMo's 50K
one, while the OLMo-2 stage-1 slices are dolma2 ids. :func:`retokenize` turns a scale's slice
(or a validation set) into a token directory of the target tokenizer:

1. The source stream is cut into *pieces*: after every source EOS (the EOS of the source
   tokenizer's own files, so a stand-in tokenizer works too) and, for an OLMo slice, at every
   4096-token instance boundary: consecutive instances of the shuffled order are unrelated text,
   so a fragment is never joined to its neighbour.
2. Each piece is decoded to text (special tokens skipped) and encoded with the target tokenizer
   (``add_special_tokens=False``; special-token strings in the text are encoded as text, so an
   HTML ``</s>`` never becomes Llama's EOS). A piece that ended with EOS in the source is followed
   by the target EOS; one that ended at an instance boundary is not. The target stream thus has a
   document separator exactly where the source had one, and no BOS (OLMo's format).
3. Pieces stay in source order. With ``n_tokens``, the stream is cut after
   ``ceil(n_tokens / seq_len)`` windows of ``seq_len`` (the run's sequences, in the same order);
   reading stops after the chunk that fills the last window. A source that re-encodes to fewer tokens is an error
   naming the scale and the key that fixes it.

Resumable like the slicer: the source is processed in parts of about ``part_tokens`` source
tokens (cut at piece boundaries), each part streamed to a temp file, fsynced, renamed into place
and recorded in ``progress.json``; a rerun with the same plan continues after the last committed
part, and ``manifest.json`` is written last.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shapelm.files import open_temp, publish, write_json
from shapelm.data.tokens import (
    DTYPE,
    MANIFEST,
    TokenStore,
    file_checksum,
    make_manifest,
    sha256_file,
)
from shapelm.errors import DataError

FORMAT_VERSION = 1
#: source tokens decoded and re-encoded per batch (bounded memory; ~1 s of work)
CHUNK_TOKENS = 1 << 20
#: source tokens per output part (the slicer's 8192 instances of 4096)
PART_TOKENS = 8192 * 4096


@dataclass
class TokenizerSpec:
    """A loaded tokenizer with what the stage needs from its files."""

    spec: str
    tok: object
    eos_id: int
    vocab_size: int
    sha256: str | None

    @classmethod
    def open(cls, spec: str | os.PathLike) -> "TokenizerSpec":
        from shapelm.data.tokenizer import (
            load_tokenizer,
            resolve_tokenizer_file,
            tokenizer_eos_id,
            vocab_size_of,
        )

        s = str(spec)
        if s == "default" or s.startswith("default:"):
            tok, path = load_tokenizer(s), None
        else:
            path = resolve_tokenizer_file(s)
            tok = load_tokenizer(path)
        tok.encode_special_tokens = True  # "</s>" in a web page is text, not an EOS
        return cls(
            spec=s,
            tok=tok,
            eos_id=tokenizer_eos_id(tok, path),
            vocab_size=vocab_size_of(tok),
            sha256=sha256_file(path) if path is not None else None,
        )


def piece_ends(tokens: np.ndarray, eos_id: int, offset: int, boundary: int | None) -> np.ndarray:
    """End positions (exclusive, within ``tokens``) of the pieces of one chunk: after each EOS,
    at each multiple of ``boundary`` of the stream position ``offset + i``, and at the end."""
    cuts = [np.flatnonzero(tokens == eos_id) + 1]
    if boundary:
        first = -offset % boundary
        cuts.append(np.arange(first if first else boundary, tokens.size, boundary))
    cuts.append(np.array([tokens.size]))
    ends = np.unique(np.concatenate(cuts))
    return ends[ends > 0]


def retokenize_chunk(
    tokens: np.ndarray,
    source: TokenizerSpec,
    target: TokenizerSpec,
    offset: int = 0,
    boundary: int | None = None,
) -> tuple[np.ndarray, int]:
    """Re-encode one chunk of the source stream (cut at piece ends); returns (target ids,
    number of pieces). The chunk must end at a piece boundary for the result to be exact."""
    ends = piece_ends(tokens, source.eos_id, offset, boundary)
    starts = np.concatenate([[0], ends[:-1]])
    has_eos = tokens[ends - 1] == source.eos_id
    bodies = [tokens[a : b - int(e)].tolist() for a, b, e in zip(starts, ends, has_eos)]
    texts = source.tok.decode_batch(bodies, skip_special_tokens=True)
    encode = getattr(target.tok, "encode_batch_fast", target.tok.encode_batch)
    encodings = encode(texts, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    lengths += has_eos
    out = np.empty(int(lengths.sum()), dtype=DTYPE)
    pos = 0
    for e, eos, n in zip(encodings, has_eos, lengths.tolist()):
        body = n - int(eos)
        out[pos : pos + body] = e.ids
        if eos:
            out[pos + body] = target.eos_id
        pos += n
    return out, len(bodies)


def chunk_end(store: TokenStore, start: int, stop: int, eos_id: int, boundary: int | None) -> int:
    """A piece end in ``(start, stop]``, the last one; past ``stop`` only when a single piece is
    longer than the chunk (then that piece's end). Chunks of whole pieces re-encode exactly as
    the whole stream would, so the output does not depend on the chunk or part sizes."""
    if stop >= store.n_tokens:
        return store.n_tokens
    if boundary and stop // boundary * boundary > start:
        return stop // boundary * boundary
    eos = np.flatnonzero(store.read(start, stop - start) == eos_id)
    if eos.size:
        return start + int(eos[-1]) + 1
    pos = stop
    while pos < store.n_tokens:
        nxt = min(store.n_tokens, pos + CHUNK_TOKENS)
        if boundary:
            nxt = min(nxt, (pos // boundary + 1) * boundary)
        hit = np.flatnonzero(store.read(pos, nxt - pos) == eos_id)
        if hit.size:
            return pos + int(hit[0]) + 1
        pos = nxt
        if boundary and pos % boundary == 0:
            return pos
    return store.n_tokens


def _check_source_ids(chunk: np.ndarray, store: TokenStore, start: int, source: TokenizerSpec):
    if chunk.size and int(chunk.max()) >= source.vocab_size:
        pos = start + int(np.argmax(chunk >= source.vocab_size))
        raise DataError(
            f"{store.path}: token id {int(store.read(pos, 1)[0])} at stream position {pos} >= "
            f"{source.vocab_size}, the vocabulary of source tokenizer {source.spec} (is it the "
            "tokenizer of this data?)"
        )


def retokenize(
    source_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    source_tokenizer: str | os.PathLike,
    target_tokenizer: str | os.PathLike,
    *,
    n_tokens: int | None = None,
    seq_len: int | None = None,
    context: str = "",
    hint: str = "",
    part_tokens: int = PART_TOKENS,
    chunk_tokens: int = CHUNK_TOKENS,
    progress: bool = True,
) -> dict:
    """Re-encode the token directory ``source_dir`` with ``target_tokenizer`` into ``out_dir``.

    ``n_tokens``: stop after ``ceil(n_tokens / seq_len)`` windows of ``seq_len`` target tokens
    (an error, starting with ``context`` and ending with ``hint``, if the source is too short);
    ``None`` re-encodes the whole source (validation sets). ``seq_len`` defaults to the source
    manifest's. Returns the manifest (``kind: retokenized``, target vocab and EOS).
    """
    src = TokenStore(source_dir, check_ids=False)
    smeta = src.manifest
    source = TokenizerSpec.open(source_tokenizer)
    target = TokenizerSpec.open(target_tokenizer)
    seq_len = int(seq_len or smeta.get("seq_len") or 0) or None
    boundary = int(smeta["instance_len"]) if smeta.get("kind") == "olmo-slice" else None
    need = None
    if n_tokens is not None:
        if not seq_len:
            raise DataError(f"{source_dir}: n_tokens given without seq_len (and none in its manifest)")
        need = math.ceil(int(n_tokens) / seq_len) * seq_len
    if boundary:  # whole instances per chunk and part: every chunk end is a piece end
        chunk_tokens = max(boundary, chunk_tokens - chunk_tokens % boundary)
        part_tokens = max(chunk_tokens, part_tokens - part_tokens % chunk_tokens)
    out = Path(out_dir)
    if (out / MANIFEST).exists():
        raise DataError(f"{out / MANIFEST}: already complete (remove the directory to redo)")
    out.mkdir(parents=True, exist_ok=True)
    plan = {
        "version": FORMAT_VERSION,
        "source_files": [[f["path"], f["n_tokens"], file_checksum(f)] for f in smeta["files"]],
        "source_tokenizer_sha256": source.sha256,
        "target_tokenizer_sha256": target.sha256,
        "source_eos_id": source.eos_id,
        "target_eos_id": target.eos_id,
        "boundary": boundary,
        "need": need,
        "part_tokens": part_tokens,
    }
    parts = _resume(out, plan)

    from tqdm import tqdm

    src_pos = parts[-1]["source_end"] if parts else 0
    have = sum(p["n_tokens"] for p in parts)
    bar = tqdm(
        total=src.n_tokens,
        initial=src_pos,
        unit="tok",
        unit_scale=True,
        desc=f"retokenize {out.name}",
        disable=not progress,
        file=sys.stderr,
        mininterval=1 if sys.stderr.isatty() else 30,
    )
    try:
        while src_pos < src.n_tokens and (need is None or have < need):
            part = _write_part(
                out, len(parts), src, src_pos, part_tokens, chunk_tokens, source, target,
                boundary, None if need is None else need - have, bar,
            )
            parts.append(part)
            write_json(out / "progress.json", {"plan": plan, "parts": parts}, indent=1)
            src_pos, have = part["source_end"], have + part["n_tokens"]
    finally:
        bar.close()
    if need is not None and have < need:
        raise DataError(
            f"{context + ': ' if context else ''}{source_dir} ({src.n_tokens:,} tokens of "
            f"{source.spec}) re-encodes to only {have:,} {target.spec} tokens, but "
            f"{need // seq_len:,} windows of {seq_len} need {need:,}"
            f"{'; ' + hint if hint else ''}"
        )
    files = [{k: p[k] for k in ("path", "n_tokens", "sha256", "max_id")} for p in parts]
    extra = {
        "kind": "retokenized",
        "tokenizer": target.spec,
        "tokenizer_sha256": target.sha256,
        "seq_len": seq_len,
        "requested_tokens": None if n_tokens is None else int(n_tokens),
        "n_documents": sum(p["pieces_with_eos"] for p in parts),
        "source": {
            "dir": str(Path(source_dir)),
            "kind": smeta.get("kind"),
            "name": smeta.get("name"),
            "n_tokens": src.n_tokens,
            "tokens_used": src_pos,
            "tokenizer": source.spec,
            "tokenizer_sha256": source.sha256,
            "eos_id": source.eos_id,
            "instance_len": boundary,
        },
        "rule": (
            "source cut after each EOS"
            + (f" and at each {boundary}-token instance boundary" if boundary else "")
            + "; each piece decoded and re-encoded, target EOS where the source had EOS; "
            "stream cut into consecutive seq_len windows"
        ),
    }
    if smeta.get("name"):
        extra["name"] = smeta["name"]
    manifest = make_manifest(files, target.vocab_size, target.eos_id, extra)
    write_json(out / MANIFEST, manifest, indent=1)
    return manifest


def _resume(out: Path, plan: dict) -> list[dict]:
    """Committed parts of an unfinished run with the same plan (in order, up to the first bad one)."""
    prog_path = out / "progress.json"
    if not prog_path.exists():
        return []
    prog = json.loads(prog_path.read_text())
    if prog.get("plan") != plan:
        diff = [k for k in plan if prog.get("plan", {}).get(k) != plan[k]]
        raise DataError(
            f"{prog_path}: an unfinished re-tokenization with a different plan is here "
            f"(differs in {', '.join(diff)}); use another directory or delete this one"
        )
    parts = []
    for p in prog.get("parts", []):
        f = out / p["path"]
        if not (f.is_file() and f.stat().st_size == p["n_tokens"] * 4):
            break
        parts.append(p)
    return parts


def _write_part(
    out: Path,
    index: int,
    src: TokenStore,
    start: int,
    part_tokens: int,
    chunk_tokens: int,
    source: TokenizerSpec,
    target: TokenizerSpec,
    boundary: int | None,
    remaining: int | None,
    bar,
) -> dict:
    """Re-encode source tokens from ``start`` (about ``part_tokens`` of them, whole pieces) into
    ``part-<index>.u32``, stopping once ``remaining`` target tokens are written."""
    name = f"part-{index:05d}.u32"
    tmp = out / f".{name}.tmp"
    h = hashlib.sha256()
    n_out = max_id = pieces = with_eos = 0
    pos, stop = start, min(src.n_tokens, start + part_tokens)
    try:
        with open_temp(tmp) as fh:
            while pos < stop and (remaining is None or n_out < remaining):
                end = chunk_end(src, pos, min(stop, pos + chunk_tokens), source.eos_id, boundary)
                chunk = src.read(pos, end - pos)
                _check_source_ids(chunk, src, pos, source)
                ids, n_pieces = retokenize_chunk(chunk, source, target, pos, boundary)
                if remaining is not None:
                    ids = ids[: remaining - n_out]
                if ids.size:
                    raw = memoryview(ids).cast("B")
                    fh.write(raw)
                    h.update(raw)
                    max_id = max(max_id, int(ids.max()))
                n_out += int(ids.size)
                pieces += n_pieces
                with_eos += int(np.count_nonzero(chunk == source.eos_id))
                bar.update(end - pos)
                pos = end
            fh.flush()
            os.fsync(fh.fileno())
        publish(tmp, out / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {
        "path": name,
        "n_tokens": n_out,
        "sha256": h.hexdigest(),
        "max_id": max_id,
        "source_start": start,
        "source_end": pos,
        "pieces": pieces,
        "pieces_with_eos": with_eos,
    }
