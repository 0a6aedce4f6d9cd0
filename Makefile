# shapelm: `make test` and `make demo` create the environment on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU torch wheel lies here on the project's machines; elsewhere uv takes it from PyTorch's CPU index.
WHEELS ?= /opt/wheels
TORCH_SOURCE := $(if $(wildcard $(WHEELS)/torch-*),--find-links $(WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
CORES ?= 2
CONFIG ?= configs/default.yaml
PYTEST_ARGS ?=
# This machine sets PYTHONDONTWRITEBYTECODE, which makes every process recompile torch (~20 s).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: env test test-slow demo field compare dry-run cost lock bench clean-demo rehearse adopt-trained unlock check-reproduce

env: $(VENV)/.installed $(VENV)/.yte-guard

$(VENV)/.installed: pyproject.toml requirements.lock
	@command -v uv >/dev/null 2>&1 || python3 -m pip install -q uv
	uv venv -q --allow-existing --python 3.11 $(VENV)
	VIRTUAL_ENV=$(VENV) uv pip install -q $(TORCH_SOURCE) -r requirements.lock
	VIRTUAL_ENV=$(VENV) uv pip install -q --no-deps -e .
	@touch $@

# Snakemake's config files read by shapelm's strict loader: YTE templates never run (shapelm.commands.yte_guard).
$(VENV)/.yte-guard: $(VENV)/.installed src/shapelm/commands/yte_guard.py
	$(PY) -c 'import shapelm.commands.yte_guard as guard; print("wrote", guard.install())'
	@touch $@

# Unit and integration tests (under 10 minutes on 2 cores); the slow end-to-end runs are in .ci/run.
# One pytest worker per core, a test file per worker (its module fixtures are built once).
test: env
	$(VENV)/bin/lint-imports  # the layers of pyproject.toml's [tool.importlinter]
	$(PY) -m pytest -m "not slow" -q -n $(CORES) --dist loadfile $(PYTEST_ARGS)

test-slow: env
	$(PY) -m pytest -m slow -q $(PYTEST_ARGS)

# A killed run leaves Snakemake's lock behind: remove it, but only when no Snakemake process
# that can hold it works in this directory (one that does holds the lock rightly, and Snakemake
# then refuses to start a second). A dry run (-n, --dry-run, -n among short flags such as -np),
# --nolock and --unlock take no lock: they do not count. Incomplete outputs of the killed jobs
# are rerun (--rerun-incomplete); training resumes from its checkpoints.
define unlock_if_idle
if [ -n "$$(ls -A .snakemake/locks 2>/dev/null)" ]; then \
  for p in /proc/[0-9]*; do \
    [ "$$(readlink $$p/cwd 2>/dev/null)" = "$(CURDIR)" ] || continue; \
    [ "$${p#/proc/}" = "$$$$" ] && continue; \
    tr '\0' '\n' < $$p/cmdline 2>/dev/null | head -3 | grep -Eq '(^|/)snakemake$$' || continue; \
    if tr '\0' '\n' < $$p/cmdline 2>/dev/null | grep -Eqx -- '-n|--dry-?run|--nolock|--unlock|-[a-zA-Z]*n[a-zA-Z]*'; then \
      continue; \
    fi; \
    echo "Snakemake is running in $(CURDIR) (pid $${p#/proc/}): leaving its lock"; exit 0; \
  done; \
  $(VENV)/bin/snakemake --unlock --configfile $(CONFIG) >/dev/null && echo "removed the lock of a killed run"; \
fi
endef

# Remove the lock of a killed run (as `make demo` does first).
unlock:
	@$(unlock_if_idle)

# Did this machine reproduce the committed numbers? `shapelm results compare` of the new tree
# with git HEAD's: runs whose provenance (code, data, initial weights, numerics) is the committed
# one must give the same bits; others are judged against seed noise (docs/TRAINING.md,
# "Reproducibility"). The cells that differ are in logs/EXP/compare.txt. Reported, not fatal:
# the outputs are still the run's.
define compare_with_committed
exp="$$($(PY) -c "import yaml; print(yaml.safe_load(open('$(CONFIG)'))['name'])")"; \
mkdir -p "logs/$$exp"; \
if $(VENV)/bin/shapelm results compare "results/$$exp" > "logs/$$exp/compare.txt" 2>&1; \
then echo "results/$$exp reproduces the committed numbers: $$(tail -n 1 logs/$$exp/compare.txt)"; \
else echo "results/$$exp differs from the committed numbers (logs/$$exp/compare.txt): $$(tail -n 1 logs/$$exp/compare.txt)"; fi
endef

# The whole DAG at tiny scale on the embedded corpus: every table and figure, on CPU. Beside it,
# as a second Snakemake process (its own experiment, disjoint outputs, its log in
# logs/field/snakemake.log), the field's newer shapes against their uniform baseline at equal
# parameters (FIELD, configs/field.yaml: results/field and paper_figures/field; FIELD= leaves it
# out), and the paper's analytic build: every paper table with its shape, parameter and FLOP
# checks beside the printed values, filled from configs/paper.yaml alone (metrics pending until
# runs exist). Run side by side, each fills the other's idle core: the default's DAG starts and
# ends with one job at a time (the corpus, the tables). The `run:` jobs only write small JSON
# files: with --force-use-threads they run in Snakemake's own process rather than each in a new
# one that reads the workflow again.
FIELD ?= configs/field.yaml
SNAKEMAKE_HERE = $(VENV)/bin/snakemake --cores $(CORES) --printshellcmds --rerun-incomplete --force-use-threads
demo: env
	@$(unlock_if_idle)
	@set -u; pids=""; \
	if [ -n "$(FIELD)" ]; then \
	  mkdir -p logs/field; echo "the field's shapes ($(FIELD)) run beside it: logs/field/snakemake.log"; \
	  $(SNAKEMAKE_HERE) --configfile $(FIELD) > logs/field/snakemake.log 2>&1 & pids="$$pids $$!"; \
	fi; \
	mkdir -p logs/paper; \
	$(VENV)/bin/shapelm results build configs/paper.yaml --results-dir results/paper \
	  --figures-dir paper_figures/paper --work-dir work/paper > logs/paper/results.log 2>&1 & pids="$$pids $$!"; \
	rc=0; $(SNAKEMAKE_HERE) --configfile $(CONFIG) || rc=$$?; \
	for pid in $$pids; do wait $$pid || rc=$$?; done; \
	if [ -n "$(FIELD)" ]; then tail -n 3 logs/field/snakemake.log; fi; tail -n 1 logs/paper/results.log; \
	exit $$rc
	@$(compare_with_committed)
	@if [ -n "$(FIELD)" ]; then $(MAKE) --no-print-directory compare CONFIG=$(FIELD); fi

# The field's shapes alone (what `make demo` runs beside the default's DAG).
field: env
	$(SNAKEMAKE_HERE) --configfile $(or $(FIELD),configs/field.yaml)

# Did this tree reproduce the committed numbers of CONFIG's experiment (see compare_with_committed)?
compare: env
	@$(compare_with_committed)

# Does this machine compute the committed numbers bit for bit? In a scratch copy of the tree:
# the tiny corpus and one tiny run (REPRO_RUN) from nothing, its held-out PPL and provenance,
# then `shapelm results compare` with the committed results/default (same provenance: exact).
REPRO_RUN ?= hg113m_conv
check-reproduce: env
	@d="$$(mktemp -d)"; trap 'rm -rf "$$d"' EXIT; \
	git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$$d"; \
	ln -s "$(CURDIR)/$(VENV)" "$$d/.venv"; \
	rm -rf "$$d/results/default/runs/$(REPRO_RUN)"; \
	cd "$$d" && .venv/bin/snakemake --cores 1 --quiet --configfile configs/default.yaml -- \
		results/default/runs/$(REPRO_RUN)/ppl.json results/default/runs/$(REPRO_RUN)/provenance.json \
		&& .venv/bin/shapelm results compare --exact results/default "$(CURDIR)/results/default"

# Runs trained before the config hash left out the settings that do not change the weights
# (README): write their run_config.json and weights_config.json, then (a second invocation:
# Snakemake does not look at a train job whose run config is being rewritten) mark their models
# current (--touch records the new rules' provenance); nothing is trained. Run it once after
# upgrading, before any other change to the runs: a change made meanwhile would be marked
# current too.
adopt-trained: env
	@targets="$$($(PY) -c "from pathlib import Path; from shapelm.plan.experiment import load_experiment as l; e = l('$(CONFIG)'); print(' '.join(p for n in e.runs if Path(p := f'work/{e.name}/runs/{n}/final/model.safetensors').is_file()))")"; \
	if [ -z "$$targets" ]; then echo "no trained run in $(CONFIG)"; exit 0; fi; \
	$(VENV)/bin/snakemake --cores 1 --configfile $(CONFIG) --allowed-rules run_config weights_config -- $${targets//final\/model.safetensors/weights_config.json} $${targets//final\/model.safetensors/run_config.json} && \
	$(VENV)/bin/snakemake --cores 1 --configfile $(CONFIG) --touch --allowed-rules run_config weights_config train train_segment -- $$targets

# Plan the full paper without running anything.
dry-run: env
	$(VENV)/bin/snakemake --configfile configs/paper.yaml -n --quiet rules

# The paper at CPU size through SLURM: all 74 runs trained, Table 2's pairs evaluated (needs a
# cluster: `bash .ci/gpu-cluster.sh` emulates one here; ~30 min on 2 cores).
rehearse: env
	$(VENV)/bin/shapelm rehearse -- --profile slurm --jobs 24 run_hg113m_conv table_hourglass_table2 \
		$$($(PY) -c "from shapelm.plan.experiment import load_experiment as l; print(' '.join(f'work/rehearsal/runs/{n}/final/model.safetensors' for n in l('configs/paper.yaml').runs))")

# GPU-hours of the three papers, then of the field's shapes at their papers' sizes.
cost: env
	$(VENV)/bin/shapelm cost configs/paper.yaml
	$(VENV)/bin/shapelm cost configs/field-paper.yaml

bench: env
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Re-resolve the pinned lock after editing pyproject.toml dependencies.
lock:
	uv pip compile pyproject.toml --all-extras --find-links $(WHEELS) --python-version 3.11 -o requirements.lock

clean-demo:
	rm -rf work/default results/default paper_figures/default work/field results/field paper_figures/field
