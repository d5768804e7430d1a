"""The model-reading wing is one package with one loader (CONTRIBUTING's map): the kinds of model
are listed once (`treernn.models.kinds`), every command reads a model through the loading ladder
(`treernn.models.load`), and `treernn.api` re-exports the public names without implementing them."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.unit.test_import_graph import MODULES, imports_of
from treernn.models import kinds

KIND_NAMES = {"language_model", "classifier", "dependency_lm"}
#: the functions that read a model from its files: only the ladder may call them
READERS = {"load_trained", "require_task", "load_export", "read_checkpoint", "load_data", "_load"}


def constant_keys(node: ast.Dict) -> set[str]:
    return {key.value for key in node.keys if isinstance(key, ast.Constant)}


def kind_tables(name: str) -> list[int]:
    """The lines of module ``name`` where a dict literal is keyed by every kind of model."""
    tree = ast.parse(MODULES[name].read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict) and constant_keys(node) >= KIND_NAMES
    ]


def test_the_checker_sees_a_kind_table():
    assert kind_tables("treernn.models.kinds") != []


def test_the_kinds_of_model_are_listed_once():
    found = {name: lines for name in MODULES if (lines := kind_tables(name))}
    assert list(found) == ["treernn.models.kinds"], found
    assert len(found["treernn.models.kinds"]) == 1
    assert set(kinds.KINDS) == KIND_NAMES


def test_each_kind_names_its_task_and_its_public_class():
    import treernn.api

    for name, kind in kinds.KINDS.items():
        model = kinds.model_class(name)
        assert getattr(treernn.api, model.__name__) is model
        assert kinds.kind_of_model(model) == name
        task = kinds.task_class(name)
        assert f"{task.__module__}.{task.__qualname__}" == kind.task
        assert task.__module__.startswith("treernn.tasks.")
    assert kinds.kind_of_model(treernn.api.Model) is None


def imported_names(name: str) -> set[str]:
    tree = ast.parse(MODULES[name].read_text())
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


COMMANDS = sorted(name for name in MODULES if name.startswith("treernn.commands."))


@pytest.mark.parametrize("name", COMMANDS)
def test_commands_read_models_through_the_ladder_only(name):
    wing = {m for m in imports_of(name) if m.startswith("treernn.models")}
    # the ladder reads; the export module writes what `export` hands it
    assert wing <= {"treernn.models.load", "treernn.models.export"}, name
    assert "treernn.api" not in imports_of(name), name
    assert not imported_names(name) & (READERS | {"inspect_checkpoint"}), name


def test_nothing_outside_the_wing_reads_a_model_for_use():
    outside = [name for name in MODULES if not name.startswith("treernn.models")]
    for name in outside:
        taken = imported_names(name) & {"load_trained", "require_task", "load_export"}
        assert not taken, (name, taken)


def test_the_api_is_a_face_that_defines_nothing():
    tree = ast.parse(MODULES["treernn.api"].read_text())
    defined = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
    ]
    assert defined == []
    api = importlib.import_module("treernn.api")
    from treernn.models import load, model

    assert api.load is load.load
    for public in api.__all__:
        assert getattr(api, public) is getattr(load if public == "load" else model, public)
