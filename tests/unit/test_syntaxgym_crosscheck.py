"""The syntaxgym cross-check tells the package's known split of ``<unk>`` runs from a real
difference: a run of consecutive ``<unk>`` tokens across a region boundary (or one that only
``<eos>`` follows) goes into the package's leftmost region, so the values of the regions it spans
differ while their sum does not; anything else is a difference."""

from __future__ import annotations

import json

import pytest

from tests.paths import script_module


@pytest.fixture(scope="module")
def crosscheck():
    with script_module("syntaxgym_crosscheck") as module:
        yield module


def regions(*tokens: list[str], values: list[float]) -> list[dict]:
    return [
        {"region_number": number, "tokens": words, "value": value}
        for number, (words, value) in enumerate(zip(tokens, values), start=1)
    ]


def test_the_regions_an_unk_run_spans(crosscheck):
    spans = crosscheck.unk_runs_across_regions
    values = [0.0] * 4
    # one <unk> inside a region: nothing the package could misplace
    assert spans(regions(["the"], ["<unk>", "ran"], ["<eos>"], [], values=values)) == set()
    # <unk> | <unk>: regions 0 and 1 (indices)
    assert spans(regions(["the", "<unk>"], ["<unk>"], ["ran"], ["<eos>"], values=values)) == {0, 1}
    # a run over an empty region: all three
    assert spans(regions(["<unk>"], [], ["<unk>", "x"], ["<eos>"], values=values)) == {0, 1, 2}
    # <unk> with only <eos> after it, in the next region: the package takes the <eos> too
    assert spans(regions(["a"], ["the", "<unk>"], ["<eos>"], values=values)) == {1, 2}
    # <eos> after a known word starts no run
    assert spans(regions(["a"], ["the", "dog"], ["<eos>"], values=values)) == set()


def write(folder, ours: list[dict], package_values: list[float], predictions) -> None:
    folder.mkdir()
    item = {"item_number": 1, "predictions": predictions[0], "regions": {"c": ours}}
    suite = {"metric": "sum", "item_results": [item]}
    (folder / "syntaxgym.json").write_text(json.dumps({"suites": [suite]}))
    package = {"1": {"predictions": predictions[1], "regions": {"c": package_values}}}
    (folder / "package.json").write_text(json.dumps(package))


def test_a_moved_run_is_counted_apart_and_anything_else_is_a_difference(crosscheck, tmp_path):
    ours = regions(["the", "<unk>"], ["<unk>"], ["ran", "<eos>"], values=[3.0, 2.0, 4.0])
    # the package put both <unk> into the first region: 3 + 2 in it, 0 in the second
    write(tmp_path / "moved", ours, [5.0, 0.0, 4.0], ([True], [False]))
    found = crosscheck.compare(tmp_path / "moved", "moved")
    assert (found.items_differ, found.items_at_unk_runs) == (1, 1)
    assert (found.values_differ, found.values_at_unk_runs, found.unexplained) == (2, 2, 0)
    # the same regions, but their sum differs: not a move, a difference
    write(tmp_path / "changed", ours, [5.5, 0.0, 4.0], ([True], [False]))
    found = crosscheck.compare(tmp_path / "changed", "changed")
    assert (found.items_at_unk_runs, found.values_at_unk_runs, found.unexplained) == (0, 0, 3)
    # a region outside any run that differs: a difference
    write(tmp_path / "outside", ours, [3.0, 2.0, 4.5], ([True], [True]))
    found = crosscheck.compare(tmp_path / "outside", "outside")
    assert (found.values_differ, found.unexplained) == (1, 1)
