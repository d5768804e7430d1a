"""ON-LSTM Table 3 as the lm table prints it: a row per construction in the paper's order, a pair
of columns (all pairs, in-vocabulary pairs) per model over its seeds, the paper's numbers beside."""

from __future__ import annotations

from pathlib import Path

from treernn.reporting.syneval_table import syneval_markdown
from treernn.reporting.table import Run


def run(model: str, seed: int, values: dict[str, float]) -> Run:
    config = {"seed": seed, "model": {"name": model}}
    return Run(Path(f"/runs/{model}/{seed}"), "ptb", config, {}, values)


def row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_rows_in_the_papers_order_with_seed_means_and_paper_numbers():
    runs = [
        run("onlstm", 1, {"syneval/agreement_simple": 90.0, "syneval_known/agreement_simple": 95.0,
                          "syneval/short_term": 60.0, "syneval_known/short_term": 70.0}),
        run("onlstm", 2, {"syneval/agreement_simple": 94.0, "syneval_known/agreement_simple": 97.0,
                          "syneval/short_term": 62.0, "syneval_known/short_term": 72.0}),
        run("lstm", 1, {"syneval/agreement_simple": 80.0}),
        run("lstm", 2, {"ppl": 150.0}),  # no syneval metric: not a column's run
    ]  # fmt: skip
    text = syneval_markdown(runs)
    header = row(text, "construction")
    assert header[1:] == [
        "onlstm all (n=2)", "onlstm in-vocab", "lstm all (n=1)", "lstm in-vocab",
        "ON-LSTM (paper)", "LSTM (paper)",
    ]  # fmt: skip
    # mean 92, sample std sqrt(8) = 2.83; mean 96, std sqrt(2) = 1.41; the paper: 0.99 and 1.00
    assert row(text, "Subject-verb agreement: Simple")[1:] == [
        "92.0 ± 2.8", "96.0 ± 1.4", "80.0", "-", "99", "100",
    ]  # fmt: skip
    # the paper's group means (Table 3 read as the paper reads it): 69.5 / 78.5 short-term
    means = row(text, "**mean of the short-term dependency rows**")
    assert means[1:3] == ["61.0 ± 1.4", "71.0 ± 1.4"] and means[-2:] == ["69.5", "78.5"]
    assert row(text, "**mean of the long-term dependency rows**")[-2:] == ["51.7", "51.3"]
    # 19 constructions: the paper's 10 short-term and 9 long-term rows, in its order
    lines = [line for line in text.splitlines() if line.startswith("| ") and ": " in line]
    assert len(lines) == 19
    assert lines[0].startswith("| Subject-verb agreement: Simple |")
    assert lines[-1].startswith(
        "| Negative polarity items: Across a relative clause (grammatical vs. ungrammatical) |"
    )


def test_no_syneval_metric_no_table():
    assert syneval_markdown([run("onlstm", 1, {"ppl": 100.0})]) == ""


def test_the_lm_table_keeps_the_range_means_and_prints_every_construction_after_it():
    from treernn.reporting.table import build_table
    from treernn.reporting.table_output import to_markdown

    runs = [
        run("onlstm", seed, {"ppl": 150.0 + seed, "syneval/agreement_simple": 90.0,
                             "syneval/short_term": 60.0, "syneval_known/long_term": 50.0})
        for seed in (1, 2)
    ]  # fmt: skip
    table = build_table(runs, paper="none")
    labels = [column.label for column in table.columns]
    assert labels == ["test ppl", "M&L short", "M&L long (in-vocab)"]  # no per-construction column
    text = to_markdown(table)
    main, rest = text.split("| construction |")
    assert "agreement_simple" not in main
    assert row("| construction |" + rest, "Subject-verb agreement: Simple")[1] == "90.0 ± 0.0"
