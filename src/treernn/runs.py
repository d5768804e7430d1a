"""Run records and resuming: which run and checkpoint to continue, and what a resume may change.

Every run writes ``status.json`` in its directory: task, model, when it started, and whether it is
``running``, ``finished``, ``failed`` (with the error) or ``interrupted``. ``ckpt_path=last`` reads
these records, not file times: it takes the newest run of this task and model, and in it the newest
checkpoint that loads (any ``checkpoints/*.ckpt``, by training step), so a run killed between
writing ``epochNNN.ckpt`` and ``last.ckpt`` resumes from the epoch file. A resumed run continues in
the directory of the run it resumes (checkpoints, metrics, status), and its own Hydra directory
links there, so one experiment has one history.

Checkpoints are inspected before any data is loaded: a truncated file, a file that is not a treernn
checkpoint, or one written for another task or model stops the run with one line.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from treernn.errors import CheckpointError, UserError

log = logging.getLogger("treernn")

STATUS_FILE = "status.json"

#: config keys whose values live in a checkpoint's optimizer / scheduler state: a resume applies
#: the new values to the restored state (see :func:`apply_resumed_overrides`)
APPLIED_ON_RESUME = ("task.module.optimizer", "task.module.scheduler")


# ----------------------------------------------------------------------------- run records
def now() -> str:
    return _dt.datetime.now().isoformat(timespec="microseconds")


def read_status(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_status(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Update ``status.json`` (written atomically: a temporary file, then a rename)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = read_status(run_dir)
    record.update(fields)
    record["updated"] = now()
    tmp = run_dir / f".{STATUS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
    os.replace(tmp, run_dir / STATUS_FILE)
    return record


# ----------------------------------------------------------------------------- checkpoints
@dataclass
class CheckpointInfo:
    path: Path
    epoch: int
    global_step: int
    #: epochs whose training and validation were done when the checkpoint was written
    epochs_done: int
    config: dict[str, Any]
    wandb_id: str | None = None
    state_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path | None:
        """The run directory that wrote this checkpoint (``<run>/checkpoints/x.ckpt``)."""
        parent = self.path.parent
        if parent.name == "checkpoints" and (parent.parent / ".hydra").is_dir():
            return parent.parent
        return None


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Open a treernn checkpoint without reading its tensors (mmap) and check it is usable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        text = str(error).strip() or type(error).__name__
        first_line = text.splitlines()[0].split(". ")[0]
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({first_line}): it is truncated or not a torch "
            "checkpoint; use another checkpoint of the run (its checkpoints/*.ckpt)"
        ) from error
    if not isinstance(checkpoint, dict) or "treernn" not in checkpoint:
        raise CheckpointError(
            f"{path} is not a treernn checkpoint (it has no run information); give a checkpoint "
            "written by python train.py"
        )
    state = checkpoint.get("state_dict", {})
    progress = (
        checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {})
    )
    epoch = int(checkpoint.get("epoch", 0))
    return CheckpointInfo(
        path=path,
        epoch=epoch,
        epochs_done=int(progress.get("processed", epoch + 1)),
        global_step=int(checkpoint.get("global_step", 0)),
        config=checkpoint["treernn"].get("config", {}),
        wandb_id=checkpoint["treernn"].get("wandb_id"),
        state_shapes={key: tuple(value.shape) for key, value in state.items()},
    )


def check_task_and_model(info: CheckpointInfo, task: str, model: str) -> None:
    """A checkpoint given to another task or model: one line that says which it belongs to."""
    written_task = info.config.get("task", {}).get("name")
    written_model = info.config.get("model", {}).get("name")
    if (written_task, written_model) != (task, model):
        raise CheckpointError(
            f"checkpoint {info.path} was written by task={written_task} model={written_model}, "
            f"not task={task} model={model}: run with task={written_task} model={written_model}, "
            "or give a checkpoint of this task and model"
        )


def newest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, list[str]]:
    """The checkpoint of ``run_dir`` with the most training steps that can be read, and the
    reasons the others (damaged ones) were passed over."""
    best, skipped = None, []
    for path in sorted((Path(run_dir) / "checkpoints").glob("*.ckpt")):
        try:
            info = inspect_checkpoint(path)
        except CheckpointError as error:
            skipped.append(str(error))
            continue
        key = (info.global_step, info.epoch, path.name == "last.ckpt")
        if best is None or key > (best.global_step, best.epoch, best.path.name == "last.ckpt"):
            best = info
    return best, skipped


def runs_of(log_dir: Path, task: str, model: str, exclude: Path | None = None) -> list[Path]:
    """Run directories of this task and model, newest first by their own record (the start time
    in ``status.json``; the directory name's timestamp for runs without one)."""
    root = Path(log_dir) / task / model
    runs = []
    for run_dir in root.glob("*/"):
        if not (run_dir / ".hydra").is_dir():
            continue
        if exclude is not None and run_dir.resolve() == Path(exclude).resolve():
            continue
        record = read_status(run_dir)
        if record.get("resumed_into"):
            continue  # a resume's own directory: its history lives in the run it resumed
        runs.append((record.get("started") or run_dir.name, run_dir))
    return [run_dir for _, run_dir in sorted(runs, reverse=True)]


@dataclass
class ResumePlan:
    checkpoint: CheckpointInfo
    run_dir: Path | None  # where the resumed run continues (None: a checkpoint outside a run)


def plan_last(
    log_dir: Path, task: str, model: str, max_epochs: int | None, exclude: Path | None
) -> ResumePlan:
    """``ckpt_path=last``: the newest run of this task and model, at its newest good checkpoint."""
    runs = runs_of(log_dir, task, model, exclude)
    if not runs:
        raise CheckpointError(
            f"ckpt_path=last: no run of task={task} model={model} under {Path(log_dir)}; "
            "train one first, or give ckpt_path=<file>"
        )
    run_dir = runs[0]
    record = read_status(run_dir)
    info, skipped = newest_complete_checkpoint(run_dir)
    for reason in skipped:
        log.warning("ckpt_path=last: passed over %s", reason)
    if info is None:
        status = record.get("status", "no status record")
        raise CheckpointError(
            f"ckpt_path=last: the newest run {run_dir} ({status}) has no checkpoint that can be "
            "read; give ckpt_path=<file> of another run, or start a new run"
        )
    if record.get("status") == "finished" and max_epochs is not None and max_epochs >= 0:
        done = info.epochs_done
        if done >= max_epochs:
            raise UserError(
                f"ckpt_path=last: the newest run {run_dir} finished ({done} epochs, "
                f"trainer.max_epochs={max_epochs}); to train it further ask for more epochs "
                f"(e.g. trainer.max_epochs={done + max(1, done)}), or start a new run"
            )
    return ResumePlan(checkpoint=info, run_dir=run_dir)


def plan_path(path: str | Path) -> ResumePlan:
    info = inspect_checkpoint(path)
    return ResumePlan(checkpoint=info, run_dir=info.run_dir)


# ----------------------------------------------------------------------------- overrides
def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict):
        items: dict[str, Any] = {}
        for key, value in config.items():
            items.update(flatten(value, f"{prefix}{key}."))
        return items
    return {prefix[:-1]: config}


def differing_keys(old: dict[str, Any], new: dict[str, Any], under: tuple[str, ...]) -> list[str]:
    """Keys below the prefixes ``under`` whose values differ between two (nested) configs."""
    old_flat, new_flat = flatten(old), flatten(new)
    keys = sorted(set(old_flat) | set(new_flat))
    return [
        key
        for key in keys
        if key.startswith(under) and old_flat.get(key, "<unset>") != new_flat.get(key, "<unset>")
    ]


def describe(keys: list[str], old: dict[str, Any], new: dict[str, Any]) -> str:
    old_flat, new_flat = flatten(old), flatten(new)
    return ", ".join(
        f"{key} (checkpoint {old_flat.get(key, '<unset>')}, now {new_flat.get(key, '<unset>')})"
        for key in keys
    )


def check_resume_config(
    info: CheckpointInfo, config: dict[str, Any], module_shapes: dict[str, tuple[int, ...]]
) -> list[str]:
    """Refuse overrides that the restored state would silently undo; return the keys whose new
    values must be applied to the restored optimizer / scheduler."""
    old = info.config
    if old.get("seed") != config.get("seed"):
        raise UserError(
            f"resuming {info.path}: seed={config.get('seed')} differs from the checkpoint's "
            f"seed={old.get('seed')}, but a resumed run continues the checkpoint's random state; "
            "drop the seed override, or start a new run"
        )
    if module_shapes != info.state_shapes:
        changed = differing_keys(old, config, ("model.", "task.module."))
        changed = [key for key in changed if not key.startswith(APPLIED_ON_RESUME)]
        raise UserError(
            f"resuming {info.path}: the model built from this config does not match the "
            f"checkpoint's weights; these settings differ: {describe(changed, old, config)}. "
            "Drop these overrides, or start a new run"
        )
    return differing_keys(old, config, APPLIED_ON_RESUME)


def apply_resumed_overrides(trainer: Any, config: dict[str, Any], keys: list[str]) -> list[str]:
    """Set the new optimizer / scheduler values on the state Lightning restored; returns what was
    applied, as ``key=value`` strings."""
    flat = flatten(config)
    applied = []
    for key in keys:
        group, name = key.split(".")[2], key.split(".", 3)[3]
        if name in ("_target_", "_partial_") or "." in name:
            raise UserError(
                f"resuming: {key} changed, but a resumed run keeps the checkpoint's "
                f"{group}; drop the override, or start a new run"
            )
        value = flat.get(key)
        if group == "optimizer":
            for optimizer in trainer.optimizers:
                for param_group in optimizer.param_groups:
                    if name not in param_group:
                        raise UserError(
                            f"resuming: {key}={value} cannot be applied to the restored "
                            f"{type(optimizer).__name__}; drop the override"
                        )
                    param_group[name] = tuple(value) if isinstance(value, list) else value
                    if name == "lr":
                        # the LM rescales lr from base_lr each step; schedulers keep initial_lr
                        for extra in ("base_lr", "initial_lr"):
                            if extra in param_group:
                                param_group[extra] = value
        else:
            for config_ in trainer.lr_scheduler_configs:
                scheduler = config_.scheduler
                if not hasattr(scheduler, name):
                    raise UserError(
                        f"resuming: {key}={value} cannot be applied to the restored "
                        f"{type(scheduler).__name__}; drop the override"
                    )
                setattr(scheduler, name, value)
        applied.append(f"{key}={value}")
    return applied
