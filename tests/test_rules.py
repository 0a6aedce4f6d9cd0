"""The Snakemake rules themselves: config values stay data on the command line, only training
settings rerun training, SIGTERM reaches running jobs, and the rules pass Snakemake's linter and
snakefmt. Every Snakemake here is the real one, planning (or running) in a scratch directory."""

import json
import shlex
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline_helpers import snakemake_here, user_env
import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = str(VENV_BIN / "snakemake")
RULE_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]

# Loads the workflow through Snakemake's API (what `snakemake` itself builds) and prints every
# rule's shell command template, unformatted.
_DUMP_SHELL_COMMANDS = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
root, configs = Path(sys.argv[1]), sys.argv[2:]
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                      config_settings=ConfigSettings(configfiles=[Path(c) for c in configs]),
                      snakefile=root / "Snakefile", workdir=root)
    rules = {r.name: r.shellcmd for r in wf._workflow.rules if r.shellcmd}
print("SHELLCMDS=" + json.dumps(rules))
"""


def _config(tmp_path, name, base="default.yaml", **sections):
    """configs/<base> with `sections` merged in (a dict per top-level key), as a file."""
    from shapelm.config import load_yaml, merge

    path = tmp_path / name
    path.write_text(yaml.safe_dump(merge(load_yaml(ROOT / "configs" / base), sections), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def shell_commands():
    """{rule: shell command template} of the tiny default and of the paper's workflow."""
    commands = {}
    for config, env in (("default.yaml", {}), ("paper.yaml", {"SHAPELM_ALLOW_MISSING_INPUTS": "1"})):
        proc = subprocess.run([sys.executable, "-c", _DUMP_SHELL_COMMANDS, str(ROOT), str(ROOT / "configs" / config)],
                              check=False, cwd=ROOT, env=user_env(**env), capture_output=True, text=True, timeout=300)
        line = [x for x in proc.stdout.splitlines() if x.startswith("SHELLCMDS=")]
        assert line, f"loading the workflow with {config} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        commands.update(json.loads(line[0].removeprefix("SHELLCMDS=")))
    return commands


def unquoted_fields(shellcmd):
    """Replacement fields of a shell command template that Snakemake would not shell-quote."""
    return [name + (f":{spec}" if spec else "")
            for _, name, spec, _ in string.Formatter().parse(shellcmd)
            if name is not None and not (spec or "").endswith("q")]


def test_the_quoting_check_sees_an_unquoted_field():
    assert unquoted_fields("shapelm x --vocab-size {params.vocab} > {log:q}") == ["params.vocab"]
    assert unquoted_fields("shapelm x {CORPUS} {input:q}") == ["CORPUS"]
    assert unquoted_fields("a {{literal}} {output:q}") == []


def test_every_value_on_a_command_line_is_shell_quoted(shell_commands):
    # Every rule that runs a shell command: the paper's slicing and re-encoding, training, each
    # evaluation, the table targets. A value from the config, a wildcard or a path is one argument.
    for rule in ("default_corpus", "slice_olmo", "retokenize_train", "validation_sets", "train",
                 "train_segment", "eval_ppl", "downstream", "export_hf", "yarn_finetune", "ruler",
                 "decode_pair", "results", "table_hourglass_table2"):
        assert rule in shell_commands
    unquoted = {rule: unquoted_fields(cmd) for rule, cmd in shell_commands.items()}
    assert not {rule: fields for rule, fields in unquoted.items() if fields}


def test_config_strings_reach_the_command_line_shell_quoted(tmp_path):
    # Strings the schema accepts (paths may hold spaces and `;`) appear as one quoted word each.
    hostile = {"data": {"olmo": {"root": "/data/olmo mirror; touch X #",
                                 "validation_root": "/data/val $(touch X)"}},
               "longctx": {"essays": "data/Paul Graham; touch X #.json"}}
    config = _config(tmp_path, "hostile.yaml", "paper.yaml", **hostile)
    targets = ["work/paper/data/113M/train/manifest.json", "work/paper/data/ruler",
               "work/paper/data/val/wikitext_103/manifest.json"]
    out = snakemake_here(["--configfile", str(config), "-n", "-p", *targets], tmp_path,
                     SHAPELM_ALLOW_MISSING_INPUTS="1").stdout
    shells = [line for line in out.splitlines() if line.startswith("Shell command:")]
    commands = [c for c in shells if "shapelm fetch " not in c]  # the inputs' fetch jobs come first
    assert len(commands) == 3, out[-3000:]
    for value in ("/data/olmo mirror; touch X #", "/data/val $(touch X)", "data/Paul Graham; touch X #.json"):
        assert sum(shlex.quote(value) in c for c in commands) == 1, (value, commands)
    assert sum(shlex.quote("data/Paul Graham; touch X #.json") in c for c in shells) == 2  # and its fetch job
    assert all(shlex.split(c.removeprefix("Shell command:"), comments=True) for c in shells)


def test_an_injected_config_value_runs_nothing(tmp_path):
    # The reported injection: refused by the schema, or (were it accepted) one quoted argument that
    # `--vocab-size` rejects; `touch X` runs in neither case.
    config = _config(tmp_path, "injected.yaml",
                     data={"default_corpus": {"vocab_size": "2048 --help; touch X; exit 1 #"}})
    proc = snakemake_here(["--configfile", str(config), "--cores", "1", "default_corpus"], tmp_path, check=False)
    assert proc.returncode != 0
    assert not (tmp_path / "X").exists()


RUN = "hg113m_conv"


def test_changing_evaluation_settings_does_not_rerun_training(tmp_path):
    """After the run config was written for real, an evaluation-, long-context-, decode- or
    results-only change plans no training and no new run config; the train command is unchanged.
    A change of training's evaluation, logging or checkpoint settings, or of the validation sets,
    rewrites the run config but retrains nothing; a learning-rate change retrains."""
    before = _config(tmp_path, "before.yaml")
    after = _config(tmp_path, "after.yaml",
                    eval={"tasks": ["heldout", "piqa"], "batch_size": 4, "heldout_examples": 50,
                          "ppl_max_instances": 8},
                    longctx={"ruler_samples": 2}, decode={"lengths": [1024]})
    # The default corpus' outputs stand in (training is not run); the run config job runs for real.
    corpus = tmp_path / "work" / "default" / "data" / "corpus"
    for rel in ["train/manifest.json", "tokenizer.json",
                *[f"val/{v}/manifest.json" for v in ("default_web", "default_code", "default_sci", "default_wiki")]]:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text("{}")
    run_config = tmp_path / "work" / "default" / "runs" / RUN / "run_config.json"
    weights = run_config.with_name("weights_config.json")
    snakemake_here(["--configfile", str(before), "--cores", "1",
                *(str(p.relative_to(tmp_path)) for p in (run_config, weights))], tmp_path)
    assert set(json.loads(run_config.read_text())) == {
        "name", "experiment", "scale", "arch", "model", "train", "validation_dirs", "hash"}
    model = run_config.parent / "final" / "model.safetensors"
    model.parent.mkdir(parents=True)
    time.sleep(1)  # the model is newer than its inputs, as a finished training leaves it
    model.write_text("stand-in")

    def planned(config):
        out = snakemake_here(["--configfile", str(config), "-n", f"run_{RUN}"], tmp_path).stdout
        stats = out.split("Job stats:")[1].split("Reasons:")[0]
        return stats, {line.split()[0] for line in stats.splitlines()[3:]
                       if line.strip() and line.split()[0] != "total"}

    stats, jobs = planned(after)
    assert "eval_ppl" in jobs and "downstream" in jobs, stats
    assert not jobs & {"train", "run_config", "default_corpus"}, stats
    # Training's own evaluation, logging and checkpoint settings and the held-out sets it scores:
    # the trainer's run config is rewritten, the weights' part is not, and nothing retrains.
    neutral = _config(tmp_path, "neutral.yaml", data={"validation_sets": ["default_web"]},
                      runs={RUN: {"train": {"eval_every": 2048, "eval_max_instances": 3,
                                            "log_every": 1, "checkpoint_every": 7, "keep_last": 5}}})
    stats, jobs = planned(neutral)
    assert "run_config" in jobs and not jobs & {"train", "weights_config"}, stats
    snakemake_here(["--configfile", str(neutral), "--cores", "1", str(run_config.relative_to(tmp_path))],
               tmp_path)
    written = json.loads(run_config.read_text())
    assert written["train"]["log_every"] == 1 and len(written["validation_dirs"]) == 1
    stats, jobs = planned(neutral)  # the rewritten run config is no reason to retrain either
    assert not jobs & {"train", "weights_config", "run_config"}, stats
    # and a setting that changes the weights does retrain
    stats, jobs = planned(_config(tmp_path, "lr.yaml", runs={RUN: {"train": {"lr": 1.0e-3}}}))
    assert {"train", "weights_config", "run_config"} <= jobs, stats

    def train_command(config):
        out = snakemake_here(["--configfile", str(config), "-n", "-p", "--forcerun", "train",
                          str(model.relative_to(tmp_path))], tmp_path).stdout
        # the same commands; a dry run's order of independent jobs is not part of the plan
        return sorted(line for line in out.splitlines() if line.startswith("Shell command:") and " train " in line)

    assert train_command(before) == train_command(after) != []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_sigterm_to_snakemake_reaches_running_jobs(tmp_path, sig):
    """Snakemake alone waits for running jobs on SIGTERM (and kills them on SIGINT); the
    workflow forwards either to them as SIGTERM, so a trainer checkpoints."""
    (tmp_path / "Snakefile").write_text(
        f'include: "{ROOT}/workflow/rules/signals.smk"\n\n\n'
        "rule slow:\n"
        '    output:\n        "done.txt",\n'
        "    shell:\n"
        "        \"trap 'touch got-term; exit 143' TERM; touch started; sleep 120 & wait; touch {output:q}\"\n")
    proc = subprocess.Popen([SNAKEMAKE, "--cores", "1"], cwd=tmp_path, env=user_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)
        started = time.monotonic()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) != 0
        assert (tmp_path / "got-term").exists() and time.monotonic() - started < 60
        assert not (tmp_path / "done.txt").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_rules_are_formatted_as_snakefmt_writes_them():
    proc = subprocess.run([str(VENV_BIN / "snakefmt"), "--check", *map(str, RULE_FILES)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The two kinds of item `snakemake --lint` may still report, each justified in the Snakefile.
JUSTIFIED_LINTS = {
    "Specify a conda environment or container for each rule.": "one environment",
    "Mixed rules and functions in same snakefile.": "input functions",
}


def lint_titles(text):
    """{lint title: [rule or snakefile it is about]} from `snakemake --lint` output."""
    titles, item = {}, None
    for line in text.splitlines():
        if line.startswith("Lints for "):
            item = line.removeprefix("Lints for ").rstrip(":")
        elif line.startswith("    * "):
            titles.setdefault(line.removeprefix("    * ").rstrip(":"), []).append(item)
    return titles


def test_snakemake_lint_reports_only_justified_items():
    snakefile = (ROOT / "Snakefile").read_text()
    for config, env in (("default.yaml", {}), ("paper.yaml", {"SHAPELM_ALLOW_MISSING_INPUTS": "1"})):
        proc = subprocess.run([SNAKEMAKE, "--lint", "--configfile", f"configs/{config}"], check=False,
                              cwd=ROOT, env=user_env(**env), capture_output=True, text=True, timeout=300)
        titles = lint_titles(proc.stdout + proc.stderr)
        assert proc.returncode == 0 or titles, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert not {t: items for t, items in titles.items() if t not in JUSTIFIED_LINTS}, config
    for title, reason in JUSTIFIED_LINTS.items():
        assert title.rstrip(".") in snakefile and reason in snakefile


def test_a_table_reading_the_decode_benchmark_waits_for_it(tmp_path):
    # tapered_decode's rows are the decode benchmark's: its target must run the benchmark first.
    proc = snakemake_here(["table_tapered_decode", "--configfile", str(ROOT / "configs" / "default.yaml"), "-n",
                       "--quiet", "rules"], tmp_path)
    jobs = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert {"table_tapered_decode", "decode_bench", "decode_pair"} <= jobs, proc.stdout


def test_the_depth_analyses_run_for_every_seed_of_the_runs_listing_their_table(tmp_path):
    # configs/field.yaml lists depth_analyses on each of its four runs (two seeds each): the
    # table's target plans one depth job per seed, writing results/field/runs/RUN/depth.json.
    from shapelm.plan.build import load_plan

    proc = snakemake_here(["table_depth_analyses", "--configfile", str(ROOT / "configs" / "field.yaml"), "-n"],
                          tmp_path)
    outputs = {line.split()[-1] for line in proc.stdout.splitlines() if line.strip().startswith("output:")}
    planned = {p for p in outputs if p.endswith("/depth.json")}
    assert planned == {f"results/field/runs/{run}/depth.json" for run in load_plan("configs/field.yaml").runs}
    assert len(planned) == 8, proc.stdout[-3000:]


@pytest.mark.parametrize(("holder_args", "unlocked"), [
    (["-n"], True), (["--dry-run"], True), (["-np", "--cores", "1"], True),
    (["--cores", "1"], False)])
def test_make_unlock_ignores_dry_runs_but_not_a_real_holder(tmp_path, holder_args, unlocked):
    """`make demo`'s unlock: a stale lock is removed unless a Snakemake that can hold it runs in
    the directory; a dry run (which takes no lock) does not keep it."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    fake = venv / "snakemake"  # the holder's stand-in, and what `--unlock` runs
    fake.write_text('#!/bin/sh\ncase "$1" in --unlock) rm -f .snakemake/locks/*;; *) sleep 60;; esac\n')
    fake.chmod(0o755)
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("")
    holder = subprocess.Popen([str(fake), *holder_args], cwd=tmp_path)
    try:
        time.sleep(0.3)
        proc = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(tmp_path),
                               f"VENV={tmp_path / 'venv'}", "unlock"], capture_output=True,
                              text=True, timeout=60, check=False)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    assert (not any((tmp_path / ".snakemake" / "locks").iterdir())) == unlocked, proc.stdout
    assert ("leaving its lock" in proc.stdout) != unlocked


@pytest.mark.parametrize(("code", "attempts"), [(2, 1), (143, 3)])
def test_a_refused_job_is_not_retried_a_preempted_one_is(tmp_path, code, attempts):
    """The train rules' command (jobs.not_retried_when_refused) under `retries: 2`: exit 2 (a
    refusal: recipe mismatch, run locked, bad data) runs once and the retries exit at once,
    naming the refusal; exit 143 (preempted) is retried. A new invocation runs it again."""
    (tmp_path / "Snakefile").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from shapelm.plan import jobs\n\n"
        "jobs.workflow_run_id()\n\n\n"
        "rule job:\n"
        '    output:\n        "done.txt",\n'
        '    log:\n        "job.log",\n'
        "    retries: 2\n"
        "    shell:\n"
        f"        jobs.not_retried_when_refused(\"echo x >> attempts; echo 'shapelm train: error: "
        f"locked by pid 7' > {{log:q}}; exit {code}\", '.refused', '{{log:q}}')\n")
    env = {k: v for k, v in user_env().items() if k != "SHAPELM_WORKFLOW_RUN"}
    for invocation in (1, 2):
        proc = subprocess.run([SNAKEMAKE, "--cores", "1"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode != 0
        assert (tmp_path / "attempts").read_text().count("x") == attempts * invocation
    if code == 2:
        assert (tmp_path / "job.log").read_text() == (
            "not retried: the previous attempt was refused: "
            "shapelm train: error: locked by pid 7\n")


def test_a_refused_job_never_overwrites_the_running_job_s_log(tmp_path):
    """Two Snakemake runs on one directory: Snakemake deletes a job's declared log before running
    it, so a job refused because another trainer holds the run would wipe the running one's log.
    The train rules' command (jobs.logged_per_attempt) logs each attempt to a file of its own,
    the declared log a symlink to it: the refused job removes only the symlink."""
    (tmp_path / "Snakefile").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from shapelm.plan import jobs\n\n\n"
        "rule job:\n"
        '    output:\n        "done.txt",\n'
        '    log:\n        "logs/train.log",\n'
        "    shell:\n"
        "        jobs.not_retried_when_refused(jobs.logged_per_attempt(\"echo 'shapelm train: error: "
        "run locked by pid 7'; exit 2\", '{log:q}'), '.refused', '{log:q}')\n")
    running = tmp_path / "logs" / "train.log.attempts" / "20260101T000000Z-7.log"
    running.parent.mkdir(parents=True)
    running.write_text("== attempt started ==\nstep 100 loss 3.2\n")
    (tmp_path / "logs" / "train.log").symlink_to(running.relative_to(tmp_path / "logs"))
    env = {k: v for k, v in user_env().items() if k != "SHAPELM_WORKFLOW_RUN"}
    proc = subprocess.run([SNAKEMAKE, "--cores", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert running.read_text() == "== attempt started ==\nstep 100 loss 3.2\n"  # untouched
    attempts = sorted(running.parent.iterdir())
    assert len(attempts) == 2
    log = tmp_path / "logs" / "train.log"
    assert log.is_symlink() and log.resolve() == (attempts[1] if attempts[0] == running else attempts[0]).resolve()
    text = log.read_text()
    assert text.startswith("== attempt started ") and text.endswith("shapelm train: error: run locked by pid 7\n")
    assert "run locked by pid 7" in (tmp_path / ".refused").read_text()
