"""The one thing pyproject.toml cannot say: the wheel carries shapelm's start-up hook
(`shapelm-yte-guard.pth`, shapelm.commands.yte_guard) at its root, so `pip install .` puts it in
site-packages and Snakemake reads config files with shapelm's strict loader there too, before
a YTE template could run. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "shapelm-yte-guard.pth"  # as shapelm.commands.yte_guard names it (a test checks they agree)
PTH_LINE = "import shapelm.commands.yte_guard as guard; guard.register()\n"


class BuildPyWithGuard(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / PTH_NAME
        target.write_text(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_NAME)]


setup(cmdclass={"build_py": BuildPyWithGuard})
