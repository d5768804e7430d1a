"""Run the real CLI: in-process (Hydra compose, same code path as train.py) or as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from treernn import run

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = str(REPO_ROOT / "conf")

#: a tiny PTB-sized setting so that a run takes seconds
TINY_LM = [
    "model.hidden_size=40",
    "model.num_layers=2",
    "task.module.embedding_size=20",
    "task.datamodule.train_fraction=0.01",
]

#: ON-LSTM on PTB parses the treebank sample at each validation: keep it short in tests
TINY_PARSE = ["task.callbacks.parse_f1.max_sentences=40"]


def compose_config(overrides: list[str], output_dir: Path):
    """The composed config of ``python train.py <overrides>``, with its run directory set."""
    run.register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=False)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.log_dir = str(output_dir.parent)
    return cfg


def train_in_process(overrides: list[str], output_dir: Path) -> dict[str, float]:
    return run.train(compose_config(overrides, output_dir))


def run_cli(
    args: list[str], cwd: Path = REPO_ROOT, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``python train.py <args>`` as a user would type it; outputs go to the caller's log_dir."""
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
