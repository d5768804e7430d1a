"""Shared fixtures: the real-data directory and a fast, deterministic torch set-up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from treernn.kernels import choices


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n 2``, the README's test command) the workers share the cores: each
    worker, and the ``train.py`` processes its tests start, gets cores / workers threads, so that
    no OpenMP thread waits for a core another worker holds."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ["OMP_NUM_THREADS"] = threads
        os.environ["MKL_NUM_THREADS"] = threads
        torch.set_num_threads(int(threads))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests (``@pytest.mark.slow``: seconds to minutes each) first, in their collected
    order, then the fast ones. Under ``-n 2`` with work stealing (``--dist=worksteal`` in
    pyproject.toml), a worker that runs out of tests takes the unstarted ones from the end of the
    other's queue: with the long ones started early, the two finish within seconds of each
    other, where a 3-minute SLURM test started last kept one worker busy while the other idled."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _torch_defaults():
    torch.manual_seed(0)
    # a run trained in this process earlier left it attached to its record and budget
    choices.detach()
    yield
    # a sweep's stop file named in this process's environment would stop every later run of
    # the process, and every subprocess it starts, at its first step
    os.environ.pop("TREERNN_SWEEP_STOP_FILE", None)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real datasets (`TREERNN_DATA_DIR`, `.ci/run` sets it to `../shared/data`).

    Outside CI a missing directory skips the test with instructions; in CI (`CI=true`) it fails.
    """
    value = os.environ.get("TREERNN_DATA_DIR")
    if value and Path(value).is_dir():
        return Path(value).resolve()
    message = (
        "real datasets not found: set TREERNN_DATA_DIR to a directory holding ptb/, "
        "ptb_nltk_sample/, propositional_logic/, listops/, sst/, syneval/, ud_english_ewt/ "
        "(see README 'Data')"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def data_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``TREERNN_CACHE_DIR`` at a fresh directory, for a dataset generated or downloaded there,
    with the compiled kernels loaded first from the cache the test run started with: they share
    that variable, and in a fresh directory this process would build each again (10-30 s each)."""
    from treernn.kernels import cpp_ext

    for source in sorted(cpp_ext.SOURCE_DIR.glob("*.cpp")):
        cpp_ext.load_extension(source.stem)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(cache))
    return cache
