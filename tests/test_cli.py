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


def test_the_core_install_needs_no_extra_and_a_missing_extra_is_named(tmp_path):
    """`pip install .` is the core: with every optional package absent (stand-ins that raise as
    a missing module does), `shapelm --help` and `shapelm shapes` work, and a command that
    needs an extra names it in one line (status 2), never a traceback."""
    import os
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    from shapelm.cli import EXTRAS

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).replace("-", "_").lower()
    assert not [m for m in EXTRAS if m.lower() in core], "an optional package is a core dependency"
    extras = project["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert any(module.replace("_", "-") in d.replace("_", "-").lower() for d in extras[extra]), (module, extra)
    absent = tmp_path / "absent"
    for module in EXTRAS:
        (absent / module).mkdir(parents=True)
        (absent / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {module!r}'!r}, name={module!r})\n")
    env = {**os.environ, "PYTHONPATH": str(absent)}
    shapelm = str(Path(sys.executable).with_name("shapelm"))

    def run(*args):
        return subprocess.run([shapelm, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)

    assert run("--help").returncode == 0
    shapes = run("shapes", "configs/default.yaml", "--format", "csv")
    assert shapes.returncode == 0 and "hg113m_conv" in shapes.stdout, shapes.stderr[-2000:]
    build = run("results", "build", "configs/paper.yaml", "--results-dir", str(tmp_path / "r"),
                "--figures-dir", str(tmp_path / "f"), "--work-dir", str(tmp_path / "w"))
    assert build.returncode == 2 and "Traceback" not in build.stderr, build.stderr[-2000:]
    assert build.stderr.strip().splitlines()[-1].startswith("shapelm results: error: this command needs matplotlib")
    assert "pip install 'shapelm[plots]'" in build.stderr
