"""``treernn.load`` as a user calls it, on the exported model kept in
``tests/fixtures/exported_onlstm_lm`` (a 2-layer ON-LSTM language model of hidden size 8 over a
15-token vocabulary, 3 steps of ``trainer=smoke`` on the toy corpus in PTB's layout of
``tests/integration/test_library.py``, written by ``python -m treernn export``; its model card
names the command): the numbers it gives are kept in ``expected.json`` beside it, so
that a later refactor that changes them, or stops the export loading, fails here. Also the
export format's safety rules (no code run, a newer version refused) and the API's one-line
errors."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import treernn
from tests.fixtures.exports import record_files
from tests.paths import FIXTURES
from treernn.api import LanguageModel, UnsupportedMethodError
from treernn.commands import main
from treernn.errors import CheckpointError, ConfigValueError
from treernn.evaluation.surprisal import read_surprisal_table

FIXTURE = FIXTURES / "exported_onlstm_lm"
EXPECTED = json.loads((FIXTURE.parent / "exported_onlstm_lm_expected.json").read_text())
SENTENCES = EXPECTED["sentences"]


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    return treernn.load(FIXTURE, device="cpu")


def test_the_export_loads_as_a_language_model(model):
    assert isinstance(model, LanguageModel)
    assert model.kind == "language_model" and model.meta["model"] == "onlstm"
    assert type(model.encoder).__name__ == "ONLSTMEncoder" and not model.module.training


def test_the_export_gives_the_numbers_it_gave_when_it_was_made(model):
    # the same weights through the same code: the same tokens and trees, and the same numbers up
    # to float32 rounding, which moves with the CPU, its matrix-product kernels and torch's
    # version (torch 2.15 moved them in the 7th digit); a refactor that changes the model's
    # arithmetic moves them far more
    surprisals = model.surprisals(SENTENCES)
    expected = [[tuple(row) for row in sentence] for sentence in EXPECTED["surprisals"]]
    assert [[t.token for t in s] for s in surprisals] == [[t for t, _ in s] for s in expected]
    assert [[t.surprisal for t in s] for s in surprisals] == [
        pytest.approx([value for _, value in s], rel=1e-5) for s in expected
    ]
    assert model.log_probs(SENTENCES) == pytest.approx(EXPECTED["log_probs"], rel=1e-5)
    assert [t.trees for t in model.trees(SENTENCES)] == EXPECTED["trees"]
    assert model.perplexity("\n".join(SENTENCES)) == pytest.approx(EXPECTED["perplexity"], rel=1e-5)


def test_surprisals_are_the_softmax_of_the_model_read_after_eos(model):
    # by hand for one sentence: <eos> w1 w2 -> log-softmax at each step, in bits
    words = model.words(SENTENCES[0])
    ids = torch.tensor([[model.vocab.eos_index, *model.vocab.encode(words)]])
    with torch.no_grad():
        logits, _, _ = model.module(ids)
    targets = [*model.vocab.encode(words), model.vocab.eos_index]
    log_probs = logits[0].log_softmax(-1)[torch.arange(len(targets)), targets]
    got = [token.surprisal for token in model.surprisals([SENTENCES[0]])[0]]
    assert got == pytest.approx([-v / math.log(2) for v in log_probs.tolist()], abs=1e-5)
    # and a sentence's log-probability is its tokens' surprisals, in nats
    total = -sum(got) * math.log(2)
    assert model.log_probs([SENTENCES[0]])[0] == pytest.approx(total, abs=1e-4)


def test_unknown_words_are_read_as_unk_and_marked(tmp_path):
    # the toy corpus has no <unk>: in a copy, "sells" becomes the <unk> entry (same size)
    path = copy_fixture(tmp_path)
    vocab = (path / "vocab.txt").read_text().split("\n")
    (path / "vocab.txt").write_text("\n".join("<unk>" if t == "sells" else t for t in vocab))
    record_files(path)
    model = treernn.load(path, device="cpu")
    tokens = model.surprisals(["the zebra sees a cat"])[0]
    assert [(t.word, t.token, t.unknown) for t in tokens[:3]] == [
        ("the", "the", False),
        ("zebra", "<unk>", True),
        ("sees", "sees", False),
    ]
    assert tokens[-1].word == "<eos>"
    # the same sentence with another unknown word is the same input: the same numbers
    other = model.surprisals(["the sells sees a cat"])[0]
    assert [t.surprisal for t in other] == [t.surprisal for t in tokens]
    assert model.trees(["the zebra sees a cat"])[0].unknown == ["zebra"]


def test_an_unknown_word_without_unk_is_one_line(model):
    with pytest.raises(ConfigValueError, match="'zebra' not in the model's vocabulary, which has"):
        model.surprisals(["the cat sees a dog", "the zebra sees a cat"])


def test_raw_text_is_tokenised_as_ptb(model):
    assert model.words("The man sells 5% of a Company.") == [
        "the", "man", "sells", "N", "N", "of", "a", "company",
    ]  # fmt: skip
    assert model.words(["As", "Given"]) == ["As", "Given"]  # a list is taken as it is


def test_trees_of_one_layer_and_errors(model):
    (result,) = model.trees(["the cat sees a dog"], layer=2)
    assert result.layers == [2] and len(result.trees) == 1
    assert result.trees[0].replace("(", "").replace(")", "").split() == result.words
    with pytest.raises(ConfigValueError, match="layer=3: the model has layers 1 to 2"):
        model.trees(["the cat"], layer=3)
    with pytest.raises(ConfigValueError, match=r"sentence 2 \('\.\.\.'\) has no words"):
        model.trees(["the cat", "..."])


def test_a_method_of_another_kind_is_one_line(model):
    with pytest.raises(UnsupportedMethodError) as error:
        model.predict(["the cat"])
    message = str(error.value)
    assert "is a language model (task=ptb model=onlstm), which has no predict" in message
    assert "\n" not in message and "log_probs" in message
    with pytest.raises(UnsupportedMethodError, match="has no score"):
        model.score([(["a"], [0])])


def copy_fixture(tmp_path: Path) -> Path:
    target = tmp_path / "export"
    shutil.copytree(FIXTURE, target)
    return target


def edit_config(path: Path, change) -> None:
    config = json.loads((path / "config.json").read_text())
    change(config)
    (path / "config.json").write_text(json.dumps(config))


def test_a_newer_format_is_refused_with_one_line(tmp_path):
    path = copy_fixture(tmp_path)
    edit_config(path, lambda config: config.update(format_version=3))
    with pytest.raises(CheckpointError, match="has format version 3; this treernn reads versions"):
        treernn.load(path, device="cpu")


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("encoder", "os.system", "names the class 'os.system', which is not one of"),
        ("task", "treernn.tasks.base.build_encoder", "which is not a Task; refused"),
        ("encoder", "treernn.encoders.nothing.Here", "does not exist in this version"),
    ],
)
def test_classes_outside_treernn_are_never_built(tmp_path, where, value, message):
    path = copy_fixture(tmp_path)
    edit_config(path, lambda config: config[where].update({"class": value}))
    with pytest.raises(CheckpointError, match=message):
        treernn.load(path, device="cpu")


def test_a_target_among_the_arguments_is_refused(tmp_path):
    path = copy_fixture(tmp_path)
    hostile = {"_target_": "os.system", "command": "touch pwned"}
    edit_config(path, lambda config: config["encoder"]["arguments"].update(dropout=hostile))
    with pytest.raises(CheckpointError, match="'os.system' to build; an exported model holds"):
        treernn.load(path, device="cpu")
    assert not Path("pwned").exists()


def test_weights_that_do_not_fit_are_one_line(tmp_path):
    path = copy_fixture(tmp_path)
    edit_config(path, lambda config: config["encoder"]["arguments"].update(hidden_size=12))
    with pytest.raises(CheckpointError, match="has shape .40, 6., but the model its config"):
        treernn.load(path, device="cpu")


def test_missing_path_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        treernn.load(tmp_path / "nothing", device="cpu")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        treernn.load(tmp_path, device="cpu")
    # what is not a path, and a file that is no checkpoint: said so, not in pathlib's or torch's
    # words (torch's spoke of mmap and _use_new_zipfile_serialization)
    for given in (123, None, ""):
        with pytest.raises(CheckpointError, match=rf"^treernn.load\({given!r}\): give the path"):
            treernn.load(given)
    with pytest.raises(CheckpointError, match=r"vocab.txt is not a torch checkpoint \(torch.save"):
        treernn.load(FIXTURE / "vocab.txt")
    (tmp_path / "empty.ckpt").write_bytes(b"")  # a checkpoint cut short, not another file
    with pytest.raises(CheckpointError, match="it is truncated or not a torch checkpoint"):
        treernn.load(tmp_path / "empty.ckpt")


def test_surprisals_command_writes_lm_zoos_table(model, tmp_path, capsys):
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n\n")
    out = tmp_path / "table.tsv"
    assert (
        main(["surprisals", "--ckpt", str(FIXTURE), "--input", str(text), "--out", str(out)]) == 0
    )
    lines = out.read_text().splitlines()
    assert lines[0] == "sentence_id\ttoken_id\ttoken\tsurprisal"
    assert lines[1].startswith("1\t1\t")
    table = read_surprisal_table(out)
    assert table == [[(t.token, t.surprisal) for t in s] for s in model.surprisals(SENTENCES)]
    # a blank line inside keeps its number: the ids are the lines', as lmzoo get-surprisals
    # (which scores a blank line as its <eos> alone) numbers the same file
    text.write_text(f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n")
    out.unlink()
    assert (
        main(["surprisals", "--ckpt", str(FIXTURE), "--input", str(text), "--out", str(out)]) == 0
    )
    ids = sorted({int(line.split("\t")[0]) for line in out.read_text().splitlines()[1:]})
    assert ids == [1, 3]
    capsys.readouterr()
    assert main(["lmzoo", "get-surprisals", "--ckpt", str(FIXTURE), str(text)]) == 0
    zoo = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row for row in zoo if row[0] != "2"] == [
        line.split("\t") for line in out.read_text().splitlines()[1:]
    ]
    assert main(["surprisals", "--ckpt", str(FIXTURE), "--input", str(tmp_path / "no")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_trees_command_reads_an_export(capsys):
    assert main(["trees", "--ckpt", str(FIXTURE), "The cat sees a dog."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sentence 1: the cat sees a dog"
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["layer 1", "layer 2"]


def test_a_line_of_punctuation_is_its_eos_alone(model):
    # PTB's normalisation drops every word of "...": the sentence is scored as <eos> after <eos>
    (tokens,) = model.surprisals(["..."])
    assert [(t.word, t.token) for t in tokens] == [("<eos>", "<eos>")]
    (log_prob,) = model.log_probs(["..."])
    assert tokens[0].surprisal == pytest.approx(-log_prob / math.log(2), rel=1e-6)
