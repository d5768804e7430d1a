"""``python -m treernn sweep status|resume`` on a sweep directory written by hand: what each job's
record says, and the command that continues the sweep (the real sweeps run in
tests/integration/test_sweeps.py, in the slow tier)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from treernn import runs
from treernn.commands import main as treernn_main


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
        runs.write_status(job, **fields)
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


def test_resume_reruns_the_saved_command_under_the_sweeps_name(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert treernn_main(["sweep", "resume", str(sweep), "--dry-run"]) == 0
    # the old sweep_id is dropped and the directory's name given, after Hydra's own overrides
    assert capsys.readouterr().out.strip() == (
        f"cd {tmp_path} && python train.py -m hydra.launcher.n_jobs=2 table=logic seed=1,2 "
        "sweep_id=mine"
    )


def test_a_directory_that_is_not_a_sweep_is_one_line(tmp_path, capsys):
    assert treernn_main(["sweep", "status", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: {tmp_path} is not a sweep directory (no multirun.yaml)")
