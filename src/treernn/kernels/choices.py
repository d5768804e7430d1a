"""What the fast kernels chose, as part of the run that used it.

The kernels choose GEMM backends, loop placements and precisions per shape by short timing
probes (`treernn.kernels.gemm.kept_choice`). The candidates agree to float rounding only,
so a choice changes a run's numbers in their last digits: a run resumed with another choice than
it started with does not end where it would have ended uninterrupted. A choice is therefore part
of the run. When a kernel asks for one, `choose` looks, in this order, at

1. the run's record, ``<run dir>/.hydra/kernel_choices.json`` beside the run's composed config
   (written as each choice is made: a resumed run, however it stopped, uses what it used
   before; so does ``mode=test`` of its checkpoints);
2. the sweep's record, ``<sweep dir>/kernel_choices.json`` (a multirun's jobs: the first job
   that needs a shape decides it for all of them, on this machine or on another of the same
   CPU);
3. the machine's cache, ``$TREERNN_CACHE_DIR/gemm_backends.json`` (default
   ``~/.cache/treernn``: runs on one machine share their choices, whatever the load was when a
   probe ran; a probe taken under load is kept and marked so, under ``"taken under load"``, and
   probed again by the first process that needs it on an idle machine);

A model loaded outside a run (`treernn.load`) reads the choices its run recorded and never writes
into its folder: an export's ``kernel_choices.json`` (read and checked by
`treernn.models.export_format`) comes first, then the choices kept for that model in the user's
cache (``$TREERNN_CACHE_DIR/models/<the export's key>.json``, `attach_loaded`), where new ones go.

Records are data: each is read as a regular file, never through a link, within `RECORD_LIMIT`
bytes; a run's or a sweep's record that cannot be read is one line (`read_record`), the
machine's cache is read past with a warning (it is rewritten whole on its next change).

and only then probes, under an exclusive lock on the machine's cache (a second process waits
for the first one's choice rather than probe the same shape beside it), and writes the choice
to all three. The run's record is written by the process that writes the run directory (rank
zero); the other ranks of a DDP run read it and share the machine's cache and lock.

Probing is bounded: a run spends at most `RUN_BUDGET` seconds probing, a long fit a hundredth of a
second per planned update up to `LONG_RUN_BUDGET` (``TREERNN_PROBE_SECONDS`` sets it; ``0``
probes nothing), a probe at most `PROBE_BUDGET` of them
(a fifth of a larger budget), not counting the probes it asks for itself (a precision probe's
products choosing their GEMM backends), whose time it gets back within the run's budget.
A shape asked for once the run's budget is spent takes the kernel's safe default (fp32, aten's
products, the projection over all steps, the compiled recurrence), recorded with the run but not
kept for the machine, whose next run probes it; so does a shape whose probe ran out of time
before it had timed every candidate. ``docs/how-to/kernel-choices.md`` says how to pin the
choices or probe again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from treernn.cpu_load import CpuSample, cpu_sample
from treernn.errors import ConfigValueError, DataError
from treernn.files import MB, RefusedFile, read_limited

log = logging.getLogger(__name__)

#: the record of a run (in its directory's ``.hydra/``) and of a sweep (in the sweep's directory)
RECORD = "kernel_choices.json"
RUN_RECORD = Path(".hydra") / RECORD
RECORD_FORMAT = 1
#: the most bytes a record of choices (a run's, a sweep's, the machine's) may hold
RECORD_LIMIT = 4 * MB
#: where the choices of loaded exports are kept, in ``$TREERNN_CACHE_DIR``
MODELS_DIR = "models"
#: the machine's cache, in ``$TREERNN_CACHE_DIR``
MACHINE_FILE = "gemm_backends.json"
#: the machine cache's map of choices probed under load to the load seen
UNDER_LOAD = "taken under load"
#: how long a kept choice's idle check watches the other processes
IDLE_CHECK_SECONDS = 0.2


#: why a probe's figures may not speak for the machine, given the sample taken as it started
Busy = Callable[[CpuSample | None], "str | None"]
#: seconds of probing a run may spend in all (``TREERNN_PROBE_SECONDS`` where set)
BUDGET_ENV = "TREERNN_PROBE_SECONDS"
RUN_BUDGET = 5.0
#: a long fit's budget: `SECONDS_PER_UPDATE` of each update it plans, from `RUN_BUDGET` up to
#: this. A choice the budget did not reach takes its default for the whole run (a resume keeps
#: it): on an idle 2-core AMD Zen 4, the first paper-size ON-LSTM under bf16-mixed probed 8 of
#: its 32 choices in 5 s and would have trained in fp32 throughout
LONG_RUN_BUDGET = 60.0
SECONDS_PER_UPDATE = 0.01
#: seconds one probe may take (less where less of the run's budget is left; a fifth of a larger
#: budget than the default's, so that a run given minutes to fill the cache probes large shapes)
PROBE_BUDGET = 1.0
#: how a choice whose probe ran out of time is recorded
OUT_OF_TIME = "default: its probe ran out of time"
#: how long a process waits for another's lock on a file of choices before it goes on without
LOCK_WAIT = 120.0
#: the kernels' environment switches, recorded with a run (a resume under other ones is said)
SWITCHES = ("TREERNN_GEMM_BACKEND", "TREERNN_ONLSTM_PROJECTION", "TREERNN_CPP_EXT")


class _Probe:
    """A probe running now: when it must be done by, the latest that may become (the run's
    budget), and whether it ran out of time."""

    def __init__(self, deadline: float, limit: float) -> None:
        self.deadline = deadline
        self.limit = limit
        self.cut_short = False


class _State:
    """This process's attachment to a run, its probing budget and the probes running now."""

    def __init__(self) -> None:
        #: record files read before the machine's, in order; those written; the sweep's (shared
        #: by processes, written under a lock)
        self.reads: list[Path] = []
        self.writes: list[Path] = []
        self.shared: list[Path] = []
        #: whether this process runs a run (its probing budget applies)
        self.attached = False
        #: the loaded model whose context this is (a weak reference; None: a run's, or none)
        self.owner: weakref.ref | None = None
        #: the updates the run's fit plans (None: not said; `plan_updates`)
        self.updates: float | None = None
        #: seconds the run has spent probing; whether it was said that they are spent
        self.spent = 0.0
        self.said_spent = False
        #: the probes running now: a probe may ask for another choice (the innermost last)
        self.probes: list[_Probe] = []
        #: the choices this process used since it attached, name -> (choice, how it was made)
        self.used: dict[str, tuple[str, str]] = {}
        #: choices read before the records (a loaded export's), name -> choice
        self.preset: dict[str, str] = {}
        #: locks this process holds, path -> open handle
        self.held: dict[Path, object] = {}


_STATE = _State()
#: what a kernel module forgets when the process attaches to a run (its in-process choices)
_FORGET: list[Callable[[], None]] = []


def on_attach(forget: Callable[[], None]) -> None:
    """Have ``forget()`` called whenever this process attaches to a run: the choices a kernel
    module remembers in the process must give way to those the run recorded."""
    _FORGET.append(forget)


def attach(
    run_dir: Path | str,
    sweep_dir: Path | str | None = None,
    trained_in: Path | str | None = None,
    write: bool = True,
) -> None:
    """Make the kernels' choices from now on part of the run in ``run_dir``: those recorded there
    (a resumed run) are used first, then those of ``trained_in`` (the run whose checkpoint
    ``mode=test`` tests, read only), then the sweep's in ``sweep_dir`` (a multirun's job), then
    the machine's; new ones are written to the run's record and the sweep's (``write``: by the
    process that writes the run directory, rank zero). The run's probing budget starts afresh."""
    run = Path(run_dir) / RUN_RECORD
    sweep = Path(sweep_dir) / RECORD if sweep_dir is not None else None
    trained = Path(trained_in) / RUN_RECORD if trained_in is not None else None
    reads = [run, trained, sweep]
    _STATE.reads = list(dict.fromkeys(path for path in reads if path is not None))
    _STATE.writes = [path for path in (run, sweep) if path is not None] if write else []
    _STATE.shared = [sweep] if sweep is not None else []
    _STATE.preset = {}
    _STATE.attached, _STATE.owner, _STATE.updates = True, None, None
    _STATE.spent, _STATE.said_spent = 0.0, False
    _STATE.used = {}
    for forget in _FORGET:
        forget()
    switches = {name: os.environ.get(name) for name in SWITCHES}
    recorded = read_record(run).get("switches")
    if isinstance(recorded, dict) and recorded != switches:
        changed = ", ".join(
            f"{name}={recorded.get(name)!r} then, {switches[name]!r} now"
            for name in SWITCHES
            if recorded.get(name) != switches[name]
        )
        log.warning(
            "%s ran with other kernel switches (%s): its numbers will differ from an "
            "uninterrupted run's in their last digits",
            run.parent,
            changed,
        )
    elif write and not isinstance(recorded, dict):
        _update(run, lambda record: record.setdefault("switches", switches))


def attach_loaded(recorded: dict[str, str], key: str | None) -> None:
    """A model loaded outside a run (`treernn.load` of an export): the choices its run recorded
    (``recorded``) are used first, then those kept for this model in the user's cache (``key``:
    what names the model's contents; None keeps nothing), then the machine's; new ones are kept
    in the user's cache, never in the model's folder. Probes are bounded as outside a run."""
    detach()
    kept = model_file(key) if key is not None else None
    _STATE.preset = dict(recorded)
    _STATE.reads = [kept] if kept is not None else []
    _STATE.writes = [kept] if kept is not None else []
    _STATE.shared = [kept] if kept is not None else []


def use_context(owner: object, attach_again: Callable[[], None]) -> None:
    """Before ``owner`` (a loaded model) computes: its own context, attached again by
    ``attach_again`` (`attach_loaded` of its export's choices, or `attach` of its run read
    only) where another model or a run attached since; nothing where it is current. The context
    is the process's, so without this a model loaded earlier would read with the choices of the
    model loaded last, and where those differ its numbers would change in their last digits."""
    if _STATE.owner is not None and _STATE.owner() is owner:
        return
    attach_again()
    _STATE.owner = weakref.ref(owner)


def model_file(key: str) -> Path:
    """Where the choices made for a loaded model named by ``key`` are kept."""
    return machine_file().parent / MODELS_DIR / f"{key}.json"


def check_run_record(run_dir: Path | str) -> None:
    """A run's record of choices, where it has one, can be read (one line where it cannot): a
    resume or ``mode=test`` checks it before it records anything."""
    read_record(Path(run_dir) / RUN_RECORD)


def detach() -> None:
    """No run: choices come from the machine's cache and probes only (tests, a notebook, a
    benchmark), each probe within `PROBE_BUDGET`, with no budget for all of them."""
    _STATE.reads, _STATE.writes, _STATE.shared, _STATE.used = [], [], [], {}
    _STATE.preset = {}
    _STATE.spent, _STATE.attached, _STATE.owner, _STATE.updates = 0.0, False, None, None
    for forget in _FORGET:
        forget()


def used() -> dict[str, tuple[str, str]]:
    """The choices this process used since it attached: name -> (choice, how it was made)."""
    return dict(_STATE.used)


def plan_updates(updates: float) -> None:
    """Said as the run's fit starts: the updates it plans (Lightning's estimate; infinite where
    its length is unknown). A long fit may probe longer (`run_budget`)."""
    _STATE.updates = float(updates)
    budget = run_budget()
    if _STATE.attached and budget > RUN_BUDGET and not os.environ.get(BUDGET_ENV, "").strip():
        log.info(
            "the fit plans %s updates: its kernel probes may take up to %.0f s (%s sets it)",
            f"{updates:,.0f}" if math.isfinite(_STATE.updates) else "an unknown number of",
            budget,
            BUDGET_ENV,
        )


def run_budget() -> float:
    """The seconds of probing a run may spend: `BUDGET_ENV`, else `RUN_BUDGET`, or for a fit
    that plans many updates `SECONDS_PER_UPDATE` of each, up to `LONG_RUN_BUDGET`."""
    value = os.environ.get(BUDGET_ENV, "")
    if not value.strip():
        updates = _STATE.updates
        if updates is None or math.isnan(updates):
            return RUN_BUDGET
        return min(LONG_RUN_BUDGET, max(RUN_BUDGET, SECONDS_PER_UPDATE * updates))
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigValueError(
            f"{BUDGET_ENV}={value!r}: the seconds a run may spend probing kernels, a number "
            "(0: no probes, the kernels' defaults)"
        )
    return seconds


def probe_deadline() -> float | None:
    """The ``time.perf_counter()`` by which the probe running now must be done; None outside a
    probe (a benchmark timing products itself)."""
    return _STATE.probes[-1].deadline if _STATE.probes else None


def cut_short() -> None:
    """Said by the timing of a probe that ran out of time before it timed every candidate: its
    choice is used by this run but not kept for the machine."""
    if _STATE.probes:
        _STATE.probes[-1].cut_short = True


def machine_file() -> Path:
    root = os.environ.get("TREERNN_CACHE_DIR", "~/.cache/treernn")
    return Path(root).expanduser() / MACHINE_FILE


def choose(
    name: str,
    usable: list[str],
    probe: Callable[[], str],
    default: str,
    revision: int,
    busy: Busy = lambda since: None,
) -> str:
    """The choice named ``name`` (the machine, shape, dtype, threads and torch version; the
    machine's cache adds the probes' ``revision``), one of ``usable``: the run's record's, else
    the sweep's, else the machine's, else ``probe()``'s within the run's budget
    (``busy(since)``: why the machine may have been too loaded for its figures since the
    `CpuSample` ``since``, noted beside it), else ``default``."""
    named = f"{name} | of {' '.join(usable)}"
    machine_name = f"{name} | probes {revision} | of {' '.join(usable)}"
    machine = machine_file()
    # the sweep's record and the machine's cache are shared with other processes; the run's
    # record has one writer (its directory is locked while the run runs)
    with _locked([*_STATE.shared, machine]):
        how = ""
        value = _STATE.preset.get(named)
        if value in usable:
            how = "recorded with the model"
        for path in [] if how else _STATE.reads:
            value = _recorded(path).get(named)
            if value in usable:
                how = f"recorded in {path}"
                break
        if not how:
            stored = _read_cache(machine)
            kept = stored.get(machine_name)
            if kept in usable and not _probe_again(stored, machine_name, busy):
                value, how = kept, f"kept in {machine}"
            else:
                value, how = _probe_within_budget(probe, default, busy)
                if how.startswith("probed"):  # a default is for this run only
                    _keep_for_machine(machine, machine_name, value, how)
                elif kept in usable:  # a choice probed under load beats a default
                    value, how = kept, f"kept in {machine}, probed under load"
                elif how == OUT_OF_TIME:  # the probe's own log line named a partial winner
                    log.info("%s: its probe ran out of time; %s is used (this run)", named, value)
        _STATE.used[named] = (value, how)
        for path in _STATE.writes:  # a record's choices are never changed, only added to
            if named not in _recorded(path):
                _update(path, lambda record: _add_choice(record, named, value, how))
    return value


def _probe_within_budget(probe: Callable[[], str], default: str, busy: Busy) -> tuple[str, str]:
    outer = not _STATE.probes
    left = run_budget() - _STATE.spent if _STATE.attached else PROBE_BUDGET
    if outer and left <= 0:
        if not _STATE.said_spent:
            _STATE.said_spent = True
            log.info(
                "the run's %.1f s of kernel probes are spent: shapes not yet chosen take the "
                "kernels' defaults, recorded with the run (%s sets the budget)",
                run_budget(),
                BUDGET_ENV,
            )
        return default, "default: the run's probing budget was spent"
    start = time.perf_counter()
    per_probe = max(PROBE_BUDGET, run_budget() / 5) if _STATE.attached else PROBE_BUDGET
    # without a run, each probe within its own second (the time of the probes it asks for aside)
    limit = start + max(left, 0.0) if _STATE.attached else math.inf
    deadline = min(start + per_probe, limit)
    if not outer:  # asked by a probe: within that probe's time
        limit = _STATE.probes[-1].limit
        deadline = min(deadline, _STATE.probes[-1].deadline)
    running = _Probe(deadline, limit)
    since = cpu_sample()
    _STATE.probes.append(running)
    try:
        value = probe()
    finally:
        _STATE.probes.pop()
        elapsed = time.perf_counter() - start
        if outer:
            _STATE.spent += elapsed
        else:
            # The probe that asked gets back the time this one took, within the run's budget: a
            # machine's first precision probe, whose products probe their GEMM backends first,
            # otherwise ran out of time before its bf16 run and left the run in fp32.
            asker = _STATE.probes[-1]
            asker.deadline = min(asker.deadline + elapsed, asker.limit)
    if running.cut_short:  # a choice among the candidates it had time for: none at all
        return default, OUT_OF_TIME
    reason = busy(since)
    return value, f"probed under load ({reason})" if reason else "probed"


def _probe_again(stored: dict, machine_name: str, busy: Busy) -> bool:
    """Whether a choice kept for the machine was probed under load and the machine is idle now:
    then it is probed again and replaced. A busy machine's timings can rank the candidates the
    other way round (the paper-size ON-LSTM's projection placements, kept while two training
    jobs shared a 2-core machine, trained at 1.00x nn.LSTM; probed again idle, 1.13x). A run's
    or a sweep's record is never probed again: they come first, and keep resumes exact."""
    notes = stored.get(UNDER_LOAD)
    if not isinstance(notes, dict) or machine_name not in notes:
        return False
    since = cpu_sample()
    time.sleep(IDLE_CHECK_SECONDS)  # what the other processes use while this one waits
    if busy(since) is not None:
        return False
    log.info(
        "%s: kept for this machine from a probe under load (%s); the machine is idle now, so "
        "it is probed again",
        machine_name,
        notes[machine_name],
    )
    return True


def _keep_for_machine(machine: Path, name: str, value: str, how: str) -> None:
    """Add one probed choice to the machine's cache (a temporary file, then a rename: never a
    half-written file); a probe under load is noted beside it."""

    def add(stored: dict) -> None:
        stored[name] = value
        notes = stored.get(UNDER_LOAD)
        notes = notes if isinstance(notes, dict) else {}
        notes.pop(name, None)
        if how.startswith("probed under load"):
            notes[name] = how.removeprefix("probed under load (").removesuffix(")")
        if notes:
            stored[UNDER_LOAD] = notes
        else:
            stored.pop(UNDER_LOAD, None)

    try:
        _update(machine, add)
    except OSError as error:  # a read-only home: the choice holds for this run only
        log.warning("could not keep the kernel choice in %s: %s", machine, error)


def _add_choice(record: dict, name: str, value: str, how: str) -> None:
    record.setdefault("format", RECORD_FORMAT)
    record.setdefault("choices", {}).setdefault(name, value)
    record.setdefault("how", {}).setdefault(name, how)


def _recorded(path: Path) -> dict:
    """The choices in a run's or a sweep's record."""
    found = read_record(path).get("choices")
    return found if isinstance(found, dict) else {}


def read_record(path: Path) -> dict:
    """A run's, a sweep's or a loaded model's record of choices; ``{}`` where there is none.
    One that is not a regular file, is larger than `RECORD_LIMIT` or is not a JSON object is one
    line (`treernn.errors.DataError`): the run's numbers depend on it."""
    try:
        stored = json.loads(read_limited(path, RECORD_LIMIT).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except RefusedFile as refused:
        raise DataError(f"{path}: {refused.what}; {_FIX_RECORD}") from None
    except (OSError, ValueError) as error:
        raise DataError(
            f"{path}: not a record of kernel choices ({error}); {_FIX_RECORD}"
        ) from None
    if not isinstance(stored, dict) or not isinstance(stored.get("choices", {}), dict):
        raise DataError(f"{path}: not a record of kernel choices (a JSON object); {_FIX_RECORD}")
    return stored


#: what to do about a record of choices that cannot be read
_FIX_RECORD = (
    "restore it from a copy, or remove it to choose again (the numbers may then differ in their "
    "last digits from the run's)"
)


def _read_cache(path: Path) -> dict:
    """The machine's cache of choices; one that cannot be read is passed over with a warning
    (the next choice rewrites it whole)."""
    try:
        stored = json.loads(read_limited(path, RECORD_LIMIT).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RefusedFile) as error:
        log.warning("the kernels' cache %s cannot be read (%s); choosing without it", path, error)
        return {}
    return stored if isinstance(stored, dict) else {}


def _update(path: Path, change: Callable[[dict], object]) -> None:
    """Read ``path``, ``change`` it and write it back (a temporary file beside it, then a
    rename)."""
    stored = _read_cache(path) if path == machine_file() else read_record(path)
    change(stored)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump(stored, handle, indent=1, sort_keys=True)
    os.replace(handle.name, path)


@contextlib.contextmanager
def _locked(paths: list[Path]) -> Iterator[None]:
    """Exclusive locks on ``.<name>.lock`` beside each of ``paths`` not already held by this
    process, taken in a fixed order (the sweep's, then the machine's) so that two processes
    never wait for each other. A lock that cannot be created (a read-only directory) or is held
    longer than `LOCK_WAIT` is gone on without."""
    taken: list[Path] = []
    try:
        for path in paths:
            if path in _STATE.held:
                continue
            handle = _lock(path)
            if handle is not None:
                _STATE.held[path] = handle
                taken.append(path)
        yield
    finally:
        for path in reversed(taken):
            handle = _STATE.held.pop(path)
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def _lock(path: Path):
    lock = path.with_name(f".{path.name}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 (held until _locked releases it)
    except OSError:
        return None
    waited_until = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > waited_until:
                log.warning("%s is held by another process; choosing without it", lock)
                handle.close()
                return None
            time.sleep(0.02)
