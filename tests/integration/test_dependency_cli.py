"""The dependency LM presets through the real CLI, then MSR scoring, reranking and generation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.integration.helpers import compose_config, run_cli, train_in_process
from treernn.commands import main as treernn_main
from treernn.data.dependency import write_conllu
from treernn.evaluation import completion as msr

SMALL_PRESETS = [
    "tdlstm/td_treelstm_ewt_small",
    "tdlstm/ld_treelstm_ewt_small",
    "tdlstm/lstm_ewt_small",
]
#: presets that build on another one: (preset, the one it builds on)
DERIVED_PRESETS = [
    ("tdlstm/ld_treelstm_ewt_small", "tdlstm/td_treelstm_ewt_small"),
    ("tdlstm/lstm_ewt_small", "tdlstm/td_treelstm_ewt_small"),
    ("tdlstm/ld_treelstm_msr", "tdlstm/td_treelstm_msr"),
    ("tdlstm/lstm_msr", "tdlstm/td_treelstm_msr"),
    ("tdlstm/ld_treelstm_ptb_rerank", "tdlstm/td_treelstm_ptb_rerank"),
]
EWT = {
    "task.datamodule.train_file": "ud_english_ewt/en_ewt-ud-train.conllu",
    "task.datamodule.val_file": "ud_english_ewt/en_ewt-ud-dev.conllu",
    "task.datamodule.test_file": "ud_english_ewt/en_ewt-ud-test.conllu",
}


SMOKE = ["trainer=smoke", "trainer.max_epochs=1", "logger=csv", "task.datamodule.max_sentences=150"]


def train(experiment: str, data_dir: Path, output_dir: Path, *overrides: str) -> Path:
    """A few steps of a preset through the composed config (the code path of train.py)."""
    metrics = train_in_process(
        [f"experiment={experiment}", f"paths.data_dir={data_dir}", *SMOKE, *overrides], output_dir
    )
    assert math.isfinite(metrics["test/ppl"]) and metrics["test/ppl"] > 1
    return output_dir / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(("preset", "base"), DERIVED_PRESETS)
def test_models_of_one_table_share_data_and_training(preset, base, tmp_path: Path):
    """A paper's models are compared on the same sentences, vocabulary and training schedule."""
    cfg = compose_config([f"experiment={preset}"], tmp_path)
    reference = compose_config([f"experiment={base}"], tmp_path)
    assert cfg.model.name != reference.model.name
    assert cfg.task.datamodule == reference.task.datamodule
    assert cfg.trainer == reference.trainer
    assert cfg.task.module.loss == reference.task.module.loss


@pytest.mark.slow
def test_train_py_runs_a_preset(data_dir: Path, tmp_path: Path):
    result = run_cli(
        ["experiment=tdlstm/ld_treelstm_ewt_small", f"paths.data_dir={data_dir}", *SMOKE,
         f"paths.log_dir={tmp_path}", f"hydra.run.dir={tmp_path}/run"]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test/ppl" in result.stdout


@pytest.mark.slow
def test_presets_train_and_tools_run(data_dir: Path, tmp_path: Path, capsys):
    checkpoints = {p: train(p, data_dir, tmp_path / p.replace("/", "_")) for p in SMALL_PRESETS}
    ewt = (f"{k}={v}" for k, v in EWT.items())
    # the NCE paper setting, on EWT, with small sizes
    train("tdlstm/ld_treelstm_msr", data_dir, tmp_path / "nce", *ewt, "model.hidden_size=16",
          "task.module.embedding_size=8")  # fmt: skip
    tree_ckpt = str(checkpoints["tdlstm/ld_treelstm_ewt_small"])
    data = ["--data-dir", str(data_dir)]

    # MSR end to end on the 1,040 questions: the sequential model needs no parse ...
    report = tmp_path / "msr.json"
    lstm_ckpt = str(checkpoints["tdlstm/lstm_ewt_small"])
    assert treernn_main(["msr", "--ckpt", lstm_ckpt, *data, "--output", str(report)]) == 0
    out = capsys.readouterr().out
    assert "on 1040 questions" in out and "tie at the top: " in out
    result = json.loads(report.read_text())
    accuracy = result["accuracy"]
    assert accuracy["questions"] == 1040 and 0 < accuracy["in_vocab_questions"] < 1040
    # many answers are <unk> like other candidates: ties, each question worth 1/k, no position bias
    assert accuracy["tied_questions"] == sum(len(top) > 1 for top in result["top"]) > 0
    assert accuracy["all"] == pytest.approx(100 * sum(result["credit"]) / 1040)
    random = ["--ties", "random", "--seed", "3", "--output", str(report)]
    kept = report.read_bytes()
    assert treernn_main(["msr", "--ckpt", lstm_ckpt, *data, *random]) == 1  # a result is kept
    assert "msr.json exists; pass --force" in capsys.readouterr().err
    assert report.read_bytes() == kept
    assert treernn_main(["msr", "--ckpt", lstm_ckpt, *data, *random, "--force"]) == 0
    assert "(--ties random)" in capsys.readouterr().out
    assert set(json.loads(report.read_text())["credit"]) <= {0.0, 1.0}
    # ... a tree model takes a parsed file (here chain trees, to exercise the path) ...
    questions = msr.read_msr(data_dir / msr.QUESTIONS_FILE, data_dir / msr.ANSWERS_FILE)
    parsed = tmp_path / "chains.conllu"
    write_conllu([msr.chain_tree(words) for words in questions.flat()], parsed)
    assert treernn_main(["msr", "--ckpt", tree_ckpt, "--parsed", str(parsed), *data]) == 0
    out = capsys.readouterr().out
    assert "LdTreeLSTM: " in out and "first half" in out
    # ... and without a parser model or a parsed file it says what to install
    assert treernn_main(["msr", "--ckpt", tree_ckpt, "--spacy-model", "no_such_model", *data]) == 1
    assert "pip install spacy" in capsys.readouterr().err

    # reranking synthetic candidates of 30 dev sentences
    gold = tmp_path / "gold.conllu"
    blocks = (data_dir / EWT["task.datamodule.val_file"]).read_text().split("\n\n")[:30]
    gold.write_text("\n\n".join(blocks) + "\n\n")
    candidates = tmp_path / "candidates.conllu"
    make = ["make-candidates", "--gold", str(gold), "--output", str(candidates)]
    assert treernn_main(["rerank", *make]) == 0
    rerank = ["score", "--ckpt", tree_ckpt, "--candidates", str(candidates), "--gold", str(gold)]
    assert treernn_main(["rerank", *rerank]) == 0
    assert "reranked 30 sentences: UAS" in capsys.readouterr().out

    # tree generation: classifiers on a few hundred training trees, then samples
    generate = ["--ckpt", tree_ckpt, *data, "--max-train-sentences", "200"]
    assert (
        treernn_main(["generate", *generate, "--classifier-epochs", "1", "--num-trees", "2"]) == 0
    )
    out = capsys.readouterr().out
    assert "ADD-NX-RIGHT" in out and "# tree 2" in out
