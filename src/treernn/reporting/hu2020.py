"""Hu et al. (2020)'s published SyntaxGym results, computed from their per-item files, and
treernn's results beside them suite by suite.

Their files (`treernn.data.syntaxgym.HU2020_FILES`, ``<data dir>/syntaxgym/hu2020_results/``)
hold one row per model, suite and item, ``model,suite,item,correct``, with ``model`` written
``<name>_<corpus>_<seed>`` (``ordered-neurons_bllip-xs_0111``); treernn's result CSVs
(``python -m treernn syntaxgym``) have the same layout. Scores are computed here as their
analysis computes them (their ``notebooks/main.py``): a suite's accuracy per model and seed,
the SG score as the mean over their 31 suites, the circuits' means; the 5-gram model's 50
"seeds" (tie-breaking only) are one model whose item is correct when more than half of them
are. Nothing is typed from the paper: every number here comes from the files.

- `read_results`: per-item results of CSV files in that layout;
- `hu2020_results`: Hu et al.'s, from the data directory (or downloaded, checked);
- `paper_rows`: their SG score and circuits per model and corpus (mean, std, max over seeds) as
  reference rows of ``report table``; `seeds_markdown`: every seed's SG score;
- `compare`: per suite, treernn's models (mean over seeds) beside Hu et al.'s ON-LSTM and LSTM
  at one corpus, with the differences and where they are largest.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from treernn.data.syntaxgym import (
    CIRCUIT_KEYS,
    CIRCUITS,
    circuit_of,
    circuit_scores,
    hu2020_files,
    in_sg_score,
    sg_score,
)
from treernn.errors import DataError
from treernn.files import read_input_text, text_lines

HEADER = ("model", "suite", "item", "correct")
#: Hu et al.'s model names, as their paper prints them
MODEL_NAMES = {
    "ordered-neurons": "ON-LSTM",
    "vanilla": "LSTM",
    "rnng": "RNNG",
    "ngram": "n-gram",
    "gpt-2": "GPT-2",
}
CORPORA = ("bllip-xs", "bllip-sm", "bllip-md", "bllip-lg")
#: treernn's model (its ``model.name``) -> Hu et al.'s model of the same architecture
COUNTERPARTS = {"onlstm": "ordered-neurons", "lstm": "vanilla"}
#: the models the report table shows as reference rows
TABLE_MODELS = ("ordered-neurons", "vanilla")


@dataclass(frozen=True)
class ModelKey:
    """A model column split as Hu et al. split it: name, corpus and seed (absent parts empty)."""

    name: str
    corpus: str
    seed: str

    @classmethod
    def parse(cls, model: str) -> ModelKey:
        parts = model.split("_", 2)
        parts += [""] * (3 - len(parts))
        return cls(parts[0], parts[1], parts[2])

    @property
    def group(self) -> tuple[str, str]:
        return (self.name, self.corpus)


#: per model column: suite -> item -> correct
Results = dict[str, dict[str, dict[int, bool]]]


def read_results(paths: Iterable[str | Path]) -> Results:
    """Per-item results from CSV files in Hu et al.'s layout (module docstring); a file in
    another layout is one `DataError` naming it and the line."""
    results: Results = {}
    for path in paths:
        text = read_input_text(path, "results file")
        rows = list(csv.reader(io.StringIO("\n".join(text_lines(text)))))
        if not rows or tuple(rows[0]) != HEADER:
            raise DataError(
                f"results file {path}: the first line must be {','.join(HEADER)} (Hu et al.'s "
                "layout, as python -m treernn syntaxgym writes it)"
            )
        for line, row in enumerate(rows[1:], start=2):
            if len(row) != len(HEADER) or row[3] not in ("True", "False") or not row[2].isdigit():
                raise DataError(
                    f"results file {path}:{line}: {','.join(row)!r} is not model,suite,item,"
                    "True|False"
                )
            model, suite, item, correct = row
            results.setdefault(model, {}).setdefault(suite, {})[int(item)] = correct == "True"
    return results


def majority_vote(results: Results) -> Results:
    """Hu et al.'s 5-gram models: the 50 tie-breaking seeds of one corpus become one model
    (seed 0) whose item is correct when more than half of the seeds have it correct."""
    merged: Results = {}
    votes: dict[str, dict[str, dict[int, list[bool]]]] = {}
    for model, suites in results.items():
        key = ModelKey.parse(model)
        if key.name != "ngram":
            merged[model] = suites
            continue
        target = votes.setdefault(f"ngram_{key.corpus}_0", {})
        for suite, items in suites.items():
            for item, correct in items.items():
                target.setdefault(suite, {}).setdefault(item, []).append(correct)
    for model, suites in votes.items():
        merged[model] = {
            suite: {item: sum(v) / len(v) > 0.5 for item, v in items.items()}
            for suite, items in suites.items()
        }
    return merged


def hu2020_results(data_dir: str | Path | None = None, download: bool = True) -> Results:
    """Hu et al.'s per-item results (the n-gram seeds merged by `majority_vote`)."""
    files = hu2020_files(data_dir, download)
    return majority_vote(
        read_results(
            path
            for name, path in sorted(files.items())
            if name.endswith(".csv") and name.startswith("syntaxgym_results_")
        )
    )


def suite_accuracies(results: Results) -> dict[str, dict[str, float]]:
    """Per model column: suite -> accuracy (a fraction)."""
    return {
        model: {suite: sum(items.values()) / len(items) for suite, items in suites.items()}
        for model, suites in results.items()
    }


def _by_group(accuracies: Mapping[str, Mapping[str, float]]) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for model in accuracies:
        groups.setdefault(ModelKey.parse(model).group, []).append(model)
    return groups


def _members(groups: Mapping[tuple[str, str], list[str]], name: str, corpus: str) -> list[str]:
    """The seeds of ``name`` trained on ``corpus``; GPT-2's corpora carry their tokenizer
    (``bllip-xs-gptbpe``), which counts as the corpus."""
    return sorted(
        model
        for (group_name, group_corpus), members in groups.items()
        if group_name == name and (group_corpus == corpus or group_corpus.startswith(corpus + "-"))
        for model in members
    )


def label(group: tuple[str, str]) -> str:
    name, corpus = group
    return " ".join(part for part in (MODEL_NAMES.get(name, name), corpus.upper()) if part)


# ----------------------------------------------------------------------------- table rows
@dataclass(frozen=True)
class Score:
    """A score over seeds: mean, sample std (None for one seed), max and the number of seeds."""

    mean: float
    std: float | None
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Score:
        std = statistics.stdev(values) if len(values) > 1 else None
        return cls(statistics.fmean(values), std, max(values), len(values))


def model_scores(accuracies: Mapping[str, float]) -> dict[str, float]:
    """One model's scores in %, by the report's column keys: ``syntaxgym/sg_score``,
    ``syntaxgym/sg_score_all`` and ``syntaxgym/circuit/<key>``."""
    scores: dict[str, float] = {}
    if not accuracies:
        return scores
    score = sg_score(accuracies)
    if score is not None:
        scores["syntaxgym/sg_score"] = 100 * score
    scores["syntaxgym/sg_score_all"] = 100 * statistics.fmean(accuracies.values())
    for circuit, value in circuit_scores(accuracies).items():
        scores[f"syntaxgym/circuit/{CIRCUIT_KEYS[circuit]}"] = 100 * value
    return scores


def paper_rows(
    results: Results, models: Sequence[str] = TABLE_MODELS
) -> dict[str, dict[str, Score]]:
    """Per model and corpus (``ON-LSTM BLLIP-XS, Hu et al. 2020``): each column's score over
    the seeds, in %."""
    accuracies = suite_accuracies(results)
    rows: dict[str, dict[str, Score]] = {}
    groups = _by_group(accuracies)
    for name in models:
        for corpus in CORPORA:
            members = _members(groups, name, corpus)
            if not members:
                continue
            per_seed = [model_scores(accuracies[model]) for model in members]
            keys = dict.fromkeys(key for scores in per_seed for key in scores)
            rows[f"{label((name, corpus))}, Hu et al. 2020"] = {
                key: Score.of([scores[key] for scores in per_seed if key in scores]) for key in keys
            }
    return rows


def seeds_markdown(results: Results) -> str:
    """Every model's SG score (31 suites, %) per corpus and seed, as a markdown table."""
    accuracies = suite_accuracies(results)
    groups = _by_group(accuracies)
    names = [name for name in MODEL_NAMES if any(group[0] == name for group in groups)]
    lines = [
        "| model | " + " | ".join(corpus.upper() for corpus in CORPORA) + " |",
        "|---|" + "---|" * len(CORPORA),
    ]
    for name in names:
        cells = []
        for corpus in CORPORA:
            members = _members(groups, name, corpus)
            scores = [sg_score(accuracies[model]) for model in members]
            cells.append(", ".join(f"{100 * s:.1f}" for s in scores if s is not None) or "-")
        lines.append(f"| {MODEL_NAMES[name]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Hu et al. (2020)'s SG score (%, mean accuracy over their 31 suites) per seed, computed "
        "from their per-item files; the n-gram's 50 tie-breaking seeds are one majority vote.",
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- comparison
def _mean_over_seeds(
    accuracies: Mapping[str, Mapping[str, float]], members: Sequence[str], suite: str
) -> float | None:
    values = [accuracies[model][suite] for model in members if suite in accuracies[model]]
    return statistics.fmean(values) if values else None


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def compare(ours: Results, theirs: Results, corpus: str = "bllip-xs", largest: int = 5) -> str:
    """treernn's models (grouped by name and corpus, mean over seeds) beside Hu et al.'s ON-LSTM
    and LSTM at ``corpus``, suite by suite (accuracy %), with each treernn model's difference
    from its counterpart (`COUNTERPARTS`), the circuits, the SG score and the mean over all
    suites, then the suites where they differ most."""
    if corpus not in CORPORA:
        raise DataError(f"corpus {corpus!r}: Hu et al.'s corpora are {', '.join(CORPORA)}")
    our_acc, their_acc = suite_accuracies(ours), suite_accuracies(theirs)
    our_groups, their_groups = _by_group(our_acc), _by_group(their_acc)
    columns: list[tuple[str, Mapping[str, Mapping[str, float]], list[str]]] = []
    for group, members in our_groups.items():
        columns.append((f"{label(group)} (n={len(members)})", our_acc, members))
    references = {}
    for name in TABLE_MODELS:
        members = _members(their_groups, name, corpus)
        if members:
            references[name] = len(columns)
            columns.append(
                (f"{label((name, corpus))} Hu et al. (n={len(members)})", their_acc, members)
            )
    pairs = [
        (index, references[COUNTERPARTS[group[0]]])
        for index, group in enumerate(our_groups)
        if COUNTERPARTS.get(group[0]) in references
    ]
    suites = sorted(
        {suite for model in our_acc.values() for suite in model},
        key=lambda suite: (circuit_of(suite) or "~", suite),
    )
    header = ["suite", "circuit", *(name for name, _, _ in columns)]
    header += [f"Δ {columns[a][0].split(' (')[0]}" for a, _ in pairs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    differences: dict[int, list[tuple[float, str]]] = {a: [] for a, _ in pairs}
    for suite in suites:
        values = [_mean_over_seeds(acc, members, suite) for _, acc, members in columns]
        cells = [suite + ("" if in_sg_score(suite) else " *"), circuit_of(suite) or "-"]
        cells += [_cell(value) for value in values]
        for a, b in pairs:
            if values[a] is None or values[b] is None:
                cells.append("-")
                continue
            delta = values[a] - values[b]
            cells.append(f"{100 * delta:+.1f}")
            differences[a].append((delta, suite))
        lines.append("| " + " | ".join(cells) + " |")
    summaries = [
        (f"**{circuit}**", f"syntaxgym/circuit/{CIRCUIT_KEYS[circuit]}") for circuit in CIRCUITS
    ]
    summaries += [
        ("**SG score**", "syntaxgym/sg_score"),
        ("**mean of these suites**", "syntaxgym/sg_score_all"),
    ]
    # every column's summaries over the suites compared (those of treernn's results)
    compared = set(suites)
    per_model = [
        [model_scores({s: v for s, v in acc[model].items() if s in compared}) for model in members]
        for _, acc, members in columns
    ]
    for title, key in summaries:
        values = []
        for scores in per_model:
            found = [score[key] / 100 for score in scores if key in score]
            values.append(statistics.fmean(found) if found else None)
        cells = [title, "", *(_cell(value) for value in values)]
        for a, b in pairs:
            both = values[a] is not None and values[b] is not None
            cells.append(f"{100 * (values[a] - values[b]):+.1f}" if both else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Accuracy (%) per suite, mean over seeds; Hu et al. (2020)'s models trained on "
        f"{corpus.upper()}, computed from their per-item files; * not in the SG score (their 31 "
        "suites); circuits, SG score and mean over the suites above only; Δ: the treernn model "
        "minus its counterpart.",
    ]
    for a, b in pairs:
        ranked = sorted(differences[a], key=lambda pair: -abs(pair[0]))[:largest]
        shown = ", ".join(f"{suite} {100 * delta:+.1f}" for delta, suite in ranked)
        lines.append(
            f"Largest differences, {columns[a][0].split(' (')[0]} vs "
            f"{columns[b][0].split(' Hu')[0]}: {shown}"
        )
    return "\n".join(lines) + "\n"
