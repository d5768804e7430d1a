"""Records people hand you are data, and a damaged one is named: every reader of a run's or a
sweep's files (status.json, metrics.json, metrics.csv, multirun.yaml, overrides.yaml, tree files)
answers a damaged file with one line ``error: <file>: <what is wrong>; <what to do>``, a finished
job whose record was cut short is never run again over its files, and an archive restored from
someone else neither writes through links nor runs code it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from treernn.commands import main as treernn_main
from treernn.lifecycle import records
from treernn.lifecycle.plan import plan_sweep_job
from treernn.lifecycle.records import (
    DAMAGED,
    DamagedRecord,
    peek_global_step,
    read_metrics,
    read_metrics_csv,
    read_multirun,
    read_overrides,
    read_status,
)
from treernn.lifecycle.sweeps.layout import DamagedJob

from ..commands.test_sweep import _checkout, make_sweep


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- the readers
@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"[1, 2]", "holds a JSON list, not an object"),
        (b'{"status": "finished", "sta', "not valid JSON (cut short?)"),
        (b'{"status": "fin\xe9shed"}', "not UTF-8 text (byte 15 is 0xe9)"),
        (b"", "not valid JSON (cut short?)"),
    ],
)
def test_a_damaged_status_record_is_named_never_read_as_no_record(tmp_path, content, what):
    (tmp_path / "status.json").write_bytes(content)
    with pytest.raises(DamagedRecord) as caught:
        read_status(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'status.json'}: {what}")
    assert message.endswith("; restore it from a copy of the run (python -m treernn sweep "
                            "restore <archive> <sweep dir>), or move the run directory away to "
                            "leave the run out")  # fmt: skip
    assert read_status(tmp_path / "elsewhere") == {}  # a run with no record is not damaged


def test_metrics_must_be_numbers(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"test/acc": 0.5, "val/ppl": NaN}')
    metrics = read_metrics(path)
    assert metrics["test/acc"] == 0.5 and metrics["val/ppl"] != metrics["val/ppl"]  # NaN kept
    path.write_text('{"test/acc": "high"}')
    with pytest.raises(DamagedRecord, match="metric 'test/acc' is 'high', not a number"):
        read_metrics(path)


def test_the_csv_history_is_read_row_by_row_and_a_bad_cell_names_its_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,val/acc,train/loss\n0,9,0.5,\n0,9,,1.25\n1,19,0.75,\n")
    rows = read_metrics_csv(path)
    assert rows == [
        {"epoch": 0.0, "step": 9.0, "val/acc": 0.5},
        {"epoch": 0.0, "step": 9.0, "train/loss": 1.25},
        {"epoch": 1.0, "step": 19.0, "val/acc": 0.75},
    ]
    path.write_bytes(b"epoch,step,val/acc\n0,9,0.5\n1,19,\xff\xfe\n")
    with pytest.raises(DamagedRecord, match=r"metrics.csv: not UTF-8 text \(byte 32 is 0xff\)"):
        read_metrics_csv(path)
    path.write_text("epoch,step,val/acc\n0,9,0.5\n1,1\x009,0.7\n")
    with pytest.raises(DamagedRecord, match=r"line 3: step is '1\\x009', not a number"):
        read_metrics_csv(path)


def test_overrides_and_multirun_files_are_checked_for_what_they_must_hold(tmp_path):
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("- seed=1\n- model=lstm\n")
    assert read_overrides(overrides) == ["seed=1", "model=lstm"]
    overrides.write_text("- seed=1\n- [model\n")
    with pytest.raises(DamagedRecord, match="overrides.yaml: not valid YAML"):
        read_overrides(overrides)
    overrides.write_text("seed: 1\n")
    with pytest.raises(DamagedRecord, match="not a list of overrides"):
        read_overrides(overrides)
    sweep = make_sweep(tmp_path / "s")
    saved = sweep / "multirun.yaml"
    text = saved.read_text()
    saved.write_text(text[: len(text) // 2] + "\n  - [")  # cut short mid-file
    with pytest.raises(DamagedRecord, match="multirun.yaml: not valid YAML"):
        read_multirun(sweep)
    saved.write_text("hydra:\n  overrides:\n    task: seed=1\n")
    with pytest.raises(DamagedRecord, match=r"hydra.overrides.task is not a list of overrides"):
        read_multirun(sweep)


def test_a_checkpoints_step_is_read_without_torch_and_without_running_its_pickle(tmp_path):
    from collections import OrderedDict

    import torch

    path = tmp_path / "last.ckpt"
    saved = {"global_step": 1234, "epoch": 3, "treernn": {"config": {}}}
    # what Lightning's checkpoints hold besides: ordered state dicts, sizes, lists of states
    weights = OrderedDict(w=torch.ones(2), b=torch.zeros(3, dtype=torch.bfloat16))
    optimizer = {"state": {0: {"step": torch.tensor(5.0)}}, "param_groups": [{"lr": 0.1}]}
    extra = {"shape": torch.Size([2, 3]), "optimizer_states": [optimizer], "loops": {"a": [1]}}
    torch.save({**saved, "state_dict": weights, **extra}, path)
    assert peek_global_step(path) == 1234
    torch.save({"global_step": 5, "state_dict": {}}, path)  # not a treernn checkpoint
    assert peek_global_step(path) is None
    path.write_bytes(path.read_bytes()[:100])  # cut short
    assert peek_global_step(path) is None

    class Hostile:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    torch.save({"global_step": 7, "treernn": {}, "x": Hostile()}, path)
    assert peek_global_step(path) == 7
    assert not (tmp_path / "ran").exists()
    # and listing a sweep's checkpoints loads neither torch nor Lightning
    code = (
        "import sys; from treernn.lifecycle.records import peek_global_step; "
        f"print(peek_global_step({str(path)!r})); "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["7", "[]"]


# ----------------------------------------------------------------------------- sweep commands
def test_sweep_status_names_a_damaged_job_and_lists_the_others(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    (sweep / "0" / "status.json").write_bytes(b'{"status": "finished", "ta')
    (sweep / "1" / ".hydra" / "overrides.yaml").write_text("- [seed\n")
    records.write_status(sweep / "1", status="failed", overrides=None)
    assert treernn_main(["sweep", "status", str(sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"job 0: {DAMAGED}: {sweep / '0' / 'status.json'}: not valid JSON (cut short?): "
        "Unterminated string starting at (line 1 column 24); restore it from a copy of the run "
        "(python -m treernn sweep restore <archive> <sweep dir>), or move the run directory away "
        "to leave the run out"
    )
    assert lines[1].startswith(f"job 1: {DAMAGED}: {sweep / '1' / '.hydra' / 'overrides.yaml'}")
    assert lines[2] == f"2 jobs in {sweep}: 2 {DAMAGED}"
    assert treernn_main(["sweep", "status", "--exit-code", str(sweep)]) == 1


def test_a_damaged_multirun_yaml_is_one_line(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    (sweep / "multirun.yaml").write_bytes(b"hydra:\n  overrides:\n    task: [\xff\n")
    for action in (["status"], ["resume", "--dry-run"]):
        assert treernn_main(["sweep", *action, str(sweep)]) == 1
        line = one_error_line(capsys)
        assert line.startswith(f"error: {sweep / 'multirun.yaml'}: not UTF-8 text")


def test_a_finished_job_whose_record_was_cut_short_is_left_alone_not_run_again(tmp_path):
    sweep = make_sweep(tmp_path)
    job = sweep / "0"
    (job / "metrics.json").write_text('{"test/acc": 0.5}')
    (job / "status.json").write_text('{"status": "finished", "overrides": ["table=lo')
    with pytest.raises(DamagedJob, match=f"sweep job {job} left as it is: .*status.json"):
        plan_sweep_job(job, ["table=logic", "seed=1"])
    (job / "status.json").write_text('{"status": "finished"}')
    (job / "metrics.json").write_text('{"test/acc": 0.')
    with pytest.raises(DamagedJob, match="metrics.json: not valid JSON"):
        plan_sweep_job(job, ["table=logic", "seed=1"])


def test_archive_into_a_file_or_into_itself_is_one_line(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    (tmp_path / "a_file").write_text("x")
    assert treernn_main(["sweep", "archive", str(sweep), str(tmp_path / "a_file")]) == 1
    assert one_error_line(capsys) == (
        f"error: sweep archive: {tmp_path / 'a_file'} is a file; give a directory to copy into"
    )
    for target in (sweep, sweep / "copy"):
        assert treernn_main(["sweep", "archive", str(sweep), str(target)]) == 1
        assert "overlap (one is inside the other)" in one_error_line(capsys)
    assert not (sweep / "copy").exists()


def test_restore_refuses_links_before_copying_anything(tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("a file of the user's\n")
    copy = make_sweep(tmp_path / "handed")
    (copy / "0" / "train.log").symlink_to(outside)
    sweep = tmp_path / "outputs" / "mine"
    assert treernn_main(["sweep", "restore", str(copy), str(sweep)]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: sweep restore: {copy / '0' / 'train.log'} is a symbolic link")
    assert not sweep.exists()  # nothing copied
    (copy / "0" / "train.log").unlink()
    (copy / "0" / ".hydra" / "config.yaml").symlink_to(outside)
    assert treernn_main(["sweep", "restore", str(copy), str(sweep)]) == 1
    assert "config.yaml is a symbolic link" in one_error_line(capsys)
    assert outside.read_text() == "a file of the user's\n"


def test_resume_refuses_a_sweep_that_writes_through_links(tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    (sweep / "1" / "train.log").symlink_to(outside)
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    assert "train.log is a symbolic link" in one_error_line(capsys)
    with pytest.raises(DamagedJob, match="is a symbolic link"):
        plan_sweep_job(sweep / "1", ["table=logic", "seed=2"])


@pytest.mark.parametrize(
    "override",
    [
        "+callbacks.x._target_=os.system",
        "+callbacks.x={_target_:os.system,command:id}",
        "hydra.searchpath=[file:///tmp/evil]",
        "model=../../../../tmp/evil",
        "+experiment=/tmp/evil",
        "hydra.job.env_set.LD_PRELOAD=/tmp/evil.so",
    ],
)
def test_resume_refuses_recorded_overrides_that_would_load_code(tmp_path, capsys, override):
    from omegaconf import OmegaConf

    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.overrides.task.append(override)
    OmegaConf.save(saved, sweep / "multirun.yaml")
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    line = one_error_line(capsys)
    assert f"records the override {override!r}, which would load code" in line


def test_resume_runs_this_projects_entry_never_the_archives(tmp_path):
    """The archive's recorded directory holds a train.py that would leave a mark; the resumed
    sweep runs this checkout's train.py (here it stops at once on the recorded overrides, a
    task this project does not have) and the mark is never made."""
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    mark = tmp_path / "archive_code_ran"
    (tmp_path / "train.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    from omegaconf import OmegaConf

    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.overrides.task = ["task=no_such_task", "sweep_id=mine"]
    saved.hydra.overrides.hydra = []
    OmegaConf.save(saved, sweep / "multirun.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "treernn", "sweep", "resume", str(sweep)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
    )
    assert done.returncode != 0
    assert f"python {REPO_ROOT / 'train.py'} -m task=no_such_task" in done.stdout
    assert "no_such_task" in done.stderr
    assert not mark.exists()


def test_resume_refuses_a_recorded_directory_that_is_not_a_checkout(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    (tmp_path / "train.py").write_text("")  # a train.py alone is not a treernn checkout
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    assert one_error_line(capsys).startswith(
        f"error: the sweep was started in {tmp_path}, which is not a treernn checkout now"
    )


# ----------------------------------------------------------------------------- reports and parse
def _finished_run(sweep: Path) -> Path:
    job = sweep / "0"
    (job / ".hydra" / "config.yaml").write_text("task:\n  name: logic\nmodel:\n  name: lstm\n")
    (job / "metrics.json").write_text(json.dumps({"test/acc": 0.5, "val/acc": 0.5}))
    (job / "csv").mkdir()
    (job / "csv" / "metrics.csv").write_text("step,val/acc\n9,0.25\n19,0.5\n")
    return job


@pytest.mark.parametrize(
    ("damage", "command", "expected"),
    [
        ("metrics.json", ["table"], "not valid JSON (cut short?)"),
        ("metrics.csv", ["curves"], "not UTF-8 text"),
        ("status.json", ["table"], "holds a JSON list, not an object"),
        ("config.yaml", ["table"], "not valid YAML"),
    ],
)
def test_reports_name_the_damaged_file(tmp_path, capsys, damage, command, expected):
    sweep = make_sweep(tmp_path)
    job = _finished_run(sweep)
    files = {
        "metrics.json": (job / "metrics.json", b'{"test/acc": 0.5, "val/a'),
        "metrics.csv": (job / "csv" / "metrics.csv", b"step,val/acc\n9,0.25\n19,\x80\n"),
        "status.json": (job / "status.json", b'["finished"]'),
        "config.yaml": (job / ".hydra" / "config.yaml", b"task:\n  name: [logic\n"),
    }
    path, content = files[damage]
    path.write_bytes(content)
    out = tmp_path / "report"
    assert treernn_main(["report", *command, str(sweep), "--out", str(out)]) == 1
    assert one_error_line(capsys).startswith(f"error: {path}: {expected}")


def test_parse_on_a_binary_file_is_one_line(tmp_path, capsys):
    binary = tmp_path / "trees.bin"
    binary.write_bytes(b"(S (NP x) (VP y))\n" + bytes(range(128, 256)))
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP x) (VP y))\n(S (NP x) (VP y))\n")
    assert treernn_main(["parse", "--pred", str(binary), "--gold", str(gold)]) == 1
    assert one_error_line(capsys) == (
        f"error: {binary}:2: not UTF-8 text (byte 0x80); a tree file is text, one tree per line "
        "(brackets or JSON lists)"
    )


def test_the_same_sweep_command_again_refuses_a_link_before_hydra_opens_a_log(tmp_path, capsys):
    """Running the sweep's ``-m`` command again (not through ``sweep resume``): the sweep's
    start refuses a link in a job before any job runs (Hydra would open its train.log)."""
    from omegaconf import OmegaConf

    from treernn.lifecycle.sweeps.summary import SweepSummary

    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    sweep = make_sweep(tmp_path)
    (sweep / "0" / "train.log").symlink_to(outside)
    config = OmegaConf.load(sweep / "multirun.yaml")
    config.hydra.sweep = {"dir": str(sweep)}
    with pytest.raises(SystemExit) as stopped:
        SweepSummary().on_multirun_start(config)
    assert stopped.value.code == 1
    assert "train.log is a symbolic link" in one_error_line(capsys)
    assert outside.read_text() == "kept\n"


def test_the_submitit_launchers_own_links_are_not_the_sweeps_records(tmp_path, capsys):
    """submitit links its job scripts inside the sweep's .submitit/ folder; those are the
    launcher's, and a sweep launched on SLURM resumes (a link among the records does not)."""
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    launcher = sweep / ".submitit" / "4242"
    launcher.mkdir(parents=True)
    (launcher / "4242_submission.sh").write_text("#!/bin/sh\n")
    (sweep / ".submitit" / ".submission_file_abc.sh").symlink_to(launcher / "4242_submission.sh")
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 0
    capsys.readouterr()
    (sweep / "0" / "metrics.json").symlink_to(launcher / "4242_submission.sh")
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    assert "metrics.json is a symbolic link" in one_error_line(capsys)
