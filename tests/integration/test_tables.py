"""The papers' tables (conf/table/): every job of each table's sweep composes, and the models
compared in one table get the same data, optimiser, schedule, batch and number of updates, at the
same scale. Composition only: no data, no training."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.integration.helpers import CONF_DIR, REPO_ROOT, compose_config

TABLES = sorted(
    path.stem
    for path in (REPO_ROOT / "conf" / "table").glob("*.yaml")
    if not path.stem.startswith("_")
)
#: what the issue asks each table to compare
MODELS = {
    "logic": {"lstm", "onlstm", "ordered_memory", "tree_lstm"},
    "sysgen": {"lstm", "ordered_memory"},
    "listops": {"lstm", "transformer", "tree_lstm", "ordered_memory"},
    "sst2": {"lstm", "ordered_memory"},
    "parsing": {"onlstm"},
}


def sweep_params(table: str) -> dict[str, list[str]]:
    """The table's own sweep: key -> values (Hydra's sweeper.params, split at commas)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"table={table}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.hydra.launcher.n_jobs == 2 and cfg.threads == 1
    return {key: str(value).split(",") for key, value in cfg.hydra.sweeper.params.items()}


def table_jobs(table: str, tmp_path: Path):
    """Each job of the table's sweep with its composed config (one seed: the seed changes nothing
    else)."""
    params = sweep_params(table)
    assert params.pop("seed") == ["1", "2", "3"]
    params["seed"] = ["1"]
    keys = list(params)
    for values in itertools.product(*(params[key] for key in keys)):
        overrides = [f"table={table}", *(f"{k}={v}" for k, v in zip(keys, values))]
        yield dict(zip(keys, values)), compose_config(overrides, tmp_path)


def test_every_table_is_listed():
    assert set(TABLES) == set(MODELS)


@pytest.mark.parametrize("table", TABLES)
def test_a_table_compares_its_models_on_equal_terms(table, tmp_path: Path):
    jobs = list(table_jobs(table, tmp_path))
    assert {cfg.model.name for _, cfg in jobs} == MODELS[table]
    shared = {}
    for job, cfg in jobs:
        if cfg.model.name == "onlstm":
            assert cfg.model.hidden_size % cfg.model.chunk_size == 0
        # what must be equal for every model (the data split may vary with the sweep, e.g. A/B/C)
        seen = {
            "datamodule": OmegaConf.to_container(cfg.task.datamodule, resolve=False),
            "optimizer": OmegaConf.to_container(cfg.task.module.optimizer),
            "scheduler": OmegaConf.to_container(
                cfg.task.module.get("scheduler") or OmegaConf.create()
            ),
            "embedding_size": cfg.task.module.embedding_size,
            "hidden_size": cfg.model.hidden_size,
            "max_steps": cfg.trainer.max_steps,
            "max_epochs": cfg.trainer.max_epochs,
            "max_time": cfg.trainer.max_time,
            "clip": cfg.trainer.gradient_clip_val,
        }
        key = tuple(v for k, v in job.items() if k not in ("seed", "experiment"))
        seen["datamodule"].pop("feed_brackets", None)  # tree models read the leaves, not brackets
        if key in shared:
            assert seen == shared[key], (table, job)
        shared[key] = seen
        assert cfg.trainer.max_steps > 0 and cfg.trainer.max_time is None  # updates, not time
        # the last update is validated wherever it falls in an epoch (the tested checkpoint can
        # be the final weights, not those of the last full epoch)
        assert cfg.trainer.check_val_every_n_epoch is None
        assert cfg.trainer.max_steps % cfg.trainer.val_check_interval == 0
