"""The end of a multirun: one line per failed job, the sweep's table, and a non-zero exit if any
job failed.

``treernn.run.main`` records a failed job in its ``status.json`` and lets the sweep go on (Hydra's
launcher then starts the next job); this Hydra callback reads those records when the sweep is over.
When at least one job finished it prints the papers' comparison table of the sweep and writes
``table.{md,csv,png}`` (``python -m treernn report table``, :mod:`treernn.reporting.table`) and
the learning curves ``curves.{md,png}`` (``report curves``) into the sweep directory. Registered
in ``conf/hydra/default.yaml``.

The sweep directory (``hydra.sweep.dir``) names the task and model, so a sweep over
``model=lstm,onlstm`` puts its jobs in one directory per model; they share the last part of the
path (the sweep's start time and process, ``${sweep_dir_name:}``), which finds them all.
"""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from treernn.errors import UserError
from treernn.runs import read_status

#: an interpolation of a config key (``${model.name}``), not a resolver (``${now:...}``)
_KEY_INTERPOLATION = re.compile(r"\$\{([\w.]+)\}")


def sweep_failures(sweep_dir: Path | list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(job directory, status record) of each job of a sweep that did not finish."""
    failures = []
    for job_dir in _jobs(sweep_dir):
        record = read_status(job_dir)
        if record.get("status") in ("failed", "interrupted"):
            failures.append((job_dir, record))
    return failures


def _jobs(sweep: Path | list[Path]) -> list[Path]:
    if isinstance(sweep, list):
        return sweep
    return sorted(path.parent for path in Path(sweep).glob("*/status.json"))


def sweep_job_dirs(config: DictConfig) -> list[Path]:
    """Every job directory of the sweep: below ``hydra.sweep.dir``, and below its siblings that
    differ only in parts named by swept config keys (``${task.name}``, ``${model.name}``) when its
    last part is one resolver's value (unique to this sweep)."""
    sweep_dir = Path(config.hydra.sweep.dir)
    dirs = {sweep_dir}
    template = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("dir", "")
    parts = str(template).split("/")
    last = parts[-1] if parts else ""
    if last.startswith("${") and ":" in last and len(parts) <= len(sweep_dir.parts):
        resolved = list(sweep_dir.parts[-len(parts) :])
        pattern = [
            "*" if _swept_part(part) else value for part, value in zip(parts, resolved, strict=True)
        ]
        root = Path(*sweep_dir.parts[: len(sweep_dir.parts) - len(parts)] or ["."])
        if "*" in pattern:
            dirs |= set(root.glob("/".join(pattern)))
    jobs = {path.parent for path in (d for sweep in dirs for d in sweep.glob("*/.hydra"))}
    return sorted(jobs, key=lambda path: (int(path.name) if path.name.isdigit() else -1, path))


def _swept_part(part: str) -> bool:
    keys = _KEY_INTERPOLATION.findall(part)
    return bool(keys) and not any(key.startswith(("paths.", "hydra.")) for key in keys)


def _overrides(job_dir: Path) -> str:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    lines = [line[2:].strip() for line in path.read_text().splitlines() if line.startswith("- ")]
    return " ".join(lines)


def report_sweep(job_dirs: list[Path], out_dir: Path) -> bool:
    """Print and write the sweep's table, and write its learning curves (``curves.{md,png}``);
    False if a report itself failed with a bug."""
    from treernn.reporting import curves, table

    def write_table() -> list[Path]:
        report = table.report_table(job_dirs)
        print("\n" + table.to_markdown(report), end="", flush=True)
        return table.write_table(report, out_dir / "table")

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


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sweep_job_dirs(config)
        finished = [job for job in jobs if read_status(job).get("status") == "finished"]
        # the table first: the summary stays the last thing printed, whatever the report says
        reported = report_sweep(jobs, sweep_dir) if finished else True
        failures = sweep_failures(jobs)
        if not failures:
            print(f"sweep finished: {len(jobs)} jobs in {sweep_dir}", flush=True)
        else:
            lines = [f"sweep: {len(failures)} of {len(jobs)} jobs failed ({sweep_dir}):"]
            for job_dir, record in failures:
                lines.append(
                    f"  job {job_dir.name} [{_overrides(job_dir)}]: {record['status']}: "
                    f"{record.get('error', '')}"
                )
            print("\n".join(lines), file=sys.stderr, flush=True)
        if failures or not reported:
            sys.exit(1)
