"""The plan as a file (work/EXP/plan.json): what the experiment_plan rule writes is what
`shapelm results` reads, its accounting is the config's, and an old or missing document is
refused in one line that says what to do."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shapelm.shapes.accounting import param_counts
from shapelm.model.config import run_model_config
from shapelm.errors import ConfigError
from shapelm.plan.build import load_plan, plan_of, write_plan
from shapelm.plan.document import PLAN_VERSION, read_plan
from shapelm.plan.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "default.yaml"


@pytest.fixture(scope="module")
def exp():
    return load_experiment(DEFAULT)


def test_written_plan_reads_back_as_the_plan_built_in_memory(exp, tmp_path):
    path = write_plan(exp, tmp_path / "plan.json")
    read, built = read_plan(path), plan_of(exp)
    assert read.name == built.name == exp.name
    assert read.runs == built.runs == json.loads(json.dumps(exp.runs))
    assert read.accounting == built.accounting
    assert read.tables == built.tables and read.decode_pairs == built.decode_pairs
    assert load_plan(path).runs == read.runs  # the CLI's reader tells a plan from a config


def test_accounting_and_widths_are_those_of_the_run_config(exp):
    plan = plan_of(exp)
    for name, run in exp.runs.items():
        cfg = run_model_config(run)
        assert plan.accounting[name]["non_embedding"] == param_counts(cfg).non_embedding, name
        assert plan.layers[name]["ffn_width"] == [sum(layer.ffn_widths) for layer in cfg.layers], name
        assert plan.instances(name) == exp.instances(name) and plan.is_primary(name) == exp.is_primary(name)
    tapered = [n for n, r in exp.runs.items() if r["arch"].get("kind") == "tapered"]
    assert tapered and set(plan.tapered_schedules) == set(tapered)
    for name in tapered:
        shape = plan.tapered_schedules[name]
        # every schedule keeps the uniform model's FFN parameters: widths sum to L * d_ff
        for widths in shape["widths"].values():
            assert sum(widths) == shape["n_layers"] * shape["d_ff"], name


def test_table_membership_leaves_out_later_seeds(exp):
    plan = plan_of(exp)
    for table, runs in plan.tables.items():
        assert runs == [n for n, r in exp.runs.items() if table in r["tables"] and exp.is_primary(n)]


@pytest.mark.parametrize("version", [None, PLAN_VERSION - 1, PLAN_VERSION + 1])
def test_a_plan_of_another_version_is_refused_in_one_line(exp, tmp_path, version):
    path = write_plan(exp, tmp_path / "plan.json")
    doc = json.loads(path.read_text())
    doc.pop("version") if version is None else doc.update(version=version)
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        read_plan(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and f"version {version!r}" in msg and "experiment_plan" in msg


def test_a_missing_or_unreadable_plan_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="plan.json: plan not found"):
        read_plan(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_text("{not json")
    with pytest.raises(ConfigError, match="plan.json: unreadable plan"):
        read_plan(tmp_path / "plan.json")


def test_the_experiment_plan_rule_writes_the_plan_the_results_rules_read(exp, tmp_path):
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-s", str(ROOT / "Snakefile"),
                           "-d", str(tmp_path), f"work/{exp.name}/plan.json", "--configfile", str(DEFAULT),
                           "--cores", "1"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_plan(tmp_path / "work" / exp.name / "plan.json").accounting == plan_of(exp).accounting


def test_mfu_peak_is_the_device_s_then_the_scale_s_configured_one(exp):
    from shapelm.shapes.accounting import peak_flops_for

    raw = json.loads(json.dumps(exp.raw))
    for section in (raw, *raw["scales"].values()):
        section.get("resources", {}).pop("gpu_peak_tflops", None)
    unconfigured = plan_of(load_experiment(raw))
    scale = next(iter(raw["scales"]))
    raw["scales"][scale].setdefault("resources", {})["gpu_peak_tflops"] = 123
    plan = plan_of(load_experiment(raw))
    run = next(n for n, r in plan.runs.items() if r["scale"] == scale)
    assert plan.peak_flops(run, "NVIDIA H100 80GB HBM3") == peak_flops_for("NVIDIA H100 80GB HBM3") > 0
    assert plan.peak_flops(run, "a device of no known peak") == 123e12
    assert unconfigured.peak_flops(run, "a device of no known peak") is None


def _broken_plans(exp, tmp_path):
    doc = json.loads(write_plan(exp, tmp_path / "good.json").read_text())
    out = {}
    for name, change, key in [("no_runs", lambda d: d.pop("runs"), "missing key 'runs'"),
                              ("tables_list", lambda d: d.update(tables=list(d["tables"])), "'tables' should be"),
                              ("run_no_config", lambda d: next(iter(d["runs"].values())).pop("config"),
                               "missing key 'config'")]:
        d = json.loads(json.dumps(doc))
        change(d)
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text(json.dumps(d))
        out[name] = key
    (tmp_path / "not_utf8").mkdir()
    (tmp_path / "not_utf8" / "plan.json").write_bytes(b'{"version": 2, "name": "\xff"}')
    out["not_utf8"] = "not UTF-8"
    (tmp_path / "a_dir" / "plan.json").mkdir(parents=True)
    out["a_dir"] = "a directory"
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "plan.json").write_text('{"version": 2, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    out["deep"] = "nested too deeply"
    return out


def test_a_malformed_plan_is_one_line_naming_the_file_and_key(exp, tmp_path):
    for name, key in _broken_plans(exp, tmp_path).items():
        path = tmp_path / name / "plan.json"
        with pytest.raises(ConfigError) as err:
            load_plan(path)
        msg = str(err.value)
        assert "\n" not in msg and str(path) in msg and key in msg, (name, msg)


def test_shapelm_results_build_on_a_malformed_plan_prints_one_line_and_exits_2(exp, tmp_path):
    broken = _broken_plans(exp, tmp_path)
    for name in ("no_runs", "tables_list", "not_utf8", "a_dir"):
        proc = subprocess.run([sys.executable, "-c", "import sys; from shapelm.cli import main; sys.exit(main())",
                               "results", "build", str(tmp_path / name / "plan.json")],
                              capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, (name, proc.stderr)
        assert broken[name] in proc.stderr, (name, proc.stderr)
