"""Training a sweep further: a new sweep, of a larger budget, whose jobs start where the old
sweep's jobs ended.

    python -m treernn sweep extend <sweep dir> trainer.max_steps=24000 --name <new sweep>

A comparison whose validation was still rising at the end of its budget needs a longer one. Run
afresh, the longer sweep trains again every update the old one did; extended, each of its jobs is
the old job interrupted at the old budget and resumed with the new one: the old job's newest
checkpoint (optimizer, scheduler, lr-halving rule, random state, best checkpoint and score), its
``metrics.csv`` history and its record of machines are copied into the new sweep's job directory
(a sibling of the old sweep's, named ``<new sweep>``), marked ``extended``, and the sweep's command
with the new budget and ``sweep_id=<new sweep>`` resumes each job from there. The old sweep stays
as it was, so both budgets can be reported.

This is the same run as a fresh sweep of the larger budget only where nothing in the recipe
depends on the budget. None of the recipes here does (the tables' lr schedules are plateau rules,
ReduceLROnPlateau, the LM's NT-ASGD, the EWT models' halving rule, all driven by validations), and
a resumed job continues the data order and random state of its checkpoint, so that the metrics of
an extended sweep are those of a fresh one (``tests/integration/test_sweep_extend.py``). A schedule
written in terms of ``trainer.max_steps`` (a cosine or linear decay to the end of the budget)
would not be: extend such a sweep only if training on at the old schedule's end is what you want.

Only the budget may change (``trainer.max_steps``, ``trainer.max_epochs``, ``trainer.max_time``),
and it must leave every job something to train. Every job needs its checkpoint: extend the sweep
in the directory it ran in (an archive in ``results/`` keeps no checkpoint of a finished job).
A job that had logged to wandb logs the extension as a new wandb run (the copied checkpoint
forgets the old run's id), so that the old sweep's runs on the dashboard stay as they ended.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from treernn.errors import UserError
from treernn.lifecycle import locks, records, runs
from treernn.lifecycle.records import RunState, read_multirun

BUDGET_NAMES = ", ".join(f"trainer.{key}" for key in runs.BUDGET_KEYS)
#: what an extended job continues from besides its checkpoints (its test outputs are not copied:
#: the extended job writes them again at its end)
CARRIED = (".hydra", "csv", "train.log")
#: the record of the job it continues, and where it stood


@dataclass
class Extension:
    """What ``sweep extend`` prepared: the new sweep's directories and the command that runs it."""

    sweep_dirs: list[Path]
    #: the one of them that Hydra names (``hydra.sweep.dir``), with the sweep's ``multirun.yaml``
    sweep_dir: Path
    cwd: Path
    arguments: list[str]


def parse_budget(overrides: list[str]) -> dict[str, Any]:
    """``trainer.<budget key>=<value>`` overrides (Hydra's grammar), as typed values by key;
    anything else is refused."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if not overrides:
        raise UserError(
            "sweep extend: give the new budget, e.g. trainer.max_steps=24000 "
            f"(one or more of {BUDGET_NAMES})"
        )
    budget = {}
    parser = OverridesParser.create()
    for item in overrides:
        try:
            (override,) = parser.parse_overrides([item])
        except HydraException as error:
            raise UserError(f"sweep extend: {item!r} is not an override ({error})") from None
        key = override.key_or_group
        value = None if override.is_sweep_override() else override.value()
        name = key.removeprefix("trainer.")
        if key == name or name not in runs.BUDGET_KEYS or value in (None, ""):
            raise UserError(
                f"sweep extend changes only the budget ({BUDGET_NAMES}), not {item!r}: any "
                "other change is another sweep (python train.py -m ... sweep_id=<name>)"
            )
        budget[key] = value
    return budget


def _with_budget(overrides: list[str], budget: dict[str, Any], name: str) -> list[str]:
    """``overrides`` with the budget's values in place of the old ones (added where absent) and
    the sweep named ``name``."""
    out, given = [], set()
    for item in overrides:
        key = item.split("=", 1)[0]
        if key.lstrip("+~") == "sweep_id":
            continue
        if key in budget:
            out.append(f"{key}={budget[key]}")
            given.add(key)
        else:
            out.append(item)
    out += [f"{key}={value}" for key, value in budget.items() if key not in given]
    return [*out, f"sweep_id={name}"]


def _check_left_to_train(job_dir: Path, info: Any, budget: dict[str, Any]) -> None:
    """The new budget must leave the job's checkpoint something to train."""
    trainer = {key.removeprefix("trainer."): value for key, value in budget.items()}
    if any(not isinstance(trainer.get(key, 0), int) for key in ("max_steps", "max_epochs")):
        raise UserError(
            "sweep extend: trainer.max_steps and trainer.max_epochs are whole numbers, not "
            + ", ".join(f"{k}={v}" for k, v in budget.items())
        )
    if runs.budget_used_up(trainer, info.global_step, info.epochs_done):
        raise UserError(
            f"sweep extend: {', '.join(f'{k}={v}' for k, v in budget.items())} leaves job "
            f"{job_dir} nothing to train (its checkpoint is at step {info.global_step}, "
            f"{info.epochs_done} epochs); give a larger budget"
        )


def _jobs(sweep_dirs: list[Path]) -> list[Path]:
    jobs = [path.parent for sweep in sweep_dirs for path in sweep.glob("*/status.json")]
    return sorted(jobs, key=runs.job_order)


def _copy_checkpoint(source: Path, target: Path) -> None:
    """``source`` as ``target`` (a temporary name, then a rename), without the wandb run id."""
    from treernn.checkpoints import AtomicCheckpointIO, read_checkpoint

    target.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = read_checkpoint(source)
    if checkpoint["treernn"].get("wandb_id"):
        checkpoint["treernn"]["wandb_id"] = None
        AtomicCheckpointIO().save_checkpoint(checkpoint, target)
        return
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(source, partial)
    os.replace(partial, target)


def _prepare_job(
    job_dir: Path, new_job: Path, budget: dict[str, Any], name: str, info: Any
) -> None:
    record = records.read_status(job_dir)
    old_status = record.get("status")
    staging = new_job.with_name(f".{new_job.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for item in CARRIED:
        path = job_dir / item
        if path.is_dir():
            shutil.copytree(path, staging / item, symlinks=True)
        elif path.is_file():
            shutil.copy2(path, staging / item)
    for source in (info.path, runs.best_file(info, job_dir)):
        if source is not None:
            _copy_checkpoint(source, staging / "checkpoints" / source.name)
    for key in ("ended", "pid", "pid_start", "error", "attempts", "rerun_because", "resumes"):
        record.pop(key, None)
    record.update(
        status=RunState.EXTENDED,
        overrides=_with_budget(list(record.get("overrides") or []), budget, name),
        extended_from={
            "job": str(job_dir.resolve()),
            "status": old_status,
            "step": info.global_step,
            "epochs": info.epochs_done,
            "checkpoint": info.path.name,
        },
    )
    records.write_status(staging, **record)
    os.replace(staging, new_job)


def _new_multirun(saved: Path, target: Path, budget: dict[str, Any], name: str) -> None:
    """The old sweep's ``multirun.yaml`` with the new budget and name (Hydra writes its own when
    the sweep starts; this one lets ``sweep status`` and ``sweep resume`` read the new sweep
    before that)."""
    from treernn.lifecycle.sweeps.layout import recorded_overrides

    config = read_multirun(saved.parent)
    task = recorded_overrides(config, "task")
    OmegaConf.update(config, "hydra.overrides.task", _with_budget(task, budget, name))
    for key, value in budget.items():
        OmegaConf.update(config, key, value, force_add=True)
    OmegaConf.update(config, "sweep_id", name, force_add=True)
    partial = target / "multirun.yaml.partial"
    OmegaConf.save(config, partial)
    os.replace(partial, target / "multirun.yaml")


def extend(sweep_dirs: list[Path], budget_overrides: list[str], name: str) -> Extension:
    """Prepare the new sweep ``name`` from ``sweep_dirs`` (a sweep's directory, or each of its
    directories where it keeps one per model); see the module's docstring."""
    from treernn.lifecycle.sweeps.layout import (
        check_passed_on,
        recorded_cwd,
        recorded_overrides,
        saved_multirun,
        sweep_size,
    )

    budget = parse_budget(budget_overrides)
    if not name or "/" in name or name.startswith("."):
        raise UserError(f"sweep extend: --name {name!r} is not a sweep name (one path part)")
    sweep_dirs = [Path(path) for path in sweep_dirs]
    for sweep in sweep_dirs:
        if not list(sweep.glob("*/status.json")):
            saved_multirun(sweep)  # the error for a directory that is not a sweep's
        if sweep.resolve().name == name:
            raise UserError(f"sweep extend: {sweep} is already named {name}; give a new --name")
    main = next((sweep for sweep in sweep_dirs if (sweep / "multirun.yaml").is_file()), None)
    main = main or sweep_dirs[0]
    config = saved_multirun(main)  # the error for a sweep without its multirun.yaml
    jobs = _jobs(sweep_dirs)
    size = sweep_size(main)
    if size is not None and len(jobs) < size:
        raise UserError(
            f"sweep extend: the sweep's command makes {size} jobs, and {len(jobs)} are in "
            f"{', '.join(map(str, sweep_dirs))}; a sweep over models outside a table keeps each "
            "model's jobs in a directory of its own (multirun/<task>/<model>/<name>): give them "
            "all, and let every job start before extending"
        )
    task = recorded_overrides(config, "task")
    arguments = ["-m", *recorded_overrides(config, "hydra"), *_with_budget(task, budget, name)]
    check_passed_on(arguments[1:], main / "multirun.yaml")  # before anything is copied
    cwd = recorded_cwd(config, main)
    infos = {}
    for job_dir in jobs:
        target = job_dir.parent.parent / name
        if target.exists():
            raise UserError(
                f"sweep extend: {target} exists; continue it with python -m treernn sweep "
                f"resume {target}, or give another --name"
            )
        if locks.is_live(job_dir):
            raise UserError(
                f"sweep extend: job {job_dir} is still running ({locks.describe_owner(job_dir)}); "
                "extend the sweep once it has stopped"
            )
        info, _ = runs.newest_complete_checkpoint(job_dir)
        if info is None:
            status = records.read_status(job_dir).get("status", "no record")
            raise UserError(
                f"sweep extend: job {job_dir} ({status}) has no checkpoint to continue from (an "
                "archived copy keeps none of a finished job's); extend the sweep in the "
                "directory it ran in, or run the larger budget as a new sweep: python train.py "
                + " ".join(arguments)
            )
        _check_left_to_train(job_dir, info, budget)
        infos[job_dir] = info
    for job_dir, info in infos.items():
        _prepare_job(job_dir, job_dir.parent.parent / name / job_dir.name, budget, name, info)
    _new_multirun(main / "multirun.yaml", main.parent / name, budget, name)
    return Extension(
        sweep_dirs=sorted({job_dir.parent.parent / name for job_dir in jobs}),
        sweep_dir=main.parent / name,
        cwd=cwd,
        arguments=arguments,
    )
