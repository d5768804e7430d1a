"""Packaging step that pyproject.toml cannot state: the Hydra configs travel inside the wheel.

``conf/`` at the repository root stays the one copy of the configs (``python train.py`` in a clone
reads it there); building a wheel copies its yaml files into ``treernn/conf`` of the package, which
``treernn-train`` (:mod:`treernn.train_entry`) reads when treernn is installed from the wheel.
Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithConfigs(build_py):
    """``build_py`` plus ``conf/**/*.yaml`` copied to ``<build>/treernn/conf``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads conf/ from the checkout
        target = Path(self.build_lib) / "treernn" / "conf"
        for source in sorted((ROOT / "conf").rglob("*.yaml")):
            destination = target / source.relative_to(ROOT / "conf")
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)


setup(cmdclass={"build_py": BuildWithConfigs})
