"""``prepared_datamodule`` reads a dataset with Python's cycle collector off and keeps what it
read out of later collections (``gc.freeze``), then leaves the collector as it found it."""

from __future__ import annotations

import gc

import pytest
from omegaconf import OmegaConf

from treernn.datamodules import cyclic_gc_paused, prepared_datamodule


class RecordingDataModule:
    """Records the collector's state in each hook and builds some acyclic data in ``setup``."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self.calls: list[tuple[str, bool]] = []
        self.data: list[tuple[int, ...]] = []

    def prepare_data(self) -> None:
        self.calls.append(("prepare_data", gc.isenabled()))

    def setup(self, stage: str) -> None:
        self.calls.append((f"setup {stage}", gc.isenabled()))
        self.data = [(i, i + 1) for i in range(self.size)]


@pytest.fixture
def collector_restored():
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()


def test_setup_runs_with_the_collector_off_and_its_data_is_frozen(collector_restored):
    gc.enable()
    frozen_before = gc.get_freeze_count()
    config = OmegaConf.create({"_target_": f"{__name__}.RecordingDataModule", "size": 10_000})
    datamodule = prepared_datamodule(config, "fit")
    # prepare_data (downloads) as Lightning runs it; setup (parsing) with the collector off
    assert datamodule.calls == [("prepare_data", True), ("setup fit", False)]
    assert gc.isenabled()
    # the 10,000 tuples read are in the permanent generation: no later collection walks them
    assert gc.get_freeze_count() - frozen_before >= 10_000


def test_a_disabled_collector_stays_disabled_and_an_error_restores_it(collector_restored):
    gc.disable()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()

    gc.enable()
    with pytest.raises(ValueError, match="bad line"), cyclic_gc_paused():
        raise ValueError("bad line")
    assert gc.isenabled()
