"""The README's numbers and examples, checked against the code and configs they describe."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def test_the_papers_table_matches_the_reference_file():
    papers = yaml.safe_load((ROOT / "src/shapelm/reference/paper_values.yaml").read_text())["papers"]
    rows = [line for line in README.splitlines() if line.startswith("| **")]
    for key in ("hourglass", "tapered", "lws"):
        paper = papers[key]
        arxiv = paper["arxiv"].split("v")[0]
        row = next((r for r in rows if f"| {arxiv} |" in r), None)
        assert row is not None, (key, arxiv)
        assert paper["title"] in row
        for author in (paper.get("authors") or "").split(", "):
            assert author in row
    assert not re.search(r"seed 00\d", README)  # the papers are named, not numbered


def test_the_explicit_example_is_a_valid_run():
    from shapelm.config import load_yaml
    from shapelm.plan.experiment import load_experiment

    block = next(b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "kind: explicit" in b)
    raw = load_yaml(ROOT / "configs" / "paper.yaml")
    raw["runs"] = yaml.safe_load(block)["runs"]
    exp = load_experiment(raw)
    (name,) = exp.runs
    layers = exp.run(name)["model"]["layers"]
    assert len(layers) == 2 and layers[1]["ffn_widths"] == [256] * 4


def test_the_demo_job_and_run_counts_are_what_the_default_plans(tmp_path):
    from shapelm.plan.experiment import load_experiment

    jobs, runs = map(int, re.search(r"`make demo` \(.*?\): (\d+) jobs, (\d+) runs", README).groups())
    assert runs == len(load_experiment(ROOT / "configs" / "default.yaml").runs)
    out = subprocess.run([SNAKEMAKE, "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path), "--configfile",
                          str(ROOT / "configs" / "default.yaml"), "-n", "--quiet", "rules"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    total = next(int(line.split()[1]) for line in out.splitlines() if line.startswith("total"))
    assert jobs == total


def test_no_development_machine_paths_or_issue_numbers():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    # sources and documentation; the outputs under results/ are the integrator's to regenerate
    texts = [f for f in files if (f.endswith((".py", ".md", ".yaml", ".smk", ".sh", ".toml")) or f == "Snakefile")
             and not f.startswith(("results/", "paper_figures/"))]
    bad = re.compile(r"/work/(?:wt|main|shared)\b|\bissue #?\d+|\bissues? \d+\b", re.IGNORECASE)
    found = [f"{f}:{i}" for f in texts if f != "tests/test_readme.py"
             for i, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1) if bad.search(line)]
    assert found == []
