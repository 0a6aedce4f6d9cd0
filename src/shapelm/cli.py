"""`shapelm <command>`: the entry points the Snakemake rules call.

Where a command lives: a stage's own commands in `STAGE/cli.py` (`shapelm.data.cli`,
`shapelm.train.cli`, ...); a command that reads the plan or spans stages in `shapelm.commands`.
Each registers its subcommands through `add_commands(subparsers)`; this file only lists the
modules. A `ShapelmError` is printed as one clear line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from shapelm.errors import ShapelmError
from shapelm.numerics import pin_cpu_numerics

#: The optional dependencies, by the extra that installs them (pyproject.toml): the core
#: (shapes, accounting, solver, model, data, training) needs none of them; a command that does
#: names the extra in one line instead of a traceback. `make env` installs them all.
EXTRAS = {
    "snakemake": "workflow", "snakemake_executor_plugin_slurm": "workflow", "datasets": "workflow",
    "huggingface_hub": "workflow",
    "lm_eval": "eval", "transformers": "eval", "accelerate": "eval", "wonderwords": "eval",
    "matplotlib": "plots",
    "tensorboard": "tracking",
    "torchao": "fp8",
}


def missing_extra(err: ModuleNotFoundError) -> str | None:
    """The extra that installs the module `err` did not find (None: not an optional one)."""
    return EXTRAS.get((err.name or "").split(".")[0])


# Modules that provide `add_commands(subparsers)`, in the order they appear in --help.
COMMAND_MODULES = [
    "shapelm.commands.shapes",
    "shapelm.commands.fetch",
    "shapelm.data.cli",
    "shapelm.train.cli",
    "shapelm.evaluation.cli",
    "shapelm.longctx.cli",
    "shapelm.analysis.cli",
    "shapelm.commands.bench",
    "shapelm.commands.results",
    "shapelm.commands.workflow",
    "shapelm.commands.recipe_diff",
    "shapelm.commands.launch",
    "shapelm.commands.cluster",
    "shapelm.commands.rehearse",
]


#: Every command, the module that registers it and its one-line help: `shapelm --help` and a
#: command's parser import that module alone (the stages import torch, which takes seconds).
#: tests/test_cli.py checks this table against what the modules register.
COMMANDS = {
    "shapes": ("shapelm.commands.shapes", "parameter, FLOP and KV-cache accounting of a config's runs"),
    "solve": ("shapelm.commands.shapes", "find widths that land a shape on a parameter budget"),
    "fetch": ("shapelm.commands.fetch", "download one external input into the local HF cache (the `fetch` jobs)"),
    "data": ("shapelm.data.cli", "token files: OLMo slices, validation sets, corpus"),
    "train": ("shapelm.train.cli", "pretrain one run (resumes from the latest checkpoint in --out)"),
    "eval": ("shapelm.evaluation.cli", "held-out perplexity and downstream tasks"),
    "export-hf": ("shapelm.evaluation.cli", "a Hugging Face model directory from a checkpoint"),
    "longctx": ("shapelm.longctx.cli", "YaRN context extension, Proof-pile PPL, RULER"),
    "analyze": ("shapelm.analysis.cli", "analyses of trained models (layer-wise novelty, depth)"),
    "bench": ("shapelm.commands.bench", "micro-benchmarks (decode latency, ...)"),
    "results": ("shapelm.commands.results", "tables and figures beside the papers' printed values"),
    "resolve": ("shapelm.commands.workflow", "write one run's resolved run config (JSON)"),
    "cost": ("shapelm.commands.workflow", "GPU-hours per table and stage (measured or assumed MFU)"),
    "recipe": ("shapelm.commands.recipe_diff", "the paper's and the released code's training recipes"),
    "launch": ("shapelm.commands.launch", "start one process per GPU (srun in SLURM, else torchrun)"),
    "cluster": ("shapelm.commands.cluster", "checks against the SLURM cluster"),
    "rehearse": ("shapelm.commands.rehearse", "run the paper's DAG at CPU size (inputs made here)"),
}


def _register(sub, name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):  # that stage is not in this build yet
            return
        raise
    register = getattr(module, "add_commands", None) or getattr(module, "add_data_commands", None)
    if register is not None:  # None: a stage module still being written
        register(sub)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help with its default, where it has one (not None, not an off switch)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _with_defaults(parser: argparse.ArgumentParser) -> None:
    """Every (sub-)parser's help shows the defaults: set here, once, not in each stage module."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _with_defaults(child)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command (`command` None), or of the module of `command` alone, with
    the others listed by name and help (what `shapelm --help` needs, no stage imported)."""
    parser = argparse.ArgumentParser(
        prog="shapelm", description="Experiments on the shape of Transformer language models.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command is None:
        for name in COMMAND_MODULES:
            _register(sub, name)
        _with_defaults(parser)
        return parser
    wanted = COMMANDS[command][0] if command in COMMANDS else None
    if wanted:
        _register(sub, wanted)
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_text, add_help=False)
    _with_defaults(parser)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command word of a command line (the first argument not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pin_cpu_numerics()  # before any stage imports torch (shapelm.numerics)
    parser = build_parser(_command_of(argv) or "")  # no command: the list alone
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
        distributed = sys.modules.get("shapelm.train.distributed")  # loaded only by the stages that use it
        return distributed.exit_after_error(2) if distributed else 2
    except ModuleNotFoundError as err:
        extra = missing_extra(err)
        if extra is None:
            raise
        print(f"shapelm {args.command}: error: this command needs {err.name.split('.')[0]}, which is not "
              f"installed: pip install 'shapelm[{extra}]' (or 'shapelm[all]'; make env installs every extra)",
              file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
