"""The report at a sweep's end: the papers' comparison table of the sweep, printed and written
(``table.{md,csv,png}``, `treernn.reporting.table`), and its learning curves
(``curves.{md,png}``, `treernn.reporting.curves`), in the sweep directory. The multirun's end
(`treernn.lifecycle.sweeps.summary.SweepSummary`) calls it as its ``report``, which
``conf/hydra/default.yaml`` names, once at least one job finished.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from treernn.errors import UserError
from treernn.reporting import curves, table, table_output


def report_sweep(job_dirs: list[Path], out_dir: Path) -> bool:
    """Print and write the sweep's table, and write its learning curves (``curves.{md,png}``);
    False if a report itself failed with a bug."""

    def write_table() -> list[Path]:
        report = table.report_table(job_dirs)
        print("\n" + table_output.to_markdown(report), end="", flush=True)
        return table_output.write_table(report, out_dir / "table")

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
