"""Run records and locks: what a run directory says about the run in it, and who writes into it.

Every run writes ``status.json`` in its directory: task, model, when it started, the host and
process that runs it (and the machine of every attempt), and whether it is ``running``,
``finished``, ``failed`` (with the error), ``interrupted`` (a signal stopped it; it saved a
checkpoint to resume from) or ``requeued`` (a SLURM job that will start again by itself). While it
runs, its process holds a lock on the directory's ``.lock`` file: one writer per run.

Here are writing and reading those records (a failure included), the lock, whether a run is live,
and finding the runs of a task and model and their newest good checkpoint. Deciding what to resume
from a run's record is :mod:`treernn.lifecycle.plan`, continuing it
:mod:`treernn.lifecycle.execute`; checkpoints are inspected (before any data is loaded) by
:mod:`treernn.checkpoints`.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from treernn.config_checks import check_switches, warn_doubtful
from treernn.errors import CheckpointError, UserError, say
from treernn.files import atomic_write, is_full_disk
from treernn.identity import is_rank_zero, process_start_ticks
from treernn.records import STATUS_FILE, DamagedRecord, RunState, read_status

if TYPE_CHECKING:
    from treernn.checkpoints import CheckpointInfo

log = logging.getLogger("treernn")

LOCK_FILE = ".lock"


# ----------------------------------------------------------------------------- run records
def now() -> str:
    return _dt.datetime.now().isoformat(timespec="microseconds")


def is_finished(run_dir: Path) -> bool:
    """The run in ``run_dir`` finished: its record says so and its final metrics are there."""
    return (
        read_status(run_dir).get("status") == RunState.FINISHED
        and (Path(run_dir) / "metrics.json").is_file()
    )


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
    commit = code_version()
    if commit is not None:
        found["commit"] = commit
    return found


def code_version(root: Path | None = None) -> str | None:
    """The git commit of the treernn checkout that runs (short hash, ``+changes`` where tracked
    files differ from it), or None outside a git checkout (an installed package) or without git:
    which code a table's job ran, beside the machine (a sweep that runs for days is meant to run
    from a fixed commit)."""
    root = Path(__file__).resolve().parents[2] if root is None else root
    if not (root / ".git").exists():  # a directory, or a file in a worktree
        return None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=20)  # fmt: skip
        if head.returncode != 0:
            return None
        changes = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+changes" if changes.stdout.strip() else "")


def record_machine(run_dir: Path) -> None:
    """Add this attempt's machine to the run's record (``machines``, one entry per attempt: a
    resumed or requeued run can continue on another node)."""
    seen = list(read_status(run_dir).get("machines") or [])
    seen.append({**machine(), "from": now()})
    write_status(run_dir, machines=seen)


def _rank_zero() -> bool:
    """Rank 0 as Lightning knows it (imported here: reading runs needs no Lightning)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return rank_zero_only.rank == 0


def record_failure(run_dir: Path | None, status: str, message: str, details: str = "") -> None:
    """Say in the run directory why it stopped (``failed``, ``interrupted``, ``requeued``):
    ``status.json`` and train.log. Rank 0 only; nothing where no run directory was made."""
    if not _rank_zero():
        return
    if run_dir is None or not run_dir.is_dir():
        return
    try:
        if read_status(run_dir).get("resumed_into"):
            return  # a refused resume: its own directory says where it pointed
    except DamagedRecord:
        return  # the damaged record is what the user is told about; it is left as it is
    write_status(run_dir, status=status, error=message, ended=now())
    if logging.getLogger().handlers:
        emit = log.error if status == RunState.FAILED else log.warning
        from treernn.process import log_to_files_only

        log_to_files_only(emit, "%s: %s%s", status, message, "\n" + details if details else "")


def remove_if_empty(run_dir: Path | None, rank_zero: bool | None = None) -> None:
    """A single run that failed while setting up (a config, data or checkpoint error, before any
    training) leaves no directory behind: the error was printed and there is nothing to keep.
    ``rank_zero``: whether this process is rank 0 (None: ask Lightning)."""
    if run_dir is None:
        return
    try:
        record = read_status(run_dir)
    except DamagedRecord:
        return  # not this run's own record: kept for the user to look at
    if rank_zero is None:
        rank_zero = _rank_zero()
    if not rank_zero or record.get("stage", "setup") != "setup":
        return
    if record.get("resumed_into") or record.get("resumes") or not run_dir.is_dir():
        return
    for handler in list(logging.getLogger().handlers):
        if (
            isinstance(handler, logging.FileHandler)
            and Path(handler.baseFilename).parent == run_dir
        ):
            handler.close()
            logging.getLogger().removeHandler(handler)
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in run_dir.resolve().parents:  # outputs/<task>/<model>/, made for this run alone
        if parent == Path.cwd().resolve():
            break
        try:
            parent.rmdir()  # only an empty one; another run's files stop it
        except OSError:
            break


def output_dir_of(cfg: DictConfig) -> Path | None:
    """The run's directory, where the config got as far as naming one."""
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    return Path(output_dir) if output_dir else None


def check_before_loading(cfg: DictConfig) -> None:
    """:func:`check_switches` for a single run, before torch and Lightning load (seconds): a
    wrong ``mode=`` or a negative dropout is answered at once, as :func:`treernn.run.main`
    answers it (one line on stderr, exit status 1, no run directory left behind). A job of a
    multirun is left to :func:`treernn.run.main`, which records the failure in the sweep and
    goes on."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return
    try:
        check_switches(cfg)
    except UserError as error:
        say(error)
        remove_if_empty(output_dir_of(cfg), rank_zero=is_rank_zero())
        sys.exit(1)
    if is_rank_zero():
        warn_doubtful(cfg)


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
    if record.get("status") != RunState.RUNNING or record.get("host") != socket.gethostname():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    start = process_start_ticks(pid)
    return start is not None and start == record.get("pid_start")


# ----------------------------------------------------------------------------- finding runs
def newest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, list[str]]:
    """The checkpoint of ``run_dir`` with the most training steps that can be read (its
    ``checkpoints/`` and the SLURM requeue's ``hpc_ckpt_N.ckpt``), and the reasons the others
    (damaged ones) were passed over."""
    best, skipped = None, []
    run_dir = Path(run_dir)
    found = [*(run_dir / "checkpoints").glob("*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    if found:  # torch reads them; a directory without checkpoints is answered without it
        from treernn.checkpoints import inspect_checkpoint
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


def best_file(newest: CheckpointInfo, job_dir: Path) -> Path | None:
    """The best checkpoint (by the run's monitor) that the job's newest checkpoint names, as a
    file of ``job_dir``'s ``checkpoints/`` (written whole: AtomicCheckpointIO), or None: a resumed
    job that tests its best checkpoint needs it (the newest alone would test the best since the
    resume)."""
    if not newest.best_model_path:
        return None
    path = job_dir / "checkpoints" / Path(newest.best_model_path).name
    return path if path != newest.path and path.is_file() else None


#: trainer keys that set a run's budget
BUDGET_KEYS = ("max_epochs", "max_steps", "max_time")


def budget_used_up(trainer: dict[str, Any], global_step: int, epochs_done: int) -> bool:
    """True where the budget in ``trainer`` (``max_epochs``, ``max_steps``; -1: no limit) leaves
    a run that stands at ``global_step`` after ``epochs_done`` epochs nothing to train."""
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    return (max_epochs is not None and 0 <= max_epochs <= epochs_done) or (
        max_steps is not None and 0 < max_steps <= global_step
    )


def job_order(job_dir: Path) -> tuple[int, str]:
    """Sort key of a sweep's job directories: by job number, then path."""
    return (int(job_dir.name) if job_dir.name.isdigit() else -1, str(job_dir))
