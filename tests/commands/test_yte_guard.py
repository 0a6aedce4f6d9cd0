"""The YTE guard patches a private Snakemake function (`snakemake.common.configfile.
_load_configfile`). These tests fail the day Snakemake stops calling it for `--configfile` (an
upstream refactor would otherwise silently end the guarding), and record the one path it never
covers: a profile's config.yaml, which Snakemake reads with YTE through another function."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SPY = """
import json, sys
import snakemake.common.configfile as module
from shapelm.commands import yte_guard

assert yte_guard.active() or yte_guard.TARGET in sys.modules
patched = module._load_configfile
calls = []

def spy(path, *args, **kwargs):
    calls.append(str(path))
    return patched(path, *args, **kwargs)

module._load_configfile = spy
from snakemake.cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print(json.dumps({"calls": calls, "guarded": bool(getattr(patched, yte_guard.MARK, False))}),
      file=open(sys.argv[1], "w"))
"""


def _snakemake_with_spy(tmp_path: Path, *args: str) -> dict:
    (tmp_path / "Snakefile").write_text('rule all:\n    shell: "true"\n')
    out = tmp_path / "spy.json"
    subprocess.run([sys.executable, "-c", SPY, str(out), "-n", "--cores", "1", "--snakefile",
                    str(tmp_path / "Snakefile"), "--directory", str(tmp_path), *args],
                   cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.read_text())


def test_snakemake_reads_configfile_through_the_patched_function(tmp_path):
    """If Snakemake stops calling `_load_configfile` for --configfile, the guard still marks
    itself active but guards nothing: this test then fails."""
    config = tmp_path / "plain.yaml"
    config.write_text("name: plain\n")
    seen = _snakemake_with_spy(tmp_path, "--configfile", str(config))
    assert seen["guarded"], "the start-up hook did not patch Snakemake's config loader"
    assert str(config) in seen["calls"], seen


def test_a_profile_config_is_not_read_through_the_guard(tmp_path):
    """The documented limitation: Snakemake reads a profile's config.yaml (`--profile`) with YTE
    through `snakemake.profiles`, not the patched function. When this fails, Snakemake routes
    profiles through the guarded loader and the limitation in the README can go."""
    profile, marker = tmp_path / "profile", tmp_path / "profile-template-ran"
    profile.mkdir()
    (profile / "config.yaml").write_text(
        f"__use_yte__: true\ncores: ?__import__('pathlib').Path({str(marker)!r}).touch() or 1\n")
    seen = _snakemake_with_spy(tmp_path, "--profile", str(profile))
    assert not any(Path(c).parent == profile for c in seen["calls"]), seen
    assert marker.exists(), "a profile template no longer runs: update the README's YTE limitation"


def test_pip_install_alone_guards_snakemake(tmp_path):
    """`pip install .` (here uv's, the same wheel build) and nothing else: the wheel carries the
    start-up hook (setup.py), so a `__use_yte__` config is refused before its template runs.
    The dependencies come from this environment by PYTHONPATH (no second install of torch)."""
    import os
    import shutil
    import sysconfig

    from shapelm.commands import yte_guard

    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        import pytest

        pytest.skip("uv is not installed")
    root = Path(__file__).resolve().parents[2]
    source = tmp_path / "source"  # the tracked tree, as a fresh clone has it
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    for rel in files.split():
        if rel.startswith(("src/", "setup.py", "pyproject.toml", "README.md", "LICENSE")):
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, source / rel)
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    subprocess.run([uv, "pip", "install", "-q", "--no-deps", str(source)], env=env, check=True, timeout=300,
                   capture_output=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(site) / yte_guard.PTH_NAME).read_text() == yte_guard.PTH_LINE
    marker = tmp_path / "template-ran"
    config = tmp_path / "yte.yaml"
    config.write_text(f"__use_yte__: true\nname: ?__import__('pathlib').Path({str(marker)!r}).touch() or 'x'\n")
    (tmp_path / "Snakefile").write_text('rule all:\n    shell: "true"\n')
    run_env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    run_env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([str(python), "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(config)],
                          cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and not marker.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "shapelm: error:" in proc.stderr and "__use_yte__" in proc.stderr, proc.stderr[-2000:]
