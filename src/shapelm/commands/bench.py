"""`shapelm bench`: the decode benchmark's commands (`shapelm.decode.cli`), its runs looked up in
the plan. `--config` is a plan document (work/EXP/plan.json, what the `decode_pair` rule passes)
or an experiment config (its plan built in memory); the decode stage receives the resolved run
configs and loads no experiment itself."""

from __future__ import annotations

import argparse
from typing import Any

from shapelm.decode import cli as decode_cli
from shapelm.errors import ConfigError


def run_configs(source: str, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(name, resolved run config) of each of `names`, from the plan of `source`."""
    from shapelm.plan.build import load_plan

    plan = load_plan(source)
    missing = [name for name in names if name not in plan.runs]
    if missing:
        raise ConfigError(f"--runs: {', '.join(missing)} not in the runs of {plan.name} ({source})")
    return [(name, plan.runs[name]) for name in names]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    decode_cli.add_commands(subparsers, run_configs=run_configs)
