"""``python -m treernn report pages``: the results pages and the README's claims excerpt are
written from the complete kept sweeps only, rewritten in place, and checked."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.unit.reporting.claims.test_claims import make_run
from treernn.commands import command_parsers
from treernn.commands import main as treernn_main
from treernn.errors import UserError
from treernn.reporting.pages import (
    END,
    HELP_COLUMNS,
    START,
    _help,
    kept_sweeps,
    planned_pages,
    replace_excerpt,
    stale_pages,
    write_pages,
)


def sst2_sweep(results: Path, name: str, finished: int) -> Path:
    """A ``table=sst2`` sweep of 6 jobs (2 models x 3 seeds, as its multirun.yaml says) with
    ``finished`` of them finished: OM 79, 80, 81 against LSTM 85, 86, 87."""
    sweep = results / "tables" / "sst2" / name
    jobs = [("ordered_memory", 79), ("ordered_memory", 80), ("ordered_memory", 81)]
    jobs += [("lstm", 85), ("lstm", 86), ("lstm", 87)]
    for job, (model, value) in enumerate(jobs[:finished]):
        make_run(sweep, job, "sst2", model, job % 3 + 1, {"test/acc": value / 100})
    multirun = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "params": {"model": "ordered_memory,lstm", "seed": "1,2,3"},
            },
            "overrides": {"task": ["table=sst2", f"sweep_id={name}"]},
        }
    }
    OmegaConf.save(OmegaConf.create(multirun), sweep / "multirun.yaml")
    return sweep


README = f"# a project\n\nintro\n\n{START}\nold table\n{END}\n\nafter\n"


def test_only_complete_sweeps_are_kept(tmp_path):
    sst2_sweep(tmp_path, "done", 6)
    sst2_sweep(tmp_path, "running", 4)  # a sweep still training beside it
    assert [(s.table, s.name) for s in kept_sweeps(tmp_path)] == [("sst2", "done")]


@pytest.mark.slow  # every command's parser, several times: about 20 s
def test_the_pages_and_the_excerpt_are_written_and_checked(tmp_path):
    results, docs, readme = tmp_path / "results", tmp_path / "docs", tmp_path / "README.md"
    sst2_sweep(results, "done", 6)
    sst2_sweep(results, "running", 2)
    readme.write_text(README)
    files = planned_pages(results, docs, readme, command_parsers("treernn"))
    assert set(files) == {
        docs / "results" / "index.md",
        docs / "results" / "sst2" / "done.md",
        docs / "reference" / "commands.md",
        readme,
    }
    # claim 9: OM - LSTM = -6, [-8.267, -3.733] (tests/unit/reporting/claims/test_claims.py)
    excerpt = files[readme].split(START)[1].split(END)[0]
    verdict = "**not shown**, post hoc (rule of 2026-12-07)"  # no plan in this results folder
    assert f"| 9 | Ordered Memory beats LSTM on SST-2 | {verdict} |" in excerpt
    # t = -6 / sqrt(2/3) with 4 df: p = 0.00183, times the report's 19 comparisons (Holm)
    assert "-6.00 [-8.27, -3.73], p 0.035" in excerpt
    assert files[readme].startswith("# a project\n\nintro\n\n") and files[readme].endswith(
        f"{END}\n\nafter\n"
    )
    page = files[docs / "results" / "sst2" / "done.md"]
    assert "python train.py -m table=sst2 sweep_id=done" in page
    assert "running" not in files[docs / "results" / "index.md"]
    assert set(stale_pages(files, docs)) == set(files)  # nothing written yet
    write_pages(files)
    assert stale_pages(files, docs) == []
    # the command's check: a page edited by hand, or one of a sweep no longer kept, fails
    (docs / "results" / "sst2" / "old.md").write_text("a sweep since removed\n")
    args = ["--results", str(results), "--docs", str(docs), "--readme", str(readme)]
    assert treernn_main(["report", "pages", *args, "--check"]) == 1
    (docs / "results" / "sst2" / "old.md").unlink()
    assert treernn_main(["report", "pages", *args, "--check"]) == 0
    readme.write_text(readme.read_text().replace("**not shown**", "**shown**"))
    assert treernn_main(["report", "pages", *args, "--check"]) == 1
    assert treernn_main(["report", "pages", *args]) == 0
    assert "**not shown**" in readme.read_text()


def test_a_readme_without_its_markers_is_one_error():
    with pytest.raises(UserError, match="claims:start"):
        replace_excerpt("# no markers\n", "table\n")
    assert replace_excerpt(README, "new\n") == (
        f"# a project\n\nintro\n\n{START}\nnew\n{END}\n\nafter\n"
    )


def test_the_commands_page_fills_a_docstrings_paragraphs_again():
    """A docstring keeps its own line breaks, wider than the page's 86 columns: its paragraph is
    filled again as one (line by line, "the" and "run" were left on lines of their own), a list
    item keeps its hanging indent, and an example stays as it is."""
    long = "word " * 18  # 90 characters
    description = "\n".join(
        [
            f"{long}the",
            "run ends here.",
            "",
            f"- item: {long}and",
            "  more of it;",
            "- next item.",
            "",
            "    python train.py task=ptb model=onlstm",
        ]
    )
    parser = argparse.ArgumentParser(
        prog="treernn x",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    text = _help(parser)
    words = "word " * 16
    assert f"\n{words}word\nword the run ends here.\n\n" in text
    assert f"\n- item: {'word ' * 14}word\n  word word word and more of it;\n- next item.\n" in text
    assert "\n\n    python train.py task=ptb model=onlstm\n" in text
    assert max(len(line) for line in text.splitlines()) <= HELP_COLUMNS
