"""Config files read strictly before Snakemake evaluates them (no code runs from a config).

Snakemake reads every `--configfile` while it parses its command line, before the Snakefile (and
so anything the workflow could check) runs, with YTE: a file setting `__use_yte__: true` has its
`?expr` values and `__definitions__` evaluated as Python. This module replaces that loader, in
the environment that runs the workflow, by shapelm's strict one (`shapelm.config.load_yaml`:
plain data, safe YAML, duplicate keys and YTE templates refused, alias expansion bounded), so a
template ends Snakemake with one `shapelm: error:` line before any of it is evaluated.

It takes effect through a `.pth` file in the environment's site-packages (`make env` writes it;
`python -m shapelm.commands.yte_guard install` elsewhere, e.g. a conda environment): Python runs it at
start-up, and it only registers an import hook, which patches Snakemake's config loader when
Snakemake imports it (other programs pay one list insertion). The workflow checks that the guard
is active (`workflow_check`) and refuses to plan without it, naming the command above.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import sysconfig
from pathlib import Path
from typing import Any

#: The module whose loader Snakemake uses for --configfile, `configfile:` and --unlock alike.
TARGET = "snakemake.common.configfile"
PTH_NAME = "shapelm-yte-guard.pth"
PTH_LINE = "import shapelm.commands.yte_guard as guard; guard.register()\n"
#: Set on the patched loader, so the workflow can tell that the guard is active.
MARK = "_shapelm_strict"


def strict_configfile(original):
    """Snakemake's `_load_configfile`, with config files read by shapelm's strict loader."""

    def load(configpath_or_obj: Any, filetype: str = "Config"):
        if filetype != "Config" or not isinstance(configpath_or_obj, (str, Path)):
            return original(configpath_or_obj, filetype)
        from shapelm.config import load_yaml
        from shapelm.errors import ConfigError

        try:
            return load_yaml(configpath_or_obj)
        except ConfigError as err:  # Snakemake would print a traceback for anything but this
            raise SystemExit(f"shapelm: error: {err}") from None

    setattr(load, MARK, True)
    return load


def patch(module: Any) -> None:
    if not getattr(module._load_configfile, MARK, False):
        module._load_configfile = strict_configfile(module._load_configfile)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when Snakemake's config module is imported, wraps its loader."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def register() -> None:
    """Patch Snakemake's config loader now if it is imported, else as soon as it is."""
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def active() -> bool:
    """Whether Snakemake's config files go through the strict loader in this process."""
    module = sys.modules.get(TARGET)
    return module is not None and getattr(module._load_configfile, MARK, False)


def workflow_check() -> None:
    """In the Snakefile: refuse to plan where the guard was not installed (its config files were
    then read with YTE)."""
    if not active():
        raise SystemExit(
            "shapelm: error: this environment reads Snakemake config files without shapelm's strict "
            f"loader (YTE templates would run as code): run `{Path(sys.executable).name} -m "
            "shapelm.commands.yte_guard install` (make env does), then Snakemake again")


def install(site_packages: str | None = None) -> Path:
    """Write the start-up hook into this environment's site-packages."""
    from shapelm import files  # here, not at the top: the start-up hook imports this module

    return files.write_text(Path(site_packages or sysconfig.get_paths()["purelib"]) / PTH_NAME, PTH_LINE)


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m shapelm.commands.yte_guard install")
    print(f"wrote {install()}")
