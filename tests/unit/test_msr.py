"""MSR sentence completion: reading, choosing, per-half accuracy, scoring with a toy model."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest
import torch

from treernn.commands.msr import (
    MSRQuestions,
    accuracy_report,
    candidate_trees,
    choose,
    evaluate,
    read_msr,
)
from treernn.data.dependency import DependencyTree, write_conllu
from treernn.encoders.td_treelstm import LdTreeLSTM
from treernn.errors import DataError
from treernn.tasks.dependency_lm import DependencyLanguageModel

VOCAB = ["<pad>", "<unk>", "<root>", "holmes", "smiled", "frowned", "ate", "he"]


def toy_model(log_probs: dict[str, float], tree_model: bool = True) -> DependencyLanguageModel:
    """A model whose next-word distribution ignores the context: softmax(bias) = given probs."""
    if tree_model:
        encoder = partial(LdTreeLSTM, hidden_size=3)
    else:
        from treernn.encoders.lstm import LSTMEncoder

        encoder = partial(LSTMEncoder, hidden_size=3)
    task = DependencyLanguageModel(encoder, vocab_size=len(VOCAB), vocab=VOCAB, embedding_size=2)
    with torch.no_grad():
        task.decoder.weight.zero_()
        task.decoder.bias.fill_(-1e4)
        for word, log_p in log_probs.items():
            task.decoder.bias[VOCAB.index(word)] = log_p
    return task.eval()


def test_read_msr_and_accuracy_halves(tmp_path: Path):
    questions = tmp_path / "q.txt"
    answers = tmp_path / "a.txt"
    lines, keys = [], []
    for q in range(4):
        options = [f"<s> he {verb} {q} </s> " for verb in ("smiled", "ate", "x", "y", "z")]
        lines += options
        keys.append(options[q % 5].strip())
    questions.write_text("\n".join(lines) + "\n")
    answers.write_text("\n".join(keys) + "\n")
    msr = read_msr(questions, answers)
    assert msr.answers == [0, 1, 2, 3]
    assert msr.candidates[1][1] == ["he", "ate", "1"]
    report = accuracy_report([0, 1, 0, 0], msr.answers)
    assert report == {"all": 50.0, "first_half": 100.0, "second_half": 0.0, "questions": 4.0}
    answers.write_text("\n".join(["<s> nothing </s>"] + keys[1:]) + "\n")
    with pytest.raises(DataError, match=r"a.txt:1: the answer matches 0"):
        read_msr(questions, answers)


def test_choose_takes_first_maximum():
    scores = torch.tensor([[0.0, 2.0, 2.0, 1.0, -1.0], [5.0, 0.0, 0.0, 0.0, 0.0]])
    assert choose(scores).tolist() == [1, 0]


@pytest.mark.parametrize("tree_model", [True, False])
def test_toy_model_picks_the_known_answer(tree_model, tmp_path: Path):
    probs = {"he": 0.5, "holmes": 0.3, "smiled": 0.1, "frowned": 0.06, "ate": 0.04}
    task = toy_model({w: math.log(p) for w, p in probs.items()}, tree_model)
    verbs = ["ate", "smiled", "frowned", "ate", "ate"]
    questions = MSRQuestions(
        candidates=[[["he", v] for v in verbs], [["holmes", v] for v in reversed(verbs)]],
        answers=[1, 3],
    )
    parsed = None
    if tree_model:
        parsed = tmp_path / "parsed.conllu"
        write_conllu([DependencyTree(tuple(w), (2, 0)) for w in questions.flat()], parsed)
    report, scores = evaluate(task, questions, parsed=parsed)
    assert report["all"] == 100.0
    # log P = log p(subject) + log p(verb), whatever the order of generation
    expected = math.log(0.5) + math.log(0.1)
    assert scores[0, 1].item() == pytest.approx(expected, abs=1e-4)


def test_tree_model_without_parser_or_parsed_file_names_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_spacy(name, *args, **kwargs):
        if name == "spacy" or name.startswith("spacy."):
            raise ImportError("no spacy here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_spacy)
    from treernn.data.dependency_parser import ParserUnavailableError

    questions = MSRQuestions([[["he", "ate"]] * 5], [0])
    with pytest.raises(ParserUnavailableError, match="pip install spacy"):
        candidate_trees(questions, needs_trees=True)


def test_parsed_file_must_match_candidates(tmp_path: Path):
    questions = MSRQuestions([[["he", "ate"]] * 5], [0])
    parsed = tmp_path / "parsed.conllu"
    write_conllu([DependencyTree(("he", "ate"), (2, 0))] * 4, parsed)
    with pytest.raises(DataError, match="4 trees for 5 candidate sentences"):
        candidate_trees(questions, needs_trees=True, parsed=parsed)


def test_real_msr_files(data_dir):
    msr = read_msr(
        data_dir / "msr_sentence_completion/Holmes.lm_format.questions.txt",
        data_dir / "msr_sentence_completion/Holmes.lm_format.answers.txt",
    )
    assert len(msr.candidates) == 1040 and all(len(q) == 5 for q in msr.candidates)
    # SOURCE.md: correct-option distribution a 195, b 208, c 211, d 205, e 221
    assert [msr.answers.count(k) for k in range(5)] == [195, 208, 211, 205, 221]


def test_unk_penalty_is_subtracted_per_unknown_word(tmp_path: Path):
    probs = {"he": 0.5, "<unk>": 0.4, "smiled": 0.1}
    task = toy_model({w: math.log(p) for w, p in probs.items()}, tree_model=False)
    questions = MSRQuestions([[["he", "smiled"], ["he", "zzz"], ["he", "ate"], ["x", "y"],
                               ["smiled", "smiled"]]], [0])  # fmt: skip
    report, scores = evaluate(task, questions)
    assert report["all"] == 0.0  # "he <unk>" (0.5 * 0.4) beats "he smiled" (0.5 * 0.1)
    report, penalised = evaluate(task, questions, unk_penalty=math.log(10))
    assert report["all"] == 100.0
    expected = math.log(0.5) + math.log(0.4) - math.log(10)
    assert penalised[0, 1].item() == pytest.approx(expected, abs=1e-4)
