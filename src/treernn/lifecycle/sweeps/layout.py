"""A sweep's layout and the rules of resuming it: its jobs' directories, its saved command
(``multirun.yaml``), how many jobs it makes, which jobs did not finish, and what a resumed sweep
refuses.

Resuming: a sweep has a name (``sweep_id=<name>``; without one, its start time). Running the same
``-m`` command with the same ``sweep_id`` again (or ``python -m treernn sweep resume <sweep dir>``)
continues it in the same directories with the same job numbers: each job reads its own record
first (`treernn.lifecycle.plan.plan_sweep_job`) and is skipped if it finished, resumed from
its newest checkpoint if it was interrupted (a signal, a requeue, a killed process), and run again
from the start if it failed. A command that would change the sweep (other overrides) is refused
with one line naming the difference. This works whatever launches the jobs (basic, joblib,
submitit), since every job decides for itself. A sweep's files are data: a job directory holding
a symbolic link is refused (`refuse_links`).

The sweep directory (``hydra.sweep.dir``) names the task and model, so a sweep over
``model=lstm,onlstm`` puts its jobs in one directory per model; they share the last part of the
path (the sweep's start time and process, ``${sweep_dir_name:}``), which finds them all.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from treernn.errors import UserError
from treernn.lifecycle import records, runs
from treernn.lifecycle.records import (
    DamagedRecord,
    RunState,
    read_multirun,
    read_overrides,
    read_status,
    status_for_listing,
)

#: job states that a resumed sweep continues from the newest checkpoint ("extended": a job that
#: ``sweep extend`` copied from a sweep of a smaller budget, `treernn.lifecycle.sweeps.extend`)
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
    records.write_status(job_dir, attempts=attempts, rerun_because=why)


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


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job directories of a sweep directory (those Hydra set up), in job order."""
    return sorted((path.parent for path in sweep_dir.glob("*/.hydra")), key=runs.job_order)


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


def overrides_line(job_dir: Path, record: dict[str, Any]) -> str:
    """`override_lines` on one line (in a listing, a damaged overrides file says so)."""
    try:
        return " ".join(override_lines(job_dir, record))
    except DamagedRecord as error:
        return f"overrides unreadable: {error}"


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
    """`sweep_size` of a multirun's config (``multirun.yaml``, or the one being launched)."""
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
