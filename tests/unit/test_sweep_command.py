"""``python -m treernn sweep status|resume`` on a sweep directory written by hand: what each job's
record says, and the command that continues the sweep (the real sweeps run in
tests/integration/test_sweeps.py, in the slow tier)."""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import OmegaConf

from treernn.commands import main as treernn_main
from treernn.commands.sweep import _step_budget, entry_script
from treernn.lifecycle import records, runs


def make_sweep(root: Path) -> Path:
    sweep = root / "tables" / "logic" / "mine"
    saved = {
        "hydra": {
            "overrides": {
                "task": ["table=logic", "seed=1,2", "sweep_id=mine"],
                "hydra": ["hydra.launcher.n_jobs=2"],
            },
            "runtime": {"cwd": str(root)},
        }
    }
    sweep.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(saved), sweep / "multirun.yaml")
    for number, seed, fields in (
        (0, 1, {"status": "finished"}),
        (1, 2, {"status": "failed", "error": "DataError: train0 is missing"}),
    ):
        job = sweep / str(number)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- table=logic\n- seed={seed}\n")
        records.write_status(job, **fields)
    return sweep


def test_status_lists_each_job_with_its_record_and_counts_them(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    assert treernn_main(["sweep", "status", str(sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "job 0 [table=logic seed=1]: finished",
        "job 1 [table=logic seed=2]: failed: DataError: train0 is missing",
        f"2 jobs in {sweep}: 1 failed, 1 finished",
    ]


def test_the_budget_a_running_job_is_shown_against(tmp_path):
    """``sweep status`` prints "newest checkpoint at step N of <max_steps>": the override wins
    (an extended job's record has its new budget while its .hydra/ is the old sweep's), else the
    saved config; no limit (-1) or an interpolation gives no budget."""
    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    assert _step_budget(job, ["table=tdlm", "seed=1"]) is None  # no config saved
    (job / ".hydra" / "config.yaml").write_text("trainer:\n  max_steps: 7680\n")
    assert _step_budget(job, ["table=tdlm", "seed=1"]) == 7680
    assert _step_budget(job, ["table=tdlm", "trainer.max_steps=24000", "sweep_id=e"]) == 24000
    assert _step_budget(job, ["trainer.max_steps=100", "++trainer.max_steps=200"]) == 200
    assert _step_budget(job, ["model.trainer.max_steps=5"]) == 7680  # another key
    assert _step_budget(job, ["trainer.max_steps=-1"]) is None
    (job / ".hydra" / "config.yaml").write_text("trainer:\n  max_steps: ${task.steps}\n")
    assert _step_budget(job, ["seed=1"]) is None


def test_status_counts_the_jobs_not_started_and_tells_a_script_whether_all_finished(
    tmp_path, capsys
):
    """With the sweeper in multirun.yaml the command's job count is known (here 2 x 3 seeds on the
    command line over the table's 2 models = 6): the jobs without a directory yet are counted, and
    --exit-code exits 1 until all 6 have finished."""
    sweep = make_sweep(tmp_path)
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    saved.hydra.sweeper.params = {"model": "onlstm,lstm", "seed": "1,2"}
    saved.hydra.overrides.task = ["table=logic", "seed=1,2,3", "sweep_id=mine"]
    OmegaConf.save(saved, sweep / "multirun.yaml")
    assert treernn_main(["sweep", "status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"6 jobs in {sweep}: 1 failed, 1 finished, 4 not started yet"
    )
    assert treernn_main(["sweep", "status", "--exit-code", str(sweep)]) == 1
    for number in range(6):
        job = sweep / str(number)
        (job / ".hydra").mkdir(parents=True, exist_ok=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- seed={number}\n")
        records.write_status(job, status="running" if number == 5 else "finished")
    assert treernn_main(["sweep", "status", "--exit-code", str(sweep)]) == 1
    records.write_status(sweep / "5", status="finished")
    assert treernn_main(["sweep", "status", "--exit-code", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"6 jobs in {sweep}: 6 finished"


def test_exit_code_of_a_sweep_archived_before_any_job_started_is_1(tmp_path):
    """A kept sweep with only its multirun.yaml and no sweeper to count its jobs from: nothing
    is known to have finished, so a script must not skip it."""
    sweep = make_sweep(tmp_path)
    for job in ("0", "1"):
        shutil.rmtree(sweep / job)
    assert treernn_main(["sweep", "status", "--exit-code", str(sweep)]) == 1


def _checkout(root: Path) -> None:
    """What makes a directory a treernn checkout for ``sweep resume``."""
    (root / "conf").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "config.yaml").write_text("defaults: []\n")
    (root / "train.py").write_text("raise SystemExit('the sweep folder's train.py ran')\n")


def test_resume_reruns_the_saved_command_under_the_sweeps_name(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    assert treernn_main(["sweep", "resume", str(sweep), "--dry-run"]) == 0
    # the old sweep_id is dropped and the directory's name given, after Hydra's own overrides;
    # the script is this project's own train.py, never the one in the recorded directory
    assert capsys.readouterr().out.strip() == (
        f"cd {tmp_path} && python {entry_script()} -m hydra.launcher.n_jobs=2 table=logic "
        "seed=1,2 sweep_id=mine"
    )


def test_a_directory_that_is_not_a_sweep_is_one_line(tmp_path, capsys):
    assert treernn_main(["sweep", "status", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: {tmp_path} is not a sweep directory (no multirun.yaml)")


def test_archive_keeps_finished_jobs_without_weights_and_a_resumed_sweep_skips_them(
    tmp_path, capsys
):
    from treernn.lifecycle.plan import plan_sweep_job

    sweep = make_sweep(tmp_path)
    (sweep / "table.md").write_text("| model |\n")
    finished = sweep / "0"
    (finished / "metrics.json").write_text('{"test/acc": 0.5}')
    (finished / "csv").mkdir()
    (finished / "csv" / "metrics.csv").write_text("step,val/acc\n9,0.5\n")
    (finished / "checkpoints").mkdir()
    (finished / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (finished / "hpc_ckpt_1.ckpt").write_bytes(b"weights")
    (finished / "wandb").mkdir()
    (finished / "wandb" / "run.wandb").write_bytes(b"log")
    copy = tmp_path / "results" / "logic" / "mine"
    assert treernn_main(["sweep", "archive", str(sweep), str(copy)]) == 0
    out = capsys.readouterr().out
    assert f"archived 1 finished jobs of {sweep} in {copy}" in out
    assert "not archived (not finished): jobs 1" in out
    kept = sorted(str(path.relative_to(copy)) for path in copy.rglob("*") if path.is_file())
    assert kept == [
        "0/.hydra/overrides.yaml", "0/csv/metrics.csv", "0/metrics.json", "0/status.json",
        "multirun.yaml", "table.md",
    ]  # fmt: skip
    # on a machine that lost outputs/: the copy put back, the job is skipped with its metrics
    restored = tmp_path / "elsewhere" / "mine"
    restored.parent.mkdir()
    shutil.copytree(copy, restored)
    plan = plan_sweep_job(restored / "0", ["table=logic", "seed=1"])
    assert (plan.action, plan.metrics) == ("skip", {"test/acc": 0.5})


def test_restore_adds_what_the_sweep_lacks_and_replaces_nothing(tmp_path, capsys):
    copy = make_sweep(tmp_path / "kept")
    (copy / "0" / "metrics.json").write_text('{"test/acc": 0.5}')
    sweep = tmp_path / "outputs" / "mine"
    (sweep / "1").mkdir(parents=True)
    (sweep / "1" / "status.json").write_text('{"status": "running"}')  # this machine's own
    assert treernn_main(["sweep", "restore", str(copy), str(sweep)]) == 0
    assert capsys.readouterr().out.strip() == f"restored 5 files of {copy} into {sweep}"
    assert (sweep / "0" / "metrics.json").read_text() == '{"test/acc": 0.5}'
    assert records.read_status(sweep / "0")["status"] == "finished"
    assert (sweep / "1" / "status.json").read_text() == '{"status": "running"}'
    assert (sweep / "1" / ".hydra" / "overrides.yaml").is_file()


def _checkpoint(path: Path, step: int, best: Path | None = None) -> None:
    """A checkpoint as treernn writes it, as far as ``newest_complete_checkpoint`` reads it;
    ``best``: the best checkpoint its ModelCheckpoint state names."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    callbacks = {"ModelCheckpoint{'monitor': 'val/acc'}": {"best_model_path": str(best or "")}}
    saved = {"global_step": step, "epoch": 0, "treernn": {"config": {}}, "state_dict": {}}
    torch.save({**saved, "callbacks": callbacks}, path)


def test_archive_unfinished_keeps_a_running_job_with_its_newest_and_best_checkpoint(
    tmp_path, capsys
):
    """--unfinished: a job still running is kept with the checkpoint a resumed run continues
    from and the best one it names (not the older ones, not a damaged one), so that a machine
    that lost outputs/ resumes it; once it has finished, its kept checkpoints leave the copy.
    Without the flag, as before."""
    sweep = make_sweep(tmp_path)
    running = sweep / "1"
    records.write_status(running, status="running")
    (running / "csv").mkdir()
    (running / "csv" / "metrics.csv").write_text("step,val/acc\n9,0.5\n")
    _checkpoint(running / "checkpoints" / "epoch000.ckpt", 300)
    _checkpoint(running / "checkpoints" / "epoch001.ckpt", 500)  # the best
    _checkpoint(
        running / "checkpoints" / "last.ckpt", 900, best=running / "checkpoints" / "epoch001.ckpt"
    )
    (running / "checkpoints" / "epoch002.ckpt").write_bytes(b"half written")  # damaged
    copy = tmp_path / "results" / "mine"
    assert treernn_main(["sweep", "archive", str(sweep), str(copy)]) == 0
    assert not (copy / "1").exists()
    capsys.readouterr()
    assert treernn_main(["sweep", "archive", "--unfinished", str(sweep), str(copy)]) == 0
    out = capsys.readouterr().out
    assert "archived unfinished, with their newest and best checkpoints: jobs 1 (step 900)" in out
    # and the best one that the newest names (the one its test reads), not the others
    assert sorted(p.name for p in (copy / "1" / "checkpoints").iterdir()) == [
        "epoch001.ckpt",
        "last.ckpt",
    ]
    # archived again with no new checkpoint: the kept copy is not written again
    inode = (copy / "1" / "checkpoints" / "last.ckpt").stat().st_ino
    assert treernn_main(["sweep", "archive", "--unfinished", str(sweep), str(copy)]) == 0
    assert (copy / "1" / "checkpoints" / "last.ckpt").stat().st_ino == inode
    capsys.readouterr()
    # restored on a machine that lost outputs/: the job resumes from step 900
    restored = tmp_path / "elsewhere" / "mine"
    assert treernn_main(["sweep", "restore", str(copy), str(restored)]) == 0
    info, _ = runs.newest_complete_checkpoint(restored / "1")
    assert info.global_step == 900
    assert treernn_main(["sweep", "status", "--exit-code", str(copy)]) == 1
    # the job finishes: the copy keeps its results and drops the weights
    records.write_status(running, status="finished")
    (running / "metrics.json").write_text('{"test/acc": 0.6}')
    assert treernn_main(["sweep", "archive", "--unfinished", str(sweep), str(copy)]) == 0
    assert not (copy / "1" / "checkpoints").exists()
    assert (copy / "1" / "metrics.json").read_text() == '{"test/acc": 0.6}'
