"""User-facing text cites what a reader has: arXiv ids and sections, the project's own docs
(docs/PAPER_NOTES.md "Protocol facts"), public repositories; never a file outside the project."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a protocol notes file and the papers' source texts that only the development setup had
UNSHIPPED = re.compile(r"PROTOCOLS\.md|\bseeds/|\b[Ss]eed 00\d\b")


def test_no_citation_of_files_users_do_not_have():
    files = subprocess.run(["git", "ls-files", "src", "docs", "README.md", "configs", "workflow", "benchmarks"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = [f"{f}:{i}" for f in files if (ROOT / f).suffix not in (".png", ".pdf")
             for i, line in enumerate((ROOT / f).read_text(errors="replace").splitlines(), 1)
             if UNSHIPPED.search(line)]
    assert found == []


def test_every_cited_protocol_is_in_the_paper_notes():
    notes = (ROOT / "docs" / "PAPER_NOTES.md").read_text()
    have = {int(n) for n in re.findall(r"^### Protocol (\d+)\.", notes, re.M)}
    files = subprocess.run(["git", "ls-files", "src", "docs", "README.md", "configs"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    cited = {int(n) for f in files if (ROOT / f).suffix not in (".png", ".pdf")
             for n in re.findall(r"\bprotocol (\d+)\b", (ROOT / f).read_text(errors="replace"))}
    assert cited and cited <= have, sorted(cited - have)


def test_license_and_citation_file_match_the_package():
    import yaml

    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License\n")
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "Apache-2.0"
    papers = yaml.safe_load((ROOT / "src/shapelm/reference/paper_values.yaml").read_text())["papers"]
    cited = {ref["identifiers"][0]["value"] for ref in cff["references"]}
    for key in ("hourglass", "tapered", "lws"):
        assert f"arXiv:{papers[key]['arxiv'].split('v')[0]}" in cited
        assert any(ref["title"] == papers[key]["title"] for ref in cff["references"])
