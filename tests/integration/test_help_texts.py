"""``--help`` names the program the way it was typed, through the real entry points: Hydra's
help of the training entry (``python train.py``; ``treernn-train`` is checked from a wheel in
``test_library.py``) and argparse's of the commands (``python -m treernn``)."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.helpers import REPO_ROOT


def help_of(*command: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, *command, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_train_py_help_names_python_train_py():
    lines = help_of("train.py")
    assert lines[0] == "python train.py: train and test a treernn model."
    assert lines[2].startswith("usage: python train.py task=<task> model=<encoder>")
    assert not any("powered by Hydra" in line and "train_entry" in line for line in lines)


def test_python_m_treernn_help_names_python_m_treernn():
    assert help_of("-m", "treernn")[0].startswith("usage: python -m treernn [-h] <command>")
    export = help_of("-m", "treernn", "export")
    assert export[0].startswith("usage: python -m treernn export [-h]")
    assert not any("``" in line for line in export)
