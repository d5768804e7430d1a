"""Run records and resuming: which run and checkpoint to continue, and what a resume may change.

Every run writes ``status.json`` in its directory: task, model, when it started, the host and
process that runs it, and whether it is ``running``, ``finished``, ``failed`` (with the error),
``interrupted`` (a signal stopped it; it saved a checkpoint to resume from) or ``requeued`` (a
SLURM job that will start again by itself). While it runs, its process holds a lock on the
directory's ``.lock`` file: one writer per run.

``ckpt_path=last`` reads these records, not file times: it takes the newest run of this task and
model (single runs and sweep jobs alike), passes over runs that have no checkpoint (a ``mode=test``
run, a run that failed while setting up) with a word, refuses a run that is still running and a
run that finished its budget, and in the chosen run takes the newest checkpoint that loads (any
``checkpoints/*.ckpt``, by training step). A resumed run continues in the directory of the run it
resumes (checkpoints, metrics, status), and its own Hydra directory links there, so one experiment
has one history.

Checkpoints are inspected before any data is loaded (:mod:`treernn.checkpoints`).
"""

from __future__ import annotations

import csv
import datetime as _dt
import fcntl
import io
import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treernn.checkpoints import CheckpointInfo, atomic_write, inspect_checkpoint, is_full_disk
from treernn.errors import CheckpointError, UserError

log = logging.getLogger("treernn")

STATUS_FILE = "status.json"
LOCK_FILE = ".lock"

#: config keys whose values live in a checkpoint's optimizer / scheduler state: a resume applies
#: the new values to the restored state (see :func:`apply_resumed_overrides`)
APPLIED_ON_RESUME = ("task.module.optimizer", "task.module.scheduler")

#: trainer keys that set a run's budget
BUDGET_KEYS = ("max_epochs", "max_steps", "max_time")


# ----------------------------------------------------------------------------- run records
def now() -> str:
    return _dt.datetime.now().isoformat(timespec="microseconds")


def read_status(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return {}


def write_status(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Update ``status.json``: written atomically (a temporary file beside it, then a rename).

    On a full disk the record is rewritten in place instead: a file of a few hundred bytes keeps
    its block, so the record stays truthful when nothing else can be written."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = read_status(run_dir)
    record.update(fields)
    record["updated"] = now()
    text = json.dumps(record, indent=2, sort_keys=True, default=str).encode()
    path = run_dir / STATUS_FILE
    try:
        atomic_write(path, lambda handle: handle.write(text))
    except OSError as error:
        if not (is_full_disk(error) or is_full_disk(error.__context__ or error)):
            raise
        with open(path, "r+b" if path.exists() else "wb") as handle:
            handle.write(text)
            handle.truncate()
    return record


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Who runs a run: host, pid and the process's start time (which tells a live process from a
    later one that got the same pid)."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "pid": pid, "pid_start": _process_start_ticks(pid)}


def _process_start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # field 22 of stat(5): start time in clock ticks after boot
    except (OSError, ValueError, IndexError):
        return None


def machine() -> dict[str, Any]:
    """What a run ran on, for its record: host, CPU model (``/proc/cpuinfo``, else the platform's
    processor string), logical CPUs, torch's intra-op threads and, where CUDA is on, the GPU."""
    import platform

    import torch

    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip() and fields:
                break  # the first processor's block is enough
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = fields.get("model name", "")
    if fields.get("cpu family"):  # a KVM guest may say only "AMD EPYC": the family tells Zen 3 / 4
        cpu += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    isa = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in
           fields.get("flags", "").split()]  # fmt: skip
    found = {
        "host": socket.gethostname(),
        "cpu": cpu or platform.processor() or platform.machine(),
        "isa": isa,
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name()
    return found


def record_machine(run_dir: Path) -> None:
    """Add this attempt's machine to the run's record (``machines``, one entry per attempt: a
    resumed or requeued run can continue on another node)."""
    seen = list(read_status(run_dir).get("machines") or [])
    seen.append({**machine(), "from": now()})
    write_status(run_dir, machines=seen)


class RunLock:
    """An exclusive lock on a run directory, held by the process that writes into it; the kernel
    releases it when that process ends, however it ends."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._handle: Any = None

    def acquire(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.run_dir / LOCK_FILE, "a")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise UserError(
                f"run {self.run_dir} is still running ({describe_owner(self.run_dir)}): one run "
                "has one writer. Wait for it to finish, or stop it (kill -TERM <pid> saves a "
                "checkpoint), then resume"
            ) from None
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def describe_owner(run_dir: Path) -> str:
    record = read_status(run_dir)
    if record.get("pid"):
        return f"pid {record['pid']} on {record.get('host', 'this host')}"
    return "another process"


def is_live(run_dir: Path) -> bool:
    """True while a process writes into ``run_dir``: its lock is held, or its record names a
    process of this host that is still alive (the same pid and start time)."""
    path = Path(run_dir) / LOCK_FILE
    if path.exists():
        with open(path, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    record = read_status(run_dir)
    if record.get("status") != "running" or record.get("host") != socket.gethostname():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    start = _process_start_ticks(pid)
    return start is not None and start == record.get("pid_start")


# ----------------------------------------------------------------------------- finding runs
def newest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, list[str]]:
    """The checkpoint of ``run_dir`` with the most training steps that can be read (its
    ``checkpoints/`` and the SLURM requeue's ``hpc_ckpt_N.ckpt``), and the reasons the others
    (damaged ones) were passed over."""
    best, skipped = None, []
    run_dir = Path(run_dir)
    found = [*(run_dir / "checkpoints").glob("*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    for path in sorted(found):
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
    """Run directories of this task and model under ``log_dir``, newest first by their own record
    (the start time in ``status.json``; the directory name's timestamp for runs without one):
    single runs (``<task>/<model>/<run>``) and the jobs of sweeps (``multirun/...``,
    ``tables/...``), which say their task and model in their record."""
    log_dir = Path(log_dir)
    candidates = {path.parent for path in (log_dir / task / model).glob("*/.hydra")}
    for path in log_dir.rglob(STATUS_FILE):
        record = read_status(path.parent)
        if record.get("task") == task and record.get("model") == model:
            candidates.add(path.parent)
    found = []
    for run_dir in candidates:
        if not (run_dir / ".hydra").is_dir():
            continue
        if exclude is not None and run_dir.resolve() == Path(exclude).resolve():
            continue
        record = read_status(run_dir)
        if record.get("resumed_into"):
            continue  # a resume's own directory: its history lives in the run it resumed
        found.append((record.get("started") or run_dir.name, str(run_dir), run_dir))
    return [run_dir for *_, run_dir in sorted(found, reverse=True)]


@dataclass
class ResumePlan:
    checkpoint: CheckpointInfo
    run_dir: Path | None  # where the resumed run continues (None: a checkpoint outside a run)


def _why_no_checkpoint(record: dict[str, Any]) -> str:
    if record.get("mode") == "test":
        return "a mode=test run"
    if record.get("status") == "failed" and record.get("stage", "setup") == "setup":
        return "failed while setting up"
    return str(record.get("status", "no status record"))


def plan_last(
    log_dir: Path,
    task: str,
    model: str,
    trainer: dict[str, Any] | None,
    exclude: Path | None,
) -> ResumePlan:
    """``ckpt_path=last``: the newest run of this task and model that has a checkpoint, at its
    newest good checkpoint. ``trainer``: the trainer settings of this invocation (None for
    ``mode=test``, which may test a finished run)."""
    candidates = runs_of(log_dir, task, model, exclude)
    for run_dir in candidates:
        if is_live(run_dir):
            raise UserError(
                f"ckpt_path=last: the newest run {run_dir} is still running "
                f"({describe_owner(run_dir)}); wait for it to finish, or stop it (kill -TERM "
                "<pid> saves a checkpoint), then resume"
            )
        record = read_status(run_dir)
        info, skipped = newest_complete_checkpoint(run_dir)
        for reason in skipped:
            log.warning("ckpt_path=last: passed over %s", reason)
        if info is None:
            log.warning(
                "ckpt_path=last: passed over %s (%s, no checkpoint)",
                run_dir,
                _why_no_checkpoint(record),
            )
            continue
        if trainer is not None and record.get("status") == "finished":
            check_budget_left(run_dir, info, trainer)
        return ResumePlan(checkpoint=info, run_dir=run_dir)
    raise CheckpointError(
        f"ckpt_path=last: no run of task={task} model={model} with a checkpoint under "
        f"{Path(log_dir)}; train one first, or give ckpt_path=<file>"
    )


def check_budget_left(run_dir: Path, info: CheckpointInfo, trainer: dict[str, Any]) -> None:
    """A finished run is resumed only to train it further: with a budget (max_epochs,
    max_steps, max_time) other than the one it finished, and not yet used up."""
    old = info.config.get("trainer", {})
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    used_up = (max_epochs is not None and 0 <= max_epochs <= info.epochs_done) or (
        max_steps is not None and 0 < max_steps <= info.global_step
    )
    unchanged = all(old.get(key) == trainer.get(key) for key in BUDGET_KEYS)
    if used_up or unchanged:
        budget = ", ".join(
            f"trainer.{key}={trainer.get(key)}" for key in BUDGET_KEYS if trainer.get(key)
        )
        more = (
            f"trainer.max_steps={info.global_step * 2}"
            if max_steps is not None and max_steps > 0
            else f"trainer.max_epochs={info.epochs_done * 2 or 1}"
        )
        raise UserError(
            f"ckpt_path=last: the newest run {run_dir} finished ({info.epochs_done} epochs, "
            f"step {info.global_step}; {budget or 'no budget'}); to train it further ask for a "
            f"larger budget (e.g. {more}), or start a new run"
        )


def plan_path(path: str | Path) -> ResumePlan:
    info = inspect_checkpoint(path)
    return ResumePlan(checkpoint=info, run_dir=info.run_dir)


# ----------------------------------------------------------------------------- metrics history
def csv_rows_up_to(path: Path, step: int) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a run's ``metrics.csv`` that were logged up to training step
    ``step`` (the step a resume continues from): rows logged later belong to training that the
    resumed run does again, and would appear twice."""
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        rows = list(reader)
    if "step" not in header:
        return header, rows
    column = header.index("step")
    kept = [row for row in rows if not row[column] or float(row[column]) <= step]
    return header, kept


def write_csv_rows(path: Path, header: list[str], rows: list[list[str]]) -> None:
    def write(handle: Any) -> None:
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        handle.write(text.getvalue().encode())

    atomic_write(path, write)


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
