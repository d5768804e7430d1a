"""MSR sentence completion: reading, tie-aware credit, the report, scoring with a toy model."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest
import torch

from treernn.commands.msr import format_report
from treernn.data.dependency import DependencyTree, write_conllu
from treernn.data.vocab import Vocabulary
from treernn.encoders.td_treelstm import LdTreeLSTM
from treernn.errors import DataError
from treernn.evaluation.completion import (
    MSRQuestions,
    accuracy_report,
    answer_words,
    answers_in_vocabulary,
    candidate_trees,
    evaluate,
    question_credit,
    read_msr,
)
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
    scores = torch.zeros(4, 5)
    scores[0, 0] = scores[1, 1] = 1.0  # questions 1 and 2 right, no ties
    scores[2, 0] = scores[3, 0] = 1.0  # questions 3 and 4 wrong
    report = accuracy_report(question_credit(scores, msr.answers))
    assert (report["all"], report["first_half"], report["second_half"]) == (50.0, 100.0, 0.0)
    assert report["questions"] == 4.0 and report["tied_questions"] == 0.0
    answers.write_text("\n".join(["<s> nothing </s>"] + keys[1:]) + "\n")
    with pytest.raises(DataError, match=r"a.txt:1: the answer matches 0"):
        read_msr(questions, answers)


def test_credit_no_tie_is_argmax():
    scores = torch.tensor([[0.0, 2.0, 1.0, 1.5, -1.0], [5.0, 0.0, 0.0, 0.0, 0.0]])
    credit = question_credit(scores, [1, 2])
    assert credit.credit.tolist() == [1.0, 0.0]
    assert credit.tied.tolist() == [False, False]
    assert credit.top.float().argmax(1).tolist() == scores.argmax(1).tolist()


def test_credit_of_ties_favours_no_position():
    scores = torch.tensor(
        [
            [-9.0, -3.0, -5.0, -3.0, -7.0],  # 2-way tie (b, d), answer d: 1/2
            [-2.0, -2.0, -2.0, -4.0, -6.0],  # 3-way tie (a, b, c), answer e: 0
            [-2.0, -2.0, -2.0, -4.0, -6.0],  # the same, answer a (first on top): 1/3, not 1
            [-1.0, -1.0, -1.0, -1.0, -1.0],  # all alike: 1/5 = chance
        ]
    )
    answers = [3, 4, 0, 2]
    credit = question_credit(scores, answers)
    assert credit.credit.tolist() == pytest.approx([0.5, 0.0, 1 / 3, 0.2])
    assert credit.top.sum(1).tolist() == [2, 3, 3, 5]
    report = accuracy_report(credit)
    assert report["tied_questions"] == 4.0 and report["tied_percent"] == 100.0
    assert report["all"] == pytest.approx(100 * (0.5 + 1 / 3 + 0.2) / 4)
    # rotating the candidates of a question leaves its credit unchanged
    for shift in range(1, 5):
        rotated = scores.roll(shift, dims=1)
        moved = [(a + shift) % 5 for a in answers]
        assert question_credit(rotated, moved).credit.tolist() == pytest.approx(
            credit.credit.tolist()
        )


def test_tie_tolerance_widens_the_top():
    scores = torch.tensor([[-3.0, -3.0 - 1e-9, -5.0, -6.0, -7.0]], dtype=torch.float64)
    assert question_credit(scores, [1]).credit.tolist() == [0.0]  # exact: b is below a
    assert question_credit(scores, [1], tolerance=1e-6).credit.tolist() == [0.5]
    with pytest.raises(ValueError, match="tolerance"):
        question_credit(scores, [1], tolerance=-1.0)
    with pytest.raises(ValueError, match="NaN"):
        question_credit(torch.tensor([[0.0, float("nan"), 0, 0, 0]]), [0])


def test_random_ties_are_seeded_uniform_draws_among_the_top():
    scores = torch.zeros(2000, 5)
    scores[:, 3:] = -1.0  # a, b, c tied on top
    answers = [0] * 1000 + [4] * 1000
    first = question_credit(scores, answers, ties="random", seed=7).credit
    assert torch.equal(first, question_credit(scores, answers, ties="random", seed=7).credit)
    assert not torch.equal(first, question_credit(scores, answers, ties="random", seed=8).credit)
    assert set(first.tolist()) <= {0.0, 1.0}
    assert first[1000:].sum() == 0  # e is never on top, never drawn
    assert first[:1000].mean().item() == pytest.approx(1 / 3, abs=0.05)
    # no tie: the draw is the argmax whatever the seed
    clear = torch.tensor([[0.0, 3.0, 1.0, 1.0, 1.0]])
    assert question_credit(clear, [1], ties="random", seed=3).credit.tolist() == [1.0]
    with pytest.raises(ValueError, match="ties='first'"):
        question_credit(clear, [1], ties="first")


def test_answer_words_and_the_in_vocabulary_subset():
    questions = MSRQuestions(
        candidates=[
            [["he", w, "."] for w in ("smiled", "ate", "grinned", "Frowned", "x")],
            [["he", w, "."] for w in ("smiled", "ate", "grinned", "frowned", "x")],
            [["Holmes", w] for w in ("zzz", "smiled", "ate", "yyy", "he")],
        ],
        answers=[3, 2, 0],
    )
    assert answer_words(questions.candidates[0], 3) == ["Frowned"]
    assert answer_words([["a", "b"], ["a", "c", "d"]], 1) == ["c", "d"]
    vocab = Vocabulary(VOCAB, specials=())
    known = answers_in_vocabulary(questions, vocab, lowercase=True, replace_numbers=False)
    assert known == [True, False, False]  # "frowned" after lower-casing; "grinned", "zzz" unknown
    assert answers_in_vocabulary(questions, vocab, False, False) == [False, False, False]
    scores = torch.tensor(
        [
            [0.0, 0.0, -1.0, 0.0, -1.0],  # tie of 3 with the answer: 1/3
            [0.0, 0.0, 1.0, 0.0, 0.0],  # right
            [0.0, 1.0, 0.0, 0.0, 0.0],  # wrong
        ]
    )
    report = accuracy_report(question_credit(scores, questions.answers), known)
    assert report["in_vocab_questions"] == 1.0
    assert report["in_vocab"] == pytest.approx(100 / 3)
    assert report["all"] == pytest.approx(100 * (1 / 3 + 1) / 3)
    assert report["tied_questions"] == 1.0
    none_known = accuracy_report(question_credit(scores, questions.answers), [False] * 3)
    assert none_known["in_vocab_questions"] == 0.0 and none_known["in_vocab"] is None
    text = format_report("LSTMEncoder", report, "expected", 0)
    assert "tie at the top: 1 questions (33.3%)" in text
    assert "answer word in the vocabulary: 1 questions, 33.33% on them" in text


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
    result = evaluate(task, questions, parsed=parsed)
    assert result.report["all"] == 100.0 and result.report["tied_questions"] == 0.0
    scores = result.scores
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
    questions = MSRQuestions([[["he", "smiled"], ["he", "zzz"], ["he", "qqq"], ["x", "y"],
                               ["smiled", "smiled"]]], [0])  # fmt: skip
    result = evaluate(task, questions)
    assert result.report["all"] == 0.0  # "he <unk>" (0.5 * 0.4) beats "he smiled" (0.5 * 0.1)
    # "he zzz" and "he qqq" are both "he <unk>": one input, one score, a tie at the top
    assert result.scores[0, 1].item() == result.scores[0, 2].item()
    assert result.report["tied_questions"] == 1.0 and result.answer_in_vocab == [True]
    result = evaluate(task, questions, unk_penalty=math.log(10))
    assert result.report["all"] == 100.0
    penalised = result.scores
    expected = math.log(0.5) + math.log(0.4) - math.log(10)
    assert penalised[0, 1].item() == pytest.approx(expected, abs=1e-4)
