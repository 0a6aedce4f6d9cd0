"""Rehearsal data inputs: the paper's data sources in their real formats, at CPU size.

A rehearsal runs a CPU-sized copy of ``configs/paper.yaml`` through the same rules: the OLMo
slicer reads stage-1 shards over HTTP byte ranges, validation sets are fetched from a URL
prefix, tokenizers are found by their HF repo ids in an HF cache, and re-encoded scales run the
retokenize stage. :func:`write_data_inputs` makes those inputs from the default corpus's real
text (:mod:`shapelm.data.corpus`, Shakespeare left out so nothing is downloaded), in seconds and
deterministically::

    OUT/hf/hub/models--ORG--NAME/{refs/main, snapshots/<rev>/tokenizer.json, tokenizer_config.json}
        one tiny byte-level BPE standing in for each tokenizer the paper config names, with
        that tokenizer's special tokens where it keeps them (dolma2's and GPT-NeoX-OLMo's EOS
        after the vocabulary, Llama's </s> = 2);
    OUT/olmo/preprocessed/.../part-*.npy
        raw headerless uint32 shards at paths of the shipped list (olmo2_stage1.yaml), documents
        tokenized with the dolma2 stand-in, each followed by its EOS;
    OUT/olmo/paths.txt
        those shards' official URLs, in list order (the slicer maps them with --root);
    OUT/olmo-val/<set>/val/part-0-00000.npy
        the paper's four v3-small validation sets, held-out text in the same format;
    OUT/inputs.json
        what was written: stand-in vocabularies and EOS ids, shard token counts.

It returns the config overrides that point a config at OUT, with ``{url}`` where OUT is
served over HTTP (``shapelm.commands.rehearse`` substitutes ``{url}`` by that address and ``{root}`` by
the local OUT). Python's ``http.server`` does not answer Range requests, which the slicer
needs: :func:`serve` (``python -m shapelm.data.rehearsal serve OUT``) does.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import threading
from pathlib import Path

import numpy as np

from shapelm import files

#: stand-in for each tokenizer configs/paper.yaml names: trained vocabulary, special tokens
#: before it (ids 0..), special tokens after it, and the tokenizer_config.json entries
STAND_INS = {
    "allenai/dolma2-tokenizer": {  # real: 100278 ids, EOS 100257 near the end, pad 100277
        "vocab_size": 2048,
        "special_tokens": (),
        "added_tokens": ("<|endoftext|>", "<|pad|>"),
        "config": {"eos_token": "<|endoftext|>", "pad_token": "<|pad|>", "bos_token": None},
    },
    "meta-llama/Llama-2-7b-hf": {  # real: 32000 ids, <unk> 0, <s> 1, </s> 2
        "vocab_size": 512,
        "special_tokens": ("<unk>", "<s>", "</s>"),
        "added_tokens": (),
        "config": {"eos_token": "</s>", "bos_token": "<s>", "unk_token": "<unk>"},
    },
    "allenai/gpt-neox-olmo-dolma-v1_5": {  # real: 50280 ids, pad 1, EOS 50279 (the last)
        "vocab_size": 1024,
        "special_tokens": ("|||IP_ADDRESS|||", "<|padding|>"),
        "added_tokens": ("|||EMAIL_ADDRESS|||", "|||PHONE_NUMBER|||", "<|endoftext|>"),
        "config": {"eos_token": "<|endoftext|>", "pad_token": "<|padding|>", "bos_token": None},
    },
}
SOURCE_TOKENIZER = "allenai/dolma2-tokenizer"
#: the paper's validation sets and the default-corpus held-out domain standing in for each
VALIDATION_TEXT = {
    "dolma_common-crawl": "default_web",
    "dolma_stack": "default_code",
    "m2d2_s2orc": "default_sci",
    "wikitext_103": "default_wiki",
}
#: shipped-list source directories (first file of each, both wiki files, two DCLM files) and
#: the default-corpus domain whose documents fill them
SHARD_DOMAINS = {
    "/dclm/": ("web", 2),
    "/starcoder/": ("code", 1),
    "/algebraic-stack/": ("code", 1),
    "/pes2o/": ("sci", 1),
    "/arxiv/": ("sci", 1),
    "/open-web-math/": ("sci", 1),
    "/wiki/": ("wiki", 2),
}
OLMO_URL = "http://olmo-data.org"


def write_data_inputs(out_dir: Path) -> dict:
    """Write the rehearsal's data inputs under ``out_dir`` (see the module docstring) and return
    the config overrides that use them::

        {"data": {"olmo": {"root": "{url}/olmo", "paths": "{url}/olmo/paths.txt",
                           "validation_root": "{url}/olmo-val"}},
         "env": {"HF_HUB_CACHE": "<absolute out_dir>/hf/hub",
                 "SHAPELM_CACHE_DIR": "<absolute out_dir>/cache"}}

    ``{url}`` stands for the URL ``out_dir`` is served at (e.g. ``http://127.0.0.1:8765``), so
    the slicer reads the shards by HTTP byte ranges as it reads olmo-data.org; the tokenizers are
    local files (``HF_HUB_CACHE``).
    """
    from shapelm.data.corpus import default_documents, split_documents

    out = Path(out_dir).resolve()
    train, val = split_documents(default_documents(books=False))
    texts = [d.text for d in train]
    hub = out / "hf" / "hub"
    tokenizers = {spec: _write_stand_in(hub, spec, cfg, texts) for spec, cfg in STAND_INS.items()}
    src, src_eos = tokenizers[SOURCE_TOKENIZER]
    shards = _write_shards(out / "olmo", train, src, src_eos)
    val_tokens = {}
    for vset, domain in VALIDATION_TEXT.items():
        ids = _encode_documents(src, [d.text for d in val[domain]], src_eos)
        path = out / "olmo-val" / vset / "val" / "part-0-00000.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes(path, ids.tobytes())
        val_tokens[vset] = int(ids.size)
    files.write_json(out / "inputs.json", {
        "format": "shapelm-rehearsal-inputs-v1",
        "tokenizers": {s: {"vocab_size": t.get_vocab_size(with_added_tokens=True), "eos_id": e}
                       for s, (t, e) in tokenizers.items()},
        "olmo_shards": shards,
        "validation_tokens": val_tokens,
    }, indent=1)
    return {
        "data": {
            "olmo": {
                "root": "{url}/olmo",
                "paths": "{url}/olmo/paths.txt",
                "validation_root": "{url}/olmo-val",
            }
        },
        # the slicer's size and order caches too: ports change, files must not meet stale sizes
        "env": {"HF_HUB_CACHE": str(hub), "SHAPELM_CACHE_DIR": str(out / "cache")},
    }


def _write_stand_in(hub: Path, spec: str, cfg: dict, texts: list[str]):
    """Train a stand-in and lay it out as the HF cache keeps ``spec``; returns (tokenizer, EOS id)."""
    from shapelm.data.tokenizer import tokenizer_eos_id, train_bpe

    tok = train_bpe(texts, cfg["vocab_size"], special_tokens=cfg["special_tokens"],
                    added_tokens=cfg["added_tokens"])
    blob = tok.to_str().encode()
    rev = hashlib.sha1(blob).hexdigest()  # a commit-like 40-hex revision, stable for the content
    repo = hub / ("models--" + spec.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    files.write_bytes(snap / "tokenizer.json", blob)
    config = {k: v for k, v in cfg["config"].items() if v is not None}
    config["model_max_length"] = 4096
    config["stand_in_for"] = spec
    files.write_json(snap / "tokenizer_config.json", config, indent=1)
    (repo / "refs").mkdir(exist_ok=True)
    files.write_bytes(repo / "refs" / "main", rev.encode())
    return tok, tokenizer_eos_id(tok, snap / "tokenizer.json")


def _encode_documents(tok, texts: list[str], eos_id: int) -> np.ndarray:
    """Documents in order, each followed by EOS, as OLMo's uint32 stream."""
    tok.encode_special_tokens = True
    encodings = tok.encode_batch_fast(texts, add_special_tokens=False)
    parts = []
    for e in encodings:
        parts.append(np.asarray(e.ids, dtype="<u4"))
        parts.append(np.array([eos_id], dtype="<u4"))
    return np.concatenate(parts) if parts else np.zeros(0, dtype="<u4")


def _shard_paths() -> list[tuple[str, str]]:
    """(official URL, domain) of each rehearsal shard, in the shipped list's order."""
    from shapelm.data.validation import load_olmo_config

    taken = {key: 0 for key in SHARD_DOMAINS}
    chosen = []
    for url in load_olmo_config()["paths"]:
        for key, (domain, count) in SHARD_DOMAINS.items():
            if key in url and taken[key] < count and url not in {u for u, _ in chosen}:
                taken[key] += 1
                chosen.append((url, domain))
    return chosen


def _write_shards(olmo: Path, train, tok, eos_id: int) -> list[dict]:
    """Training documents of each domain dealt round-robin over that domain's shards."""
    chosen = _shard_paths()
    by_domain: dict[str, list[str]] = {}
    for url, domain in chosen:
        by_domain.setdefault(domain, []).append(url)
    texts: dict[str, list[str]] = {url: [] for url, _ in chosen}
    dealt = {domain: 0 for domain in by_domain}
    for d in train:
        urls = by_domain.get(d.domain)
        if urls:
            texts[urls[dealt[d.domain] % len(urls)]].append(d.text)
            dealt[d.domain] += 1
    shards = []
    for url, domain in chosen:
        ids = _encode_documents(tok, texts[url], eos_id)
        path = olmo / url[len(OLMO_URL) + 1 :]
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes(path, ids.tobytes())
        shards.append({"url": url, "domain": domain, "documents": len(texts[url]),
                       "tokens": int(ids.size), "instances": int(ids.size // 4096)})
    lines = ["# rehearsal stand-ins of OLMo-2 stage-1 sources, in the shipped list's order"]
    files.write_bytes(olmo / "paths.txt", ("\n".join(lines + [u for u, _ in chosen]) + "\n").encode())
    return shards


# -- serving -----------------------------------------------------------------------------------
class RangeRequestHandler(http.server.SimpleHTTPRequestHandler):
    """``http.server``'s file handler plus single ``bytes=a-b`` Range requests (206), which the
    slicer's HTTP reader needs and the stdlib handler ignores."""

    def log_message(self, *args):  # quiet: a slice makes thousands of requests
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        path = Path(self.translate_path(self.path))
        if m is None or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        start = int(m.group(1))
        end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
        if start >= size or end < start:
            self.send_error(416, "Requested Range Not Satisfiable")
            return None
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._range_left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "_range_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        self._range_left = None
        while left > 0:
            b = source.read(min(left, 1 << 20))
            if not b:
                break
            outputfile.write(b)
            left -= len(b)


def serve(directory: str | os.PathLike, port: int = 0, host: str = "127.0.0.1"):
    """Serve ``directory`` with Range support in a daemon thread; returns (server, base URL).
    Stop it with ``server.shutdown(); server.server_close()``."""
    handler = lambda *a, **kw: RangeRequestHandler(*a, directory=str(directory), **kw)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://{host}:{httpd.server_address[1]}"


def main(argv=None) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="python -m shapelm.data.rehearsal")
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the rehearsal data inputs; print the overrides")
    w.add_argument("out_dir")
    s = sub.add_parser("serve", help="serve a directory over HTTP with Range support")
    s.add_argument("directory")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args(argv)
    if args.command == "write":
        print(json.dumps(write_data_inputs(Path(args.out_dir)), indent=1))
        return 0
    httpd, url = serve(args.directory, args.port, args.host)
    print(f"serving {args.directory} at {url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
