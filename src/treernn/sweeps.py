"""Sweeps that survive interruptions, and the end of a multirun: one line per job that did not
finish, the sweep's table, and a non-zero exit if any job did not finish.

Resuming: a sweep has a name (``sweep_id=<name>``; without one, its start time). Running the same
``-m`` command with the same ``sweep_id`` again (or ``python -m treernn sweep resume <sweep dir>``)
continues it in the same directories with the same job numbers: each job reads its own record
first (:func:`treernn.lifecycle.plan.plan_sweep_job`) and is skipped if it finished, resumed from
its newest checkpoint if it was interrupted (a signal, a requeue, a killed process), and run again
from the start if it failed. A command that would change the sweep (other overrides) is refused
with one line naming the difference. This works whatever launches the jobs (basic, joblib,
submitit), since every job decides for itself.

``treernn.run.main`` records a failed job in its ``status.json`` and lets the sweep go on (Hydra's
launcher then starts the next job), returning :func:`sweep_value` (NaN for an Optuna trial that
failed); this Hydra callback reads those records when the sweep is over.
When at least one job finished it prints the papers' comparison table of the sweep and writes
``table.{md,csv,png}`` (``python -m treernn report table``, :mod:`treernn.reporting.table`) and
the learning curves ``curves.{md,png}`` (``report curves``) into the sweep directory. Registered
in ``conf/hydra/default.yaml``.

The sweep directory (``hydra.sweep.dir``) names the task and model, so a sweep over
``model=lstm,onlstm`` puts its jobs in one directory per model; they share the last part of the
path (the sweep's start time and process, ``${sweep_dir_name:}``), which finds them all.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from treernn import runs
from treernn.config_checks import warn_doubtful
from treernn.errors import UserError
from treernn.lifecycle import signals
from treernn.records import (
    DamagedRecord,
    RunState,
    read_multirun,
    read_overrides,
    read_status,
    status_for_listing,
)

#: job states that a resumed sweep continues from the newest checkpoint ("extended": a job that
#: ``sweep extend`` copied from a sweep of a smaller budget, :mod:`treernn.sweep_extend`)
RESUMABLE = (RunState.INTERRUPTED, RunState.REQUEUED, RunState.RUNNING, RunState.EXTENDED)
#: what a job produced that a run from the start must not find
ATTEMPT_FILES = ("checkpoints", "csv", "metrics.json", "parse_eval.json")


class SweepChanged(UserError):
    """A resumed sweep (or one of its jobs) was given other overrides than it ran with."""


class NotStarted(SweepChanged):
    """A job of a sweep that was asked to stop before the job started: it leaves no record."""


class DamagedJob(SweepChanged):
    """A job whose record cannot be read: it is left as it is (never taken for a job that has
    not started, and run again over its old files)."""


# ----------------------------------------------------------------------------- a job's value
def sweep_value(cfg: DictConfig, metrics: dict[str, float] | None) -> Any:
    """What the Hydra job returns: the metrics, or with ``optimized_metric`` set (an Optuna sweep,
    ``conf/hparams_search/``) that one value; NaN for a failed job, which Optuna records as a
    failed trial while the sweep goes on."""
    key = cfg.get("optimized_metric")
    if not key:
        return metrics
    if metrics is None:
        return float("nan")
    if key not in metrics:
        raise UserError(f"optimized_metric={key} is not a metric of this run: {sorted(metrics)}")
    return metrics[key]


# ----------------------------------------------------------------------------- resuming
def clear_attempt(job_dir: Path, why: str) -> None:
    """Remove what a failed attempt of a job wrote (its record keeps the attempt)."""
    record = read_status(job_dir)
    attempts = [*record.get("attempts", [])]
    attempts.append({key: record.get(key) for key in ("status", "error", "started", "ended")})
    for name in ATTEMPT_FILES:
        path = Path(job_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for path in Path(job_dir).glob("hpc_ckpt_*.ckpt"):
        path.unlink()
    runs.write_status(job_dir, attempts=attempts, rerun_because=why)


def without_name(overrides: list[str]) -> list[str]:
    return [item for item in overrides if item.split("=", 1)[0].lstrip("+~") != "sweep_id"]


#: the folder submitit keeps its job files in (the submitit launcher's default submitit_folder,
#: ${hydra.sweep.dir}/.submitit/%j)
LAUNCHER_FOLDER = ".submitit"


def refuse_links(root: Path, what: str) -> None:
    """A sweep is data: a symbolic link in it (to a file outside, which a resumed job would
    append to or overwrite: its train.log, its .hydra/config.yaml) is refused with one line.
    The submitit launcher's own folder (``.submitit/``: its job scripts and their links, under
    new SLURM job ids at each submission) is the launcher's, not the sweep's records."""
    root = Path(root)
    if not root.exists():
        return
    for path in [root, *sorted(root.rglob("*"))]:
        if LAUNCHER_FOLDER in path.relative_to(root).parts:
            continue
        if path.is_symlink():
            raise UserError(
                f"{what}: {path} is a symbolic link (to {os.readlink(path)}); a sweep's files "
                "are data, never links: replace it with the file it points to, or remove it"
            )


def sweep_command(config: DictConfig) -> list[str]:
    """The task overrides that define a sweep (its name aside)."""
    return without_name(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))


def check_same_sweep(config: DictConfig) -> None:
    """Refuse to continue a sweep directory with another command than the one that started it."""
    resumed = os.environ.get("TREERNN_RESUME_SWEEP_DIR")  # python -m treernn sweep resume
    if resumed and Path(resumed).resolve() != Path(config.hydra.sweep.dir).resolve():
        raise SweepChanged(
            f"resuming {resumed}, but this command's sweep directory is {config.hydra.sweep.dir} "
            "(was paths.log_dir or TREERNN_DATA_DIR set differently?); nothing was started"
        )
    saved = Path(config.hydra.sweep.dir) / "multirun.yaml"
    if not saved.is_file():
        return
    before = sweep_command(read_multirun(saved.parent))
    now = sweep_command(config)
    if sorted(before) != sorted(now):
        added = [item for item in now if item not in before]
        removed = [item for item in before if item not in now]
        raise SweepChanged(
            f"sweep {saved.parent} was started with [{' '.join(before)}]; this command differs "
            f"(added: {' '.join(added) or 'nothing'}; left out: {' '.join(removed) or 'nothing'}). "
            f"Resume it with the same overrides (python -m treernn sweep resume {saved.parent}), "
            "or give another sweep_id"
        )


def saved_multirun(sweep_dir: Path) -> DictConfig:
    """A sweep's ``multirun.yaml`` (the command and config it was started with), checked."""
    return read_multirun(sweep_dir)


#: an interpolation of a config key (``${model.name}``), not a resolver (``${now:...}``)
_KEY_INTERPOLATION = re.compile(r"\$\{([\w.]+)\}")


def sweep_failures(sweep_dir: Path | list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(job directory, status record) of each job of a sweep that did not finish."""
    failures = []
    for job_dir in _jobs(sweep_dir):
        record = status_for_listing(job_dir)
        if record.get("status") != RunState.FINISHED:
            failures.append((job_dir, record))
    return failures


def _jobs(sweep: Path | list[Path]) -> list[Path]:
    if isinstance(sweep, list):
        return sweep
    return sorted(path.parent for path in Path(sweep).glob("*/status.json"))


def sweep_job_dirs(config: DictConfig) -> list[Path]:
    """Every job directory of the sweep: below ``hydra.sweep.dir``, and below its siblings that
    differ only in parts named by config keys this sweep varies (``${task.name}`` of
    ``task=a,b``, ``${model.name}``) when its last part is one resolver's value (the sweep's
    name). A part named by a key the sweep does not vary (a table's ``${table_name}``) is not a
    wildcard: two tables' sweeps of one ``sweep_id`` stay apart."""
    sweep_dir = Path(config.hydra.sweep.dir)
    dirs = {sweep_dir}
    template = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("dir", "")
    parts = str(template).split("/")
    last = parts[-1] if parts else ""
    if last.startswith("${") and ":" in last and len(parts) <= len(sweep_dir.parts):
        resolved = list(sweep_dir.parts[-len(parts) :])
        varied = _varied_roots(config)
        pattern = [
            "*" if _swept_part(part, varied) else value
            for part, value in zip(parts, resolved, strict=True)
        ]
        root = Path(*sweep_dir.parts[: len(sweep_dir.parts) - len(parts)] or ["."])
        if "*" in pattern:
            dirs |= set(root.glob("/".join(pattern)))
    # a job that never started (SLURM could not schedule it) has a record but no .hydra/
    jobs = {
        path.parent
        for sweep in dirs
        for path in (*sweep.glob("*/.hydra"), *sweep.glob("*/status.json"))
    }
    return sorted(jobs, key=runs.job_order)


_SWEEP_FUNCTIONS = ("range(", "choice(", "interval(", "glob(")


def _varied_roots(config: DictConfig) -> set[str]:
    """The first parts of the keys this multirun varies: command-line overrides with several
    values (``model=a,b``, ``seed=range(3)``) and the sweeper's own ``params`` (a table's)."""
    found: dict[str, str] = {}
    for line in OmegaConf.select(config, "hydra.overrides.task", default=None) or []:
        key, _, value = str(line).partition("=")
        found[key.lstrip("+~").split("@")[0]] = value
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    for key, value in params.items():
        found.setdefault(str(key), str(value))
    return {
        key.split(".")[0]
        for key, value in found.items()
        if "," in value or value.strip().startswith(_SWEEP_FUNCTIONS)
    }


#: config groups whose files write anywhere in the config (``# @package _global_``): sweeping
#: one of them can change any key a directory names
GLOBAL_GROUPS = frozenset({"experiment", "table", "hparams_search"})


def _swept_part(part: str, varied: set[str]) -> bool:
    keys = [
        key for key in _KEY_INTERPOLATION.findall(part) if not key.startswith(("paths.", "hydra."))
    ]
    if varied & GLOBAL_GROUPS:
        return bool(keys)
    return any(key.split(".")[0] in varied for key in keys)


def override_lines(job_dir: Path, record: dict[str, Any]) -> list[str]:
    """The job's overrides as its record (``status.json``, read by the caller) has them (an
    extended job's carry its new budget while ``.hydra/`` is still the old sweep's), else as
    Hydra saved them."""
    recorded = record.get("overrides")
    if isinstance(recorded, list):
        return [str(line) for line in recorded]
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    return read_overrides(path)


def _overrides(job_dir: Path, record: dict[str, Any]) -> str:
    """:func:`override_lines` on one line (in a listing, a damaged overrides file says so)."""
    try:
        return " ".join(override_lines(job_dir, record))
    except DamagedRecord as error:
        return f"overrides unreadable: {error}"


def report_sweep(job_dirs: list[Path], out_dir: Path) -> bool:
    """Print and write the sweep's table, and write its learning curves (``curves.{md,png}``);
    False if a report itself failed with a bug."""
    from treernn.reporting import curves, table, table_output

    def write_table() -> list[Path]:
        report = table.report_table(job_dirs)
        print("\n" + table_output.to_markdown(report), end="", flush=True)
        return table_output.write_table(report, out_dir / "table")

    def write_curves() -> list[Path]:
        return curves.write_curves(curves.learning_curves(job_dirs), out_dir / "curves")

    reported = True
    for name, write in (("table", write_table), ("curves", write_curves)):
        try:
            written = write()
            print(f"wrote {', '.join(str(path) for path in written)}", flush=True)
        except UserError as error:
            print(f"sweep {name}: {error}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - a bug in a report keeps its traceback, not the
            # sweep's exit: the sweep's own summary below is what the user must see
            traceback.print_exc()
            reported = False
    return reported


# ----------------------------------------------------------------------------- stopping
#: launchers whose jobs run in worker processes of the launching one (a Ctrl-C of the sweep
#: reaches them through its stop file: :mod:`treernn.lifecycle.signals`)
WORKER_LAUNCHERS = ("hydra_plugins.hydra_joblib_launcher.",)


def runs_in_workers(config: DictConfig) -> bool:
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    return target.startswith(WORKER_LAUNCHERS)


def _no_idle_workers(config: DictConfig) -> None:
    """No more joblib workers than jobs: a worker that never gets one waits for work through the
    whole sweep, where Ctrl-C of the sweep's process group reaches it as KeyboardInterrupt,
    joblib takes its pool for broken and kills the busy workers before they save (a worker that
    has run a job ignores SIGINT afterwards: :func:`treernn.lifecycle.signals.guard_idle_worker`).
    The launcher is built from this config after this callback."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs")
    size = jobs_in(config)
    if isinstance(n_jobs, int) and size is not None and 0 < size < n_jobs:
        with read_write(config.hydra.launcher), open_dict(config.hydra.launcher):
            config.hydra.launcher.n_jobs = size


def check_launcher(config: DictConfig) -> None:
    """The launcher's job count, which joblib would answer with its own traceback after the
    sweep's directory is made: an integer other than 0 (-1: one per CPU)."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs", default=None)
    if n_jobs is None:
        return
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0:
        raise UserError(
            f"hydra.launcher.n_jobs={n_jobs!r} must be a number of jobs run at once: a positive "
            "integer, or -1 for one per CPU; e.g. hydra.launcher.n_jobs=2"
        )


class SweepSummary(Callback):
    def __init__(self) -> None:
        self._stop: signals.StopSweep | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_launcher(config)
            for path in [Path(config.hydra.sweep.dir), *sweep_job_dirs(config)]:
                refuse_links(path, "sweep")  # before Hydra opens a job's train.log
            check_same_sweep(config)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(1)  # before the sweep's directory is made
        warn_doubtful(config)
        if runs_in_workers(config):
            _no_idle_workers(config)
            self._stop = signals.StopSweep.start(Path(config.hydra.sweep.dir) / ".stopping")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        stopped_by = None
        if self._stop is not None:
            self._stop.restore()
            stopped_by = signals.stop_requested()
            self._stop.path.unlink(missing_ok=True)
        jobs = sweep_job_dirs(config)
        finished = [
            job for job in jobs if status_for_listing(job).get("status") == RunState.FINISHED
        ]
        # the table first: the summary stays the last thing printed, whatever the report says
        reported = report_sweep(jobs, sweep_dir) if finished else True
        failures = sweep_failures(jobs)
        if not failures:
            print(f"sweep finished: {len(jobs)} jobs in {sweep_dir}", flush=True)
        else:
            lines = [f"sweep: {len(failures)} of {len(jobs)} jobs did not finish ({sweep_dir}):"]
            for job_dir, record in failures:
                error = f": {record['error']}" if record.get("error") else ""
                lines.append(
                    f"  job {job_dir.name} [{_overrides(job_dir, record)}]: "
                    f"{record.get('status', 'not started')}{error}"
                )
            lines.append(
                f"resume it (finished jobs are skipped, interrupted ones continue, failed ones run "
                f"again): python -m treernn sweep resume {sweep_dir}"
            )
            print("\n".join(lines), file=sys.stderr, flush=True)
        if stopped_by is not None:
            size = sweep_size(sweep_dir)
            if size is not None and size > len(jobs):
                print(f"  {size - len(jobs)} jobs not started", file=sys.stderr, flush=True)
            sys.exit(128 + stopped_by)
        if failures or not reported:
            sys.exit(1)


def sweep_size(sweep_dir: Path) -> int | None:
    """How many jobs the sweep's command makes: the product of the numbers of values of its swept
    parameters (Hydra's basic sweeper: the table's ``hydra.sweeper.params``, overridden key by key
    by the command line), read from the sweep's ``multirun.yaml``. None where that cannot be told
    (no ``multirun.yaml``, another sweeper, a ``glob`` sweep)."""
    saved = Path(sweep_dir) / "multirun.yaml"
    if not saved.is_file():
        return None
    return jobs_in(read_multirun(sweep_dir))


def jobs_in(config: DictConfig) -> int | None:
    """:func:`sweep_size` of a multirun's config (``multirun.yaml``, or the one being launched)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    sweeper = OmegaConf.select(config, "hydra.sweeper")
    if sweeper is None or not str(sweeper.get("_target_", "")).endswith(".BasicSweeper"):
        return None
    params = sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()]
    lines += [str(item) for item in OmegaConf.select(config, "hydra.overrides.task") or []]
    counts: dict[str, int] = {}
    try:
        for override in OverridesParser.create().parse_overrides(lines):
            swept = override.is_sweep_override()
            counts[override.get_key_element()] = (
                len(list(override.sweep_string_iterator())) if swept else 1
            )
    except HydraException:
        return None
    return math.prod(counts.values())
