"""``python -m treernn parse`` as the unsupervised-parsing scoreboard: a hand-written tree file in
another format scored on sample10, the round trip of a tiny ON-LSTM's trees through
``--save-trees`` and ``--pred``, and a malformed tree file."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.integration.helpers import REPO_ROOT, TINY_LM, train_in_process
from treernn.commands import main as commands_main

pytestmark = pytest.mark.usefixtures("data_dir")

#: the first four sentences of sample10, written by hand as JSON lists with their punctuation
#: and capitals (the scorer drops and lower-cases them as it does the gold)
HAND_JSON = "\n".join(
    [
        '[["A", "Lorillard", "spokewoman"], [["said", ","], '
        '["``", ["This", ["is", ["an", "old", "story"]]]], "."]]',
        '["There", [["is", ["no", "asbestos"]], [["in", ["our", "products"]], ["now", "."]]]]',
        '[["It", "has"], [["no", "bearing"], ["on", [["our", "work", "force"], ["today", "."]]]]]',
        '["Not", [["this", "year"], "."]]',
    ]
)
#: the same trees, Penn-Treebank style with made-up labels
HAND_LABELLED = """\
(S (NP A Lorillard spokewoman) (VP (X said ,) (S `` (S This (VP is (NP an old story))))) .)
(S There (VP (VP is (NP no asbestos)) (X (PP in (NP our products)) (ADVP now .))))
(S (X It has) (NP (NP no bearing) (PP on (NP (NP our work force) (NP today .)))))
(FRAG Not (NP (NP this year) .))
"""
BASELINES = ("left_branching", "right_branching", "random", "balanced", "balanced_bottom_up")


def treernn_process(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m treernn <args>`` as a user types it."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"), PYTHONUNBUFFERED="1", **env)
    return subprocess.run(
        [sys.executable, "-m", "treernn", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def treernn(*args: str) -> SimpleNamespace:
    """The same command in this process (the treebank is read once per process, not per call)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = commands_main(list(args))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


@pytest.mark.parametrize("text", [HAND_JSON, HAND_LABELLED], ids=["json", "labelled"])
def test_a_hand_written_tree_file_is_scored_beside_the_baselines(text, data_dir, tmp_path):
    pred = tmp_path / "hand.trees"
    pred.write_text(text)
    common = ["parse", "--pred", str(pred), "--gold", "sample10", "--max-sentences", "4"]
    result = treernn(*common, "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "gold: sample10 (4 sentences)"
    assert lines[1].startswith("protocol: punctuation dropped; corpus F1 = EVALB")
    assert "sentence F1 without the whole-sentence span" in lines[1]
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert set(rows) == {"hand.trees", *BASELINES}
    # 19 of the 20 gold brackets (whole sentences included) are among the 22 predicted ones
    assert rows["hand.trees"][0] == "90.48"  # 2 * 19 / (22 + 20)
    assert rows["random"][1] == "(max"  # mean (max ...) over the 5 seeds

    as_json = treernn(*common, "--data-dir", str(data_dir), "--output", "json")
    board = json.loads(as_json.stdout)[0]
    assert board["protocol"]["punctuation"] == "drop"
    hand = board["rows"][0]
    assert hand["brackets"] == {"matched": 19, "predicted": 22, "gold": 20}
    assert hand["label_recall"]["NP"] == 1.0

    markdown = treernn(*common, "--data-dir", str(data_dir), "--output", "markdown")
    assert "| trees | corpus F1 | sentence F1 |" in markdown.stdout


@pytest.fixture(scope="module")
def onlstm_checkpoint(tmp_path_factory, data_dir) -> Path:
    run_dir = tmp_path_factory.mktemp("onlstm") / "run"
    train_in_process(["model=onlstm", "trainer=smoke", *TINY_LM], run_dir)
    return run_dir / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("tree_format", ["bracketed", "json"])
def test_saved_trees_score_exactly_what_the_model_evaluation_printed(
    onlstm_checkpoint, data_dir, tmp_path, tree_format
):
    saved = tmp_path / f"onlstm_trees.{tree_format}"
    gold = ["--gold", "sample10", "--data-dir", str(data_dir), "--output", "json"]
    model = treernn(
        "parse", "--ckpt", str(onlstm_checkpoint), *gold, "--out", str(tmp_path / "model.json"),
        "--save-trees", str(saved), "--tree-format", tree_format, "--layer", "2",
    )  # fmt: skip
    assert model.returncode == 0, model.stderr[-3000:]
    assert len(saved.read_text().splitlines()) == 555
    scored = treernn("parse", "--pred", str(saved), *gold)
    assert scored.returncode == 0, scored.stderr[-3000:]

    model_board, file_board = json.loads(model.stdout)[0], json.loads(scored.stdout)[0]
    model_rows = {row["name"]: row for row in model_board["rows"]}
    file_rows = {row["name"]: row for row in file_board["rows"]}
    assert set(model_rows) == {"ONLSTM layer 1", "ONLSTM layer 2", *BASELINES}
    layer2, from_file = model_rows["ONLSTM layer 2"], file_rows[saved.name]
    for key in ("corpus_f1", "sentence_f1", "label_recall", "depth", "brackets", "sentences"):
        assert from_file[key] == layer2[key], key
    for name in BASELINES:
        assert file_rows[name] == model_rows[name]
    assert file_board["protocol"] == model_board["protocol"]
    assert (
        model_board["gold"]
        == file_board["gold"]
        == {
            "name": "sample10",
            "sentences": 555,
            "skipped": [],
        }
    )
    record = json.loads((tmp_path / "model.json").read_text())
    assert record["tables"][0]["rows"] == model_board["rows"]


def test_a_malformed_tree_file_is_one_line_naming_the_line(tmp_path):
    pred = tmp_path / "broken.txt"
    pred.write_text("((the cat) sat)\n\n((a dog) (barked loudly)\n")
    result = treernn_process("parse", "--pred", str(pred), "--gold", "sample10")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {pred}:3: ")

    debug = treernn_process("parse", "--pred", str(pred), "--gold", "sample10", TREERNN_DEBUG="1")
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and f"error: {pred}:3: " in debug.stderr


def test_pred_needs_one_gold(tmp_path):
    pred = tmp_path / "p.txt"
    pred.write_text("((the cat) sat)\n")
    result = treernn("parse", "--pred", str(pred))
    assert result.returncode == 1
    assert result.stderr.startswith("error: --pred needs one --gold")
