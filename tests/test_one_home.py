"""One home for each layout fact, guarded: a run's folder is spelled in `shapelm.plan.paths`
alone, and `shapelm.results` reads result files through their records (`shapelm.records`, by
way of `shapelm.results.readers`), never as raw JSON of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "shapelm"
#: "runs" as a path component: `/ "runs"`, "runs/...", ".../runs/..." or f"{root}/runs".
RUNS_IN_A_PATH = re.compile(r"(^|/)runs(/|$)")
#: Raw JSON readers; in shapelm.results only the readers' module calls them, beside compare.py,
#: which diffs every number of two result trees whatever file holds it, and intervals.py, which
#: reads lm-eval's own per-sample logs (not a shapelm result file).
RAW_JSON = {"load_json", "json.load", "json.loads"}
RAW_JSON_READERS = {"readers.py", "compare.py", "intervals.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions (prose, not paths)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _run_folder_spellings(source: str, where: str) -> list[str]:
    """Where `source` spells a run folder: a "runs" path component in a string (not a docstring
    or an option's help) or the constant "runs" joined with `/`."""
    tree = ast.parse(source, where)
    prose = _docstrings(tree) | {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "help"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any(isinstance(s, ast.Constant) and s.value == "runs" for s in (node.left, node.right)):
                found.append(f"{where}:{node.lineno}: / \"runs\"")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if "/" in node.value and RUNS_IN_A_PATH.search(node.value) and " " not in node.value:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_run_folders_are_spelled_in_plan_paths_alone():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel != "plan/paths.py":
            found += _run_folder_spellings(path.read_text(), rel)
    assert not found, "take run folders from shapelm.plan.paths (run_dir, run_under, ...):\n" + "\n".join(found)


def test_the_run_folder_guard_sees_each_spelling():
    for line in ('root / "runs" / run', 'glob("runs/*/ppl.json")', 'f"{root}/runs/{run}"'):
        assert _run_folder_spellings(line, "t.py"), line
    assert not _run_folder_spellings('run_under(root, run) / "ppl.json"', "t.py")
    assert not _run_folder_spellings('"""work/EXP/runs/RUN/ holds the run"""', "t.py")
    assert not _run_folder_spellings('p.add_argument("--out", help="results/EXP/runs/RUN/ppl.json")', "t.py")


def _raw_json_reads(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    return [f"{where}:{node.lineno}: {ast.unparse(node.func)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and ast.unparse(node.func) in RAW_JSON | {"records.load_json", "readers.load_json"}]


def test_results_read_result_files_through_their_records():
    found = []
    for path in sorted((PACKAGE / "results").rglob("*.py")):
        rel = path.relative_to(PACKAGE / "results").as_posix()
        if rel not in RAW_JSON_READERS:
            found += _raw_json_reads(path.read_text(), rel)
    assert not found, "read result files through a record (shapelm.records, shapelm.results.readers):\n" + \
        "\n".join(found)


def test_the_record_guard_sees_raw_reads():
    for line in ("load_json(p)", "json.loads(text)", "records.load_json(p)", "json.load(f)"):
        assert _raw_json_reads(line, "t.py"), line
    assert not _raw_json_reads("NoveltyRecord.read(p)", "t.py")
