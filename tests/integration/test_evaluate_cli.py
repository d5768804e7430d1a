"""``python -m treernn parse|trees|syneval`` on checkpoints of tiny language models trained
through the real CLI code path: parse F1 (Table 2), induced trees (Appendix A), syneval (Table 3),
bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO_ROOT, TINY_LM, train_in_process
from treernn.commands import main
from treernn.parsing.baselines import baseline_trees
from treernn.parsing.metrics import score_trees
from treernn.parsing.wsj import load_split

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, data_dir) -> dict[str, Path]:
    paths = {}
    for model in ("onlstm", "lstm"):
        run_dir = tmp_path_factory.mktemp(model) / "run"
        train_in_process([f"model={model}", "trainer=smoke", *TINY_LM], run_dir)
        paths[model] = run_dir / "checkpoints" / "last.ckpt"
    return paths


def evaluate_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "treernn", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_parse_table_and_json(checkpoints, data_dir, tmp_path):
    out = tmp_path / "parse.json"
    result = evaluate_cli(
        "parse", "--ckpt", str(checkpoints["onlstm"]), "--gold", "sample10", "sample",
        "--data-dir", str(data_dir), "--max-sentences", "40", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for row in ("ONLSTM layer 1", "ONLSTM layer 2", "random", "right_branching", "Paper"):
        assert row in result.stdout
    report = json.loads(out.read_text())
    assert [table["gold"]["name"] for table in report["tables"]] == ["sample10", "sample"]
    assert [table["gold"]["sentences"] for table in report["tables"]] == [40, 40]
    sample = report["tables"][1]
    rows = {row["name"]: row for row in sample["rows"]}
    for layer in ("ONLSTM layer 1", "ONLSTM layer 2"):
        assert 0.0 < rows[layer]["corpus_f1"]["mean"] <= 1.0
        assert set(rows[layer]["label_recall"]) == {"ADJP", "NP", "PP", "INTJ"}
    # the baseline in the JSON is the one computed directly on the same 40 sentences
    sentences = load_split("sample", "sample", data_dir=data_dir)[:40]
    right = score_trees(
        baseline_trees("right_branching", [len(s.words) for s in sentences]),
        [s.tree for s in sentences],
    )
    assert rows["right_branching"]["corpus_f1"]["mean"] == pytest.approx(right.corpus_f1)
    assert report["seconds"]["total"] > 0


def test_parse_refuses_a_model_without_distances(checkpoints, data_dir, tmp_path):
    out = tmp_path / "parse.json"
    result = evaluate_cli(
        "parse", "--ckpt", str(checkpoints["lstm"]), "--gold", "sample",
        "--data-dir", str(data_dir), "--max-sentences", "5", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 1
    assert not out.exists()
    assert "Traceback" not in result.stderr
    assert "has no syntactic distances" in result.stderr
    assert str(checkpoints["lstm"]) in result.stderr


def test_trees_prints_every_layer(checkpoints, capsys):
    sentence = "The RTC needs the most able competent management available ."
    assert main(["trees", "--ckpt", str(checkpoints["onlstm"]), sentence]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sentence 1: the rtc needs the most able competent management available"
    layer_lines = [line for line in lines if line.strip().startswith("layer")]
    assert len(layer_lines) == 2
    for line in layer_lines:
        tree = line.split(": ", 1)[1]
        assert tree.replace("(", "").replace(")", "").split() == lines[0].split(": ")[1].split()
        assert tree.count("(") == 8  # a binary tree over 9 words has 8 brackets


def test_bad_input_gives_one_line(checkpoints, data_dir, tmp_path, capsys):
    ckpt = str(checkpoints["onlstm"])
    assert main(["trees", "--ckpt", ckpt, "a fine sentence", "?! ..."]) == 1
    assert "sentence 2 ('?! ...') has no words" in capsys.readouterr().err
    assert main(["parse", "--ckpt", ckpt, "--gold", "wsj10", "--wsj-dir", str(tmp_path)]) == 1
    assert f"no WSJ trees in {tmp_path}" in capsys.readouterr().err
    assert (
        main(["parse", "--ckpt", str(tmp_path / "missing.ckpt"), "--data-dir", str(data_dir)]) == 1
    )
    assert "missing.ckpt does not exist" in capsys.readouterr().err
    assert main(["syneval", "--ckpt", ckpt, "--syneval-dir", str(tmp_path)]) == 1
    assert "is missing" in capsys.readouterr().err


def test_syneval_table_and_json(checkpoints, data_dir, tmp_path, capsys):
    out = tmp_path / "syneval.json"
    args = ["syneval", "--ckpt", str(checkpoints["lstm"]), "--data-dir", str(data_dir)]
    assert main([*args, "--max-per-condition", "3", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "Across a prepositional phrase" in table and "Long-Term Dependency" in table
    report = json.loads(out.read_text())
    assert len(report["cases"]) == 19
    simple = report["cases"][0]
    assert simple["case"] == "Simple" and simple["total"] == 6  # 3 per condition, 2 conditions
    assert 0.0 <= simple["accuracy"] <= 1.0
    assert report["pairs_with_unknown_words"] > 0  # PTB lacks some template words
