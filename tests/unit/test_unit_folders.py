"""Where a unit test lives (CONTRIBUTING "Tests"): ``tests/unit/`` mirrors ``src/treernn/``, so
that whoever touches ``src/treernn/<pkg>/<mod>.py`` finds its tests in ``tests/unit/<pkg>/``. Every
folder under ``tests/unit/`` is a package of ``src/treernn/`` (with an ``__init__.py``: two folders
may hold test files of the same name); a top-level module's tests, and those of the repository as
a whole, sit in ``tests/unit/`` itself; and a test file named after a module sits in the folder of
a package that has that module."""

from __future__ import annotations

from pathlib import Path

from tests.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "treernn"
UNIT = REPO_ROOT / "tests" / "unit"


def _shown(where: Path) -> str:
    return "tests/unit/" + ("" if where == Path(".") else f"{where.as_posix()}/")


def misplaced(unit: Path, package: Path) -> list[str]:
    """One line for each folder or test file of ``unit`` that does not mirror ``package``."""
    homes: dict[str, set[Path]] = {}  # a module's name -> the folders (under package) holding one
    for module in package.rglob("*.py"):
        if module.name != "__init__.py":
            homes.setdefault(module.stem, set()).add(module.parent.relative_to(package))
    folders = [unit]
    folders += sorted(
        path
        for path in unit.rglob("*")
        if path.is_dir()
        and not any(part == "__pycache__" or part.startswith(".") for part in path.parts)
    )
    problems = []
    for folder in folders:
        where = folder.relative_to(unit)
        if where != Path(".") and not (package / where / "__init__.py").is_file():
            problems.append(
                f"{_shown(where)}: src/treernn/{where.as_posix()}/ is no package; put a test in "
                "the folder of the package it tests, a top-level module's in tests/unit/"
            )
            continue
        if not (folder / "__init__.py").is_file():
            problems.append(f"{_shown(where)}: no __init__.py")
        for test in sorted(folder.glob("test_*.py")):
            others = homes.get(test.stem.removeprefix("test_"), set())
            if others and where not in others:
                other = min(others)
                module = (other / f"{test.stem.removeprefix('test_')}.py").as_posix()
                problems.append(
                    f"{_shown(where)}{test.name}: named after src/treernn/{module}; move it to "
                    f"{_shown(other)} or name it after what it tests"
                )
    return problems


def test_the_unit_tests_mirror_the_package():
    problems = misplaced(UNIT, PACKAGE)
    assert not problems, "\n".join(problems)


def test_a_misplaced_test_is_seen(tmp_path):
    package, unit = tmp_path / "treernn", tmp_path / "unit"
    for path in ["__init__.py", "api.py", "kernels/__init__.py", "kernels/gemm.py"]:
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).touch()
    well_placed = ["__init__.py", "test_api.py", "test_unit_folders.py", "kernels/__init__.py"]
    for path in [*well_placed, "kernels/test_gemm.py", "kernels/test_packing.py"]:
        (unit / path).parent.mkdir(parents=True, exist_ok=True)
        (unit / path).touch()
    assert misplaced(unit, package) == []

    (unit / "test_gemm.py").touch()  # the flat layout of old
    (unit / "kernels" / "test_api.py").touch()
    (unit / "lifecycle").mkdir()  # no such package
    (unit / "lifecycle" / "test_plan.py").touch()
    (package / "encoders").mkdir()
    (package / "encoders" / "__init__.py").touch()
    (unit / "encoders").mkdir()  # a package, but the folder is no package of the tests
    assert misplaced(unit, package) == [
        "tests/unit/test_gemm.py: named after src/treernn/kernels/gemm.py; move it to "
        "tests/unit/kernels/ or name it after what it tests",
        "tests/unit/encoders/: no __init__.py",
        "tests/unit/kernels/test_api.py: named after src/treernn/api.py; move it to tests/unit/ or "
        "name it after what it tests",
        "tests/unit/lifecycle/: src/treernn/lifecycle/ is no package; put a test in the folder of "
        "the package it tests, a top-level module's in tests/unit/",
    ]
