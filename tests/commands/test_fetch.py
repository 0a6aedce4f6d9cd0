"""The fetch stage (shapelm.commands.fetch) against a local HTTP server that answers as the hub does."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shapelm.plan.inputs import Input, experiment_inputs, record_path, tokenizer_input

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL_FILES = {"tokenizer.json": b'{"version": "1.0"}', "tokenizer_config.json": b'{"eos_token": "</s>"}',
               "model.safetensors": b"weights not to fetch"}
DATASET_FILES = {"data/train-00000-of-00001.parquet": b"PAR1 train", "data/test-00000-of-00001.parquet": b"PAR1 t"}
REPOS = {("models", "owner/tok"): MODEL_FILES, ("datasets", "owner/books"): DATASET_FILES}
GATED = ("models", "gated/llama")


class HubHandler(http.server.BaseHTTPRequestHandler):
    """The paths huggingface_hub asks for: the revision's info, its file tree, each file."""

    requests: list[str] = []

    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", headers=None, head=False):
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head):
        path = self.path.split("?")[0]
        type(self).requests.append(f"{self.command} {path}")
        parts = path.strip("/").split("/")
        if parts[0] == "api":  # /api/{models,datasets}/OWNER/NAME/{revision,tree}/REV[/...]
            kind, repo, what = parts[1], "/".join(parts[2:4]), parts[4]
            if (kind, repo) == GATED:
                return self._send(403, b"gated", {"X-Error-Code": "GatedRepo",
                                                  "X-Error-Message": "Access to model gated/llama is restricted"})
            files = REPOS.get((kind, repo))
            if files is None:
                return self._send(404, b"no repo", {"X-Error-Code": "RepoNotFound"})
            if what == "revision":
                body = {"id": repo, "sha": COMMIT, "siblings": [{"rfilename": f} for f in files]}
            else:
                body = [{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                        for f, b in files.items()]
            return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
        kind = "datasets" if parts[0] == "datasets" else "models"
        if kind == "datasets":
            parts = parts[1:]
        repo, rev, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])  # OWNER/NAME/resolve/REV/FILE
        body = REPOS.get((kind, repo), {}).get(name)
        if body is None or rev not in (COMMIT, "main"):
            return self._send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
        return self._send(200, body, {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(body).hexdigest()}"'},
                          head)

    def do_GET(self):
        self._route(head=False)

    def do_HEAD(self):
        self._route(head=True)


@pytest.fixture
def hub(tmp_path):
    HubHandler.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fetch_cli(tmp_path, endpoint, *args, offline=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(tmp_path / "hub"), HF_HOME=str(tmp_path / "home"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1" if offline else "0", HF_HUB_DISABLE_XET="1")
    return subprocess.run([sys.executable, "-m", "shapelm.cli", "fetch", *args, "--out", str(tmp_path / "rec.json"),
                           "--no-progress"], env=env, capture_output=True, text=True, timeout=120)


def test_a_tokenizer_is_fetched_into_the_hub_cache_with_its_commit(tmp_path, hub):
    inp = tokenizer_input("owner/tok", "scale x")
    proc = fetch_cli(tmp_path, hub, *inp.args())
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "rec.json").read_text())
    assert record["commit"] == COMMIT
    snapshot = tmp_path / "hub" / "models--owner--tok" / "snapshots" / COMMIT
    assert Path(record["path"]) == snapshot
    assert (snapshot / "tokenizer.json").read_bytes() == MODEL_FILES["tokenizer.json"]
    assert not (snapshot / "model.safetensors").exists()  # only the tokenizer's files
    assert any(r.startswith("GET /api/models/owner/tok/revision/") for r in HubHandler.requests)
    # what the jobs then read offline: the shapelm tokenizer lookup finds it in that cache
    from shapelm.data.tokenizer import cached_repo_file

    assert cached_repo_file("owner/tok", "tokenizer.json", cache_dirs=[tmp_path / "hub"]) == snapshot / "tokenizer.json"
    # and a second fetch, offline, finds it there without asking the server
    HubHandler.requests.clear()
    assert fetch_cli(tmp_path, hub, *inp.args(), offline=True).returncode == 0
    assert HubHandler.requests == []


def test_a_dataset_split_is_fetched_alone(tmp_path, hub):
    from shapelm.plan.inputs import longctx_input

    inp = longctx_input("pg19", "hf:owner/books/data", "train", "longctx.pg19")
    proc = fetch_cli(tmp_path, hub, *inp.args())
    assert proc.returncode == 0, proc.stderr
    snapshot = Path(json.loads((tmp_path / "rec.json").read_text())["path"])
    assert [p.name for p in (snapshot / "data").iterdir()] == ["train-00000-of-00001.parquet"]
    assert snapshot.parent.parent.name == "datasets--owner--books"


def test_a_gated_repository_is_one_line_naming_it_and_the_token(tmp_path, hub):
    proc = fetch_cli(tmp_path, hub, *tokenizer_input("gated/llama", "scale tapered").args())
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "gated/llama" in lines[0] and "gated" in lines[0] and "HF_TOKEN" in lines[0]
    assert not (tmp_path / "rec.json").exists()


def test_an_unknown_repository_is_one_line(tmp_path, hub):
    proc = fetch_cli(tmp_path, hub, *tokenizer_input("nobody/none", "scale x").args())
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "nobody/none" in lines[0] and "no such repository" in lines[0]


def test_offline_with_nothing_cached_refuses_in_one_line_without_asking_the_server(tmp_path, hub):
    proc = fetch_cli(tmp_path, hub, *tokenizer_input("owner/tok", "scale x").args(), offline=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "owner/tok" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0] and "scale x" in lines[0]
    assert HubHandler.requests == []


def test_a_missing_local_file_says_where_it_comes_from(tmp_path):
    from shapelm.plan.inputs import longctx_input

    inp = longctx_input("essays", str(tmp_path / "PaulGrahamEssays.json"), None, "longctx.essays")
    proc = fetch_cli(tmp_path, "http://127.0.0.1:9", *inp.args())
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "PaulGrahamEssays.json" in lines[0] and "RULER" in lines[0]
    (tmp_path / "PaulGrahamEssays.json").write_text('{"text": "x"}')
    assert longctx_input("essays", str(tmp_path / "PaulGrahamEssays.json"), None, "x") is None


def test_the_paper_lists_every_input_kind():
    from shapelm.config import load_yaml
    from shapelm.plan.experiment import load_experiment

    root = Path(__file__).resolve().parents[2]
    exp = load_experiment(load_yaml(root / "configs" / "paper.yaml"))
    found = experiment_inputs(exp)
    repos = {i.repo: i for i in found.values()}
    for repo in ("allenai/dolma2-tokenizer", "meta-llama/Llama-2-7b-hf", "allenai/gpt-neox-olmo-dolma-v1_5",
                 "emozilla/pg19", "hoskinson-center/proof-pile", "openai-community/gpt2-xl", "baber/piqa"):
        assert repo in repos, sorted(repos)
    assert repos["emozilla/pg19"].include and all(p.startswith("data/train") for p in repos["emozilla/pg19"].include)
    assert {i.kind for i in found.values()} >= {"model", "dataset", "task"}
    assert record_path("work/paper", found["tokenizer-allenai--dolma2-tokenizer"]) == \
        Path("work/paper/inputs/tokenizer-allenai--dolma2-tokenizer.json")
    # the tiny default reads no hub input, nor does a rehearsal (its inputs are made here)
    default = load_experiment(load_yaml(root / "configs" / "default.yaml"))
    assert experiment_inputs(default) == {}
    rehearsal = load_experiment({**load_yaml(root / "configs" / "paper.yaml"), "name": "rehearsal"})
    assert experiment_inputs(rehearsal) == {}


def test_inputs_round_trip_through_the_command_line():
    inp = Input("task-x", "task", "allenai/ai2_arc", "eval", config="ARC-Easy")
    from shapelm.commands.fetch import add_commands
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["fetch", *inp.args(), "--out", "x.json"])
    assert (args.kind, args.repo, args.config, args.name) == ("task", "allenai/ai2_arc", "ARC-Easy", "task-x")


@pytest.mark.parametrize("repo", ["../../etc", "owner/../etc", "/etc/passwd", "owner/name/extra", "name",
                                  "owner/na..me", "owner/-name", "own er/name", "owner/name\n"])
def test_a_repo_that_is_not_owner_name_is_refused_in_one_line_naming_the_option(repo, tmp_path, hub):
    proc = fetch_cli(tmp_path, hub, "--kind", "model", "--repo", repo, "--name", "x")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--repo" in lines[0] and "owner/name" in lines[0] and "Traceback" not in proc.stderr
    assert HubHandler.requests == [] and not (tmp_path / "rec.json").exists() and not (tmp_path / "hub").exists()


@pytest.mark.parametrize("config", ["paper.yaml", "one-gpu.yaml"])
def test_every_hub_input_the_configs_name_passes_the_repo_check(config):
    from shapelm.commands.fetch import HUB_REPO_ID
    from shapelm.plan.experiment import load_experiment

    inputs = experiment_inputs(load_experiment(Path(__file__).resolve().parents[2] / "configs" / config))
    hub = [inp.repo for inp in inputs.values() if inp.kind != "file"]
    assert hub and all(HUB_REPO_ID.fullmatch(repo) for repo in hub), hub
