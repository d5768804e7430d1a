"""A DataModule ready to hand out batches, from its config: built, its data prepared (downloaded
where it may be) and set up for a stage. ``treernn.run`` and any command that loads data outside
a ``Trainer`` call :func:`prepared_datamodule` so that the sequence lives in one place.
"""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig


def prepared_datamodule(config: DictConfig, stage: str) -> Any:
    """Instantiate ``config`` (a ``task.datamodule`` node), then ``prepare_data()`` and
    ``setup(stage)`` (``"fit"``, ``"test"``, ...), in the order Lightning calls them."""
    datamodule = hydra.utils.instantiate(config)
    datamodule.prepare_data()
    datamodule.setup(stage)
    return datamodule
