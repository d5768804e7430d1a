"""The kernel context: the kernels' per-machine choices (GEMM backend, where ON-LSTM's input
projection runs, bf16 or fp32 per product shape) as part of a run or of a loaded model.

One object, `context`, is all that code outside the kernels sees of them: the lifecycle opens it
for a run (`attach`, after `check`; `plan_updates` as the fit starts), the model package for a
loaded model (`attach_export`, `attach`, and `use` before each computation) and for an export
(`export_record`), the step timer reads what each product ran in (`precisions`). How the
choices are made, cached and recorded is `choices.py`; the products they are about are
`gemm.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from treernn.kernels import choices, gemm


class KernelContext:
    """The process's kernel context (there is one: `context`). Each method says who calls it."""

    def check(self, run_dir: Path | str | None) -> None:
        """Refuse, in one line, a resumed or tested run whose record of choices cannot be read (a
        FIFO, a link, a damaged file): the planner calls it before the attempt is recorded."""
        if run_dir is not None:
            choices.check_run_record(run_dir)

    def attach(
        self,
        run_dir: Path | str,
        sweep_dir: Path | str | None = None,
        trained_in: Path | str | None = None,
        *,
        write: bool = True,
    ) -> None:
        """The choices from now on are the run's in ``run_dir``: those it recorded first, then
        ``trained_in``'s (the run ``mode=test`` tests), then the sweep's, then the machine's; new
        ones are written to the run's and the sweep's records where ``write`` (rank zero).
        `choices.attach` has the details."""
        choices.attach(run_dir, sweep_dir, trained_in, write)

    def plan_updates(self, updates: float) -> None:
        """The updates the run's fit plans, said by the lifecycle as the fit starts: a long fit
        may spend longer probing (`choices.run_budget`)."""
        choices.plan_updates(updates)

    def attach_export(self, recorded: dict[str, str], key: str | None) -> None:
        """The choices from now on are a loaded export's: those its run recorded, then those kept
        for it (``key``) in the user's cache, where new ones go (`choices.attach_loaded`)."""
        choices.attach_loaded(recorded, key)

    def use(self, owner: object, attach_again: Callable[[], None]) -> None:
        """Before a loaded model ``owner`` computes: its own context again (``attach_again``)
        where another model or a run attached since (`choices.use_context`)."""
        choices.use_context(owner, attach_again)

    def export_record(self, recorded: dict[str, str] | Path | None) -> bytes | None:
        """An export's ``kernel_choices.json``: the choices ``recorded`` (a loaded export's map,
        or the run directory whose record holds them), in this version's format; None where
        there are none, and an export then has no such file."""
        if isinstance(recorded, Path):
            recorded = choices.read_record(recorded / choices.RUN_RECORD).get("choices", {})
        if not recorded:
            return None
        record = {"format": choices.RECORD_FORMAT, "choices": dict(sorted(recorded.items()))}
        return (json.dumps(record, indent=1) + "\n").encode()

    def precisions(self) -> list[list[str]]:
        """Each product's precision as this process's probes chose it under bf16-mixed, sorted:
        ``[model, product, shape, "bfloat16" | "float32"]`` (the step timer's record)."""
        return [[*key, dtype] for key, dtype in sorted(gemm.DECISIONS.items())]


context = KernelContext()
