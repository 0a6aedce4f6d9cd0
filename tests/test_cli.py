"""`shapelm`'s front end: the command table, and a help listing that imports no stage."""

import argparse
import subprocess
import sys

from shapelm.cli import COMMANDS, build_parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help for a in sub._choices_actions}


def test_the_command_table_is_what_the_modules_register():
    # every module imported: the table `shapelm --help` prints must name each command and its help
    assert _commands(build_parser()) == {name: help_text for name, (_, help_text) in COMMANDS.items()}
    for name, (module, _) in COMMANDS.items():  # and a command's parser is its own module's
        parser = build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert sub.choices[name].add_help, (name, module)


def test_help_lists_the_commands_without_importing_a_stage():
    code = ("import sys; from shapelm.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'numpy', 'lm_eval', 'shapelm.model') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "fetch" in out and "rehearse" in out
    assert out.strip().splitlines()[-1] == "IMPORTED []"


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, (*path, name))
        elif action.dest != "help":
            yield " ".join(path), action, parser


def test_every_option_has_help_and_shows_its_default():
    missing = [(cmd, action.option_strings or action.dest) for cmd, action, _ in _options(build_parser())
               if not action.help]
    assert missing == []
    shown = {(cmd, action.dest): parser.formatter_class(cmd)._get_help_string(action)
             for cmd, action, parser in _options(build_parser())}
    assert shown[("longctx finetune", "steps")].endswith("(default: %(default)s)")
    assert "default" not in shown[("fetch", "revision")].replace("(default: main)", "")  # None: nothing added
