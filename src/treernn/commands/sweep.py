"""A sweep's state, and resuming it.

    python -m treernn sweep status <sweep dir>
    python -m treernn sweep resume <sweep dir> [--dry-run]
    python -m treernn sweep archive <sweep dir> <copy dir>
    python -m treernn sweep restore <copy dir> <sweep dir>
    python -m treernn sweep extend <sweep dir>... trainer.max_steps=<more> --name <new sweep>

``status`` lists each job of the sweep: its overrides, whether it finished, was interrupted (with
the step of its newest checkpoint), failed (with the error) or is running, and counts them,
with the jobs the sweep's command makes that have not started yet (where its ``multirun.yaml``
tells how many it makes), and the CPU time its jobs' attempts recorded (core-hours, resumed
attempts included). ``--exit-code``: exit 1 unless every one of them has finished (for
scripts that skip a finished sweep).

``resume`` runs the command that started the sweep again, from the directory it was started in and
with the sweep's name (``sweep_id=<last part of the sweep dir>``): finished jobs are skipped,
interrupted ones continue from their newest checkpoint, failed ones run again from the start, in
the same directories with the same numbers. At the end the sweep's table is printed over all of
its jobs. The same happens when you run the original ``-m`` command again with
``sweep_id=<name>``.

A sweep's record is data (an archive may come from anyone): of its recorded Hydra settings,
``resume`` (and ``restore``, ``extend``) passes on only the launcher's and the sweeper's choice
and numbers (`treernn.lifecycle.sweeps.layout.PASSED_ON`). A recorded setting that names files,
directories, classes or handlers (logging, the run and sweep directories, where ``.hydra`` goes,
callbacks, the launcher's set-up and folders), a key that names where a job writes, and a flag of
Hydra's command line are refused in one line before anything is written: where a sweep writes is
decided by its directory and this checkout's ``conf/``. So is a record of more than
`treernn.lifecycle.sweeps.layout.MAX_JOBS` jobs, counted without listing them.

``archive`` copies what a sweep's finished jobs produced, without their checkpoints and wandb
files, into ``<copy dir>`` (a few hundred KB a job, the same layout as the sweep's): what
``report table``, ``report curves`` and ``report claims`` read, and what a resumed sweep needs to
skip those jobs. A sweep of many hours can so be kept in a repository, reported from any clone,
and continued on a machine that lost its ``outputs/``: ``restore`` puts back what the sweep
directory lacks (it never replaces a file) and a resumed sweep skips the finished jobs.
Jobs that did not finish are left out (they need their checkpoints to resume), unless
``--unfinished``: then each of them is kept too, with its newest complete checkpoint (the one a
resumed run continues from) and the best one that checkpoint names (the one its test reads), each
written to a temporary name, then renamed, so that a machine that lost ``outputs/`` resumes such a
job where the copy was taken instead of starting it again.
A job's kept checkpoint leaves the copy once the job has finished. Files already in the archive
are replaced.

``extend`` trains a sweep further as a new sweep (``--name``) of a larger budget: each of its jobs
starts from the old job's newest checkpoint, as if the old job had been interrupted at its budget
and resumed with the new one (`treernn.lifecycle.sweeps.extend`); then the new sweep runs,
as ``resume`` runs one (``--no-run``: prepare it and print the command).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from treernn.errors import UserError
from treernn.lifecycle import locks, records
from treernn.lifecycle.records import (
    DAMAGED,
    DamagedRecord,
    RunState,
    peek_global_step,
    read_yaml,
)
from treernn.lifecycle.sweeps.archive import archive_sweep, restore_sweep
from treernn.lifecycle.sweeps.layout import (
    check_passed_on,
    job_dirs,
    recorded_cwd,
    recorded_overrides,
    refuse_links,
    saved_multirun,
)

RESUME_ENV = "TREERNN_RESUME_SWEEP_DIR"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="<action>")
    status = actions.add_parser("status", help="each job's state")
    status.add_argument("sweep_dir", type=Path)
    status.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 unless every job the sweep's command makes has finished",
    )
    resume = actions.add_parser("resume", help="continue the sweep where it stopped")
    resume.add_argument("sweep_dir", type=Path)
    resume.add_argument("--dry-run", action="store_true", help="print the command and run nothing")
    archive = actions.add_parser("archive", help="keep the finished jobs' results, no checkpoints")
    archive.add_argument("sweep_dir", type=Path)
    archive.add_argument("copy_dir", type=Path)
    archive.add_argument(
        "--unfinished",
        action="store_true",
        help="keep the unfinished jobs too, each with its newest and its best checkpoint",
    )
    restore = actions.add_parser("restore", help="put an archived sweep's files back")
    restore.add_argument("copy_dir", type=Path)
    restore.add_argument("sweep_dir", type=Path)
    extend = actions.add_parser("extend", help="train a sweep further, as a new sweep")
    extend.add_argument(
        "items",
        nargs="+",
        metavar="<sweep dir or trainer.max_steps=N>",
        help="the sweep's directory (each of them, where it keeps one per model), then the budget",
    )
    extend.add_argument("--name", required=True, help="the new sweep's name (its sweep_id)")
    extend.add_argument(
        "--no-run", action="store_true", help="prepare the new sweep and print its command"
    )


def resume_command(sweep_dir: Path) -> tuple[Path, list[str]]:
    """The directory and the ``train.py`` arguments that continue a sweep: its recorded
    overrides as written (never resolved), under the sweep's name."""
    config = saved_multirun(sweep_dir)
    task = [item for item in recorded_overrides(config, "task") if not _names_sweep(item)]
    hydra = recorded_overrides(config, "hydra")
    name = f"sweep_id={sweep_dir.resolve().name}"
    return recorded_cwd(config, sweep_dir), ["-m", *hydra, *task, name]


def _names_sweep(item: str) -> bool:
    return item.split("=", 1)[0].lstrip("+~") == "sweep_id"


def run(args: argparse.Namespace) -> int:
    if args.action == "status":
        return _status(args.sweep_dir, args.exit_code)
    if args.action == "archive":
        return archive_sweep(args.sweep_dir, args.copy_dir, args.unfinished)
    if args.action == "restore":
        return restore_sweep(args.copy_dir, args.sweep_dir)
    if args.action == "extend":
        from treernn.lifecycle.sweeps.extend import extend

        overrides = [item for item in args.items if "=" in item]
        dirs = [Path(item) for item in args.items if "=" not in item]
        if not dirs:
            raise UserError("sweep extend: give the sweep's directory before its new budget")
        made = extend(dirs, overrides, args.name)
        jobs = sum(len(list(path.glob("*/status.json"))) for path in made.sweep_dirs)
        print(f"extended {jobs} jobs into {', '.join(map(str, made.sweep_dirs))}", flush=True)
        return _launch(made.cwd, made.arguments, made.sweep_dir, args.no_run)
    cwd, arguments = resume_command(args.sweep_dir)
    return _launch(cwd, arguments, args.sweep_dir, args.dry_run)


def _launch(cwd: Path, arguments: list[str], sweep_dir: Path, dry_run: bool) -> int:
    """Run this project's ``train.py`` with ``arguments`` in ``cwd`` (this process becomes it).

    A sweep directory may come from someone else (an archive restored from a colleague's
    ``results/``): what it records is data. The script is this checkout's own, never one found in
    the recorded directory, which must be a treernn checkout (its ``train.py`` and ``conf/``:
    where the sweep's relative paths, ``outputs/`` and ``data/``, lie); and recorded overrides
    that would load configs or objects from elsewhere, Hydra settings that decide where the sweep
    writes, and keys that name where a job writes, are refused
    (`treernn.lifecycle.sweeps.layout.check_passed_on`)."""
    script = entry_script()
    checkout = script.name == "train.py"  # else an installed treernn's treernn-train
    if checkout and not ((cwd / "train.py").is_file() and (cwd / "conf" / "config.yaml").is_file()):
        raise UserError(
            f"the sweep was started in {cwd}, which is not a treernn checkout now (no train.py "
            f"and conf/config.yaml); run from your checkout: cd <treernn> && python train.py "
            f"{' '.join(arguments)}"
        )
    if not cwd.is_dir():
        raise UserError(
            f"the sweep was started in {cwd}, which does not exist here; run its command from "
            f"the directory that holds outputs/: treernn-train {' '.join(arguments)}"
        )
    check_passed_on(arguments[1:], sweep_dir / "multirun.yaml")  # after -m
    refuse_links(sweep_dir, "sweep resume")
    shown = "train.py" if script.parent == cwd.resolve() else str(script)
    print(f"cd {cwd} && {'python ' if checkout else ''}{shown} {' '.join(arguments)}", flush=True)
    if dry_run:
        return 0
    os.chdir(cwd)
    os.environ[RESUME_ENV] = str(sweep_dir.resolve())
    # a script's own folder leads sys.path, not the working directory: nothing is imported from
    # the recorded folder
    os.execv(sys.executable, [sys.executable, str(script), *arguments])
    return 0  # not reached


def entry_script() -> Path:
    """This checkout's ``train.py`` (beside ``src/treernn``), else, for a treernn installed
    from a wheel, its ``treernn-train`` console script beside this interpreter."""
    script = Path(__file__).resolve().parents[3] / "train.py"
    if script.is_file():
        return script
    installed = Path(sys.executable).parent / "treernn-train"
    if installed.is_file():
        return installed
    raise UserError(
        f"sweep resume runs this treernn's train.py or treernn-train, and neither {script} nor "
        f"{installed} exists; reinstall treernn (pip install treernn) or run from a clone"
    )


def _status(sweep_dir: Path, exit_code: bool = False) -> int:
    from treernn.lifecycle.sweeps.layout import sweep_size

    saved_multirun(sweep_dir)
    jobs = job_dirs(sweep_dir)
    counts: dict[str, int] = {}
    hours, unrecorded = 0.0, 0
    for job_dir in jobs:
        try:
            status, line = _job_line(job_dir)
            used, missing = records.cpu_hours(records.read_status(job_dir))
            hours, unrecorded = hours + used, unrecorded + missing
        except DamagedRecord as error:  # one damaged file: the job says so, the others are listed
            status, line = DAMAGED, f"job {job_dir.name}: {DAMAGED}: {error}"
        counts[status] = counts.get(status, 0) + 1
        print(line)
    size = sweep_size(sweep_dir)
    if size is not None and size > len(jobs):
        counts["not started yet"] = size - len(jobs)
    if hours or unrecorded:  # the jobs' records name attempts
        cost = f"CPU time its jobs' attempts recorded: {hours:.2f} core-hours"
        if unrecorded:
            attempts = "attempt" if unrecorded == 1 else "attempts"
            cost += f"; {unrecorded} {attempts} recorded none (run before treernn recorded it)"
        print(cost)
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    print(f"{max(size or 0, len(jobs))} jobs in {sweep_dir}: {summary}")
    if exit_code and (not counts or counts.get(RunState.FINISHED, 0) != sum(counts.values())):
        return 1  # no job known at all is not "every job finished"
    return 0


def _job_line(job_dir: Path) -> tuple[str, str]:
    """A job's state and its line of ``sweep status``."""
    from treernn.lifecycle.sweeps.layout import override_lines

    record = records.read_status(job_dir)
    status = record.get("status", "not started")
    if status == RunState.RUNNING and not locks.is_live(job_dir):
        status = "stopped (its process is gone)"
    overrides = override_lines(job_dir, record)
    step = _newest_step(job_dir)
    where = ""
    if step is not None:
        budget = _step_budget(job_dir, overrides)
        where = f", newest checkpoint at step {step}"
        where += f" of {budget}" if budget else ""
    if status == RunState.EXTENDED and record.get("extended_from"):
        where += f" (from {record['extended_from']['job']}); not resumed yet"
    error = f": {record['error']}" if record.get("error") and status != RunState.FINISHED else ""
    return status, f"job {job_dir.name} [{' '.join(overrides)}]: {status}{where}{error}"


def _newest_step(job_dir: Path) -> int | None:
    """The training step of the job's newest readable checkpoint, read without torch or
    Lightning (`treernn.lifecycle.records.peek_global_step`)."""
    found = [*(job_dir / "checkpoints").glob("*.ckpt"), *job_dir.glob("hpc_ckpt_*.ckpt")]
    steps = [step for step in map(peek_global_step, found) if step is not None]
    return max(steps, default=None)


def _step_budget(job_dir: Path, overrides: list[str]) -> int | None:
    """The job's ``trainer.max_steps``: its (recorded) override, which an extended job carries
    before its ``.hydra/`` is rewritten, else its saved config's; None where it has none (-1, no
    limit) or the config gives it by interpolation."""
    from treernn.reporting.run_records import _parse_overrides, config_value

    given = _parse_overrides(overrides).get("trainer.max_steps")
    config = job_dir / ".hydra" / "config.yaml"
    if given is not None:
        steps = int(given) if given.lstrip("-").isdigit() else None
    elif config.is_file():
        steps = config_value(read_yaml(config) or {}, "trainer.max_steps")
    else:
        steps = None
    return steps if isinstance(steps, int) and steps > 0 else None
