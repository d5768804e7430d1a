"""``python -m treernn sweep status|resume`` on a sweep directory written by hand: what each job's
record says, and the command that continues the sweep (the real sweeps run in
tests/integration/test_sweeps.py, in the slow tier)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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
        (0, 1, {"status": "finished", "machines": [{"cpu_seconds": 3600}, {"cpu_seconds": 1800}]}),
        (1, 2, {"status": "failed", "error": "DataError: train0 is missing", "machines": [{}]}),
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
        "CPU time its jobs' attempts recorded: 1.50 core-hours; 1 attempt recorded none (run "
        "before treernn recorded it)",
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


# ----------------------------------------------------------------------------- a record is data
def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _record(sweep: Path, hydra: list[str] | None = None, task: list[str] | None = None) -> None:
    """Add ``hydra`` and ``task`` overrides to the sweep's multirun.yaml, as an archive handed
    over could record them."""
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.overrides.hydra = [*saved.hydra.overrides.hydra, *(hydra or [])]
    saved.hydra.overrides.task = [*saved.hydra.overrides.task, *(task or [])]
    OmegaConf.save(saved, sweep / "multirun.yaml")


#: recorded Hydra settings that name files, directories, classes or handlers: where the resumed
#: sweep would log, put its jobs and .hydra records, what it would build
LAYOUT_SETTINGS = [
    "hydra.job_logging.handlers.file.filename={outside}/victim.log",
    "hydra.job_logging.handlers.file.mode=w",
    "+hydra.job_logging.handlers.evil={{class:subprocess.Popen,args:[touch,{outside}/mark]}}",
    "+hydra.job_logging.handlers.z={{class:zipfile.ZipFile,file:{outside}/victim.log,mode:w}}",
    "+hydra.hydra_logging.handlers.f={{class:logging.FileHandler,filename:{outside}/h.log}}",
    "hydra/job_logging=disabled",
    "hydra.run.dir={outside}",
    "hydra.sweep.dir={outside}",
    "hydra.sweep.subdir=../../..",
    "hydra.output_subdir={outside}/.hydra",
    "hydra.job.chdir=true",
    "hydra.launcher.submitit_folder={outside}",
    "hydra.launcher.temp_folder={outside}",
    "+hydra.launcher.additional_parameters.output={outside}/slurm.out",
    "hydra.sweeper.storage=sqlite:///{outside}/optuna.db",
    "hydra={{job_logging:{{root:{{level:INFO}}}}}}",
    "task@hydra.job_logging=logic",
    "hydra.launcher.n_jobs=1,2",
    "hydra.mode=RUN",
]


@pytest.mark.parametrize("setting", LAYOUT_SETTINGS)
@pytest.mark.parametrize("where", ["hydra", "task"])
def test_resume_refuses_recorded_hydra_settings_that_decide_where_the_sweep_writes(
    tmp_path, capsys, setting, where
):
    """In the record's Hydra overrides, or moved among its task overrides (Hydra reads a
    ``hydra.`` key there the same): one line naming the setting, nothing written."""
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    line = setting.format(outside=outside)
    _record(sweep, **{where: [line]})
    before = {path: path.read_bytes() for path in sweep.rglob("*") if path.is_file()}
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    error = _error_line(capsys)
    assert error.startswith(f"error: {sweep / 'multirun.yaml'} records the Hydra setting ")
    assert repr(line) in error
    assert "decided by the sweep, its directory and this checkout's conf/, not by its record" in (
        error
    )
    assert not list(outside.iterdir())
    assert {path: path.read_bytes() for path in sweep.rglob("*") if path.is_file()} == before


def test_a_recorded_interpolation_in_a_path_setting_is_one_line(tmp_path, capsys):
    """``hydra.sweep.subdir=${hydra.job.num}``: resolved in this process, it was a
    MissingMandatoryValue traceback."""
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    _record(sweep, hydra=["hydra.sweep.subdir=${hydra.job.num}"])
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.job = {"num": "???"}
    OmegaConf.save(saved, sweep / "multirun.yaml")
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    error = _error_line(capsys)
    assert "records the Hydra setting 'hydra.sweep.subdir=${hydra.job.num}'" in error
    assert "(its value is an interpolation)" in error
    # sweep status reads the record without resolving it
    assert treernn_main(["sweep", "status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"2 jobs in {sweep}: 1 failed, 1 finished"


def test_a_recorded_working_directory_that_is_not_a_path_is_one_line(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.runtime.cwd = "${hydra.job.num}"
    OmegaConf.save(saved, sweep / "multirun.yaml")
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    assert _error_line(capsys) == (
        f"error: {sweep / 'multirun.yaml'}: hydra.runtime.cwd is '${{hydra.job.num}}', not the "
        "directory the sweep was started in (an absolute path); restore it from a copy of the "
        "sweep (python -m treernn sweep archive keeps one)"
    )


@pytest.mark.parametrize(
    ("line", "why"),
    [
        # Hydra's --experimental-rerun unpickles the file it names: code in an archive's file
        ("--experimental-rerun=outputs/evil.pickle", "not an override Hydra reads"),
        ("--config-dir=/tmp/evil", "not an override Hydra reads"),
        ("-cd=/tmp/evil", "not an override Hydra reads"),
        ("seed=" + "[" * 40 + "]" * 40, "not an override Hydra reads"),
        ("paths.output_dir={outside}", "names where a job writes"),
        ("callbacks.model_checkpoint.dirpath={outside}", "names where a job writes"),
        ("+task.callbacks.tree_f1.output_dir={outside}", "names where a job writes"),
        ("trainer.default_root_dir={outside}", "names where a job writes"),
        ("hydra.sweeper.params.paths.output_dir='{outside}'", "names where a job writes"),
        ("hydra.sweeper.params.model='../../evil'", "would load code or configs"),
        ("hydra.sweeper.params.hydra.run.dir='{outside}'", "a swept parameter that is a Hydra"),
    ],
)
def test_resume_refuses_recorded_flags_and_keys_that_name_where_jobs_write(
    tmp_path, capsys, line, why
):
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    outside = tmp_path / "outside"
    line = line.format(outside=outside)
    _record(sweep, hydra=[line] if line.startswith(("-", "hydra")) else [], task=[line])
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    error = _error_line(capsys)
    assert f"{sweep / 'multirun.yaml'} records" in error and why in error, error
    assert repr(line[:200]) in error


def test_resume_passes_on_the_launchers_and_sweepers_numbers(tmp_path, capsys):
    """What a resume passes on: the launcher and sweeper chosen, jobs at once, a SLURM job's
    resources, the swept parameters; and the layout keys that place the sweep itself
    (paths.log_dir: checked against the resumed directory when the sweep starts)."""
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    hydra = [
        "hydra.mode=MULTIRUN",
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.timeout_min=60",
        "hydra.launcher.cpus_per_task=8",
        "hydra.sweeper.params.seed='1,2,3'",
    ]
    _record(sweep, hydra=hydra, task=[f"paths.log_dir={tmp_path}"])
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"cd {tmp_path} && python {entry_script()} -m hydra.launcher.n_jobs=2 "
        f"{' '.join(hydra)} table=logic seed=1,2 paths.log_dir={tmp_path} sweep_id=mine"
    )


def test_restore_refuses_an_archive_whose_record_a_resume_would_refuse(tmp_path, capsys):
    """Nothing of it is copied: the sweep directory is not even made."""
    copy = make_sweep(tmp_path / "handed")
    outside = tmp_path / "outside"
    _record(copy, hydra=[f"hydra.job_logging.handlers.file.filename={outside}/victim.log"])
    sweep = tmp_path / "outputs" / "mine"
    assert treernn_main(["sweep", "restore", str(copy), str(sweep)]) == 1
    assert "records the Hydra setting 'hydra.job_logging.handlers" in _error_line(capsys)
    assert not sweep.exists() and not outside.exists()


def test_extend_refuses_a_recorded_hydra_setting_before_copying_a_job(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    _record(sweep, hydra=["hydra.sweep.subdir=../../.."])
    args = ["sweep", "extend", str(sweep), "trainer.max_steps=100", "--name", "longer", "--no-run"]
    assert treernn_main(args) == 1
    assert "records the Hydra setting 'hydra.sweep.subdir=../../..'" in _error_line(capsys)
    assert not (sweep.parent / "longer").exists()


# ----------------------------------------------------------------------------- a record's size
@pytest.mark.parametrize(
    ("params", "task", "jobs"),
    [
        ({}, ["seed=range(0,10,3)"], 4),
        ({}, ["seed=range(10,0,-3)"], 4),
        ({}, ["seed=range(5)"], 5),
        ({}, ["seed=range(3,3)"], 0),
        ({}, ["x=range(0,1,0.1)"], 10),  # Hydra's decimal steps: 0.0 ... 0.9
        ({}, ["x=range(0.5,2.0,0.5)"], 3),
        ({}, ["seed=shuffle(range(1,4))"], 3),
        ({}, ["seed=sort(range(1,4),reverse=true)"], 3),
        ({"model": "onlstm,lstm", "seed": "range(1,4)"}, ["model=a,b,c", "x=choice(1,2)"], 18),
        ({"seed": "1,2"}, ["model=glob(*)"], None),  # the config group's files decide
    ],
)
def test_a_sweeps_size_is_counted_without_listing_its_values(tmp_path, params, task, jobs):
    """Worked out by hand, and (where Hydra can list them) the number of values Hydra lists."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from treernn.lifecycle.sweeps.layout import sweep_size

    sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    saved = {"hydra": {"sweeper": {**sweeper, "params": params}, "overrides": {"task": task}}}
    OmegaConf.save(OmegaConf.create(saved), tmp_path / "multirun.yaml")
    assert sweep_size(tmp_path) == jobs
    if jobs is not None and not params:
        listed = OverridesParser.create().parse_overrides(task)
        assert math.prod(len(list(item.sweep_string_iterator())) for item in listed) == jobs


def _huge(sweep: Path, kind: str) -> str:
    """A record of 10^12 jobs: one range, or the product of the table's params."""
    saved = OmegaConf.load(sweep / "multirun.yaml")
    saved.hydra.sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    if kind == "range":
        saved.hydra.overrides.task = ["table=logic", "seed=range(0,1000000000000)"]
        named = "'seed=range(0,1000000000000)': 1,000,000,000,000 values"
    else:
        saved.hydra.sweeper.params = {key: "range(0,1000)" for key in ("a", "b", "c", "d")}
        saved.hydra.overrides.task = ["table=logic"]
        named = "'a=range(0,1000)': 1,000 values, 'b=range(0,1000)': 1,000 values, 'c=range"
    OmegaConf.save(saved, sweep / "multirun.yaml")
    return named


#: runs ``sweep status <argv[1]>`` as its child, under an address-space limit (so that a
#: regression fails with MemoryError instead of filling this machine's memory), and prints the
#: child's exit status, seconds and peak memory (KB): the child's alone, whatever else this test
#: run has started
MEASURED = """
import json, resource, subprocess, sys, time
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
started = time.monotonic()
done = subprocess.run([sys.executable, "-m", "treernn", "sweep", "status", sys.argv[1]],
                      capture_output=True, text=True, timeout=120, preexec_fn=limit)
took = time.monotonic() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps([done.returncode, done.stderr, took, peak]))
"""


def _measured_status(sweep: Path) -> tuple[int, str, float, int]:
    measured = subprocess.run(
        [sys.executable, "-c", MEASURED, str(sweep)], capture_output=True, text=True, timeout=180
    )
    assert measured.returncode == 0, measured.stderr[-2000:]
    return tuple(json.loads(measured.stdout))


@pytest.mark.parametrize("kind", ["range", "product"])
def test_a_record_of_a_trillion_jobs_is_refused_quickly_in_little_memory(tmp_path, kind):
    """``sweep status`` listed every value of the range (MemoryError); the product it counted,
    and a resume's Hydra sweeper listed it. The peak memory is the ``sweep status`` process's."""
    sweep = make_sweep(tmp_path)
    named = _huge(sweep, kind)
    returncode, stderr, took, peak_kb = _measured_status(sweep)
    assert returncode == 1, stderr[-2000:]
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith(
        f"error: {sweep / 'multirun.yaml'}: its command makes 1,000,000,000,000 jobs ({named}"
    ), stderr
    assert "more than a sweep may make (100,000)" in stderr
    assert took < 30 and peak_kb < 256 * 1024, (took, peak_kb)


@pytest.mark.parametrize("kind", ["range", "product"])
def test_resume_and_archive_refuse_a_record_of_a_trillion_jobs(tmp_path, capsys, kind):
    sweep = make_sweep(tmp_path)
    _checkout(tmp_path)
    _huge(sweep, kind)
    assert treernn_main(["sweep", "resume", "--dry-run", str(sweep)]) == 1
    assert "its command makes 1,000,000,000,000 jobs" in _error_line(capsys)
    assert treernn_main(["sweep", "archive", str(sweep), str(tmp_path / "copy")]) == 1
    assert "its command makes 1,000,000,000,000 jobs" in _error_line(capsys)
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ("seed=range(0,5,0)", "its step is 0"),
        ("x=range(0,inf)", "it has no finite end"),
        ("x=range(0.0,1.0,0.0)", "its step is 0"),
    ],
)
def test_a_recorded_range_hydra_could_not_list_is_one_line(tmp_path, override, why):
    """Hydra lists ``range(0,inf)`` until memory runs out (so does a regression here: in a
    process of its own, with its memory limited); a step of 0 is its traceback."""
    sweep = make_sweep(tmp_path)
    _record(sweep, task=[override])
    returncode, stderr, _, _ = _measured_status(sweep)
    assert returncode == 1 and len(stderr.strip().splitlines()) == 1, stderr[-2000:]
    assert stderr.startswith(f"error: {sweep / 'multirun.yaml'}: {override!r} is not a range ")
    assert f"is not a range Hydra can list: {why}; refused before listing them" in stderr


def test_a_record_with_more_overrides_than_a_command_has_is_refused(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    _record(sweep, task=[f"+x{number}=1" for number in range(1001)])
    assert treernn_main(["sweep", "status", str(sweep)]) == 1
    assert "hydra.overrides.task holds 1004 overrides, more than a sweep's command has" in (
        _error_line(capsys)
    )
    sweep = make_sweep(tmp_path / "long")
    _record(sweep, task=["seed=" + ",".join(map(str, range(5000)))])
    assert treernn_main(["sweep", "status", str(sweep)]) == 1
    assert "hydra.overrides.task holds an override of 23894 characters ('seed=0,1,2" in (
        _error_line(capsys)
    )
