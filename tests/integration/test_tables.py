"""The papers' tables (conf/table/): every job of each table's sweep composes, and the models
compared in one table get the same data, optimiser, schedule, batch and number of updates, at the
same scale; a table's own models run their paper presets, scaled; and any model runs on a table's
recipe (``python train.py -m table=<table> model=<a>,<b>``). Composition only: no data, no
training."""

from __future__ import annotations

import itertools
from pathlib import Path

import hydra
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from tests.integration.helpers import (
    CONF_DIR,
    REPO_ROOT,
    WITH_EXAMPLE,
    compose_config,
    model_configs,
)
from treernn.checkpoints import constructor_config
from treernn.tasks.base import build_encoder

CONF = REPO_ROOT / "conf"
TABLES = sorted(
    path.stem for path in (CONF / "table").glob("*.yaml") if not path.stem.startswith("_")
)
#: what the issue asks each table to compare
MODELS = {
    "logic": {"lstm", "onlstm", "ordered_memory", "tree_lstm"},
    "logic_onlstm": {"lstm", "onlstm"},
    "sysgen": {"lstm", "ordered_memory"},
    "listops": {"lstm", "transformer", "tree_lstm", "ordered_memory"},
    "sst2": {"lstm", "ordered_memory"},
    "lm": {"onlstm", "lstm"},
    "tdlm": {"lstm", "td_treelstm", "ld_treelstm"},
}
#: seeds per table where not 3
SEEDS = {"lm": 5}
#: the paper preset each model of a table's own list runs (scaled by the table): the table's
#: variant where there is one (ListOps: the half-size Transformer), else the paper's
PRESETS = {
    "logic": ["om/{}_logic"],
    "logic_onlstm": ["onlstm/{}_logic"],  # the ON-LSTM paper's width and recipe, not scaled
    "sysgen": ["om/{}_logic"],
    "listops": ["om/{}_listops_half", "om/{}_listops"],
    "sst2": ["om/{}_sst2"],
    "lm": [],  # the main job's setting (task=ptb), no preset
    "tdlm": ["tdlstm/{}_ewt_small"],
}
#: the keys whose values a table's sweep varies besides the model (equal terms within each value)
NOT_SHARED = ("seed", "model")


def sweep_params(table: str) -> dict[str, list[str]]:
    """The table's own sweep: key -> values (Hydra's sweeper.params, split at commas)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"table={table}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.hydra.launcher.n_jobs == 2 and cfg.threads == 1
    return {key: str(value).split(",") for key, value in cfg.hydra.sweeper.params.items()}


def table_jobs(table: str, tmp_path: Path):
    """Each job of the table's sweep with its overrides and composed config (one seed: the seed
    changes nothing else)."""
    params = sweep_params(table)
    assert params.pop("seed") == [str(seed) for seed in range(1, 1 + SEEDS.get(table, 3))]
    params["seed"] = ["1"]
    keys = list(params)
    for values in itertools.product(*(params[key] for key in keys)):
        overrides = [f"table={table}", *(f"{k}={v}" for k, v in zip(keys, values))]
        yield dict(zip(keys, values)), overrides, compose_config(overrides, tmp_path)


def resolved(cfg, key: str | None = None):
    """The resolved value of ``key`` (the whole config: None), None where it is not set."""
    node = OmegaConf.select(cfg, key) if key else cfg
    return OmegaConf.to_container(node, resolve=True) if node is not None else None


def test_every_table_is_listed():
    assert set(TABLES) == set(MODELS) == set(PRESETS)


@pytest.mark.parametrize("table", TABLES)
def test_a_table_compares_its_models_on_equal_terms(table, tmp_path: Path):
    jobs = list(table_jobs(table, tmp_path))
    assert {cfg.model.name for _, _, cfg in jobs} == MODELS[table]
    assert (
        sweep_params(table)["model"][0]
        == {
            "logic": "ordered_memory",
            "logic_onlstm": "onlstm",
            "sysgen": "ordered_memory",
            "listops": "ordered_memory",
            "sst2": "ordered_memory",
            "lm": "onlstm",
            "tdlm": "ld_treelstm",
        }[table]
    )  # the slowest model first (conf/table/_parallel.yaml)
    shared = {}
    for job, _, cfg in jobs:
        if cfg.model.name == "onlstm":
            assert cfg.model.hidden_size % cfg.model.chunk_size == 0
        # what must be equal for every model (the data split may vary with the sweep, e.g. A/B/C)
        seen = {
            "datamodule": resolved(cfg, "task.datamodule"),
            "optimizer": resolved(cfg, "task.module.optimizer"),
            "scheduler": resolved(cfg, "task.module.scheduler"),
            "embedding_size": cfg.task.module.embedding_size,
            "hidden_size": cfg.model.hidden_size,
            "max_steps": cfg.trainer.max_steps,
            "max_epochs": cfg.trainer.max_epochs,
            "max_time": cfg.trainer.max_time,
            "clip": cfg.trainer.gradient_clip_val,
        }
        key = tuple(v for k, v in job.items() if k not in NOT_SHARED)
        seen["datamodule"].pop("feed_brackets", None)  # tree models read the leaves, not brackets
        if key in shared:
            assert seen == shared[key], (table, job)
        shared[key] = seen
        assert cfg.trainer.max_steps > 0 and cfg.trainer.max_time is None  # updates, not time
        # the last update is validated wherever it falls in an epoch (the tested checkpoint can
        # be the final weights, not those of the last full epoch)
        assert cfg.trainer.check_val_every_n_epoch is None
        assert cfg.trainer.max_steps % cfg.trainer.val_check_interval == 0


@pytest.mark.parametrize("table", TABLES)
def test_a_tables_own_models_run_their_paper_presets(table, tmp_path: Path):
    """A job of the table's own list (``model=M``) is the model's paper preset (its setting in
    ``conf/model/M/table_<table>.yaml`` is the preset's) scaled by the table: the same composed
    config as ``experiment=<preset>`` with the table and without the model's table file."""
    for _, overrides, cfg in table_jobs(table, tmp_path):
        model = cfg.model.name
        presets = [p.format(model) for p in PRESETS[table]]
        existing = [p for p in presets if (CONF / "experiment" / f"{p}.yaml").is_file()]
        preset = [f"experiment={existing[0]}"] if existing else []
        assert existing or not presets, (table, model)
        from_preset = compose_config([*overrides, *preset, "~model@_global_"], tmp_path)
        assert resolved(cfg) == resolved(from_preset), (table, model, preset)


@pytest.mark.parametrize("table", TABLES)
def test_any_model_runs_on_a_tables_recipe(table, tmp_path: Path):
    """``-m table=<table> model=<m>`` for every model config (the example GRU too): the encoder
    builds (no key of another model, e.g. weight_drop, reaches it), and every model without a
    setting of its own (``conf/model/<m>/table_<table>.yaml``, or a ``recipe`` for the table's
    task in its yaml) gets the same data, optimiser, schedule and budget."""
    recipes = {}
    for model in model_configs():
        overrides = [f"table={table}", f"model={model}", "seed=1", *WITH_EXAMPLE]
        cfg = compose_config(overrides, tmp_path)
        assert cfg.model.name == model
        factory = hydra.utils.instantiate(constructor_config(cfg.model))
        encoder = build_encoder(factory, input_size=cfg.task.module.embedding_size)
        assert encoder.input_size == cfg.task.module.embedding_size
        own_recipe = OmegaConf.select(cfg, f"model.recipe.{cfg.task.name}") is not None
        if not own_recipe and not (CONF / "model" / model / f"table_{table}.yaml").is_file():
            recipes[model] = {
                "task": resolved(cfg, "task"),
                "trainer": resolved(cfg, "trainer"),
                "hidden_size": cfg.model.hidden_size,
            }
    assert ("example_gru" in recipes) == (table != "lm")  # its own recipe on PTB
    for recipe in recipes.values():
        recipe["task"].pop("callbacks", None)  # the accuracy report's label is the model's name
    first = next(iter(recipes.values()))
    for model, recipe in recipes.items():
        assert recipe == first, (table, model)
