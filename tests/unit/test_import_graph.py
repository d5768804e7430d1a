"""The shape of the package (CONTRIBUTING's map): no import circle between treernn's modules (a
function-level import counts: it is a circle that a reader must untangle all the same), callbacks
built from config and imported by no module outside them, and no command importing another
command."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

from tests.paths import REPO_ROOT

SRC = REPO_ROOT / "src"
PACKAGE = SRC / "treernn"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The treernn modules that module ``name`` imports, anywhere in its body."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from treernn.x import y`: the module treernn.x.y where there is one, else treernn.x
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        found |= {target for target in targets if target in MODULES and target != name}
    return found


def graph() -> nx.DiGraph:
    edges = nx.DiGraph()
    edges.add_nodes_from(MODULES)
    for name in MODULES:
        edges.add_edges_from((name, target) for target in imports_of(name))
    return edges


def test_the_checker_sees_a_circle():
    circle = nx.DiGraph([("a", "b"), ("b", "a"), ("b", "c")])
    assert [sorted(c) for c in nx.simple_cycles(circle)] == [["a", "b"]]
    assert "treernn.lifecycle.plan" in imports_of("treernn.lifecycle.entry")  # a real edge is found


def test_no_import_circles():
    # a package's __init__ importing its own modules is how packages export; leave those edges out
    edges = graph()
    edges.remove_edges_from(
        [(a, b) for a, b in edges.edges if MODULES[a].name == "__init__.py" and b.startswith(a)]
    )
    circles = sorted(sorted(circle) for circle in nx.simple_cycles(edges))
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_callbacks_are_built_from_config_not_imported(name):
    # every callback, the run's built-in ones too, is built by its _target_ (conf/callbacks/,
    # conf/builtin_callbacks/, a task's callbacks)
    if name.startswith("treernn.callbacks"):
        return
    assert not {m for m in imports_of(name) if m.startswith("treernn.callbacks")}, name


def test_no_command_imports_another():
    commands = [name for name in MODULES if name.startswith("treernn.commands.")]
    for name in commands:
        assert not {m for m in imports_of(name) if m in commands and m != name}, name


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


#: (lower, upper): no module of the lower package imports one of the upper. The lifecycle builds
#: callbacks from their config (conf/callbacks/, conf/builtin_callbacks/) and hands a sweep's
#: report to the function conf/hydra/default.yaml names; the commands hand their parsers to the
#: docs' commands page.
NO_TIES_UP = [
    ("treernn.lifecycle", "treernn.callbacks"),
    ("treernn.lifecycle", "treernn.reporting"),
    ("treernn.reporting", "treernn.commands"),
]


@pytest.mark.parametrize(("lower", "upper"), NO_TIES_UP)
def test_no_tie_runs_back_up(lower, upper):
    ties = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if in_package(name, lower)
        for target in imports_of(name)
        if in_package(target, upper)
    )
    assert ties == [], f"{lower} imports {upper}:\n" + "\n".join(ties)


def test_a_tie_up_is_seen(tmp_path, monkeypatch):
    """The check finds a function-level import as it finds one at the top."""
    module = tmp_path / "runner.py"
    module.write_text("def run():\n    from treernn.reporting import table\n")
    monkeypatch.setitem(MODULES, "treernn.lifecycle.runner", module)
    assert imports_of("treernn.lifecycle.runner") == {"treernn.reporting.table"}
    with pytest.raises(AssertionError, match="treernn.lifecycle.runner -> treernn.reporting"):
        test_no_tie_runs_back_up("treernn.lifecycle", "treernn.reporting")


# ----------------------------------------------------------------------------- the kernels' door
KERNELS = "treernn.kernels"
#: the modules that may import the kernels' package (never a submodule of it): the encoders,
#: the run's execution (its kernel context) and its planner (the record check before a resume or
#: a test records anything), and the code that reads and exports models
KERNEL_USERS = ("treernn.encoders.", "treernn.models.")
KERNEL_USERS_NAMED = ("treernn.lifecycle.kernel_context",)


def kernel_imports(name: str) -> tuple[set[str], bool]:
    """The kernels' submodules that module ``name`` imports, and whether it imports the kernels'
    package at all (a submodule's import runs the package too)."""
    found = {m for m in imports_of(name) if m == KERNELS or m.startswith(KERNELS + ".")}
    return found - {KERNELS}, bool(found)


def outside_kernels() -> list[str]:
    return sorted(n for n in MODULES if n != KERNELS and not n.startswith(KERNELS + "."))


def test_the_kernel_check_tells_the_package_from_its_submodules():
    assert kernel_imports("treernn.lifecycle.kernel_context") == (set(), True)
    assert kernel_imports("treernn.lifecycle.execute") == (set(), False)
    assert kernel_imports("treernn.tasks.base") == (set(), False)
    # inside the package a module imports its neighbours: the count is not empty
    assert f"{KERNELS}.gemm" in kernel_imports(f"{KERNELS}.onlstm")[0]


def test_no_module_outside_the_kernels_imports_a_kernels_submodule():
    reaching_in = {n: sorted(kernel_imports(n)[0]) for n in outside_kernels()}
    assert {n: found for n, found in reaching_in.items() if found} == {}


def test_only_the_encoders_the_lifecycles_hook_and_the_model_package_import_the_kernels():
    def allowed(name: str) -> bool:
        return name.startswith(KERNEL_USERS) or name in KERNEL_USERS_NAMED

    users = [n for n in outside_kernels() if kernel_imports(n)[1]]
    assert [n for n in users if not allowed(n)] == []


def contributing_tree() -> set[str]:
    """The modules CONTRIBUTING.md's tree of ``src/treernn/`` names, as paths under it (a line
    such as ``│   ├── plan.py   what ...`` under ``lifecycle/`` is ``lifecycle/plan.py``)."""
    text = (SRC.parent / "CONTRIBUTING.md").read_text()
    block = text.split("```\nsrc/treernn/\n", 1)[1].split("```", 1)[0]
    named, folders = set(), []
    for line in block.splitlines():
        match = re.match(r"^([│ ]*)[├└]── (\S+)", line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match.group(1)) // 4
        folders = folders[:depth]
        name = match.group(2)
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        elif name.endswith(".py"):
            named.add("/".join([*folders, name]))
    return named


def test_contributings_tree_names_every_module_and_no_other():
    modules = {
        str(path.relative_to(SRC / "treernn"))
        for path in (SRC / "treernn").rglob("*.py")
        if path.name != "__init__.py"
    }
    named = contributing_tree()
    assert sorted(modules - named) == [], "modules missing from CONTRIBUTING.md's tree"
    assert sorted(named - modules) == [], "CONTRIBUTING.md's tree names modules that are gone"
