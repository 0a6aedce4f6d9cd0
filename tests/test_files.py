"""shapelm.files: every writer's one way to write a file (temp name beside it, fsync, rename,
group-readable mode), and the rule that no other module writes a file of any kind."""
import ast
import os
import stat
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


#: The one exception: a training checkpoint seals a whole step directory its own way (meta.json
#: last, then a rename of the directory), documented in shapelm.train.checkpoint.
OWN_WRITERS = {"files.py", "train/checkpoint.py"}
WRITE_MODES = set("wax+")
MOVES = {"os.replace", "os.rename", "os.renames", "shutil.move", "shutil.copy", "shutil.copy2",
         "shutil.copyfile", "shutil.copytree"}


def _mode(call: ast.Call) -> str:
    """The mode of an open(...) or Path.open(...) call, "" when it reads or is not spelled."""
    args = call.args[1:] if isinstance(call.func, ast.Name) else call.args
    found = [a.value for a in args[:1] if isinstance(a, ast.Constant)]
    found += [k.value.value for k in call.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
    return next((m for m in found if isinstance(m, str)), "")


def _writes(call: ast.Call) -> str | None:
    """What kind of file write `call` is, if it is one that does not go through shapelm.files."""
    func = call.func
    name = ast.unparse(func)
    if name == "open" or (isinstance(func, ast.Attribute) and func.attr == "open" and name != "files.open"):
        return f"open mode {_mode(call)!r}" if set(_mode(call)) & WRITE_MODES else None
    if isinstance(func, ast.Attribute) and func.attr in ("write_text", "write_bytes") and \
            ast.unparse(func.value) != "files":
        return f".{func.attr}()"
    return name if name in MOVES else None


def test_no_module_writes_a_file_but_through_shapelm_files():
    """Every file write of the package goes through shapelm.files (a temp name, fsync, rename): no
    open(..., "w"/"a"/"x"), Path.write_text/write_bytes or os.replace/shutil copy elsewhere,
    whatever writes into the handle (json.dump, csv, np.save)."""
    root = ROOT / "src" / "shapelm"
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in OWN_WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Call) and (kind := _writes(node)):
                found.append(f"{rel}:{node.lineno}: {kind}")
    assert not found, "write through shapelm.files instead:\n" + "\n".join(found)


def test_the_write_guard_catches_each_kind_of_write():
    for line in ('open(p, "w")', 'open(p, mode="ab")', 'p.open("x")', "p.write_text(t)", "p.write_bytes(b)",
                 "os.replace(a, b)", "shutil.copyfile(a, b)"):
        assert _writes(ast.parse(line).body[0].value), line
    for line in ("open(p)", 'open(p, "rb")', "files.write_text(p, t)", 'files.atomic_open(p, "w")'):
        assert not _writes(ast.parse(line).body[0].value), line
