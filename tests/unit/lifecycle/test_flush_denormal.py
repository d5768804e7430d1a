"""Subnormal floats are flushed to zero on the CPU when a run asks for it (the default)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from tests.paths import REPO_ROOT
from treernn.lifecycle.process import flush_denormals

SUBNORMAL = 1e-40  # below float32's smallest normal number, 1.18e-38


def _product() -> float:
    return float(torch.tensor([SUBNORMAL]) * 1.0)


def test_flush_denormals_turns_subnormal_arithmetic_into_zeros():
    try:
        flush_denormals(False)
        assert _product() > 0.0  # kept as a subnormal number
        flush_denormals(True)
        assert _product() == 0.0
    finally:
        flush_denormals(True)


def test_the_run_config_flushes_by_default():
    config = OmegaConf.load(REPO_ROOT / "conf" / "config.yaml")
    assert config.flush_denormal is True
