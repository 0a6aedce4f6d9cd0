"""benchmarks/gpu_check.sh as the GPU image runs it (no jsonschema, no torchao), in its CPU
smoke mode: every section's rows, each with a status, the JSON rewritten after every row."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_cpu_smoke_runs_every_section_without_jsonschema_and_torchao(tmp_path):
    absent = tmp_path / "absent"
    for name in ("jsonschema", "torchao"):
        (absent / name).mkdir(parents=True)
        (absent / name / "__init__.py").write_text(f"raise ImportError('{name} is not on the GPU image')\n")
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out)],
                          env={**os.environ, "PYTHONPATH": str(absent)}, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert data["finished"] and data["smoke"] and len(rows) >= 8
    assert {r["status"] for r in rows} <= {"ok", "skipped"}, [r.get("error") for r in rows]
    assert {r["section"] for r in rows if r["status"] == "ok"} == {"setup", *gpu_check().SECTIONS}
    packages = data["preflight"]["packages"]
    assert not packages["torchao"]["available"] and not packages["jsonschema"]["available"]
    assert "FP8" in packages["torchao"]["costs"]
    fp8 = [r for r in rows if r.get("fp8")]
    assert fp8 and all(r["status"] == "skipped" and r["reason"] for r in fp8)
    trained = [r for r in rows if r["status"] == "ok" and "tokens_per_s" in r and r["section"] != "mixers"]
    assert trained and all(r["tokens_per_s"] > 0 and 0 < r["output_layer_flop_share"] < 1 for r in trained)


def test_each_row_is_written_as_it_ends_and_an_error_or_overrun_is_recorded(tmp_path):
    mod = gpu_check()
    out = tmp_path / "rows.json"
    run = mod.Run(device=torch.device("cpu"), smoke=True, budget_s=2.5, out=out, data={"rows": []})
    run.section_end = 100.0
    run.row("decode", "fails", lambda: 1 / 0)
    assert json.loads(out.read_text())["rows"][0]["error"].startswith("ZeroDivisionError: division by zero")
    t0 = time.perf_counter()
    run.row("decode", "overruns", lambda: time.sleep(30))
    assert time.perf_counter() - t0 < 5
    rows = json.loads(out.read_text())["rows"]
    assert rows[1]["status"] == "error" and rows[1]["error"].startswith("RowTimeout")
    run.row("decode", "too late", lambda: {"never": True})
    assert json.loads(out.read_text())["rows"][2]["reason"].startswith("time budget")


@pytest.mark.parametrize("argv", [["--only", "slice_8b,nonsense"]])
def test_an_unknown_section_is_refused_before_any_work(argv, capsys):
    with pytest.raises(SystemExit):
        gpu_check().main(argv)
    assert "nonsense" in capsys.readouterr().err


def test_fp8_is_switched_in_place_and_back_with_the_optimizer_on_the_model_parameters(monkeypatch):
    pytest.importorskip("torchao.float8")
    from shapelm.train import parallel

    mod = gpu_check()
    # torchao converts on the CPU too; only training in float8 needs a GPU (convert_to_fp8's check)
    monkeypatch.setattr(parallel, "convert_to_fp8", lambda model, device: parallel.fp8_linear_layers(model))
    layer = {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 16}, "ffn_widths": [64]}
    cfg = mod.ModelConfig(vocab_size=64, d_model=32, layers=[layer] * 2, max_seq_len=64)
    trainer = mod.Trainer(cfg, torch.device("cpu"), smoke=True, recompute="selective")

    def kinds():
        return {type(m).__name__ for name, m in trainer.model.named_modules() if name.startswith("layers.")}

    def optimized():
        return {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}

    before = {id(p) for p in trainer.model.parameters()}
    assert "Linear" in kinds() and optimized() == before
    trainer.set_fp8(True)
    assert "Float8Linear" in kinds() and "Linear" not in kinds()
    assert optimized() == {id(p) for p in trainer.model.parameters()}
    trainer.set_fp8(False)
    assert "Linear" in kinds() and "Float8Linear" not in kinds()
    assert optimized() == {id(p) for p in trainer.model.parameters()} == before

    def fails_after_converting(model, device):
        parallel.fp8_linear_layers(model)
        raise RuntimeError("a torchao failure after the swap")

    monkeypatch.setattr(parallel, "convert_to_fp8", fails_after_converting)
    with pytest.raises(RuntimeError):
        trainer.set_fp8(True)
    trainer.set_fp8(False)  # the next bf16 row gets plain layers again
    assert "Float8Linear" not in kinds() and optimized() == before
