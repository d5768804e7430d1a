"""What a run directory records, read as data and written so that it stays whole.

A run directory holds ``status.json`` (the run's record), ``metrics.json`` (its final metrics),
``csv/**/metrics.csv`` (the logger's history) and ``.hydra/{config,overrides}.yaml``; a sweep
directory holds ``multirun.yaml``.

``status.json`` says, for every run: task, model, when it started, the host and process that runs
it (and the machine of every attempt), and its state (`RunState`): ``running``,
``finished``, ``failed`` (with the error), ``interrupted`` (a signal stopped it; it saved a
checkpoint to resume from), ``requeued`` (a SLURM job that will start again by itself), and the
states a resume or ``sweep extend`` leaves. It is written atomically (`write_status`), and
rewritten in place only on a full disk.

Reading: these files travel (a colleague's ``results/``, an archive restored on another machine,
a copy cut short by a full disk). Every reader here turns a damaged file (bytes that are not
UTF-8, JSON or YAML that does not parse, a JSON list where an object belongs, a metric that is not
a number) into one `DamagedRecord`, printed as ``error: <file>: <what is wrong>; <what to
do>``, never a traceback from deep inside and never an empty record: an unreadable
``status.json`` is not a run that has not started. A file that is missing is not damaged: each
reader says what it returns then.

Nothing here imports torch or Lightning at module level (``sweep status`` and ``report`` read
records without them); `machine` imports torch when a run records its machine.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import logging
import os
import pickle
import shutil
import socket
import subprocess
import zipfile
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from treernn.errors import UserError
from treernn.files import (
    CHECKPOINT_EXPANSION,
    GB,
    MB,
    RefusedFile,
    atomic_write,
    check_zip_expansion,
    is_full_disk,
    read_limited,
)

log = logging.getLogger("treernn")

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.json"


class RunState(str, Enum):
    """What ``status.json`` says of a run (its ``status``); written and compared as the string."""

    RUNNING = "running"
    FINISHED = "finished"
    #: stopped by an error (its ``error``); a sweep runs such a job again from the start
    FAILED = "failed"
    #: a signal stopped it after it saved a checkpoint to resume from
    INTERRUPTED = "interrupted"
    #: a SLURM job that will start again by itself and resume
    REQUEUED = "requeued"
    #: an invocation that continued another run (``resumed_into`` names it)
    RESUMED = "resumed"
    #: a sweep job copied from a sweep of a smaller budget, not resumed yet (``sweep extend``)
    EXTENDED = "extended"

    def __str__(self) -> str:
        return self.value


#: what to do about a damaged record of a run
FIX_RUN = (
    "restore it from a copy of the run (python -m treernn sweep restore <archive> <sweep dir>), "
    "or move the run directory away to leave the run out"
)


class DamagedRecord(UserError):
    """A record file exists but cannot be read as what it should be."""

    def __init__(self, path: str | Path, what: str, todo: str = FIX_RUN) -> None:
        super().__init__(f"{path}: {what}; {todo}")
        self.path = Path(path)


#: the most bytes a record of each kind may hold (a file larger is refused unread)
LIMITS = {
    STATUS_FILE: 4 * MB,
    METRICS_FILE: 16 * MB,
    "metrics.csv": 1 * GB,
    "multirun.yaml": 16 * MB,
    "overrides.yaml": 1 * MB,
}
OTHER_LIMIT = 16 * MB


def read_text(path: str | Path, todo: str = FIX_RUN) -> str:
    """A text file's contents; a file that is not UTF-8 text, a link, a FIFO or device, or one
    larger than its kind may be (`LIMITS`) is a `DamagedRecord` (FileNotFoundError passes
    through: callers decide what a missing file means)."""
    path = Path(path)
    try:
        data = read_limited(path, LIMITS.get(path.name, OTHER_LIMIT))
    except RefusedFile as refused:
        raise DamagedRecord(path, refused.what, todo) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DamagedRecord(
            path, f"not UTF-8 text (byte {error.start} is {data[error.start]:#04x})", todo
        ) from None


def read_json_object(path: str | Path, todo: str = FIX_RUN) -> dict[str, Any]:
    """A JSON file that must hold one object (``{...}``)."""
    text = read_text(path, todo)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        cut = "" if text.rstrip().endswith(("}", "]")) else " (cut short?)"
        where = f"line {error.lineno} column {error.colno}"
        raise DamagedRecord(path, f"not valid JSON{cut}: {error.msg} ({where})", todo) from None
    if not isinstance(value, dict):
        raise DamagedRecord(path, f"holds a JSON {_json_kind(value)}, not an object", todo)
    return value


def _json_kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def read_status(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``status.json``; ``{}`` where it has none (the run has not started, or is not a
    treernn run); a damaged one is a `DamagedRecord`."""
    path = Path(run_dir) / STATUS_FILE
    try:
        return read_json_object(path)
    except (FileNotFoundError, NotADirectoryError):
        return {}


def read_metrics(path: str | Path) -> dict[str, float]:
    """A ``metrics.json``: metric name -> number (NaN and infinities, as a diverged run writes
    them, included)."""
    metrics = read_json_object(path)
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DamagedRecord(path, f"metric {key!r} is {value!r}, not a number")
    return {key: float(value) for key, value in metrics.items()}


def is_fraction(key: str) -> bool:
    """Whether a logged metric is an accuracy logged as a fraction (torchmetrics' ``Accuracy``:
    ``test/acc``, ``test/acc/ops7``, ``train/acc_epoch``). Every printed table and report shows
    accuracies in % (x 100); the other metrics are logged in their printed unit already
    (perplexity, parse F1 and the evaluations' accuracies such as ``test/completion_acc`` in %)."""
    parts = key.split("/")
    return len(parts) >= 2 and parts[1] in ("acc", "acc_epoch", "acc_step")


def read_yaml(path: str | Path, todo: str = FIX_RUN) -> Any:
    """A YAML file as plain containers, interpolations left as written."""
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    text = read_text(path, todo)
    try:
        # OmegaConf's own YAML reading (its float and interpolation rules), from the checked text;
        # a lone scalar is its OSError "Invalid loaded object type"
        return OmegaConf.to_container(OmegaConf.load(io.StringIO(text)), resolve=False)
    except (YAMLError, OmegaConfBaseException, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DamagedRecord(path, f"not valid YAML ({first})", todo) from None


def read_overrides(path: str | Path) -> list[str]:
    """A job's ``.hydra/overrides.yaml``: its command-line overrides, a list of strings."""
    value = read_yaml(path)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DamagedRecord(path, "not a list of overrides (key=value lines)")
    return value


#: the most overrides a sweep's recorded command may hold in each of its lists, and the longest
#: one (the tables' commands hold a dozen short lines): a record beyond them is refused unparsed,
#: since Hydra's parser takes seconds and hundreds of MB for an override of 100,000 values
MAX_RECORDED_OVERRIDES = 1000
MAX_OVERRIDE_CHARS = 10_000


def read_multirun(sweep_dir: str | Path) -> Any:
    """A sweep's ``multirun.yaml`` as a DictConfig, checked to hold what a sweep's command is
    made of (``hydra.overrides.task``, and ``.hydra`` where it has one: lists of at most
    `MAX_RECORDED_OVERRIDES` strings of at most `MAX_OVERRIDE_CHARS` characters). A directory
    without one is not a sweep (a `treernn.errors.UserError`). Nothing in it is resolved here:
    a recorded override that holds ``${...}`` is text (read it with
    ``OmegaConf.to_container(..., resolve=False)``)."""

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        raise UserError(
            f"{sweep_dir} is not a sweep directory (no multirun.yaml); give the directory that "
            "python train.py -m printed (outputs/multirun/... or outputs/tables/...)"
        )
    todo = "restore it from a copy of the sweep (python -m treernn sweep archive keeps one)"
    try:
        value = read_yaml(path, todo)
    except RecursionError:  # YAML nested thousands deep: no sweep's config is
        raise DamagedRecord(path, "nested too deeply to be a sweep's config", todo) from None
    overrides = (value or {}).get("hydra", {}).get("overrides") if isinstance(value, dict) else None
    if not isinstance(overrides, dict):
        raise DamagedRecord(path, "has no hydra.overrides (the sweep's command)", todo)
    for part in ("task", "hydra"):
        lines = overrides.get(part, [] if part == "hydra" else None)
        if not isinstance(lines, list) or not all(isinstance(item, str) for item in lines):
            raise DamagedRecord(path, f"hydra.overrides.{part} is not a list of overrides", todo)
        if len(lines) > MAX_RECORDED_OVERRIDES:
            raise DamagedRecord(
                path,
                f"hydra.overrides.{part} holds {len(lines)} overrides, more than a sweep's "
                f"command has ({MAX_RECORDED_OVERRIDES} at most)",
                todo,
            )
        for item in lines:
            if len(item) > MAX_OVERRIDE_CHARS:
                raise DamagedRecord(
                    path,
                    f"hydra.overrides.{part} holds an override of {len(item)} characters "
                    f"({item[:40]!r}...), longer than a sweep's command has "
                    f"({MAX_OVERRIDE_CHARS} at most)",
                    todo,
                )
    return OmegaConf.create(value)


def read_metrics_csv(path: str | Path) -> list[dict[str, float]]:
    """The csv logger's ``metrics.csv``: one dict per row of its non-empty numeric cells (a
    row of one stage leaves the other stages' columns empty)."""
    text = read_text(path)
    rows = []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for record in reader:
            row = {}
            for key, value in record.items():
                if not key or value in ("", None):
                    continue
                try:
                    row[key] = float(value)
                except (TypeError, ValueError):
                    raise DamagedRecord(
                        path, f"line {reader.line_num}: {key} is {value!r}, not a number"
                    ) from None
            rows.append(row)
    except csv.Error as error:
        raise DamagedRecord(path, f"line {reader.line_num}: {error}") from None
    return rows


def final_values(rows: list[dict[str, float]]) -> dict[str, float]:
    """The last value of each column of `read_metrics_csv`'s rows."""
    values: dict[str, float] = {}
    for row in rows:
        values.update(row)
    return values


#: the state a listing gives a run whose ``status.json`` cannot be read
DAMAGED = "damaged record"


def status_for_listing(run_dir: str | Path) -> dict[str, Any]:
    """`read_status` for a listing of many runs (``sweep status``, a sweep's summary): a
    damaged record is shown as `DAMAGED` with the reason, never as a run not started."""
    try:
        return read_status(run_dir)
    except DamagedRecord as error:
        return {"status": DAMAGED, "error": str(error)}


# ----------------------------------------------------------------------------- a checkpoint's step
class _Ignored(dict):
    """What a peeked checkpoint's classes and tensors unpickle to: nothing is imported or called.
    A dict (an ``OrderedDict``'s items are set on it) that takes any arguments and state, and
    list items too (``append``, ``extend``), and keeps none of them that matter here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class _StructureOnly(pickle.Unpickler):
    """Unpickles the containers and numbers of a checkpoint's ``data.pkl``; every class it names
    (tensors' rebuild functions, ``OrderedDict``, ...) becomes `_Ignored`, and tensor
    storages (persistent ids) become None. Nothing in the file is run."""

    def find_class(self, module: str, name: str) -> Any:
        return _Ignored

    def persistent_load(self, pid: Any) -> None:
        return None


def peek_global_step(path: str | Path) -> int | None:
    """A treernn checkpoint's training step, read from its pickle's structure without torch or
    Lightning (importing them takes seconds; ``sweep status`` lists many checkpoints). None for a
    file that is not a whole treernn checkpoint: `treernn.checkpoints.inspect_checkpoint`
    says what is wrong with it where a run needs it."""
    try:
        check_zip_expansion(path, CHECKPOINT_EXPANSION)
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.endswith("/data.pkl")]
            if len(names) != 1:
                return None
            with archive.open(names[0]) as handle:
                top = _StructureOnly(handle).load()
    except (OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError, RefusedFile):
        return None
    if not isinstance(top, dict) or "treernn" not in top:
        return None
    step = top.get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


# ----------------------------------------------------------------------------- run records
def now() -> str:
    return _dt.datetime.now().isoformat(timespec="microseconds")


def is_finished(run_dir: Path) -> bool:
    """The run in ``run_dir`` finished: its record says so and its final metrics are there."""
    return (
        read_status(run_dir).get("status") == RunState.FINISHED
        and (Path(run_dir) / "metrics.json").is_file()
    )


#: run directory -> this process's CPU time when it started its attempt there (`record_machine`)
_ATTEMPT_CPU: dict[str, float] = {}


def cpu_seconds() -> float | None:
    """This process's CPU time so far, user and system, all its threads, with that of the
    children it has waited for (data loader workers, compilers); None where the platform has no
    ``getrusage``."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    used = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        used += usage.ru_utime + usage.ru_stime
    return used


def write_status(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Update ``status.json``: written atomically (a temporary file beside it, then a rename).
    Written by the process of the run's current attempt, it also brings that attempt's CPU time
    up to date (``machines[-1].cpu_seconds``, `record_machine`).

    On a full disk the record is rewritten in place instead: a file of a few hundred bytes keeps
    its block, so the record stays truthful when nothing else can be written."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = read_status(run_dir)
    record.update(fields)
    start, machines = _ATTEMPT_CPU.get(str(run_dir.resolve())), record.get("machines")
    used = cpu_seconds()
    if start is not None and used is not None and machines and isinstance(machines[-1], dict):
        machines[-1]["cpu_seconds"] = round(used - start, 1)
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
    if root is None:  # the checkout that holds the package: <root>/src/treernn/__init__.py
        import treernn

        root = Path(treernn.__file__).resolve().parents[2]
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
    resumed or requeued run can continue on another node). From here on, each `write_status` of
    this process to the run records the CPU time the attempt has used (``cpu_seconds``: this
    process and the children it waited for; a DDP run's rank 0 alone), and so does each
    checkpoint (`AttemptCpu`): an attempt killed without warning keeps the time to its last
    checkpoint. `cpu_hours` sums a run's attempts."""
    seen = list(read_status(run_dir).get("machines") or [])
    seen.append({**machine(), "from": now()})
    start = cpu_seconds()
    if start is not None:  # a sweep's worker runs job after job: this attempt counts from here
        _ATTEMPT_CPU[str(Path(run_dir).resolve())] = start
    write_status(run_dir, machines=seen)


def cpu_hours(record: dict[str, Any]) -> tuple[float, int]:
    """The CPU hours a run's attempts recorded (``machines[].cpu_seconds``) and the number of its
    attempts that recorded none (started by a treernn that did not record it, or on a platform
    without ``getrusage``)."""
    used, missing = 0.0, 0
    for attempt in record.get("machines") or []:
        seconds = attempt.get("cpu_seconds") if isinstance(attempt, dict) else None
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            used += seconds
        else:
            missing += 1
    return used / 3600.0, missing


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
        from treernn.lifecycle.process import log_to_files_only

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
