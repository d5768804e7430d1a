"""The end of a multirun: one line per failed job, and a non-zero exit if any failed.

``treernn.run.main`` records a failed job in its ``status.json`` and lets the sweep go on (Hydra's
launcher then starts the next job); this Hydra callback reads those records when the sweep is over.
Registered in ``conf/hydra/default.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from treernn.runs import read_status


def sweep_failures(sweep_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(job directory, status record) of each job of a sweep that did not finish."""
    failures = []
    for status in sorted(Path(sweep_dir).glob("*/status.json")):
        record = read_status(status.parent)
        if record.get("status") in ("failed", "interrupted"):
            failures.append((status.parent, record))
    return failures


def _overrides(job_dir: Path) -> str:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    lines = [line[2:].strip() for line in path.read_text().splitlines() if line.startswith("- ")]
    return " ".join(lines)


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        failures = sweep_failures(sweep_dir)
        jobs = len(list(sweep_dir.glob("*/.hydra")))
        if not failures:
            print(f"sweep finished: {jobs} jobs in {sweep_dir}", flush=True)
            return
        lines = [f"sweep: {len(failures)} of {jobs} jobs failed ({sweep_dir}):"]
        for job_dir, record in failures:
            lines.append(
                f"  job {job_dir.name} [{_overrides(job_dir)}]: {record['status']}: "
                f"{record.get('error', '')}"
            )
        print("\n".join(lines), file=sys.stderr, flush=True)
        sys.exit(1)
