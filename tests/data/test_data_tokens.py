"""Token directory contract: round trip, windows, and every validation error names the file."""

import json
import os

import numpy as np
import pytest

from shapelm.data.tokens import (
    TokenStore,
    fast_hash,
    file_checksum,
    iter_chunks,
    read_manifest,
    write_token_dir,
)
from shapelm.errors import DataError


def make_dir(tmp_path, arrays=None, vocab=1000, eos=999):
    arrays = arrays if arrays is not None else [np.arange(10) % vocab, np.arange(10, 25) % vocab]
    write_token_dir(tmp_path / "tok", arrays, vocab, eos, {"seq_len": 4})
    return tmp_path / "tok"


def test_round_trip_and_windows(tmp_path):
    d = make_dir(tmp_path)
    m = read_manifest(d)
    assert m["format"] == "shapelm-tokens-v1" and m["dtype"] == "uint32"
    assert m["n_tokens"] == 25 and [f["n_tokens"] for f in m["files"]] == [10, 15]
    assert m["seq_len"] == 4
    s = TokenStore(d, verify=True)
    assert s.n_tokens == 25
    np.testing.assert_array_equal(s.read(0, 25), np.arange(25))
    np.testing.assert_array_equal(s.read(8, 5), np.arange(8, 13))  # across files
    assert s.read(3, 4).dtype == np.uint32
    assert s.n_instances(4) == 6  # remainder dropped
    np.testing.assert_array_equal(s.instance(2, 4), np.arange(8, 12))
    assert [w.tolist() for w in s.instances(12)] == [list(range(12)), list(range(12, 24))]
    # raw files are headerless little-endian uint32
    raw = (d / m["files"][1]["path"]).read_bytes()
    assert raw == np.arange(10, 25, dtype="<u4").tobytes()
    with pytest.raises(DataError):
        s.read(20, 10)
    with pytest.raises(DataError):
        s.instance(6, 4)


def test_uint16_file_is_named(tmp_path):
    d = make_dir(tmp_path)
    f = d / "part-00001.u32"
    f.write_bytes(np.arange(10, 25, dtype=np.uint16).tobytes())
    with pytest.raises(DataError, match=r"part-00001\.u32.*uint16"):
        TokenStore(d)


def test_id_out_of_vocab_names_file_position_value(tmp_path):
    d = make_dir(tmp_path)
    f = d / "part-00001.u32"
    a = np.arange(10, 25, dtype=np.uint32)
    a[7] = 5000
    f.write_bytes(a.tobytes())
    with pytest.raises(DataError, match=r"part-00001\.u32: token id 5000 at position 7 >= vocab_size 1000"):
        TokenStore(d)
    TokenStore(d, check_ids=False)  # scan can be skipped


def test_checksum_mismatch(tmp_path):
    d = make_dir(tmp_path)
    f = d / "part-00000.u32"
    a = np.fromfile(f, dtype=np.uint32)
    a[0] = 1
    a.tofile(f)
    TokenStore(d)  # sizes and ids fine
    with pytest.raises(DataError, match=r"part-00000\.u32: sha256 mismatch"):
        TokenStore(d, verify=True)


def test_either_checksum_verifies_and_identities_keep_sha256_values(tmp_path):
    d = make_dir(tmp_path)
    m = read_manifest(d)
    sha256s = [f["sha256"] for f in m["files"]]
    assert [file_checksum(f) for f in m["files"]] == sha256s  # pinned identities unchanged
    for f in m["files"]:  # the slicer's kind of entry: xxh3-128 alone
        h = fast_hash()
        h.update((d / f["path"]).read_bytes())
        del f["sha256"]
        f["xxh3_128"] = h.hexdigest()
    (d / "manifest.json").write_text(json.dumps(m))
    TokenStore(d, verify=True)
    assert [file_checksum(f) for f in m["files"]] == [f"xxh3_128:{f['xxh3_128']}" for f in m["files"]]
    m["files"][1]["xxh3_128"] = "0" * 32
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match=r"part-00001\.u32: xxh3_128 mismatch \(manifest 0{32}, "):
        TokenStore(d, verify=True)
    del m["files"][1]["xxh3_128"]
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match=r"part-00001\.u32: no sha256 or xxh3_128 in the manifest"):
        TokenStore(d, verify=True)


def test_missing_file_and_manifest(tmp_path):
    d = make_dir(tmp_path)
    (d / "part-00000.u32").unlink()
    with pytest.raises(DataError, match=r"part-00000\.u32.*missing"):
        TokenStore(d)
    with pytest.raises(DataError, match=r"manifest\.json: missing"):
        TokenStore(tmp_path)


def test_manifest_dtype_must_be_uint32(tmp_path):
    d = make_dir(tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    m["dtype"] = "uint16"
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match=r"manifest\.json: dtype 'uint16'"):
        TokenStore(d)


def test_write_rejects_bad_ids(tmp_path):
    with pytest.raises(DataError, match="token id 1000 at position 2"):
        write_token_dir(tmp_path / "x", np.array([1, 2, 1000]), 1000, 0)
    with pytest.raises(DataError, match="negative"):
        write_token_dir(tmp_path / "x", np.array([1, -2]), 1000, 0)
    with pytest.raises(DataError, match="dtype float"):
        write_token_dir(tmp_path / "x", np.array([1.0]), 1000, 0)
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_iter_chunks():
    parts = list(iter_chunks([np.arange(5), np.arange(5, 12)], 4))
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("bad", ["../outside.u32", "/etc/passwd", "sub/../../x.u32", "", 7])
def test_manifest_paths_stay_in_the_directory(tmp_path, bad):
    d = make_dir(tmp_path)
    (tmp_path / "outside.u32").write_bytes(np.arange(10, dtype="<u4").tobytes())
    m = json.loads((d / "manifest.json").read_text())
    m["files"][0]["path"] = bad
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match=r"manifest\.json: file path .*(outside|string)"):
        TokenStore(d, check_ids=False)


def test_checksum_cache_rereads_every_file_with_the_fast_hash_only(tmp_path, monkeypatch):
    from shapelm.data import tokens

    d = make_dir(tmp_path)
    cache = tmp_path / "cache.json"
    reads = []
    real = tokens.digest_file

    def spy(path, *hashers, **kwargs):
        reads.append((path.name, sorted(h.name.lower() for h in hashers)))
        return real(path, *hashers, **kwargs)

    monkeypatch.setattr(tokens, "digest_file", spy)
    TokenStore(d).verify_checksums(cache)  # the first start: sha256 and the fast hash, one read
    assert reads == [(name, ["sha256", "xxh3_128"]) for name in ("part-00000.u32", "part-00001.u32")]
    reads.clear()
    TokenStore(d).verify_checksums(cache)  # a restart: every byte again, the fast hash only
    assert reads == [(name, ["xxh3_128"]) for name in ("part-00000.u32", "part-00001.u32")]
    # one id changed, size and mtime kept (bit rot): refused in one line naming the file
    f = d / "part-00001.u32"
    st = f.stat()
    a = np.fromfile(f, dtype="<u4")
    a[3] = (a[3] + 1) % 1000
    a.tofile(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DataError, match=r"part-00001\.u32: contents changed since they matched "
                                        r"the manifest's sha256 \(xxh3-128 [0-9a-f]{32}, "):
        TokenStore(d).verify_checksums(cache)
    # without the cache (or with a new manifest sha256), the sha256 decides
    cache.unlink()
    with pytest.raises(DataError, match=r"part-00001\.u32: sha256 mismatch"):
        TokenStore(d).verify_checksums(cache)


def test_read_checked_names_file_and_position(tmp_path):
    d = make_dir(tmp_path)
    f = d / "part-00001.u32"
    a = np.fromfile(f, dtype="<u4")
    a[4] = 5000  # >= vocab 1000, behind a stale manifest
    a.tofile(f)
    s = TokenStore(d, check_ids=False)
    np.testing.assert_array_equal(s.read_checked(0, 12), np.arange(12))
    with pytest.raises(DataError, match=r"part-00001\.u32: token id 5000 at position 4 >= vocab_size 1000"):
        s.read_checked(8, 10)
    assert s.locate(14) == (f, 4)


def test_written_files_are_group_readable(tmp_path):
    import os

    previous = os.umask(0o022)
    try:
        d = make_dir(tmp_path)
    finally:
        os.umask(previous)
    for p in d.iterdir():
        assert p.stat().st_mode & 0o777 == 0o644, p  # mkstemp alone gives 0600
