"""The EWT stand-ins callback (``callbacks=[default,ewt_standins]``) in real dependency-LM runs:
after testing it logs completion accuracy (and, for a tree model, reranking UAS/LAS), and they
are the numbers the evaluation functions give on the checkpoint that was tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import train_in_process
from treernn.evaluation.ewt_standins import (
    StandInOptions,
    build_standins,
    evaluate_completion,
    evaluate_reranking,
    read_treebanks,
    standin_metrics,
)
from treernn.models.load import load_trained

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

SENTENCES = 8
SMOKE = [
    "trainer=smoke",
    "logger=csv",
    "task.datamodule.max_sentences=150",
    "test_ckpt=last",  # the tested weights are checkpoints/last.ckpt
    "callbacks=[default,ewt_standins]",
    f"callbacks.ewt_standins.max_sentences={SENTENCES}",
]
RERANK_KEYS = {
    "test/rerank_uas",
    "test/rerank_las",
    "test/rerank_first_uas",
    "test/rerank_oracle_uas",
}


@pytest.mark.parametrize(("preset", "reranks"), [("td_treelstm", True), ("lstm", False)])
def test_logged_metrics_are_those_of_the_tested_checkpoint(preset, reranks, data_dir, tmp_path):
    run_dir = tmp_path / "run"
    metrics = train_in_process(
        [f"experiment=tdlstm/{preset}_ewt_small", f"paths.data_dir={data_dir}", *SMOKE], run_dir
    )
    logged = {k: v for k, v in metrics.items() if "completion" in k or "rerank" in k}
    # a sequential model scores every tree of a sentence alike: no reranking metrics
    assert set(logged) == {"test/completion_acc"} | (RERANK_KEYS if reranks else set())
    assert logged.get("test/rerank_oracle_uas", 100.0) == pytest.approx(100.0)
    record = json.loads((run_dir / "ewt_standins.json").read_text())
    assert record["completion"]["questions"] == SENTENCES
    assert record["options"]["max_sentences"] == SENTENCES

    # the same questions and lists, built here from the same files, scored by the checkpoint
    train, test = read_treebanks(
        data_dir, "ud_english_ewt/en_ewt-ud-train.conllu", "ud_english_ewt/en_ewt-ud-test.conllu"
    )
    questions, lists = build_standins(train, test, StandInOptions(max_sentences=SENTENCES))
    assert [q.candidates for q in questions[:5]] == [
        tuple(example["candidates"]) for example in record["examples"]
    ]
    task = load_trained(Path(run_dir) / "checkpoints" / "last.ckpt").task
    completion = evaluate_completion(task, questions)
    reranking = evaluate_reranking(task, *lists) if reranks else None
    expected = standin_metrics(completion, reranking)
    assert record["metrics"] == expected
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-6)  # logged as float32
