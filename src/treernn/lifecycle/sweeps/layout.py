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
a symbolic link is refused (`refuse_links`), and so is a recorded override that a resume must not
pass on (`check_passed_on`: Hydra settings that decide where the sweep writes, keys that name
where a job writes, flags and code) or a record of more jobs than `MAX_JOBS` (`jobs_in`).

The sweep directory (``hydra.sweep.dir``) names the task and model, so a sweep over
``model=lstm,onlstm`` puts its jobs in one directory per model; they share the last part of the
path (the sweep's start time and process, ``${sweep_dir_name:}``), which finds them all.
"""

from __future__ import annotations

import decimal
import functools
import itertools
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
    """A sweep's ``multirun.yaml`` (the command and config it was started with), checked: its
    structure (`treernn.lifecycle.records.read_multirun`), and its size (`jobs_in`: a record of
    more than `MAX_JOBS` jobs is refused before its values are listed)."""
    config = read_multirun(sweep_dir)
    jobs_in(config, Path(sweep_dir) / "multirun.yaml")
    return config


def recorded_cwd(config: DictConfig, sweep_dir: Path) -> Path:
    """The directory the sweep was started in (``hydra.runtime.cwd``), as written: an absolute
    path, never an interpolation resolved in this process."""
    value = raw_value(config, "hydra.runtime.cwd")
    if not isinstance(value, str) or "${" in value or not value.startswith("/"):
        raise DamagedRecord(
            Path(sweep_dir) / "multirun.yaml",
            f"hydra.runtime.cwd is {str(value)[:200]!r}, not the directory the sweep was started "
            "in (an absolute path)",
            "restore it from a copy of the sweep (python -m treernn sweep archive keeps one)",
        )
    return Path(value)


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
    for line in recorded_overrides(config, "task"):
        key, _, value = line.partition("=")
        found[key.lstrip("+~").split("@")[0]] = value
    params = raw_value(config, "hydra.sweeper.params")
    for key, value in (params if isinstance(params, dict) else {}).items():
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
    (no ``multirun.yaml``, another sweeper, a ``glob`` sweep); a record of more than `MAX_JOBS`
    jobs is refused (`TooManyJobs`)."""
    saved = Path(sweep_dir) / "multirun.yaml"
    if not saved.is_file():
        return None
    return jobs_in(read_multirun(sweep_dir), saved)


# ----------------------------------------------------------------------------- a sweep's size
#: the most jobs a sweep's command may make (a table makes a few dozen). Hydra's basic sweeper
#: lists every job before it starts one (``seed=range(0,1000000000000)`` fills memory), so a
#: command or record of more is refused, counted without listing its values
MAX_JOBS = 100_000
#: the deepest an override's brackets may nest: Hydra's parser recurses per level and fails
#: with a RecursionError some hundreds deep
MAX_NESTING = 32


class TooManyJobs(UserError):
    """A sweep's command (or its record) makes more jobs than `MAX_JOBS`."""


class _NotCountable(Exception):
    """A range that Hydra could not list (a step of 0, an infinite or NaN end): its reason."""


def raw_value(config: DictConfig, key: str) -> Any:
    """The value at the dotted ``key`` of ``config`` as written, in plain containers (an
    interpolation is its text: a record's ``${hydra.job.num}`` is not resolved in this
    process); None where it is absent."""
    node: Any = config
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(node, DictConfig) or part not in node:
            return None
        if OmegaConf.is_interpolation(node, part):
            return None  # a record's node that is text where a mapping belongs
        node = node[part]
    if not isinstance(node, DictConfig) or last not in node:
        return None
    if OmegaConf.is_interpolation(node, last) or not OmegaConf.is_config(node[last]):
        return OmegaConf.to_container(node, resolve=False)[last]
    return OmegaConf.to_container(node[last], resolve=False)


def recorded_overrides(config: DictConfig, part: str) -> list[str]:
    """``hydra.overrides.<part>`` (``task`` or ``hydra``) as written: never resolved, since a
    recorded ``${hydra.job.num}`` is text to pass on, not a value of this process."""
    found = raw_value(config, f"hydra.overrides.{part}")
    return [str(item) for item in found] if isinstance(found, list) else []


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse_override(line: str) -> Any:
    """``line`` read by Hydra's own override parser (a
    ``hydra.core.override_parser.types.Override``); None where Hydra would not read it (its
    parse error, or brackets nested deeper than `MAX_NESTING`)."""
    from hydra.errors import HydraException

    depth = deepest = 0
    for char in line:
        depth += (char in "([{") - (char in ")]}")
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return None
    try:
        (override,) = _parser().parse_overrides([line])
    except HydraException:
        return None
    return override


def values_swept(override: Any) -> int | None:
    """How many values a parsed override gives its key, counted without listing them: 1 for a
    single value, a choice's length, a range's by arithmetic; None where the override alone
    cannot tell (a ``glob`` over a config group's files, an ``interval`` of a search). A range
    Hydra could not list is `_NotCountable`."""
    from hydra.core.override_parser.types import ValueType

    if not override.is_sweep_override():
        return 1
    if override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
        return len(override.value().list)
    if override.value_type == ValueType.RANGE_SWEEP:
        return _range_length(override.value())
    return None


def _range_length(sweep: Any) -> int:
    """The number of values of Hydra's ``range(start, stop, step)``: Python's ``range`` for
    integers, else Hydra's ``FloatRange`` (decimal steps from ``start`` while below ``stop``)."""
    start, stop, step = sweep.start, sweep.stop, sweep.step
    if all(isinstance(value, int) for value in (start, stop, step)):
        if step == 0:
            raise _NotCountable("its step is 0")
        return max(0, -((start - stop) // step)) if step > 0 else max(0, -((stop - start) // -step))
    exact = [decimal.Decimal(value) for value in (start, stop, step)]
    if not all(value.is_finite() for value in exact):
        raise _NotCountable("it has no finite end")
    if exact[2] == 0:
        raise _NotCountable("its step is 0")
    bound = max(0, math.ceil((exact[1] - exact[0]) / exact[2]))
    if bound > MAX_JOBS:
        return bound
    # Hydra's own steps (each a decimal sum, rounded as it rounds them), a few thousand at most
    return sum(1 for _ in itertools.islice(sweep.range(), MAX_JOBS + 1))


#: where the command sets the sweeper's parameters (``hydra.sweeper.params.seed='1,2,3'``)
SWEEPER_PARAMS = "hydra.sweeper.params."


def _swept_lines(config: DictConfig, where: Path | None) -> list[str]:
    """The overrides Hydra's basic sweeper expands, in its order: its ``params`` (as the config
    has them, then as the command's ``hydra.sweeper.params.*`` overrides set them), then the
    command's task overrides, which replace them key by key."""
    lines = []
    params = raw_value(config, "hydra.sweeper.params")
    if isinstance(params, dict):
        if len(params) > records.MAX_RECORDED_OVERRIDES:
            raise DamagedRecord(
                where or "the sweep's config",
                f"hydra.sweeper.params holds {len(params)} parameters, more than a sweep has "
                f"({records.MAX_RECORDED_OVERRIDES} at most)",
            )
        lines += [f"{key}={value}" for key, value in params.items()]
    for line in recorded_overrides(config, "hydra"):
        override = parse_override(line)
        if override is not None and override.key_or_group.startswith(SWEEPER_PARAMS):
            lines.append(_param_line(override))
    return lines + recorded_overrides(config, "task")


def _param_line(override: Any) -> str:
    """The override that a ``hydra.sweeper.params.<key>=<value>`` override makes of each job's
    ``<key>``: the value is the text of a sweep (``'1,2,3'``)."""
    value = override.value()
    text = value if isinstance(value, str) else override.get_value_string()
    return f"{override.key_or_group.removeprefix(SWEEPER_PARAMS)}={text}"


def jobs_in(config: DictConfig, where: Path | None = None) -> int | None:
    """`sweep_size` of a multirun's config (``multirun.yaml``, read from ``where``, or the one
    being launched). A command of more than `MAX_JOBS` jobs, whatever its sweeper, or a range
    Hydra could not list, is refused (`TooManyJobs`) before any value is listed."""
    counts: dict[str, int | None] = {}
    shown: dict[str, str] = {}
    for line in _swept_lines(config, where):
        override = parse_override(line)
        if override is None:
            counts[line] = None  # Hydra answers it when the sweep runs
            continue
        key = override.get_key_element()
        try:
            counts[key] = values_swept(override)
        except _NotCountable as why:
            problem = f"{line[:200]!r} is not a range Hydra can list: {why}"
            raise TooManyJobs(_size_error(where, problem)) from None
        shown[key] = line
    known = math.prod(count for count in counts.values() if count is not None)
    if known > MAX_JOBS:
        largest = sorted(
            (key for key, count in counts.items() if count and count > 1),
            key=lambda key: -(counts[key] or 0),
        )[:3]
        named = ", ".join(f"{shown[key][:80]!r}: {_number(counts[key])} values" for key in largest)
        raise TooManyJobs(
            _size_error(
                where,
                f"its command makes {_number(known)} jobs ({named}), more than a sweep may make "
                f"({MAX_JOBS:,})",
            )
        )
    sweeper = raw_value(config, "hydra.sweeper._target_")
    if not str(sweeper).endswith(".BasicSweeper") or None in counts.values():
        return None
    return known


def _number(count: int | None) -> str:
    """``count`` with thousands separators, or its order of magnitude where it is too long to
    read (a product of many large sweeps)."""
    digits = len(str(count))
    return f"{count:,}" if digits <= 18 else f"about 10^{digits - 1}"


def _size_error(where: Path | None, what: str) -> str:
    if where is None:  # a command being launched
        return f"this sweep: {what}; split it into smaller sweeps"
    return (
        f"{where}: {what}; refused before listing them (a damaged or altered record?): restore "
        "it from a copy of the sweep (python -m treernn sweep archive keeps one)"
    )


# ----------------------------------------------------------------------------- a recorded command
#: the recorded Hydra settings a resumed sweep passes on: which launcher and sweeper run the jobs
#: and their numbers (jobs at once, a job's resources, trials, the swept parameters). Every other
#: ``hydra.`` setting names files, directories, classes or handlers (logging, the run and sweep
#: directories, where ``.hydra`` goes, callbacks, the launcher's set-up, folders and extra
#: arguments): where a resumed sweep writes is decided by the sweep (its directory, this
#: checkout's conf/), not by its record
PASSED_ON_GROUPS = frozenset({"hydra/launcher", "hydra/sweeper", "hydra/sweeper/sampler"})
PASSED_ON = frozenset(
    {
        "hydra.mode",
        *(
            f"hydra.launcher.{key}"
            for key in (
                # joblib
                "n_jobs", "prefer", "verbose", "timeout", "batch_size",
                # SLURM (submitit, conf/hydra/launcher/slurm.yaml)
                "partition", "qos", "account", "constraint", "exclude", "gres", "nodes",
                "tasks_per_node", "cpus_per_task", "gpus_per_node", "gpus_per_task",
                "cpus_per_gpu", "mem_gb", "mem_per_cpu", "mem_per_gpu", "timeout_min",
                "signal_delay_s", "max_num_timeout", "array_parallelism", "poll_s",
            )
        ),
        *(
            f"hydra.sweeper.{key}"
            for key in (
                "max_batch_size", "n_trials", "n_jobs", "direction", "study_name",
                "sampler.seed", "sampler.n_startup_trials",
            )
        ),
    }
)  # fmt: skip
#: what a recorded override may not say: objects to build (``_target_``), other places to read
#: configs from, callbacks and set-up commands of Hydra, the job's environment
CODE_KEYS = ("_target_", "searchpath", "hydra.callbacks", "hydra.job.env_", "hydra.launcher.setup")
#: the last part of a key that names where a job writes (its run directory's parts: checkpoints,
#: logs, reports); ``paths.log_dir`` and ``paths.root_dir`` place the sweep's directory itself,
#: which a resumed sweep checks against the directory resumed (`check_same_sweep`)
WRITE_KEYS = ("output_dir", "dirpath", "default_root_dir", "save_dir", "log_dir", "root_dir",
              "filename", "path")  # fmt: skip
SWEEP_PLACE = ("paths.log_dir", "paths.root_dir")


def check_passed_on(lines: list[str], where: Path) -> None:
    """Refuse a recorded override (``where``: the ``multirun.yaml`` that records it) that a
    resumed sweep must not pass on to Hydra: one that could run code from outside this project
    (an object to build, a config search path, a config file chosen by a path that leaves
    ``conf/``, a flag of Hydra's command line such as ``--experimental-rerun``, which unpickles a
    file), a Hydra setting other than `PASSED_ON` (which decides the sweep's layout: its logs,
    directories, ``.hydra`` records) and a key that names where a job writes (`WRITE_KEYS`).
    Each is one line naming the override."""
    for line in lines:
        _check_line(line, where, line)


def _check_line(line: str, where: Path, recorded: str) -> None:
    """`check_passed_on` of one override; ``recorded``: the line as the record has it (a
    swept parameter's own override is checked as each job will be given it)."""
    shown = repr(recorded[:200])
    override = None if line.startswith("-") else parse_override(line)
    if override is None:
        raise UserError(
            f"{where} records {shown}, which is not an override Hydra reads (a flag of Hydra's "
            "command line, or text its parser refuses); a sweep handed to you is data: remove "
            "it from hydra.overrides in multirun.yaml"
        )
    key, package = override.key_or_group, override.package or ""
    value = override.get_value_string() if override.value_type is not None else ""
    group = "." not in key  # model=..., hydra/launcher=...: a config file is chosen
    if any(code in line for code in CODE_KEYS) or (group and _leaves_conf(value)):
        raise UserError(
            f"{where} records the override {shown}, which would load code or configs from "
            "outside this project; a sweep handed to you is data. If you trust it, run its "
            "command yourself: python train.py -m ..."
        )
    if key == "hydra" or key.startswith(("hydra.", "hydra/")) or package.startswith("hydra"):
        _check_hydra_setting(override, line, where)
    elif key.rsplit(".", 1)[-1] in WRITE_KEYS and key not in SWEEP_PLACE:
        raise UserError(
            f"{where} records {shown}, which names where a job writes; a resumed sweep's jobs "
            "write in their own directories, decided by the sweep, not by its record: remove "
            "it from hydra.overrides in multirun.yaml"
        )


def _leaves_conf(value: str) -> bool:
    """A config choice (or list of them) given by a path outside ``conf/``: absolute, from a
    home directory, or through ``..``."""
    names = re.split(r"[\[\],\s'\"]+", value)
    return any(name.startswith(("/", "~")) or ".." in name.split("/") for name in names)


def _check_hydra_setting(override: Any, line: str, where: Path) -> None:
    """A recorded ``hydra.`` override passes on only where it is one of `PASSED_ON` (a
    single value, no interpolation), a plain choice of `PASSED_ON_GROUPS`, or a swept parameter
    that is itself an override a resumed sweep passes on."""
    key = override.key_or_group
    value = override.value()
    single = isinstance(value, int | float | str | bool | None) and not override.is_sweep_override()
    choice = key in PASSED_ON_GROUPS and isinstance(value, str) and re.fullmatch(r"\w+", value)
    setting = key in PASSED_ON and single and (key != "hydra.mode" or value == "MULTIRUN")
    if "${" in line:
        why = "its value is an interpolation"
    elif override.package:
        why = "it places a config into Hydra's own"
    elif key.startswith(SWEEPER_PARAMS):
        inner = _param_line(override)
        if not inner.lstrip("+~").startswith("hydra"):
            _check_line(inner, where, line)  # as each job is given it
            return
        why = "a swept parameter that is a Hydra setting"
    elif choice or setting:
        return
    else:
        why = (
            "a resume passes on only the launcher's and the sweeper's choice and numbers: "
            "hydra/launcher, hydra.launcher.n_jobs and resources, hydra.sweeper.params.<key>"
        )
    raise UserError(
        f"{where} records the Hydra setting {line[:200]!r}, which a resumed sweep does not pass "
        f"on ({why}): a sweep's layout (its logs, job directories, .hydra records) is decided "
        "by the sweep, its directory and this checkout's conf/, not by its record; remove it "
        "from hydra.overrides in multirun.yaml"
    )
