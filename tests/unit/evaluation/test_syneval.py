"""Targeted syntactic evaluation on a hand-made bigram model whose answers are known."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from treernn.data.vocab import Vocabulary
from treernn.evaluation.syneval import (
    TABLE3,
    SynEvalError,
    evaluate_syneval,
    format_table,
    load_test_sets,
    sentence_log_probs,
)

WORDS = ["<eos>", "the", "author", "authors", "laughs", "laugh", "no", "most", "ever"]


class BigramModel(nn.Module):
    """log p(next | current) from a fixed table; ``token_log_probs`` like LanguageModelTask's."""

    def __init__(self, probabilities: dict[tuple[str, str], float]) -> None:
        super().__init__()
        self.vocab = Vocabulary(WORDS)  # <pad>=0, <unk>=1, <eos>=2, the=3, ...
        size = len(self.vocab)
        table = torch.full((size, size), 1e-3)
        for (current, following), probability in probabilities.items():
            table[self.vocab.stoi[current], self.vocab.stoi[following]] = probability
        self.log_table = nn.Parameter(table.log(), requires_grad=False)
        self.calls: list[tuple[Tensor, Tensor, Tensor]] = []

    def token_log_probs(self, inputs: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
        self.calls.append((inputs, targets, mask))
        return self.log_table[inputs, targets] * mask


PROBABILITIES = {
    ("<eos>", "the"): 0.5,
    ("the", "author"): 0.3,
    ("the", "authors"): 0.2,
    ("author", "laughs"): 0.6,
    ("author", "laugh"): 0.1,
    ("authors", "laugh"): 0.2,
    ("authors", "laughs"): 0.4,  # the model gets plural agreement wrong
    ("laughs", "<eos>"): 0.9,
    ("laugh", "<eos>"): 0.9,
}


def test_sentence_log_prob_is_the_sum_after_eos_with_the_end_token():
    model = BigramModel(PROBABILITIES)
    (with_end,) = sentence_log_probs(model, [["the", "author", "laughs"]])
    assert with_end == pytest.approx(math.log(0.5 * 0.3 * 0.6 * 0.9), rel=1e-6)
    (without_end,) = sentence_log_probs(model, [["the", "author", "laughs"]], include_end=False)
    assert without_end == pytest.approx(math.log(0.5 * 0.3 * 0.6), rel=1e-6)
    inputs, targets, mask = model.calls[0]
    eos, the, author, laughs = 2, 3, 4, 6
    assert inputs.tolist() == [[eos, the, author, laughs]]
    assert targets.tolist() == [[the, author, laughs, eos]]
    assert mask.tolist() == [[True, True, True, True]]


def test_batching_with_padding_changes_no_score():
    model = BigramModel(PROBABILITIES)
    sentences = [["the", "author", "laughs"], ["the"], ["the", "authors"], ["laugh"]]
    batched = sentence_log_probs(model, sentences, batch_size=4)
    alone = [sentence_log_probs(model, [s], batch_size=1)[0] for s in sentences]
    assert batched == pytest.approx(alone)
    # ["the"]: log 0.5 + log p(<eos> | the) = log 0.5 + log 1e-3
    assert batched[1] == pytest.approx(math.log(0.5) + math.log(1e-3), rel=1e-6)


def test_agreement_accuracy_and_unknown_words():
    model = BigramModel(PROBABILITIES)
    test_sets = {
        "simple_agrmt": {
            "sing_MS_MV": [("the author laughs", "the author laugh")],  # 0.6 > 0.1: right
            "plur_MS_MV": [
                ("the authors laugh", "the authors laughs"),  # 0.2 < 0.4: wrong
                ("the dogs laugh", "the dogs laughs"),  # dogs -> <unk>: both 1e-3 then equal
            ],
        }
    }
    result = evaluate_syneval(model, test_sets)
    (simple,) = result.cases
    assert simple.case.name == "Simple" and simple.case.files == ("simple_agrmt",)
    assert (simple.correct, simple.total) == (1, 3)  # a tie is not a success
    assert simple.conditions == {
        "simple_agrmt/sing_MS_MV": (1, 1),
        "simple_agrmt/plur_MS_MV": (0, 2),
    }
    assert simple.pairs_with_unknown_words == 1
    assert result.pairs_with_unknown_words == 1
    assert result.unknown_words == {"dogs": 2}
    assert result.sentences_scored == 6
    table = format_table(result)
    # accuracies in %, the paper's columns named as the paper's (Simple: 99 / 100 there)
    assert "Subject-verb agreement" in table and " 33.3 " in table
    assert "ON-LSTM (paper) %" in table and "LSTM (paper) %" in table
    simple_line = next(line for line in table.splitlines() if "Simple" in line)
    assert simple_line.split()[-2:] == ["99.0", "100.0"]
    assert result.as_dict()["cases"][0]["accuracy"] == pytest.approx(1 / 3)


def test_npi_triples_give_three_comparisons():
    model = BigramModel(
        {
            ("<eos>", "no"): 0.1,  # grammatical
            ("<eos>", "the"): 0.3,  # intrusive / no licensor
            ("<eos>", "most"): 0.2,  # ungrammatical
            ("no", "ever"): 0.5,
            ("the", "ever"): 0.5,
            ("most", "ever"): 0.5,
            ("ever", "<eos>"): 0.5,
        }
    )
    triples = {"past": [("no ever", "the ever", "most ever")]}
    result = evaluate_syneval(
        model, {"simple_npi_anim": triples, "simple_npi_inanim": {"future": []}}
    )
    accuracy = {case_result.case.name: case_result.accuracy for case_result in result.cases}
    assert accuracy == {
        "Simple (grammatical vs. intrusive)": 0.0,  # 0.1 < 0.3
        "Simple (intrusive vs. ungrammatical)": 1.0,  # 0.3 > 0.2
        "Simple (grammatical vs. ungrammatical)": 0.0,  # 0.1 < 0.2
    }


def test_table3_rows_and_real_files(data_dir: Path):
    assert len(TABLE3) == 19
    test_sets = load_test_sets(data_dir / "syneval", "current")
    assert len(test_sets["simple_agrmt"]["sing_MS_MV"]) == 70
    assert sum(len(v) for v in test_sets["obj_rel_across_inanim"].values()) == 10_080
    assert all(len(item) == 3 for item in test_sets["npi_across_anim"]["past"])
    emnlp = load_test_sets(data_dir / "syneval", "EMNLP2018", names=["obj_rel_across_inanim"])
    assert sum(len(v) for v in emnlp["obj_rel_across_inanim"].values()) == 11_200


def test_missing_files_are_named(tmp_path: Path):
    with pytest.raises(SynEvalError, match=r"simple_agrmt\.json\.gz is missing"):
        load_test_sets(tmp_path, "current", names=["simple_agrmt"])
    folder = tmp_path / "json" / "current"
    folder.mkdir(parents=True)
    with gzip.open(folder / "simple_agrmt.json.gz", "wt") as handle:
        json.dump({"sing": [["a b", "a c"]]}, handle)
    assert load_test_sets(tmp_path, "current", names=["simple_agrmt"]) == {
        "simple_agrmt": {"sing": [("a b", "a c")]}
    }
    (folder / "vp_coord.json.gz").write_bytes(b"not gzip")
    with pytest.raises(SynEvalError, match=r"vp_coord\.json\.gz: not a syneval JSON export"):
        load_test_sets(tmp_path, "current", names=["vp_coord"])


def test_metrics_are_percentages_per_row_and_unweighted_group_means():
    from treernn.evaluation.syneval import CaseResult, SynEvalResult, syneval_metrics

    simple, sent_comp, across_pp = TABLE3[0], TABLE3[1], TABLE3[11]
    result = SynEvalResult(
        cases=[
            # short-term: 3/4 and 1/2 over all pairs; known pairs 1/1, none
            CaseResult(simple, correct=3, total=4, known_correct=1, known_total=1),
            CaseResult(sent_comp, correct=1, total=2, known_correct=0, known_total=0),
            # long-term: 1/10 over all pairs, 1/5 known
            CaseResult(across_pp, correct=1, total=10, known_correct=1, known_total=5),
        ],
        template_set="current",
        sentences_scored=0,
        pairs_with_unknown_words=0,
        pairs=16,
        unknown_words={},
        seconds=0.0,
    )
    assert syneval_metrics(result) == pytest.approx(
        {
            "test/syneval/agreement_simple": 75.0,
            "test/syneval/agreement_sent_comp": 50.0,
            "test/syneval/agreement_across_pp": 10.0,
            "test/syneval/short_term": 62.5,  # (75 + 50) / 2, not 4/6 pooled
            "test/syneval/long_term": 10.0,
            "test/syneval_known/agreement_simple": 100.0,
            # agreement_sent_comp has no known pair: no key, and left out of the mean
            "test/syneval_known/agreement_across_pp": 20.0,
            "test/syneval_known/short_term": 100.0,
            "test/syneval_known/long_term": 20.0,
        }
    )
