"""The one thing pyproject.toml cannot say: the wheel carries shapelm's start-up hook
(`shapelm-yte-guard.pth`, shapelm.commands.yte_guard) at its root, so `pip install .` puts it in
site-packages and Snakemake reads config files with shapelm's strict loader there too, before
a YTE template could run. Everything else is in pyproject.toml."""

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The hook's file name and line, from the guard module itself (standard library only, so it
# runs here without the package's dependencies).
_GUARD = runpy.run_path(str(Path(__file__).resolve().parent / "src" / "shapelm" / "commands" / "yte_guard.py"))
PTH_NAME, PTH_LINE = _GUARD["PTH_NAME"], _GUARD["PTH_LINE"]


class BuildPyWithGuard(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / PTH_NAME
        target.write_text(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_NAME)]


setup(cmdclass={"build_py": BuildPyWithGuard})
