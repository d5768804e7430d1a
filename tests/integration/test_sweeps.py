"""Sweeps that survive interruptions, run here (the SLURM ones are in test_slurm.py): a sweep
killed halfway and resumed gives the table of an uninterrupted one, a changed command is refused,
a failed job runs again, and ``ckpt_path=last`` finds a sweep's job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.integration.helpers import REPO_ROOT, one_line_error, run_cli, tiny_logic, treernn_cli
from treernn.lifecycle import records

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

#: a tiny logic classifier, budget in updates, as the tables run
LOGIC = [*tiny_logic(validate_every=20, max_steps=60), "threads=1"]
#: three jobs, two at a time (Hydra's joblib launcher, as the tables run)
SWEEP = [*LOGIC, "seed=1,2,3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def _sweep_dir(log_dir: Path, name: str) -> Path:
    return log_dir / "multirun" / "logic" / "lstm" / name


def _records(job_dir: Path) -> dict[str, bytes]:
    """A job's own log and Hydra's record of how it was composed, byte for byte."""
    paths = [job_dir / "train.log", *sorted((job_dir / ".hydra").glob("*.yaml"))]
    assert len(paths) == 4, paths
    return {path.name: path.read_bytes() for path in paths}


def _metrics(job_dir: Path) -> dict[str, float]:
    values = json.loads((job_dir / "metrics.json").read_text())
    return {k: v for k, v in values.items() if "tokens_per_sec" not in k and k[:3] != "lr-"}


def test_a_sweep_killed_halfway_resumes_to_the_table_of_an_uninterrupted_one(tmp_path):
    whole = run_cli(["-m", *SWEEP, f"paths.log_dir={tmp_path / 'whole'}", "sweep_id=s"])
    assert whole.returncode == 0, whole.stderr[-3000:]

    sweep_dir = _stopped_sweep(tmp_path / "killed", os.killpg)

    status = treernn_cli("sweep", "status", str(sweep_dir))
    assert status.returncode == 0, status.stderr[-3000:]
    assert "interrupted" in status.stdout and "its process is gone" not in status.stdout
    resumed = treernn_cli("sweep", "resume", str(sweep_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "sweep finished: 3 jobs" in resumed.stdout
    for job in ("0", "1", "2"):
        assert _metrics(sweep_dir / job) == _metrics(_sweep_dir(tmp_path / "whole", "s") / job)
    table = (sweep_dir / "table.md").read_text()
    assert table == (_sweep_dir(tmp_path / "whole", "s") / "table.md").read_text()

    # all finished: resuming again skips every job, leaves their records as they were (Hydra
    # writes no .hydra/ and no train.log line into a finished job) and prints the same table
    kept = {job: _records(sweep_dir / job) for job in ("0", "1", "2")}
    again = treernn_cli("sweep", "resume", str(sweep_dir))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "job 2: finished before, skipped" in again.stdout + again.stderr
    assert {job: _records(sweep_dir / job) for job in ("0", "1", "2")} == kept
    assert (sweep_dir / "table.md").read_text() == table


def _stopped_with_checkpoints(sweep_dir: Path, stderr: str) -> None:
    """Every job that ran when the sweep was stopped recorded it, having saved a checkpoint
    where it stopped (joblib killed them before they could, 2026-12-01: their records said
    "running" and they resumed from their last validation); none finished them all."""
    found = [records.read_status(job) for job in sorted(sweep_dir.glob("[0-9]"))]
    states = [record.get("status") for record in found if record]
    assert "interrupted" in states and set(states) <= {"interrupted", "finished"}, states
    assert len(states) < 3 or "interrupted" in states
    for record in found:
        if record.get("status") == "interrupted":
            error = record["error"]
            assert (
                "interrupted by SIGINT at" in error
                and "saved" in error
                or ("before training started" in error)
            ), error
    assert "the sweep stops; each running job saves a checkpoint" in stderr, stderr[-3000:]


def _start_sweep(log_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    sweep = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "train.py"), "-m", *SWEEP, f"paths.log_dir={log_dir}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the whole sweep: its process group
    )
    deadline = time.monotonic() + 300
    while not list(log_dir.glob("multirun/logic/lstm/*/[0-9]/checkpoints/last.ckpt")):
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return sweep


def _stopped_sweep(log_dir: Path, kill) -> Path:
    """A sweep started, and sent SIGINT by ``kill`` (os.killpg: its process group, as Ctrl-C
    does; os.kill: the launching process alone) after its first checkpoint; its directory."""
    sweep = _start_sweep(log_dir)
    kill(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, (stdout[-3000:], stderr[-3000:])
    (sweep_dir,) = log_dir.glob("multirun/logic/lstm/*")
    _stopped_with_checkpoints(sweep_dir, stderr)
    return sweep_dir


def test_a_signal_to_the_launching_process_alone_stops_the_jobs_with_checkpoints(tmp_path):
    """``kill -INT <pid of python train.py -m>`` (not its process group): the joblib workers
    did not get the signal; they read the sweep's stop file and stop as if they had."""
    sweep_dir = _stopped_sweep(tmp_path, os.kill)
    assert not (sweep_dir / ".stopping").exists()
    resumed = treernn_cli("sweep", "resume", str(sweep_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "sweep finished: 3 jobs" in resumed.stdout


def _ctrl_c_when(log_dir: Path, budgets: str, ready: list[str], workers: int = 2) -> Path:
    """A joblib sweep of ``workers`` workers over ``trainer.max_steps=<budgets>``, sent Ctrl-C
    (SIGINT to its process group) once every status in ``ready`` holds (``"<job>:finished"``,
    ``"<job>:checkpoint"``); it exits with 130 and no traceback. Its directory."""
    args = [*LOGIC, "hydra/launcher=joblib", f"hydra.launcher.n_jobs={workers}"]
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    sweep = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "train.py"), "-m", *args, f"trainer.max_steps={budgets}"]
        + [f"paths.log_dir={log_dir}"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def holds(condition: str) -> bool:
        job, state = condition.split(":")
        found = list(log_dir.glob(f"multirun/logic/lstm/*/{job}"))
        if state == "finished":
            return bool(found) and records.read_status(found[0]).get("status") == "finished"
        return bool(found) and (found[0] / "checkpoints" / "last.ckpt").is_file()

    deadline = time.monotonic() + 300
    while not all(holds(condition) for condition in ready):
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 130, (stdout[-3000:], stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    (sweep_dir,) = log_dir.glob("multirun/logic/lstm/*")
    return sweep_dir


def _saved_on_sigint(job_dir: Path) -> None:
    record = records.read_status(job_dir)
    assert record["status"] == "interrupted", record
    assert "interrupted by SIGINT at" in record["error"] and "saved" in record["error"]


def test_ctrl_c_with_an_idle_worker_stops_the_running_job_with_a_checkpoint(tmp_path):
    """Ctrl-C when a joblib worker waits for work (it has finished its job; or the sweep has
    fewer jobs than workers): the idle worker took it as KeyboardInterrupt, joblib saw a broken
    pool (a traceback) and killed the busy worker before it saved; its job was left "running"
    without the checkpoint it announced (seen 2026-12-02)."""
    sweep_dir = _ctrl_c_when(tmp_path / "a", "20,4000", ["0:finished", "1:checkpoint"])
    _saved_on_sigint(sweep_dir / "1")
    # one job, two workers asked for: one worker is started
    sweep_dir = _ctrl_c_when(tmp_path / "b", "4000", ["0:checkpoint"])
    _saved_on_sigint(sweep_dir / "0")
    assert OmegaConf.load(sweep_dir / "multirun.yaml").hydra.launcher.n_jobs == 1
    # one worker: joblib runs the jobs in the launching process, where the job's own handler
    # took the signal; the job stopped and the sweep went on to its next job
    sweep_dir = _ctrl_c_when(tmp_path / "c", "4000,4001", ["0:checkpoint"], workers=1)
    _saved_on_sigint(sweep_dir / "0")
    assert records.read_status(sweep_dir / "1").get("status") is None


def test_a_changed_sweep_is_refused_and_a_failed_job_runs_again(tmp_path, data_dir):
    args = ["-m", *LOGIC, "seed=1,2", f"paths.log_dir={tmp_path}", "sweep_id=c"]
    assert run_cli(args).returncode == 0
    # job 1 as a crash would have left it
    sweep_dir = _sweep_dir(tmp_path, "c")
    records.write_status(sweep_dir / "1", status="failed", error="RuntimeError: a crash")

    changed = run_cli([*args[:-1], "trainer.max_steps=80", "sweep_id=c"])
    one_line_error(changed, f"sweep {sweep_dir} was started with", "added: trainer.max_steps=80")

    finished = _records(sweep_dir / "0")
    # from elsewhere, as from another checkout (a relative TREERNN_DATA_DIR, as CI's, made absolute)
    rerun = run_cli(args, cwd=tmp_path, env={"TREERNN_DATA_DIR": str(data_dir)})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = (sweep_dir / "1" / "train.log").read_text()
    assert "job 1: failed: RuntimeError: a crash; running it again from the start" in log
    assert "job 0: finished before, skipped" in rerun.stdout + rerun.stderr
    assert _records(sweep_dir / "0") == finished
    record = records.read_status(sweep_dir / "1")
    assert record["status"] == "finished" and record["attempts"][0]["status"] == "failed"


def test_last_finds_the_newest_job_of_a_sweep(tmp_path):
    args = [*LOGIC, "seed=5", f"paths.log_dir={tmp_path}"]
    assert run_cli(["-m", *args, "sweep_id=l"]).returncode == 0
    job = _sweep_dir(tmp_path, "l") / "0"
    more = run_cli([*args, "ckpt_path=last", "trainer.max_steps=80"])
    assert more.returncode == 0, more.stderr[-3000:]
    assert f"resuming {job} from {job / 'checkpoints' / 'last.ckpt'}" in more.stdout + more.stderr
    assert records.read_status(job)["status"] == "finished"


def test_an_archived_sweep_restored_on_a_machine_that_lost_outputs_skips_its_jobs(tmp_path):
    """`sweep archive` keeps the finished jobs without weights; after outputs/ is gone,
    `sweep restore` and the same command: the jobs are skipped (nothing trains again), and the
    table and `report claims`-style reading work from the copy alone."""
    args = ["-m", *LOGIC, "seed=1,2", f"paths.log_dir={tmp_path / 'outputs'}", "sweep_id=a"]
    assert run_cli(args).returncode == 0
    sweep_dir = _sweep_dir(tmp_path / "outputs", "a")
    before = {job: _metrics(sweep_dir / job) for job in ("0", "1")}
    kept = tmp_path / "results" / "a"
    archived = treernn_cli("sweep", "archive", str(sweep_dir), str(kept))
    assert archived.returncode == 0, archived.stderr[-3000:]
    assert "archived 2 finished jobs" in archived.stdout
    assert not list(kept.rglob("*.ckpt"))
    table = treernn_cli("report", "table", str(kept))
    assert table.returncode == 0 and "| lstm |" in table.stdout, table.stderr[-3000:]

    shutil.rmtree(tmp_path / "outputs")  # the machine and its outputs/ are gone
    restored = treernn_cli("sweep", "restore", str(kept), str(sweep_dir))
    assert restored.returncode == 0, restored.stderr[-3000:]
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "sweep finished: 2 jobs" in again.stdout
    for job in ("0", "1"):
        assert f"job {job}: finished before, skipped" in again.stdout + again.stderr
        assert not (sweep_dir / job / "checkpoints").exists()  # nothing trained again
        assert _metrics(sweep_dir / job) == before[job]


def test_a_finished_job_whose_record_was_cut_short_is_named_and_never_trained_again(tmp_path):
    """A truncated status.json of a finished job read as 'not started', and the resumed sweep
    trained the job again over its files (an epoch000-v1.ckpt beside the old checkpoint)."""
    args = ["-m", *LOGIC, "seed=1,2", f"paths.log_dir={tmp_path}", "sweep_id=d"]
    assert run_cli(args).returncode == 0
    sweep_dir = _sweep_dir(tmp_path, "d")
    job = sweep_dir / "1"
    record = (job / "status.json").read_bytes()
    (job / "status.json").write_bytes(record[: len(record) // 2])
    checkpoints = sorted(path.name for path in (job / "checkpoints").iterdir())
    status = treernn_cli("sweep", "status", str(sweep_dir))
    assert status.returncode == 0, status.stderr[-3000:]
    assert f"job 1: damaged record: {job / 'status.json'}: not valid JSON" in status.stdout
    resumed = treernn_cli("sweep", "resume", str(sweep_dir))
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr
    assert f"sweep job {job} left as it is: {job / 'status.json'}" in resumed.stderr
    assert "job 0: finished before, skipped" in resumed.stdout + resumed.stderr
    assert sorted(path.name for path in (job / "checkpoints").iterdir()) == checkpoints
    assert (job / "status.json").read_bytes() == record[: len(record) // 2]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, byte for byte (its lock files aside: a resume takes them)."""
    files = [path for path in folder.rglob("*") if path.is_file() and path.name != ".lock"]
    return {str(path.relative_to(folder)): path.read_bytes() for path in files}


def test_a_restored_sweeps_recorded_logging_and_directories_are_never_used(tmp_path):
    """A sweep handed over whose multirun.yaml records Hydra settings naming an outside file or
    folder: a log handler appending to (or, with mode w, replacing) an outside file, job and
    .hydra directories put outside. ``sweep resume`` refuses each in one line before Hydra
    starts: the outside file stays byte-identical, the outside folder holds only it, and the
    sweep's files are as they were. Without them in its overrides the same sweep resumes."""
    args = ["-m", *LOGIC, "seed=1", f"paths.log_dir={tmp_path / 'outputs'}", "sweep_id=h"]
    assert run_cli(args).returncode == 0
    sweep_dir = _sweep_dir(tmp_path / "outputs", "h")
    records.write_status(sweep_dir / "0", status="failed", error="RuntimeError: a crash")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.log"
    victim.write_text("the victim's own lines\n")
    saved = (sweep_dir / "multirun.yaml").read_text()
    for setting in (
        f"hydra.job_logging.handlers.file.filename={victim}",
        f"+hydra.job_logging.handlers.w={{class:logging.FileHandler,filename:{victim},mode:w}}",
        "hydra.sweep.subdir=../../..",
        f"hydra.output_subdir={outside}/.hydra",
        f"hydra.sweep.dir={outside}",
    ):
        config = OmegaConf.create(saved)
        config.hydra.overrides.hydra.append(setting)
        OmegaConf.save(config, sweep_dir / "multirun.yaml")
        before = _tree(sweep_dir)
        resumed = treernn_cli("sweep", "resume", str(sweep_dir))
        one_line_error(resumed, f"records the Hydra setting {setting!r}", "not by its record")
        assert victim.read_text() == "the victim's own lines\n"
        assert sorted(path.name for path in outside.iterdir()) == ["victim.log"]
        assert _tree(sweep_dir) == before
        assert sorted(path.name for path in tmp_path.iterdir()) == ["outputs", "outside"]
    # the same settings in the record's composed config (its hydra: node) and in the job's
    # .hydra/hydra.yaml are never read: Hydra composes the resumed sweep from this checkout's
    # conf/ and the overrides passed on
    for path in (sweep_dir / "multirun.yaml", sweep_dir / "0" / ".hydra" / "hydra.yaml"):
        config = OmegaConf.create(saved if path.name == "multirun.yaml" else path.read_text())
        config.hydra.job_logging.handlers.file.update(filename=str(victim), mode="w")
        config.hydra.output_subdir = str(outside / ".hydra")
        config.hydra.sweep.subdir = "../../.."
        OmegaConf.save(config, path)
    resumed = treernn_cli("sweep", "resume", str(sweep_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records.read_status(sweep_dir / "0")["status"] == "finished"
    assert "job 0: failed: RuntimeError: a crash" in (sweep_dir / "0" / "train.log").read_text()
    assert victim.read_text() == "the victim's own lines\n"
    assert sorted(path.name for path in outside.iterdir()) == ["victim.log"]
