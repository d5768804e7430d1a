"""The config map: every experiment preset and every ``task=X model=Y`` pair composes, presets are
named ``experiment/<paper>/<model>_<task>[_small]`` after what they run, and a bare task x model
pair is a modest run, never a paper-length one. Composition only: no data, no training."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.helpers import REPO_ROOT, WITH_EXAMPLE, compose_config

CONF = REPO_ROOT / "conf"
PAPERS = {"onlstm", "om", "tdlstm"}
TASKS = sorted(path.stem for path in (CONF / "task").glob("*.yaml"))
MODELS = sorted(path.stem for path in (CONF / "model").glob("*.yaml"))
#: a preset's task part names the task, or its dataset where one task has several
DATASET_TASK = {"sst2": "sst", "sst5": "sst", "ewt": "dependency_lm", "msr": "dependency_lm",
                "ptb_rerank": "dependency_lm"}  # fmt: skip
#: files that other presets build on (defaults lists), not presets themselves
SHARED_PREFIX = "_shared_"
PRESETS = sorted(
    f"{path.parent.name}/{path.stem}"
    for path in (CONF / "experiment").glob("*/*.yaml")
    if not path.stem.startswith(SHARED_PREFIX)
)
#: the most epochs a bare `task=X model=Y` run may take
MODEST_EPOCHS = 4


def _split_name(preset: str) -> tuple[str, str, str, bool]:
    """``om/tree_lstm_listops_small`` -> ("om", "tree_lstm", "listops", True); a table's scaled
    variant (``om/transformer_listops_half``) is its preset's model and task."""
    paper, name = preset.split("/")
    small = name.endswith("_small")
    name = name.removesuffix("_small").removesuffix("_half")
    model = max((m for m in MODELS if name.startswith(m + "_")), key=len)
    return paper, model, name[len(model) + 1 :], small


def test_every_preset_lives_in_a_paper_folder():
    assert not list((CONF / "experiment").glob("*.yaml")), "presets go in experiment/<paper>/"
    assert {path.name for path in (CONF / "experiment").iterdir()} == PAPERS
    assert not (CONF / "task_model").exists()
    assert len(PRESETS) >= 30


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs_the_model_and_task_its_name_says(preset, tmp_path: Path):
    paper, model, task, small = _split_name(preset)
    cfg = compose_config([f"experiment={preset}"], tmp_path)
    assert cfg.model.name == model
    assert cfg.task.name == DATASET_TASK.get(task, task)
    assert paper in PAPERS
    if small:  # a quick CPU run
        assert cfg.trainer.max_epochs <= 10
    else:  # the paper's budget
        assert cfg.trainer.max_epochs >= 50


@pytest.mark.parametrize("task", TASKS)
def test_bare_task_and_model_is_a_modest_run(task, tmp_path: Path):
    for model in MODELS:
        cfg = compose_config([f"task={task}", f"model={model}"], tmp_path)
        assert cfg.trainer.max_epochs <= MODEST_EPOCHS, (task, model)
        assert cfg.model.name == model and cfg.task.name == task
        if model == "ordered_memory":
            assert cfg.model.num_layers == 1  # Ordered Memory has one layer
        if model == "onlstm":
            assert cfg.model.hidden_size % cfg.model.chunk_size == 0


def test_tree_f1_callbacks_come_with_the_task(tmp_path: Path):
    """Parse F1 on PTB, induced-tree F1 on logic and ListOps, for every encoder (encoders without a
    tree signal skip them with a warning)."""
    for task, callback in [("ptb", "parse_f1"), ("logic", "tree_f1"), ("listops", "tree_f1")]:
        for model in ("lstm", "onlstm", "ordered_memory"):
            cfg = compose_config([f"task={task}", f"model={model}"], tmp_path)
            assert callback in cfg.task.callbacks, (task, model)
    for task in ("sst", "dependency_lm"):
        cfg = compose_config([f"task={task}"], tmp_path)
        assert not {"parse_f1", "tree_f1"} & set(cfg.task.get("callbacks") or {})


def test_main_job_is_the_quick_onlstm_language_model(tmp_path: Path):
    """`python train.py`: ON-LSTM 200-400-200 on PTB, 3 epochs (a budget in epochs, not
    minutes: the same on every machine); the paper's run is experiment=onlstm/onlstm_ptb."""
    main = compose_config([], tmp_path)
    paper = compose_config(["experiment=onlstm/onlstm_ptb"], tmp_path)
    assert (main.task.name, main.model.name) == (paper.task.name, paper.model.name)
    assert main.model.hidden_size < paper.model.hidden_size
    assert main.task.module.embedding_size < paper.task.module.embedding_size
    assert main.trainer.max_epochs == 3 and main.trainer.max_steps == -1
    assert main.trainer.max_time is None
    assert paper.trainer.max_time is None and paper.trainer.max_epochs == 1000


def test_a_models_own_recipe_is_taken_where_nothing_states_a_value(tmp_path: Path):
    """conf/model/<model>.yaml's recipe.<task> (the example GRU's PTB lr) beats the task's
    recipe, and is beaten by anything that states the value: a preset, a table, the command
    line. No shipped model has one, so the papers' presets are what they were."""

    def optimizer(*overrides: str) -> tuple[float, float]:
        cfg = compose_config([*overrides, *WITH_EXAMPLE], tmp_path)
        return cfg.task.module.optimizer.lr, cfg.trainer.gradient_clip_val

    assert optimizer("task=ptb", "model=lstm") == (30.0, 0.25)
    assert optimizer("task=ptb", "model=example_gru") == (2.0, 0.25)  # its own lr, the task's clip
    assert optimizer("task=logic", "model=example_gru") == (1e-3, 1.0)  # no recipe for logic
    assert optimizer("model=example_gru", "task.module.optimizer.lr=30") == (30.0, 0.25)
    assert optimizer("table=lm", "model=example_gru") == (2.0, 0.25)  # states no lr
    overridden = optimizer("model=example_gru", "+model.recipe.ptb.gradient_clip_val=1.0")
    assert overridden == (2.0, 1.0)
    for model in MODELS:
        cfg = compose_config([f"model={model}"], tmp_path)
        assert "recipe" not in cfg.model, model
