"""The planner: one immutable plan per invocation, from the composed config, hand-made run
directories (records, locks) and small checkpoints; it writes nothing and leaves the config it was
given as it was."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import ReadonlyConfigError

from tests.paths import REPO_ROOT
from treernn.checkpoints import build_task, serialise_task_kwargs
from treernn.data.vocab import Vocabulary
from treernn.errors import CheckpointError
from treernn.lifecycle import locks, records
from treernn.lifecycle.identity import process_identity
from treernn.lifecycle.plan import Plan, plan_run
from treernn.lifecycle.records import RunState
from treernn.lifecycle.resolvers import register_resolvers
from treernn.lifecycle.sweeps.layout import NotStarted, SweepChanged

CONF = REPO_ROOT / "conf"
BASE = ["task=logic", "model=lstm", "trainer=smoke"]


def compose_config(tmp_path: Path, *overrides: str, run: str = "own"):
    """The config as ``python train.py`` composes it, writing into ``outputs/logic/lstm/<run>``."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[*BASE, *overrides], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.log_dir = str(tmp_path / "outputs")
        cfg.paths.output_dir = str(tmp_path / "outputs" / "logic" / "lstm" / run)
    return cfg


def stored_config(cfg, **changes) -> dict:
    """The config a checkpoint of ``cfg``'s run holds, with ``changes`` (``a.b``: value)."""
    stored = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key, value in changes.items():
        OmegaConf.update(stored, key, value, force_add=True)
    return OmegaConf.to_container(stored)


def logic_kwargs() -> dict:
    """The logic task's data arguments as its DataModule gives them, with a small vocabulary (no
    data is read)."""
    vocab = Vocabulary(["a", "b", "c", "not", "and", "or", "(", ")"])
    return {
        "vocab_size": len(vocab),
        "num_classes": 7,
        "vocab": vocab,
        "pad_index": vocab.pad_index,
        "num_sentences": 2,
        "label_names": ["#", "=", "<", ">", "^", "|", "v"],
        "bucket_names": [f"ops{n}" for n in range(13)],
        "group_names": ["length"],
    }


def save_checkpoint(path: Path, config: dict, step: int, epochs_done: int = 1) -> Path:
    """A checkpoint as far as the planner reads it: the weights of the task ``config`` builds
    (zeros; built on the meta device, then made), its optimizer's and scheduler's state, and
    what `treernn.checkpoints.RunInfo` adds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    progress = {"fit_loop": {"epoch_progress": {"current": {"processed": epochs_done}}}}
    kwargs = logic_kwargs()
    with torch.device("meta"):
        task = build_task(OmegaConf.create(config), kwargs)
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    torch.save(
        {
            "global_step": step,
            "epoch": max(epochs_done - 1, 0),
            "loops": progress,
            "state_dict": {key: torch.zeros(v.shape) for key, v in task.state_dict().items()},
            "optimizer_states": [optimizer.state_dict()],
            "lr_schedulers": [scheduler.state_dict()],
            "treernn": {
                "config": config,
                "task_kwargs": serialise_task_kwargs(kwargs),
                "wandb_id": None,
            },
        },
        path,
    )
    return path


def make_run(tmp_path: Path, name: str, started: str, **record) -> Path:
    run_dir = tmp_path / "outputs" / "logic" / "lstm" / name
    (run_dir / ".hydra").mkdir(parents=True)
    records.write_status(run_dir, task="logic", model="lstm", started=started, **record)
    return run_dir


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path): (path.stat().st_mtime_ns, path.stat().st_size)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def plan_of(cfg, overrides: list[str] | None = None, **kwargs) -> Plan:
    before = OmegaConf.to_container(cfg)
    plan = plan_run(cfg, overrides=overrides or [], **kwargs)
    assert OmegaConf.to_container(cfg) == before  # the given config is left as it was
    return plan


# ----------------------------------------------------------------------------- single runs
def test_a_new_run_plans_its_own_directory_with_a_read_only_copy_of_the_config(tmp_path):
    cfg = compose_config(tmp_path)
    plan = plan_of(cfg)
    assert plan.action == "run" and plan.refusal is None
    assert plan.run_dir == plan.invocation_dir == Path(cfg.paths.output_dir)
    assert plan.checkpoint is None and plan.apply_on_resume == ()
    assert plan.config is not cfg and plan.config.seed == cfg.seed
    with pytest.raises(ReadonlyConfigError):
        plan.config.seed = 4
    with pytest.raises(AttributeError):  # frozen
        plan.action = "skip"


def test_ckpt_path_file_resumes_in_the_run_that_wrote_it_with_the_new_optimizer_values(tmp_path):
    cfg = compose_config(tmp_path, "task.module.optimizer.lr=0.01")
    old = make_run(tmp_path, "old", "2026-01-01T00:00:00", status=RunState.INTERRUPTED)
    stored = stored_config(cfg, **{"task.module.optimizer.lr": 0.001, "trainer.max_steps": 3})
    path = save_checkpoint(old / "checkpoints" / "last.ckpt", stored, step=2)
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    before = snapshot(tmp_path)
    plan = plan_of(cfg)
    assert snapshot(tmp_path) == before  # the planner writes nothing
    assert plan.action == "resume"
    assert (plan.run_dir, plan.invocation_dir) == (old, Path(cfg.paths.output_dir))
    assert plan.continues_elsewhere
    assert plan.checkpoint == path and plan.info.global_step == 2
    assert plan.config.paths.output_dir == str(old) and plan.config.ckpt_path == str(path)
    assert cfg.paths.output_dir.endswith("/own")  # the command's config is not the one that runs
    assert plan.apply_on_resume == ("task.module.optimizer.lr",)


def test_ckpt_path_last_takes_the_newest_run_with_a_checkpoint(tmp_path, caplog):
    cfg = compose_config(tmp_path, "ckpt_path=last", "trainer.max_steps=10")
    older = make_run(tmp_path, "older", "2026-01-01T00:00:00", status=RunState.INTERRUPTED)
    save_checkpoint(older / "checkpoints" / "last.ckpt", stored_config(cfg), step=1)
    chosen = make_run(tmp_path, "chosen", "2026-01-02T00:00:00", status=RunState.INTERRUPTED)
    save_checkpoint(chosen / "checkpoints" / "epoch000.ckpt", stored_config(cfg), step=2)
    newest = save_checkpoint(chosen / "checkpoints" / "last.ckpt", stored_config(cfg), step=3)
    make_run(tmp_path, "no_ckpt", "2026-01-03T00:00:00", status=RunState.FAILED, stage="setup")
    plan = plan_of(cfg)
    assert (plan.action, plan.run_dir, plan.checkpoint) == ("resume", chosen, newest)
    assert "passed over" in caplog.text and "failed while setting up" in caplog.text


def test_ckpt_path_last_refuses_a_run_that_is_still_running(tmp_path):
    cfg = compose_config(tmp_path, "ckpt_path=last")
    live = make_run(tmp_path, "live", "2026-01-01T00:00:00", status=RunState.RUNNING)
    save_checkpoint(live / "checkpoints" / "last.ckpt", stored_config(cfg), step=1)
    lock = locks.RunLock(live)
    lock.acquire()
    try:
        plan = plan_of(cfg)
    finally:
        lock.release()
    assert plan.action == "refuse" and plan.config is None
    assert f"the newest run {live} is still running" in str(plan.refusal)


def test_a_checkpoint_of_another_model_is_refused_before_anything_is_built(tmp_path):
    cfg = compose_config(tmp_path)
    path = save_checkpoint(
        tmp_path / "x.ckpt", stored_config(cfg, **{"model.name": "onlstm"}), step=1
    )
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    plan = plan_of(cfg)
    assert plan.action == "refuse" and isinstance(plan.refusal, CheckpointError)
    assert "was written by task=logic model=onlstm" in str(plan.refusal)


def test_a_requeued_job_resumes_in_its_own_directory_from_its_newest_checkpoint(tmp_path):
    cfg = compose_config(tmp_path, run="slurm-7-0")
    own = make_run(tmp_path, "slurm-7-0", "2026-01-01T00:00:00", status=RunState.REQUEUED)
    save_checkpoint(own / "checkpoints" / "last.ckpt", stored_config(cfg), step=2)
    requeue = save_checkpoint(own / "hpc_ckpt_1.ckpt", stored_config(cfg), step=3)
    plan = plan_of(cfg)
    assert (plan.action, plan.checkpoint, plan.run_dir) == ("resume", requeue, own)
    assert not plan.continues_elsewhere and plan.info.run_dir is None


def test_mode_test_plans_the_model_as_the_checkpoint_trained_it(tmp_path):
    cfg = compose_config(tmp_path, "mode=test", "model.dropout=0.3")
    trained = make_run(tmp_path, "trained", "2026-01-01T00:00:00", status=RunState.FINISHED)
    stored = stored_config(cfg, **{"model.hidden_size": 7, "model.dropout": 0.0})
    path = save_checkpoint(trained / "checkpoints" / "last.ckpt", stored, step=3)
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    plan = plan_of(cfg, overrides=["mode=test", "model.dropout=0.3", f"ckpt_path={path}"])
    assert plan.action == "test" and plan.checkpoint == path
    assert plan.run_dir == Path(cfg.paths.output_dir)  # a test writes into its own directory
    assert plan.config.model.hidden_size == 7  # as trained
    assert plan.config.model.dropout == 0.3  # given on the command line
    assert cfg.model.hidden_size == 100  # the task's, in the command's config


def test_mode_test_without_a_checkpoint_is_refused(tmp_path):
    plan = plan_of(compose_config(tmp_path, "mode=test"))
    assert plan.action == "refuse"
    assert str(plan.refusal) == "mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)"


# ----------------------------------------------------------------------------- sweep jobs
def sweep_job(tmp_path: Path, overrides: list[str], **record) -> tuple[object, Path]:
    cfg = compose_config(tmp_path, *overrides)
    job = tmp_path / "multirun" / "1"
    with open_dict(cfg):
        cfg.paths.output_dir = str(job)
    (job / ".hydra").mkdir(parents=True)
    if record:
        records.write_status(job, task="logic", model="lstm", overrides=overrides, **record)
    return cfg, job


def test_a_finished_sweep_job_is_skipped_with_its_metrics(tmp_path):
    overrides = ["seed=1"]
    cfg, job = sweep_job(tmp_path, overrides, status=RunState.FINISHED)
    (job / "metrics.json").write_text('{"test/acc": 0.75}')
    plan = plan_of(cfg, overrides, multirun=True)
    assert (plan.action, plan.metrics, plan.config) == ("skip", {"test/acc": 0.75}, None)


def test_an_interrupted_sweep_job_resumes_and_a_failed_one_runs_again(tmp_path):
    overrides = ["seed=1"]
    cfg, job = sweep_job(tmp_path, overrides, status=RunState.INTERRUPTED)
    path = save_checkpoint(job / "checkpoints" / "last.ckpt", stored_config(cfg), step=2)
    plan = plan_of(cfg, overrides, multirun=True)
    assert (plan.action, plan.checkpoint, plan.run_dir, plan.why) == (
        "resume",
        path,
        job,
        "interrupted",
    )
    assert plan.config.ckpt_path == str(path)
    records.write_status(job, status=RunState.FAILED, error="DataError: x")
    plan = plan_of(cfg, overrides, multirun=True)
    assert (plan.action, plan.why, plan.checkpoint) == ("rerun", "failed: DataError: x", None)
    assert (job / "checkpoints" / "last.ckpt").is_file()  # cleared by the executor, not here


def test_a_new_sweep_job_runs_and_a_stopping_sweep_starts_none(tmp_path):
    cfg, job = sweep_job(tmp_path, ["seed=1"])
    assert plan_of(cfg, ["seed=1"], multirun=True).action == "run"
    plan = plan_of(cfg, ["seed=1"], multirun=True, stop_signal=2)
    assert plan.action == "refuse" and isinstance(plan.refusal, NotStarted)


def test_a_sweep_job_given_other_overrides_is_left_alone(tmp_path):
    cfg, job = sweep_job(tmp_path, ["seed=1"], status=RunState.FAILED, **process_identity())
    plan = plan_of(cfg, ["seed=2"], multirun=True)
    assert plan.action == "refuse" and isinstance(plan.refusal, SweepChanged)
    assert "ran with [seed=1], this command gives it [seed=2]" in str(plan.refusal)
    assert os.path.isdir(job)


# ----------------------------------------------------------------------------- naming a run
def test_a_finished_run_named_by_its_checkpoint_file_is_refused_as_ckpt_path_last_is(tmp_path):
    """One rule however a finished run is named: ``ckpt_path=last`` refused it ("ask for a larger
    budget"), while ``ckpt_path=<its last.ckpt>`` resumed it, trained nothing and tested again."""
    cfg = compose_config(tmp_path)  # trainer=smoke: max_steps=3
    done = make_run(tmp_path, "done", "2026-01-01T00:00:00", status=RunState.FINISHED)
    path = save_checkpoint(done / "checkpoints" / "last.ckpt", stored_config(cfg), step=3)
    for named in ("last", str(path)):
        with open_dict(cfg):
            cfg.ckpt_path = named
        plan = plan_of(cfg)
        assert plan.action == "refuse", named
        message = str(plan.refusal)
        assert message.startswith(f"ckpt_path={named}: ")
        assert f"run {done} finished (1 epochs, step 3; " in message
        assert "ask for a larger budget (e.g. trainer.max_steps=6)" in message
    with open_dict(cfg):  # a larger budget trains it further, named either way
        cfg.trainer.max_steps = 6
    for named in ("last", str(path)):
        with open_dict(cfg):
            cfg.ckpt_path = named
        plan = plan_of(cfg)
        assert (plan.action, plan.run_dir, plan.checkpoint) == ("resume", done, path)


def test_a_finished_run_may_be_tested_however_it_is_named(tmp_path):
    cfg = compose_config(tmp_path, "mode=test")
    done = make_run(tmp_path, "done", "2026-01-01T00:00:00", status=RunState.FINISHED)
    path = save_checkpoint(done / "checkpoints" / "last.ckpt", stored_config(cfg), step=3)
    for named in ("last", str(path)):
        with open_dict(cfg):
            cfg.ckpt_path = named
        assert plan_of(cfg).action == "test"


def test_the_run_chosen_is_named_with_the_overrides_that_differ_from_the_command(tmp_path, caplog):
    """After a dropout sweep, ``ckpt_path=last`` resumed its newest job, whose dropout the command
    does not give, without a word: the run then trained on with the command's dropout."""
    cfg = compose_config(tmp_path, "ckpt_path=last", "trainer.max_steps=6")
    sweep = tmp_path / "outputs" / "multirun" / "logic" / "lstm" / "mine"
    for number, dropout, started in ((0, 0.1, "2026-01-01T00:00:00"), (1, 0.3, "2026-01-02")):
        job = sweep / str(number)
        (job / ".hydra").mkdir(parents=True)
        overrides = [f"model.dropout={dropout}", "trainer.max_steps=3", "sweep_id=mine"]
        records.write_status(
            job,
            task="logic",
            model="lstm",
            started=started,
            status=RunState.FINISHED,
            overrides=overrides,
        )
        stored = stored_config(cfg, **{"model.dropout": dropout, "trainer.max_steps": 3})
        save_checkpoint(job / "checkpoints" / "last.ckpt", stored, step=3)
    caplog.set_level("INFO", logger="treernn")
    command = ["ckpt_path=last", "trainer.max_steps=6"]
    plan = plan_of(cfg, overrides=command)
    assert (plan.action, plan.run_dir) == ("resume", sweep / "1")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ckpt_path=")]
    assert lines == [
        f"ckpt_path=last: resuming run {sweep / '1'} (finished, step 3), whose overrides differ "
        "from this command's: model.dropout=0.3 (this command: not given), trainer.max_steps=3 "
        "(this command: 6); it goes on with this command's settings"
    ]
    # named by its file: the same line
    caplog.clear()
    path = sweep / "1" / "checkpoints" / "last.ckpt"
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    plan_of(cfg, overrides=[f"ckpt_path={path}", "trainer.max_steps=6"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ckpt_path=")]
    assert lines == [
        f"ckpt_path={path}: resuming run {sweep / '1'} (finished, step 3), whose overrides "
        "differ from this command's: model.dropout=0.3 (this command: not given), "
        "trainer.max_steps=3 (this command: 6); it goes on with this command's settings"
    ]
    # the command that gives the run's dropout: only the budget differs
    caplog.clear()
    with open_dict(cfg):
        cfg.ckpt_path = "last"
    plan_of(cfg, overrides=["ckpt_path=last", "model.dropout=0.3", "trainer.max_steps=6"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ckpt_path=")]
    assert lines == [
        f"ckpt_path=last: resuming run {sweep / '1'} (finished, step 3), whose overrides differ "
        "from this command's: trainer.max_steps=3 (this command: 6); it goes on with this "
        "command's settings"
    ]


def test_a_run_resumed_with_its_own_overrides_is_named(tmp_path, caplog):
    cfg = compose_config(tmp_path, "ckpt_path=last")
    old = make_run(tmp_path, "old", "2026-01-01", status=RunState.INTERRUPTED, overrides=["seed=3"])
    save_checkpoint(old / "checkpoints" / "last.ckpt", stored_config(cfg), step=2)
    caplog.set_level("INFO", logger="treernn")
    plan_of(cfg, overrides=["seed=3", "ckpt_path=last"])
    assert (
        f"ckpt_path=last: resuming run {old} (interrupted, step 2) with this command's "
        "overrides" in caplog.text
    )


def test_ckpt_path_last_continues_the_run_whose_newest_checkpoint_is_a_requeue_s(tmp_path):
    """The SLURM requeue's ``hpc_ckpt_N.ckpt`` lies in the run directory itself, not in its
    checkpoints/: the run ``ckpt_path=last`` chose is continued all the same."""
    cfg = compose_config(tmp_path, "ckpt_path=last")
    old = make_run(tmp_path, "old", "2026-01-01", status=RunState.INTERRUPTED)
    save_checkpoint(old / "checkpoints" / "last.ckpt", stored_config(cfg), step=2)
    newest = save_checkpoint(old / "hpc_ckpt_1.ckpt", stored_config(cfg), step=3)
    plan = plan_of(cfg)
    assert (plan.action, plan.checkpoint, plan.run_dir) == ("resume", newest, old)
    assert plan.config.paths.output_dir == str(old)


# ----------------------------------------------------------------------------- refusals
# Each refusal of a resume was decided by the executor after it had recorded the attempt in the
# run it resumed: a finished run read "failed" afterwards and left the report's tables. Now the
# planner decides each from the checkpoint's record; the run entry (plan, execute, conclude) is
# run here with the data loader replaced by one that fails, so a refusal that came after the data
# (or no refusal) fails the test.
def contents(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (hidden ones too) and its bytes."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def finished_run(tmp_path: Path, cfg, **changes) -> tuple[Path, Path]:
    """A finished run of ``cfg`` (3 steps, 1 epoch) as the report reads it, and its last.ckpt;
    ``changes``: how the config it was trained with differs from ``cfg``."""
    run_dir = make_run(
        tmp_path, "done", "2026-01-01T00:00:00", status=RunState.FINISHED, stage="fit+test"
    )
    stored = stored_config(cfg, **changes)
    OmegaConf.save(OmegaConf.create(stored), run_dir / ".hydra" / "config.yaml")
    (run_dir / "metrics.json").write_text('{"test/acc": 0.75, "val/acc": 0.7}')
    (run_dir / "train.log").write_text("final metrics\n")
    (run_dir / locks.LOCK_FILE).touch()
    path = save_checkpoint(run_dir / "checkpoints" / "last.ckpt", stored, step=3, epochs_done=1)
    return run_dir, path


def interrupted_run(tmp_path: Path, cfg, epochs_done: int, step: int, **record) -> Path:
    """An interrupted run of ``cfg`` with its last.ckpt after ``epochs_done`` epochs."""
    record = {"status": RunState.INTERRUPTED, "stage": "fit", **record}
    run_dir = make_run(tmp_path, "cut", "2026-01-01T00:00:00", **record)
    (run_dir / locks.LOCK_FILE).touch()
    save_checkpoint(run_dir / "checkpoints" / "last.ckpt", stored_config(cfg), step, epochs_done)
    return run_dir


def refused(cfg, monkeypatch, capsys) -> str:
    """The one line ``python train.py`` prints for ``cfg`` where its plan refuses it (exit
    status 1), with nothing read from the data."""
    from treernn.lifecycle import entry, execute

    def no_data(*args, **kwargs):
        raise AssertionError("the data was loaded: the refusal came after the attempt began")

    monkeypatch.setattr(execute, "prepared_datamodule", no_data)
    with pytest.raises(SystemExit) as ended:
        entry.main(cfg)
    assert ended.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_a_differing_seed_leaves_the_finished_run_as_it_was_and_in_the_report(
    tmp_path, monkeypatch, capsys
):
    from treernn.reporting.run_records import load_runs

    cfg = compose_config(tmp_path, "seed=2", "trainer.max_steps=6")  # a budget left to train
    run_dir, path = finished_run(tmp_path, cfg, **{"seed": 141, "trainer.max_steps": 3})
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    before = contents(run_dir)
    line = refused(cfg, monkeypatch, capsys)
    assert line == (
        f"error: resuming {path}: seed=2 differs from the checkpoint's seed=141, but a resumed "
        "run continues the checkpoint's random state; drop the seed override (or give "
        "seed=141), or start a new run"
    )
    assert contents(run_dir) == before
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["done"]  # no directory added
    listed, left_out = load_runs([tmp_path / "outputs"])
    assert [run.path for run in listed] == [run_dir] and left_out == []


def test_a_model_of_other_shapes_is_refused_before_the_run_is_touched(
    tmp_path, monkeypatch, capsys
):
    cfg = compose_config(tmp_path, "ckpt_path=last", "model.hidden_size=50")
    run_dir = interrupted_run(tmp_path, compose_config(tmp_path), epochs_done=1, step=2)
    before = contents(run_dir)
    line = refused(cfg, monkeypatch, capsys)
    path = run_dir / "checkpoints" / "last.ckpt"
    assert line == (
        f"error: resuming {path}: the model built from this config does not match the "
        "checkpoint's weights; these settings differ: model.hidden_size (checkpoint 100, now "
        "50). Drop these overrides, or start a new run"
    )
    assert contents(run_dir) == before


def test_a_budget_below_what_an_interrupted_run_trained_is_refused_by_the_plan(
    tmp_path, monkeypatch, capsys
):
    """Lightning answered this one with a traceback ("You restored a checkpoint with
    current_epoch=5, but you have set Trainer(max_epochs=3)"), also where the run's record names
    a pid that an unrelated process holds now (the run was killed; its record still reads
    "running"): that process has another start time, so the run is not live."""
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        identity = process_identity(unrelated.pid)
        identity["pid_start"] -= 1  # the killed run's process started earlier
        cfg = compose_config(tmp_path, "ckpt_path=last", "trainer.max_epochs=3")
        run_dir = interrupted_run(
            tmp_path,
            cfg,
            epochs_done=5,
            step=2,
            **{**identity, "status": RunState.RUNNING},
        )
        assert not locks.is_live(run_dir)
        before = contents(run_dir)
        with open_dict(cfg):
            cfg.trainer.max_steps = -1
        line = refused(cfg, monkeypatch, capsys)
    finally:
        unrelated.kill()
        unrelated.wait()
    path = run_dir / "checkpoints" / "last.ckpt"
    assert line == (
        f"error: resuming {path}: trainer.max_epochs=3 is below the 5 epochs it has already "
        "trained (5 epochs, step 2); give trainer.max_epochs=5 to end it where it stands, a "
        "larger budget to train it further, or start a new run"
    )
    assert contents(run_dir) == before
    # the budget it has reached resumes it: a run interrupted after training tests
    with open_dict(cfg):
        cfg.trainer.max_epochs = 5
    assert plan_of(cfg).action == "resume"


def test_a_budget_below_the_steps_trained_is_refused(tmp_path):
    cfg = compose_config(tmp_path, "ckpt_path=last")  # trainer=smoke: max_steps=3
    interrupted_run(tmp_path, cfg, epochs_done=0, step=4)
    plan = plan_of(cfg)
    assert plan.action == "refuse"
    assert (
        "trainer.max_steps=3 is below the 4 steps it has already trained (0 epochs, step 4)"
        in str(plan.refusal)
    )
    assert "give trainer.max_steps=4 to end it where it stands" in str(plan.refusal)


def test_a_finished_run_without_a_budget_left_is_left_as_it_was(tmp_path, monkeypatch, capsys):
    cfg = compose_config(tmp_path)
    run_dir, path = finished_run(tmp_path, cfg)
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    before = contents(run_dir)
    line = refused(cfg, monkeypatch, capsys)
    assert line.startswith(f"error: ckpt_path={path}: run {run_dir} finished (1 epochs, step 3;")
    assert contents(run_dir) == before


@pytest.mark.parametrize(
    ("override", "said"),
    [
        (
            "task.module.optimizer._target_=torch.optim.AdamW",
            "task.module.optimizer._target_ changed, but a resumed run keeps the checkpoint's "
            "optimizer",
        ),
        (
            "task.module.scheduler.min_lr=0.1",
            "task.module.scheduler.min_lr=0.1 cannot be applied to the restored "
            "ReduceLROnPlateau (min_lr is not one of its settings)",
        ),
    ],
)
def test_a_new_optimizer_value_the_restored_state_cannot_take_is_refused_by_the_plan(
    override, said, tmp_path
):
    """Refused once training had begun (the restored state is known then), after the attempt
    was recorded in the run; the checkpoint holds that state."""
    cfg = compose_config(tmp_path, "ckpt_path=last", f"++{override}")
    interrupted_run(tmp_path, compose_config(tmp_path), epochs_done=1, step=2)
    plan = plan_of(cfg)
    assert plan.action == "refuse", override
    assert said in str(plan.refusal)


def test_ckpt_path_file_of_a_run_that_is_still_running_is_refused_by_the_plan(tmp_path):
    cfg = compose_config(tmp_path)
    run_dir = interrupted_run(tmp_path, cfg, epochs_done=1, step=2)
    with open_dict(cfg):
        cfg.ckpt_path = str(run_dir / "checkpoints" / "last.ckpt")
    lock = locks.RunLock(run_dir)
    lock.acquire()
    try:
        plan = plan_of(cfg)
    finally:
        lock.release()
    assert plan.action == "refuse"
    assert f"run {run_dir} is still running" in str(plan.refusal)


def test_mode_test_of_a_model_that_does_not_fit_its_weights_is_refused_by_the_plan(tmp_path):
    cfg = compose_config(tmp_path, "mode=test", "model.hidden_size=60")
    run_dir, path = finished_run(tmp_path, compose_config(tmp_path))
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    plan = plan_of(cfg, overrides=["mode=test", "model.hidden_size=60", f"ckpt_path={path}"])
    assert plan.action == "refuse"
    assert str(plan.refusal).startswith(
        f"mode=test: the model built with model.hidden_size does not match the weights of {path} "
    )
    assert plan_of(compose_config(tmp_path, "mode=test", f"ckpt_path={path}")).action == "test"


def test_a_refused_resume_of_a_requeued_run_leaves_its_own_record_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """A requeued job (and a sweep job) resumes in its own directory: a refusal there is not
    recorded over the earlier attempt's record."""
    cfg = compose_config(tmp_path, run="slurm-7-0")
    own = make_run(tmp_path, "slurm-7-0", "2026-01-01T00:00:00", status=RunState.REQUEUED)
    stored = stored_config(cfg, seed=7)
    save_checkpoint(own / "checkpoints" / "last.ckpt", stored, step=2)
    before = contents(own)
    line = refused(cfg, monkeypatch, capsys)
    assert "seed=141 differs from the checkpoint's seed=7" in line
    assert contents(own) == before


def test_data_that_does_not_fit_the_checkpoint_leaves_the_run_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """The data's sizes are known only once it is read: a resume whose data gives the task
    another vocabulary size is refused before its attempt is recorded in the run it resumes (the
    executor recorded it first, then refused it naming no setting)."""
    from treernn.lifecycle import entry, execute

    cfg = compose_config(tmp_path, "ckpt_path=last", "task.datamodule.train_limit=50")
    run_dir = interrupted_run(tmp_path, compose_config(tmp_path), epochs_done=1, step=2)
    kwargs = logic_kwargs()
    kwargs["vocab"].add("xor")
    kwargs["vocab_size"] = len(kwargs["vocab"])

    class Data:
        def task_kwargs(self):
            return kwargs

    monkeypatch.setattr(execute, "prepared_datamodule", lambda *args, **kwargs: Data())
    before = contents(run_dir)
    with pytest.raises(SystemExit) as ended:
        entry.main(cfg)
    assert ended.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: resuming {run_dir / 'checkpoints' / 'last.ckpt'}: the data gives the model "
        "other sizes than its checkpoint was trained with (vocab_size 11 (checkpoint 10)); give "
        "the run's data settings (task.datamodule.*; these differ: task.datamodule.train_limit "
        "(checkpoint None, now 50)), or start a new run"
    )
    assert contents(run_dir) == before


@pytest.mark.parametrize("mode", ["fit+test", "test"])
def test_a_fifo_as_the_runs_kernel_choices_is_refused_by_the_plan_without_waiting(
    tmp_path, monkeypatch, capsys, mode
):
    cfg = compose_config(tmp_path, "ckpt_path=last", f"mode={mode}")
    run_dir = interrupted_run(tmp_path, compose_config(tmp_path), epochs_done=1, step=2)
    os.mkfifo(run_dir / ".hydra" / "kernel_choices.json")  # opened for reading it would block
    before = sorted(path.name for path in run_dir.rglob("*"))
    line = refused(cfg, monkeypatch, capsys)
    assert line == (
        f"error: {run_dir / '.hydra' / 'kernel_choices.json'}: is a FIFO (named pipe), not a "
        "regular file; restore it from a copy, or remove it to choose again (the numbers may "
        "then differ in their last digits from the run's)"
    )
    assert sorted(path.name for path in run_dir.rglob("*")) == before
