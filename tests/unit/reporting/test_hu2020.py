"""SyntaxGym in ``python -m treernn report table``: the callback's columns, Hu et al. (2020)'s
ON-LSTM and LSTM as reference rows computed from their per-item files (checked against the SG
scores their files give, which ``../shared/data/syntaxgym/SOURCE.md`` lists), the section of
every seed's score and of the runs' suites beside theirs, and the line that says where their
files go when they are missing."""

from __future__ import annotations

import pytest

from tests.paths import REPO_ROOT
from tests.unit.reporting.test_table import make_run
from treernn.reporting.hu2020 import hu2020_results, paper_rows, seeds_markdown
from treernn.reporting.table import report_table
from treernn.reporting.table_output import to_markdown

ONLSTM_PAGE = REPO_ROOT / "docs" / "papers" / "onlstm.md"

SCORES = {
    "test/ppl": 300.0,
    "test/syntaxgym/sg_score": 40.0,
    "test/syntaxgym/sg_score_all": 41.0,
    "test/syntaxgym/circuit/agreement": 10.0,
    "test/syntaxgym/unk_items": 12.5,
    "test/syntaxgym_suite/number_src": 10.0,
}


def lm_runs(root, with_csv: bool = True):
    for job, (model, seed, shift) in enumerate((("onlstm", 1, 0.0), ("onlstm", 2, 10.0))):
        metrics = {key: value + shift for key, value in SCORES.items()}
        run = make_run(root, str(job), [f"model={model}", f"seed={seed}"], metrics, task="ptb")
        if with_csv:
            (run / "syntaxgym_results.csv").write_text(
                f"model,suite,item,correct\nonlstm_ptb_{seed},number_src,0,{seed == 2}\n"
                f"onlstm_ptb_{seed},number_src,1,False\n"
            )
    return root


def test_the_columns_and_a_missing_reference_said(tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_DATA_DIR", str(tmp_path / "nothing"))
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    table = report_table([lm_runs(tmp_path / "runs")])
    labels = [column.label for column in table.columns]
    assert labels[-4:] == ["SG score", "SG all suites", "SG agreement", "SG items w/ <unk>"]
    assert not any("number_src" in label for label in labels)  # per suite: in the files
    (row,) = [row for row in table.rows if row.kind == "run"]
    assert row.cells["syntaxgym/sg_score"].mean == 45.0  # 40 and 50
    assert not any("Hu et al." in row.label for row in table.rows)
    assert "need their per-item files in <data dir>/syntaxgym/hu2020_results" in to_markdown(table)
    assert not any("Hu et al." in r.label for r in report_table([tmp_path / "runs"], "none").rows)


def test_hu_et_als_rows_are_computed_from_their_files(tmp_path, data_dir):
    theirs = hu2020_results(download=False)
    rows = paper_rows(theirs)
    xs = rows["ON-LSTM BLLIP-XS, Hu et al. 2020"]["syntaxgym/sg_score"]
    # their three seeds: 0.432, 0.441 and 0.442 (31 suites, 799 items)
    assert xs.n == 3 and xs.max == pytest.approx(44.2, abs=0.05)
    assert xs.mean == pytest.approx((43.2 + 44.1 + 44.2) / 3, abs=0.05)
    lstm = rows["LSTM BLLIP-XS, Hu et al. 2020"]["syntaxgym/sg_score"]
    assert lstm.mean == pytest.approx((32.3 + 30.7 + 32.0) / 3, abs=0.05)
    assert "| ON-LSTM | 43.2, 44.1, 44.2 | 52.3, 52.4, 49.1 | 46.5, 51.8 | 48.6 |" in (
        seeds_markdown(theirs)
    )
    table = report_table([lm_runs(tmp_path / "runs")])
    labels = [row.label for row in table.rows if row.kind == "paper"]
    assert "ON-LSTM BLLIP-XS, Hu et al. 2020 (paper)" in labels
    assert "LSTM BLLIP-LG, Hu et al. 2020 (paper)" in labels
    text = to_markdown(table)
    assert "SyntaxGym SG score per seed (Hu et al. 2020)" in text
    # the runs' suites from their syntaxgym_results.csv: seeds 0% and 50% -> 25%
    assert "| number_src | Agreement | 25.0 |" in text


def test_the_onlstm_page_holds_their_scores_as_computed(data_dir):
    page = ONLSTM_PAGE.read_text()
    shown = page.split("<!-- hu2020 seeds: begin -->\n")[1].split("<!-- hu2020 seeds: end -->")[0]
    assert shown == seeds_markdown(hu2020_results(download=False))
