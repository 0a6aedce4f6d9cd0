"""`shapelm <command>`: the entry points the Snakemake rules call.

Each stage module registers its own subcommands through `add_commands(subparsers)`; this file
only lists the modules. A `ShapelmError` is printed as one clear line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from shapelm.errors import ShapelmError

# Modules that provide `add_commands(subparsers)`, in the order they appear in --help.
COMMAND_MODULES = [
    "shapelm.shapes_cli",
    "shapelm.data.cli",
    "shapelm.train.cli",
    "shapelm.evaluation.cli",
    "shapelm.longctx.cli",
    "shapelm.analysis.cli",
    "shapelm.decode.cli",
    "shapelm.results.cli",
    "shapelm.workflow_cli",
    "shapelm.recipe_diff",
    "shapelm.launch",
    "shapelm.slurm_check",
    "shapelm.rehearsal",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shapelm", description="Experiments on the shape of Transformer language models."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):  # that stage is not in this build yet
                continue
            raise
        register = getattr(module, "add_commands", None) or getattr(module, "add_data_commands", None)
        if register is None:  # a stage module still being written
            continue
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        result = args.func(args)
    except ShapelmError as err:
        print(f"shapelm {args.command}: error: {err}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
