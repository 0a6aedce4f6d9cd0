"""OLMo-2 stage-1 order: slicer vs an independent reimplementation, local and over HTTP."""

import http.server
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from shapelm.data.cli import main as data_cli
from shapelm.data.olmo_order import n_instances_for_tokens, parse_tokens, slice_olmo
from shapelm.data.tokens import TokenStore
from shapelm.data.validation import fetch_validation, load_olmo_config, validation_sources
from shapelm.errors import DataError

L = 4096
VOCAB = 100278
# tokens per synthetic file: remainders, an empty-ish file and a file smaller than one instance
FILE_TOKENS = [L * 5 + 7, L * 3, 100, L * 9 + 4095, L * 2, L * 7 + 1, 0, L * 4]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("olmo_src")
    rng = np.random.default_rng(123)
    paths = []
    for i, n in enumerate(FILE_TOKENS):
        p = d / f"part-{i}-00000.npy"  # OLMo names raw uint32 files .npy
        rng.integers(0, VOCAB, n, dtype=np.uint32).astype("<u4").tofile(p)
        paths.append(str(p))
    return d, paths


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves files of ``root``: HEAD, GET, and GET with a single ``bytes=a-b`` Range."""

    root: Path = Path(".")
    log: list = []

    def log_message(self, *args):
        pass

    def _file(self):
        p = self.root / self.path.lstrip("/")
        if not p.is_file():
            self.send_error(404, "not found")
            return None
        return p

    def do_HEAD(self):
        p = self._file()
        if p is None:
            return
        self.log.append(("HEAD", self.path, None))
        self.send_response(200)
        self.send_header("Content-Length", str(p.stat().st_size))
        self.end_headers()

    def do_GET(self):
        p = self._file()
        if p is None:
            return
        data = p.read_bytes()
        rng = self.headers.get("Range")
        self.log.append(("GET", self.path, rng))
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
            a, b = int(m.group(1)), int(m.group(2))
            if a >= len(data):
                self.send_error(416)
                return
            body = data[a : b + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{a + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server(source):
    root, _ = source
    handler = type("H", (RangeHandler,), {"root": root, "log": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def reference_order(paths, n_select, seed=6198):
    """Straightforward OLMo: concatenate each file's whole instances, shuffle, take a prefix."""
    chunks = []
    for p in paths:
        a = np.fromfile(p, dtype="<u4")
        n = a.size // L
        chunks.append(a[: n * L].reshape(n, L))
    allinst = np.concatenate(chunks)
    indices = np.arange(len(allinst), dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed=seed + 0)).shuffle(indices)
    return indices[:n_select], allinst[indices[:n_select]].reshape(-1)


def test_first_n_rule():
    want = {"2.5B": 610_352, "7B": 1_708_985, "18B": 4_394_532, "60B": 14_648_438, "160B": 39_062_500}
    for k, v in want.items():
        assert n_instances_for_tokens(parse_tokens(k)) == v
        assert load_olmo_config()["budgets"][k]["instances"] == v
    assert parse_tokens("2,500,000,000") == parse_tokens(2_500_000_000) == parse_tokens("2.5e9")
    with pytest.raises(DataError):
        parse_tokens("lots")


@pytest.mark.parametrize("n_tokens", [1, 4096, 4097, 50_000, 27 * 4096])
def test_slice_matches_reference(source, tmp_path, n_tokens):
    _, paths = source
    k = -(-n_tokens // L)
    m = slice_olmo(paths, n_tokens, tmp_path / "out", cache_dir=tmp_path / "c",
                   part_instances=4, workers=2, progress=False)
    ids, tokens = reference_order(paths, k)
    assert m["instance_ids"] == ids.tolist()
    assert m["n_instances"] == k and m["n_tokens"] == k * L
    assert m["sources"] == paths and m["seed"] == 6198
    s = TokenStore(tmp_path / "out", verify=True)
    np.testing.assert_array_equal(s.read(0, s.n_tokens), tokens)


def test_part_checksums_catch_a_changed_byte_and_old_sha256_slices_still_verify(source, tmp_path):
    import hashlib

    _, paths = source
    out = tmp_path / "out"
    m = slice_olmo(paths, 9 * L, out, cache_dir=tmp_path / "c", part_instances=4, workers=1,
                   progress=False)
    assert all(set(f) == {"path", "n_tokens", "xxh3_128", "max_id"} for f in m["files"])
    TokenStore(out, verify=True)
    # a slice written before parts recorded xxh3-128: its sha256s verify as they did
    old = json.loads((out / "manifest.json").read_text())
    for f in old["files"]:
        del f["xxh3_128"]
        f["sha256"] = hashlib.sha256((out / f["path"]).read_bytes()).hexdigest()
    sha_dir = tmp_path / "sha256"
    sha_dir.mkdir()
    for f in old["files"]:
        (sha_dir / f["path"]).write_bytes((out / f["path"]).read_bytes())
    (sha_dir / "manifest.json").write_text(json.dumps(old))
    TokenStore(sha_dir, verify=True)
    # one id changed in place, still a valid id of the same size: each checksum names the part
    for d, algorithm in ((out, "xxh3_128"), (sha_dir, "sha256")):
        part = d / "part-00001.u32"
        a = np.fromfile(part, dtype="<u4")
        a[L + 5] = (a[L + 5] + 1) % VOCAB
        a.tofile(part)
        TokenStore(d)  # sizes and ids still fine: only the checksum sees it
        with pytest.raises(DataError, match=rf"part-00001\.u32: {algorithm} mismatch"):
            TokenStore(d, verify=True)


def test_too_many_tokens(source, tmp_path):
    _, paths = source
    with pytest.raises(DataError, match="hold only 30 instances"):
        slice_olmo(paths, 31 * L, tmp_path / "o", cache_dir=tmp_path / "c", progress=False)


def test_2048_rule(source, tmp_path):
    _, paths = source
    slice_olmo(paths, 6 * L, tmp_path / "o", seq_len_out=2048, cache_dir=tmp_path / "c",
               progress=False)
    s = TokenStore(tmp_path / "o")
    assert s.manifest["seq_len"] == 2048
    assert s.n_instances(2048) == 2 * s.n_instances(4096) == 12
    for k in range(6):
        inst = s.instance(k, 4096)
        np.testing.assert_array_equal(s.instance(2 * k, 2048), inst[:2048])
        np.testing.assert_array_equal(s.instance(2 * k + 1, 2048), inst[2048:])
    with pytest.raises(DataError, match="seq_len_out 3000"):
        slice_olmo(paths, L, tmp_path / "o2", seq_len_out=3000, progress=False)


class Crash(Exception):
    pass


def test_resume_after_crash(source, tmp_path):
    _, paths = source
    kw = dict(cache_dir=tmp_path / "c", part_instances=3, workers=1, progress=False)
    clean = slice_olmo(paths, 20 * L, tmp_path / "clean", **kw)

    def crash_after_2(i):
        if i == 2:
            raise Crash

    out = tmp_path / "resumed"
    with pytest.raises(Crash):
        slice_olmo(paths, 20 * L, out, on_part_done=crash_after_2, **kw)
    assert not (out / "manifest.json").exists()
    prog = json.loads((out / "progress.json").read_text())
    assert sorted(prog["parts"], key=int) == ["0", "1", "2"]
    # a stale temp file and a truncated committed part from the "crash"
    (out / ".part-00003.u32.abc.tmp").write_bytes(b"junk")
    (out / "part-00001.u32").write_bytes(b"\0" * 8)
    redone = []
    m = slice_olmo(paths, 20 * L, out, on_part_done=redone.append, **kw)
    assert redone == [1, 3, 4, 5, 6]  # parts 0 and 2 were kept
    assert [f["xxh3_128"] for f in m["files"]] == [f["xxh3_128"] for f in clean["files"]]
    for f in m["files"]:
        assert (out / f["path"]).read_bytes() == (tmp_path / "clean" / f["path"]).read_bytes()
    TokenStore(out, verify=True)
    with pytest.raises(DataError, match="already complete"):
        slice_olmo(paths, 20 * L, out, **kw)
    # a different plan in an unfinished directory is refused
    with pytest.raises(Crash):
        slice_olmo(paths, 9 * L, tmp_path / "p", on_part_done=crash_after_2, **kw)
    with pytest.raises(DataError, match="differs in n_instances"):
        slice_olmo(paths, 12 * L, tmp_path / "p", **kw)


def test_http_range_source(source, server, tmp_path):
    _, paths = source
    base, handler = server
    urls = [f"{base}/{Path(p).name}" for p in paths]
    handler.log.clear()
    m = slice_olmo(urls, 13 * L, tmp_path / "o", cache_dir=tmp_path / "c", part_instances=5,
                   workers=4, progress=False)
    _, tokens = reference_order(paths, 13)
    np.testing.assert_array_equal(TokenStore(tmp_path / "o").read(0, 13 * L), tokens)
    assert m["sources"] == urls
    heads = [e for e in handler.log if e[0] == "HEAD"]
    gets = [e for e in handler.log if e[0] == "GET"]
    assert len(heads) == len(urls)
    assert gets and all(r is not None for _, _, r in gets)  # only byte ranges were read
    assert sum(int(r.split("-")[1]) - int(r[6:].split("-")[0]) + 1 for _, _, r in gets) == 13 * L * 4
    sizes = json.loads((tmp_path / "c" / "source_sizes.json").read_text())
    assert sizes[urls[0]] == FILE_TOKENS[0] * 4
    # second plan: sizes and order come from the cache, no HEAD
    handler.log.clear()
    slice_olmo(urls, 2 * L, tmp_path / "o2", cache_dir=tmp_path / "c", progress=False)
    assert not [e for e in handler.log if e[0] == "HEAD"]
    assert list((tmp_path / "c").glob("olmo-order-*.npy"))


def test_source_errors_name_the_file(source, server, tmp_path):
    d, paths = source
    base, _ = server
    missing = str(d / "nope.npy")
    with pytest.raises(DataError, match=re.escape(missing) + ": source file not found"):
        slice_olmo(paths + [missing], L, tmp_path / "a", cache_dir=tmp_path / "c", progress=False)
    bad_url = f"{base}/nope.npy"
    with pytest.raises(DataError, match=re.escape(bad_url) + ": HTTP 404"):
        slice_olmo([bad_url], L, tmp_path / "b", cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(DataError, match="127.0.0.1:1/x.npy"):
        slice_olmo(["http://127.0.0.1:1/x.npy"], L, tmp_path / "b2", cache_dir=tmp_path / "c",
                   progress=False)
    odd = tmp_path / "odd.npy"
    odd.write_bytes(b"\0" * (4 * L + 2))
    with pytest.raises(DataError, match=re.escape(str(odd)) + ".*not a multiple of 4"):
        slice_olmo([str(odd)], L, tmp_path / "c2", cache_dir=tmp_path / "c", progress=False)
    # uint16 ids written where uint32 are expected: pairs fuse into ids >= vocab
    u16 = tmp_path / "u16.npy"
    np.full(4 * L, 50_000, dtype=np.uint16).tofile(u16)
    with pytest.raises(DataError, match=re.escape(str(u16)) + ": token id 3276850000"):
        slice_olmo([str(u16)], L, tmp_path / "d", cache_dir=tmp_path / "c", progress=False)


def test_validation_sets(source, server, tmp_path):
    d, paths = source
    base, _ = server
    m = validation_sources()
    assert list(m) == ["dolma_common-crawl", "dolma_stack", "m2d2_s2orc", "wikitext_103"]
    assert m["wikitext_103"] == [
        "http://olmo-data.org/eval-data/perplexity/v3_small_dolma2-tokenizer/wikitext_103/val/part-0-00000.npy"
    ]
    assert len(validation_sources("all")) == 11
    with pytest.raises(DataError, match="'nope'"):
        validation_sources(["nope"])
    # a local mirror laid out like the URLs, and explicit URL sources
    mirror = tmp_path / "mirror" / "dolma_stack" / "val"
    mirror.mkdir(parents=True)
    (mirror / "part-0-00000.npy").write_bytes(Path(paths[1]).read_bytes())
    out = fetch_validation(["dolma_stack"], tmp_path / "mirror", tmp_path / "val")
    s = TokenStore(out["dolma_stack"], verify=True)
    np.testing.assert_array_equal(s.read(0, s.n_tokens), np.fromfile(paths[1], dtype="<u4"))
    assert s.manifest["seq_len"] == 4096 and s.manifest["name"] == "dolma_stack"
    out = fetch_validation(None, {"web": f"{base}/{Path(paths[0]).name}"}, tmp_path / "val")
    assert TokenStore(out["web"]).n_tokens == FILE_TOKENS[0]
    with pytest.raises(DataError, match="HTTP 404"):
        fetch_validation(None, {"x": f"{base}/missing.npy"}, tmp_path / "val")
    u16 = tmp_path / "u16.npy"
    np.full(64, 50_000, dtype=np.uint16).tofile(u16)
    with pytest.raises(DataError, match=re.escape(str(u16)) + ": token id"):
        fetch_validation(None, {"y": str(u16)}, tmp_path / "val")


def test_shipped_config():
    cfg = load_olmo_config()
    assert cfg["seed"] == 6198 and cfg["instance_len"] == 4096
    assert cfg["eos_id"] == 100257 and cfg["vocab_size"] == 100278
    assert cfg["embedding_size"] == 100352
    assert len(cfg["paths"]) == 1122
    ref = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "olmo2-1b-stage1-paths.txt"
    if ref.is_file():
        lines = [s.strip() for s in ref.read_text().splitlines() if s.strip() and not s.startswith("#")]
        assert cfg["paths"] == lines


def test_cli_slice_and_inspect(source, tmp_path, capsys):
    _, paths = source
    lst = tmp_path / "paths.txt"
    lst.write_text("# comment\n" + "\n".join(paths) + "\n")
    out = tmp_path / "o"
    rc = data_cli(["data", "slice", str(out), "--tokens", "3", "--paths", str(lst), "--quiet",
                   "--cache-dir", str(tmp_path / "c"), "--seq-len-out", "2048"])
    assert rc == 0
    assert data_cli(["data", "inspect", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "tokens     4,096 in 1 file(s)" in text and "seq_len    2048" in text
    (out / "part-00000.u32").write_bytes(b"\0" * 8192)
    assert data_cli(["data", "inspect", str(out)]) == 2
    assert "uint16" in capsys.readouterr().err


def test_path_list_with_root(tmp_path):
    from shapelm.data.validation import read_path_list

    lst = tmp_path / "paths.txt"
    lst.write_text("# comment\nhttp://olmo-data.org/preprocessed/a/part-0.npy\nrel/part-1.npy\n"
                   "/abs/part-2.npy\nhttps://elsewhere.org/part-3.npy\n")
    assert read_path_list(str(lst), "http://127.0.0.1:9/olmo/") == [
        "http://127.0.0.1:9/olmo/preprocessed/a/part-0.npy", "http://127.0.0.1:9/olmo/rel/part-1.npy",
        "/abs/part-2.npy", "https://elsewhere.org/part-3.npy"]
    assert read_path_list(str(lst))[1] == "rel/part-1.npy"
    with pytest.raises(DataError, match=r"nope\.txt: path list not found"):
        read_path_list(str(tmp_path / "nope.txt"))
