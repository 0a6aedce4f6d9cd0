"""shapelm.files: every writer's one way to write a file (temp name beside it, fsync, rename,
group-readable mode), and the rule that no other module renames files into place."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from shapelm import files

ROOT = Path(__file__).resolve().parents[1]


def test_a_written_file_is_whole_and_group_readable(tmp_path, monkeypatch):
    old = os.umask(0o022)
    try:
        path = files.write_json(tmp_path / "a" / "b.json", {"x": 1})
        assert path.read_text() == '{\n  "x": 1\n}\n'
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # mkstemp alone would leave 0600
    finally:
        os.umask(old)
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]


def test_a_failed_writer_leaves_the_old_file_and_no_temp(tmp_path):
    path = files.write_text(tmp_path / "t.csv", "old\n")
    with pytest.raises(RuntimeError), files.atomic_open(path) as f:
        f.write("half a ro")
        raise RuntimeError("killed")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_a_library_writing_by_name_gets_the_extension_it_needs(tmp_path):
    with files.atomic_path(tmp_path / "fig.png", suffix=".tmp.png") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".fig.png.") and tmp.suffix == ".png"
        tmp.write_bytes(b"png")
    assert (tmp_path / "fig.png").read_bytes() == b"png"


def test_only_two_modules_rename_files_into_place():
    # shapelm.files for every file, shapelm.train.checkpoint for whole checkpoint directories.
    out = subprocess.run(["grep", "-rl", "--include=*.py", "os.replace", "src"], cwd=ROOT,
                         capture_output=True, text=True).stdout.split()
    assert sorted(out) == ["src/shapelm/files.py", "src/shapelm/train/checkpoint.py"]
