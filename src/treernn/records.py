"""One reader for each kind of record a run or a sweep leaves behind, and what a damaged one says.

A run directory holds ``status.json`` (the run's record), ``metrics.json`` (its final metrics),
``csv/**/metrics.csv`` (the logger's history) and ``.hydra/{config,overrides}.yaml``; a sweep
directory holds ``multirun.yaml``. These files travel: a colleague's ``results/``, an archive
restored on another machine, a copy cut short by a full disk. Every reader here turns a damaged
file (bytes that are not UTF-8, JSON or YAML that does not parse, a JSON list where an object
belongs, a metric that is not a number) into one :class:`DamagedRecord`, printed as
``error: <file>: <what is wrong>; <what to do>``, never a traceback from deep inside and never an
empty record: an unreadable ``status.json`` is not a run that has not started.

A file that is missing is not damaged: each reader says what it returns then. Nothing here imports
torch or Lightning (``sweep status`` and ``report`` read records without them).
"""

from __future__ import annotations

import csv
import io
import json
import pickle
import zipfile
from enum import Enum
from pathlib import Path
from typing import Any

from treernn.errors import UserError

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


def read_text(path: str | Path, todo: str = FIX_RUN) -> str:
    """A text file's contents; a file that is not UTF-8 text is a :class:`DamagedRecord`
    (FileNotFoundError passes through: callers decide what a missing file means)."""
    path = Path(path)
    data = path.read_bytes()
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
    treernn run); a damaged one is a :class:`DamagedRecord`."""
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


def read_yaml(path: str | Path, todo: str = FIX_RUN) -> Any:
    """A YAML file as plain containers, interpolations left as written."""
    from omegaconf import OmegaConf
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


def read_multirun(sweep_dir: str | Path) -> Any:
    """A sweep's ``multirun.yaml`` as a DictConfig, checked to hold what a sweep's command is
    made of (``hydra.overrides.task``, and ``.hydra`` where it has one: lists). A directory without
    one is not a sweep (a :class:`~treernn.errors.UserError`)."""
    from omegaconf import OmegaConf

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        raise UserError(
            f"{sweep_dir} is not a sweep directory (no multirun.yaml); give the directory that "
            "python train.py -m printed (outputs/multirun/... or outputs/tables/...)"
        )
    todo = "restore it from a copy of the sweep (python -m treernn sweep archive keeps one)"
    value = read_yaml(path, todo)
    overrides = (value or {}).get("hydra", {}).get("overrides") if isinstance(value, dict) else None
    if not isinstance(overrides, dict):
        raise DamagedRecord(path, "has no hydra.overrides (the sweep's command)", todo)
    for part in ("task", "hydra"):
        lines = overrides.get(part, [] if part == "hydra" else None)
        if not isinstance(lines, list) or not all(isinstance(item, str) for item in lines):
            raise DamagedRecord(path, f"hydra.overrides.{part} is not a list of overrides", todo)
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
    """The last value of each column of :func:`read_metrics_csv`'s rows."""
    values: dict[str, float] = {}
    for row in rows:
        values.update(row)
    return values


#: the state a listing gives a run whose ``status.json`` cannot be read
DAMAGED = "damaged record"


def status_for_listing(run_dir: str | Path) -> dict[str, Any]:
    """:func:`read_status` for a listing of many runs (``sweep status``, a sweep's summary): a
    damaged record is shown as :data:`DAMAGED` with the reason, never as a run not started."""
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
    (tensors' rebuild functions, ``OrderedDict``, ...) becomes :class:`_Ignored`, and tensor
    storages (persistent ids) become None. Nothing in the file is run."""

    def find_class(self, module: str, name: str) -> Any:
        return _Ignored

    def persistent_load(self, pid: Any) -> None:
        return None


def peek_global_step(path: str | Path) -> int | None:
    """A treernn checkpoint's training step, read from its pickle's structure without torch or
    Lightning (importing them takes seconds; ``sweep status`` lists many checkpoints). None for a
    file that is not a whole treernn checkpoint: :func:`treernn.checkpoints.inspect_checkpoint`
    says what is wrong with it where a run needs it."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.endswith("/data.pkl")]
            if len(names) != 1:
                return None
            with archive.open(names[0]) as handle:
                top = _StructureOnly(handle).load()
    except (OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError):
        return None
    if not isinstance(top, dict) or "treernn" not in top:
        return None
    step = top.get("global_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
