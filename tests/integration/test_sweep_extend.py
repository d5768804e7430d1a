"""``sweep extend``: a sweep trained further as a new sweep of a larger budget gives the metrics
and table of a fresh sweep of that budget, keeps the old sweep as it was, and refuses what it
cannot do (another change than the budget, a budget already used up, a job without checkpoint)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.integration.helpers import one_line_error, run_cli, tiny_logic, treernn_cli
from treernn.lifecycle import records

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

#: two jobs of a tiny logic classifier validated every 20 updates, two at a time as tables run
SWEEP = [
    *tiny_logic(validate_every=20),
    "threads=1",
    "seed=1,2",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
]


def _sweep_dir(log_dir: Path, name: str) -> Path:
    return log_dir / "multirun" / "logic" / "lstm" / name


def _metrics(job_dir: Path) -> dict[str, float]:
    values = json.loads((job_dir / "metrics.json").read_text())
    return {k: v for k, v in values.items() if "tokens_per_sec" not in k and k[:3] != "lr-"}


def _validated_steps(job_dir: Path) -> list[int]:
    with open(job_dir / "csv" / "metrics.csv") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row.get("val/acc")]


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_an_extended_sweep_gives_the_metrics_of_a_fresh_sweep_of_its_budget(tmp_path):
    fresh = run_cli(
        ["-m", *SWEEP, "trainer.max_steps=60", f"paths.log_dir={tmp_path}", "sweep_id=f"]
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    short = run_cli(
        ["-m", *SWEEP, "trainer.max_steps=40", f"paths.log_dir={tmp_path}", "sweep_id=s"]
    )
    assert short.returncode == 0, short.stderr[-3000:]
    old = _sweep_dir(tmp_path, "s")
    before = {job: _files(old / job) for job in ("0", "1")}

    # refused before anything is written: another change than the budget, a budget used up
    other = treernn_cli("sweep", "extend", str(old), "model.dropout=0.5", "--name", "x")
    one_line_error(other, "sweep extend changes only the budget", "not 'model.dropout=0.5'")
    used = treernn_cli("sweep", "extend", str(old), "trainer.max_steps=40", "--name", "x")
    one_line_error(used, "trainer.max_steps=40 leaves job", "nothing to train")
    assert not _sweep_dir(tmp_path, "x").exists()

    extended = treernn_cli("sweep", "extend", str(old), "trainer.max_steps=60", "--name", "e")
    assert extended.returncode == 0, extended.stderr[-3000:]
    new = _sweep_dir(tmp_path, "e")
    assert f"extended 2 jobs into {new}" in extended.stdout
    assert "sweep finished: 2 jobs" in extended.stdout
    for job in ("0", "1"):
        out = extended.stdout + extended.stderr
        assert f"job {job}: extended; resuming from {new / job / 'checkpoints'}" in out
        # the metrics of the fresh sweep of 60 updates, to the last digit
        assert _metrics(new / job) == _metrics(_sweep_dir(tmp_path, "f") / job)
        # the whole history: the old job's validations, then the new ones
        assert _validated_steps(new / job) == _validated_steps(_sweep_dir(tmp_path, "f") / job)
        record = records.read_status(new / job)
        assert record["status"] == "finished"
        assert record["extended_from"]["step"] == 40
        assert record["extended_from"]["job"] == str((old / job).resolve())
        assert "trainer.max_steps=60" in record["overrides"]
        assert len(record["machines"]) == 2  # the old job's attempt and the extension's
        # each attempt's CPU time: the old job's 40 updates and the extension's 20
        assert all(attempt["cpu_seconds"] > 0 for attempt in record["machines"])
        assert _files(old / job) == before[job]  # the old sweep is left as it was
    assert (new / "table.md").read_text() == (_sweep_dir(tmp_path, "f") / "table.md").read_text()

    # prepared only: the status gives each job the budget it will run to, and where it came from
    prepared = treernn_cli(
        "sweep", "extend", str(old), "trainer.max_steps=80", "--name", "n", "--no-run"
    )
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    status = treernn_cli("sweep", "status", str(_sweep_dir(tmp_path, "n"))).stdout.splitlines()
    for job in ("0", "1"):
        (line,) = [line for line in status if line.startswith(f"job {job} [")]
        assert "trainer.max_steps=80" in line and "sweep_id=n]" in line, line
        assert line.endswith(
            f"]: extended, newest checkpoint at step 40 of 80 (from {(old / job).resolve()}); "
            "not resumed yet"
        ), line
    assert status[-1].endswith(": 2 extended")

    # the name is taken now; and an archive keeps no checkpoint of a finished job
    again = treernn_cli("sweep", "extend", str(old), "trainer.max_steps=80", "--name", "e")
    one_line_error(again, f"sweep extend: {new} exists", "sweep resume")
    kept = tmp_path / "kept" / "s"
    assert treernn_cli("sweep", "archive", str(old), str(kept)).returncode == 0
    archived = treernn_cli("sweep", "extend", str(kept), "trainer.max_steps=80", "--name", "a")
    one_line_error(archived, "has no checkpoint to continue from", "trainer.max_steps=80")
