"""Without an extra, what needs it says in one line what to install; a module missing for any
other reason keeps its traceback. And the help names the program as the user typed it."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from treernn import extras, train_entry
from treernn.commands import build_parser, main, plain_text
from treernn.extras import MissingExtraError
from treernn.invocation import commands_name, trainer_name
from treernn.models import trust


def without(monkeypatch, *missing: str) -> None:
    """Make the packages ``missing`` unimportable, as in an install without their extra."""
    real = importlib.import_module

    def import_module(name, package=None):
        if name.partition(".")[0] in missing:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.partition(".")[0])
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    for name in list(sys.modules):
        if name.partition(".")[0] in missing:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Blocker(missing), *sys.meta_path])


class Blocker:
    def __init__(self, missing: tuple[str, ...]) -> None:
        self.missing = missing

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.missing:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch):
    without(monkeypatch, "hydra")
    with pytest.raises(MissingExtraError) as raised:
        extras.require("hydra.utils", "rebuilding a model from a checkpoint")
    assert str(raised.value) == (
        "rebuilding a model from a checkpoint needs hydra-core, which is not installed: "
        'pip install "treernn[train]"'
    )


def test_a_package_that_lacks_a_module_of_its_own_keeps_its_traceback(monkeypatch):
    # hydra is there but what it imports is not: a broken install, not a missing extra
    def import_module(name, package=None):
        raise ModuleNotFoundError("No module named 'antlr4'", name="antlr4")

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError) as raised:
        extras.require("hydra", "training")
    assert not isinstance(raised.value, MissingExtraError)
    error = ModuleNotFoundError("No module named 'antlr4'", name="antlr4")
    assert extras.missing_extra(error, "x") is None


def test_training_without_the_train_extra_says_what_to_install(monkeypatch):
    without(monkeypatch, "hydra", "omegaconf")
    monkeypatch.setattr(sys, "argv", ["/venv/bin/treernn-train", "task=ptb"])
    with pytest.raises(SystemExit) as raised:
        train_entry.main()
    assert raised.value.code == (
        "error: training (treernn-train) needs hydra-core, which is not installed: "
        'pip install "treernn[train]"'
    )


def test_a_command_that_needs_the_train_extra_is_one_line(monkeypatch, capsys):
    real = importlib.import_module

    def import_module(name, package=None):
        if name == "treernn.commands.sweep":  # as in an install without OmegaConf
            raise ModuleNotFoundError("No module named 'omegaconf'", name="omegaconf")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/treernn", "sweep", "--help"])
    assert main(["sweep", "--help"]) == 1
    assert capsys.readouterr().err.strip() == (
        'error: treernn sweep needs omegaconf, which is not installed: pip install "treernn[train]"'
    )


def test_an_export_whose_class_needs_a_missing_extra_says_so(monkeypatch):
    real = importlib.import_module

    def import_module(name, package=None):
        if name == "mypkg_models.encoder":  # the module exists and imports scipy
            raise ModuleNotFoundError("No module named 'scipy'", name="scipy")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(MissingExtraError, match=r"mypkg_models.encoder.Enc needs scipy.*\[train\]"):
        trust.import_trusted("mypkg_models.encoder.Enc", ("mypkg_models.",))
    # a module that is not there at all is a class that does not exist
    with pytest.raises(trust.UntrustedClass) as raised:
        trust.import_trusted("treernn.encoders.nothing_here.Enc", ("treernn.",))
    assert raised.value.why == "missing"


# ----------------------------------------------------------------------------- help texts
@pytest.mark.parametrize(
    ("argv0", "main_module", "commands", "trainer"),
    [
        ("/venv/bin/treernn", None, "treernn", "treernn-train"),
        ("/venv/bin/treernn-train", None, "treernn", "treernn-train"),
        ("/x/src/treernn/__main__.py", "treernn.__main__", "python -m treernn", "treernn-train"),
        ("train.py", None, "treernn", "python train.py"),
        ("/work/main/train.py", None, "treernn", "python /work/main/train.py"),
        ("/x/treernn/train_entry.py", "treernn.train_entry", "treernn", "python -m "
         "treernn.train_entry"),
    ],
)  # fmt: skip
def test_the_program_is_named_as_typed(monkeypatch, argv0, main_module, commands, trainer):
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    fake_main = types.ModuleType("__main__")
    fake_main.__spec__ = importlib.machinery.ModuleSpec(main_module, None) if main_module else None
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    assert commands_name() == commands and trainer_name() == trainer


def test_help_names_the_program_as_typed_and_has_no_markup(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/treernn", "export", "--help"])
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: treernn export [-h] --ckpt CKPT --out OUT")
    assert "treernn export: a trained model as a directory" in text
    assert "python -m treernn" not in text and "`" not in text
    assert (
        build_parser(prog="python -m treernn").format_usage().startswith("usage: python -m treernn")
    )
    assert plain_text("``--out`` and `treernn.load` (:func:`x.y`)", "treernn") == (
        "--out and treernn.load (x.y)"
    )
