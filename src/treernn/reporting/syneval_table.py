"""ON-LSTM Table 3 from a sweep's runs: Marvin & Linzen accuracy per construction, one column per
model over its seeds, beside the paper's ON-LSTM and LSTM.

Runs that logged the syneval callback's metrics (``test/syneval/<case>`` over all pairs and
``test/syneval_known/<case>`` over the pairs with no word outside the model's vocabulary) give, per
Table 3 row (`treernn.evaluation.syneval.TABLE3`, the paper's order) and per model, the mean
± sample std over seeds of both; the group rows are the unweighted means over each group's rows,
as the paper reads its table. The paper's numbers are its Table 3 (fractions there, % here).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from treernn.reporting.run_records import Run

PREFIXES = ("syneval", "syneval_known")


def has_syneval(runs: Sequence[Run]) -> bool:
    return any(key.startswith("syneval/") for run in runs for key in run.values)


def _cell(runs: Sequence[Run], key: str) -> str:
    values = [run.values[key] for run in runs if key in run.values]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def _paper(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}"


def _paper_group(cases: Sequence[Any], group: str, attribute: str) -> str:
    values = [getattr(case, attribute) for case in cases if case.dependency == group]
    return f"{100 * statistics.fmean(values):.1f}"


def syneval_markdown(runs: Sequence[Run]) -> str:
    """The table as markdown (empty when no run logged syneval metrics)."""
    if not has_syneval(runs):
        return ""
    from treernn.evaluation.syneval import GROUP_KEYS, TABLE3  # torch: only where needed

    models: dict[str, list[Run]] = {}
    for run in runs:
        if any(key.startswith("syneval/") for key in run.values):
            models.setdefault(run.model, []).append(run)
    header = ["construction"]
    for model, model_runs in models.items():
        header += [f"{model} all (n={len(model_runs)})", f"{model} in-vocab"]
    header += ["ON-LSTM (paper)", "LSTM (paper)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group, group_key in GROUP_KEYS.items():
        lines.append("| **" + group + "** |" + " |" * (len(header) - 1))
        for case in (case for case in TABLE3 if case.dependency == group):
            cells = [f"{case.phenomenon}: {case.name}"]
            for model_runs in models.values():
                cells += [_cell(model_runs, f"{prefix}/{case.key}") for prefix in PREFIXES]
            cells += [_paper(case.paper_onlstm), _paper(case.paper_lstm)]
            lines.append("| " + " | ".join(cells) + " |")
        cells = [f"**mean of the {group.lower()} rows**"]
        for model_runs in models.values():
            cells += [_cell(model_runs, f"{prefix}/{group_key}") for prefix in PREFIXES]
        cells += [
            _paper_group(TABLE3, group, "paper_onlstm"),
            _paper_group(TABLE3, group, "paper_lstm"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Marvin & Linzen accuracy (%) per construction (ON-LSTM Table 3), mean ± sample std over "
        "seeds; all: every pair; in-vocab: the pairs with no word outside the model's vocabulary "
        "('-': no such pair). The paper's models read a 90M-word Wikipedia vocabulary.",
    ]
    return "\n".join(lines) + "\n"
