"""Targeted syntactic evaluation (Marvin & Linzen 2018) of a language model, grouped like the
ON-LSTM paper's Table 3: the evaluation that ``python -m treernn syneval`` and the test-time
callback `treernn.callbacks.syneval.SynEvalCallback` both run.

Each test case is a set of minimal pairs, a grammatical and an ungrammatical sentence (NPI cases are
triples: grammatical, intrusive licensor, ungrammatical). A pair is right when the grammatical
sentence has the higher log-probability under the model. A sentence ``w_1 ... w_n`` is read after
``<eos>`` (the state after a previous sentence, as in the language-modelling stream) and scored as
``sum_i log p(w_i | <eos>, w_<i) + log p(<eos> | w_1..w_n)``; the end token plays the part of the
final ``.`` that Marvin & Linzen's ``LM_eval.py`` appends (``include_end=False`` leaves it out).
Words outside the model's vocabulary map to ``<unk>``; the pairs with such words are counted, and
each case also gets its accuracy on the pairs with no unknown word ("known" pairs). With PTB's 10k
vocabulary most pairs hold an unknown word (the paper's models had a Wikipedia vocabulary), and a
pair whose differing word is unknown reads as two equal sentences, which is never counted right.

Test sets: ``<data_dir>/syneval/json/{current,EMNLP2018}/<test>.json.gz``, lossless JSON exports of
the LM_syneval pickles, ``{condition: [[grammatical, ungrammatical(, ungrammatical_2)], ...]}``.
``current`` is what LM_syneval's ``make_templates.py`` generates, the set ON-LSTM evaluated on (its
footnote 2); ``EMNLP2018`` is the set of Marvin & Linzen's paper.

Metrics (`syneval_metrics`; accuracies in %): ``<prefix>/<case key>`` per Table 3 row over all
its pairs and ``<prefix>_known/<case key>`` over its known pairs (absent for a case with none);
``<prefix>/short_term`` and ``<prefix>/long_term`` (and ``<prefix>_known/...``), the unweighted
mean over the rows of each group, which is how Table 3 is read ("ON-LSTM performs better on the
long-term dependency cases, while the baseline LSTM fares better on the short-term ones": paper
means 69.5 / 78.5 short-term and 51.7 / 51.3 long-term for ON-LSTM / LSTM). The case keys are
`TestCase.key`.
"""

from __future__ import annotations

import gzip
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from treernn.errors import DataError
from treernn.files import MB, RefusedFile, read_limited, size_words

TEMPLATE_SETS = ("current", "EMNLP2018")
#: the most one test set's file, or its JSON once decompressed, may hold (the published ones
#: expand to under 3 MiB)
TEST_SET_LIMIT = 256 * MB


@dataclass(frozen=True)
class TestCase:
    """One row of Table 3: the files it pools and which two sentences of each tuple it compares."""

    key: str  # the row's name in metric keys, e.g. "agreement_across_pp"
    dependency: str  # "Short-Term Dependency" / "Long-Term Dependency"
    phenomenon: str
    name: str
    files: tuple[str, ...]
    better: int = 0  # index in the tuple of the sentence that should score higher
    worse: int = 1
    paper_onlstm: float | None = None  # ON-LSTM paper, Table 3
    paper_lstm: float | None = None


SHORT, LONG = "Short-Term Dependency", "Long-Term Dependency"
#: the metric-key names of the two groups of Table 3
GROUP_KEYS = {SHORT: "short_term", LONG: "long_term"}
AGREEMENT, REFLEXIVE, NPI = (
    "Subject-verb agreement",
    "Reflexive anaphora",
    "Negative polarity items",
)
OBJ_REL_WITHIN = ("obj_rel_within_anim", "obj_rel_within_inanim")
OBJ_REL_NO_COMP_WITHIN = ("obj_rel_no_comp_within_anim", "obj_rel_no_comp_within_inanim")
OBJ_REL_ACROSS = ("obj_rel_across_anim", "obj_rel_across_inanim")
OBJ_REL_NO_COMP_ACROSS = ("obj_rel_no_comp_across_anim", "obj_rel_no_comp_across_inanim")
SIMPLE_NPI = ("simple_npi_anim", "simple_npi_inanim")
NPI_ACROSS = ("npi_across_anim", "npi_across_inanim")

#: The rows of Table 3 in the paper's order, with its ON-LSTM and LSTM accuracies.
TABLE3: tuple[TestCase, ...] = (
    TestCase("agreement_simple", SHORT, AGREEMENT, "Simple", ("simple_agrmt",), 0, 1, 0.99, 1.00),
    TestCase(
        "agreement_sent_comp", SHORT, AGREEMENT, "In a sentential complement", ("sent_comp",),
        0, 1, 0.95, 0.98,
    ),
    TestCase(
        "agreement_short_vp_coord", SHORT, AGREEMENT, "Short VP coordination", ("vp_coord",),
        0, 1, 0.89, 0.92,
    ),
    TestCase(
        "agreement_in_obj_rel", SHORT, AGREEMENT, "In an object relative clause",
        OBJ_REL_WITHIN, 0, 1, 0.84, 0.88,
    ),
    TestCase(
        "agreement_in_obj_rel_no_that", SHORT, AGREEMENT, "In an object relative (no that)",
        OBJ_REL_NO_COMP_WITHIN, 0, 1, 0.78, 0.81,
    ),
    TestCase(
        "reflexive_simple", SHORT, REFLEXIVE, "Simple", ("simple_reflexives",), 0, 1, 0.89, 0.82
    ),
    TestCase(
        "reflexive_sent_comp", SHORT, REFLEXIVE, "In a sentential complement",
        ("reflexive_sent_comp",), 0, 1, 0.86, 0.80,
    ),
    TestCase(
        "npi_simple_gram_intrusive", SHORT, NPI, "Simple (grammatical vs. intrusive)",
        SIMPLE_NPI, 0, 1, 0.18, 1.00,
    ),
    TestCase(
        "npi_simple_intrusive_ungram", SHORT, NPI, "Simple (intrusive vs. ungrammatical)",
        SIMPLE_NPI, 1, 2, 0.50, 0.01,
    ),
    TestCase(
        "npi_simple_gram_ungram", SHORT, NPI, "Simple (grammatical vs. ungrammatical)",
        SIMPLE_NPI, 0, 2, 0.07, 0.63,
    ),
    TestCase(
        "agreement_long_vp_coord", LONG, AGREEMENT, "Long VP coordination", ("long_vp_coord",),
        0, 1, 0.74, 0.74,
    ),
    TestCase(
        "agreement_across_pp", LONG, AGREEMENT, "Across a prepositional phrase",
        ("prep_anim", "prep_inanim"), 0, 1, 0.67, 0.68,
    ),
    TestCase(
        "agreement_across_subj_rel", LONG, AGREEMENT, "Across a subject relative clause",
        ("subj_rel",), 0, 1, 0.66, 0.60,
    ),
    TestCase(
        "agreement_across_obj_rel", LONG, AGREEMENT, "Across an object relative clause",
        OBJ_REL_ACROSS, 0, 1, 0.57, 0.52,
    ),
    TestCase(
        "agreement_across_obj_rel_no_that", LONG, AGREEMENT,
        "Across an object relative (no that)", OBJ_REL_NO_COMP_ACROSS, 0, 1, 0.54, 0.51,
    ),
    TestCase(
        "reflexive_across_rel", LONG, REFLEXIVE, "Across a relative clause",
        ("reflexives_across",), 0, 1, 0.57, 0.58,
    ),
    TestCase(
        "npi_across_gram_intrusive", LONG, NPI,
        "Across a relative clause (grammatical vs. intrusive)", NPI_ACROSS, 0, 1, 0.59, 0.95,
    ),
    TestCase(
        "npi_across_intrusive_ungram", LONG, NPI,
        "Across a relative clause (intrusive vs. ungrammatical)", NPI_ACROSS, 1, 2, 0.20, 0.00,
    ),
    TestCase(
        "npi_across_gram_ungram", LONG, NPI,
        "Across a relative clause (grammatical vs. ungrammatical)", NPI_ACROSS, 0, 2, 0.11, 0.04,
    ),
)  # fmt: skip


class LanguageModel(Protocol):
    """What the evaluation needs from a model (``LanguageModelTask`` has it)."""

    vocab: Any  # treernn.data.vocab.Vocabulary

    def token_log_probs(self, inputs: Tensor, targets: Tensor, mask: Tensor) -> Tensor: ...


class SynEvalError(DataError, ValueError):
    """Missing or malformed test sets; the message names the file."""


TestSets = dict[str, dict[str, list[tuple[str, ...]]]]


def load_test_sets(
    directory: str | Path, template_set: str = "current", names: Sequence[str] | None = None
) -> TestSets:
    """``test file -> condition -> sentence tuples`` from ``<directory>/json/<template_set>``.

    ``directory`` is the ``syneval`` folder (or its ``json/<template_set>`` subfolder).
    """
    if template_set not in TEMPLATE_SETS:
        raise SynEvalError(f"unknown template set {template_set!r}; choose {TEMPLATE_SETS}")
    root = Path(directory).expanduser()
    folder = root if root.name == template_set else root / "json" / template_set
    names = names or sorted({name for case in TABLE3 for name in case.files})
    test_sets: TestSets = {}
    for name in names:
        path = folder / f"{name}.json.gz"
        if not path.exists():  # a FIFO or a device is refused below, without reading it
            raise SynEvalError(
                f"syneval test set {path} is missing: expected the Marvin & Linzen JSON exports "
                "(see data/syneval/SOURCE.md) in <data_dir>/syneval/json/{current,EMNLP2018}/"
            )
        try:
            data = read_limited(path, TEST_SET_LIMIT, follow_links=True)
        except RefusedFile as refused:
            raise SynEvalError(f"syneval test set {path} {refused.what}") from None
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
                text = handle.read(TEST_SET_LIMIT + 1)
        except (OSError, EOFError) as error:
            raise SynEvalError(f"{path}: not a syneval JSON export ({error})") from None
        if len(text) > TEST_SET_LIMIT:
            raise SynEvalError(
                f"{path}: expands to more than {size_words(TEST_SET_LIMIT)} (a test set is a "
                "few MiB); not a syneval JSON export"
            )
        try:
            raw = json.loads(text.decode("utf-8"))
            test_sets[name] = {
                condition: [tuple(str(sentence) for sentence in item) for item in items]
                for condition, items in raw.items()
            }
        except (ValueError, AttributeError, TypeError, RecursionError) as error:
            raise SynEvalError(f"{path}: not a syneval JSON export ({error})") from error
    return test_sets


def sentence_log_probs(
    model: LanguageModel,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 64,
    include_end: bool = True,
) -> list[float]:
    """Total log-probability of each tokenised sentence read after ``<eos>`` (see the docstring).

    Sentences that encode to the same ids (they differ only in words outside the vocabulary) are
    the same model input: each distinct input is scored once, shortest first, and such sentences
    share its score bit for bit, so a pair of them is a tie, never a win by rounding noise.
    """
    vocab = model.vocab
    eos = vocab.eos_index
    device = _model_device(model)
    position: dict[tuple[int, ...], int] = {}
    distinct: list[list[int]] = []
    input_of = []
    for sentence in sentences:
        ids = vocab.encode(sentence)
        key = tuple(ids)
        if key not in position:
            position[key] = len(distinct)
            distinct.append(ids)
        input_of.append(position[key])
    totals_of = [0.0] * len(distinct)
    order = sorted(range(len(distinct)), key=lambda index: len(distinct[index]))
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        encoded = [distinct[index] for index in chunk]
        steps = max(len(ids) for ids in encoded) + 1
        inputs = torch.full((len(chunk), steps), eos, dtype=torch.long)  # (B, T)
        targets = torch.full((len(chunk), steps), eos, dtype=torch.long)  # (B, T)
        mask = torch.zeros(len(chunk), steps, dtype=torch.bool)  # (B, T)
        for row, ids in enumerate(encoded):
            inputs[row, 1 : 1 + len(ids)] = torch.as_tensor(ids, dtype=torch.long)
            targets[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)  # then <eos>
            mask[row, : len(ids) + 1] = True
        scored = mask.clone()
        if not include_end:
            scored[torch.arange(len(chunk)), torch.tensor([len(ids) for ids in encoded])] = False
        with torch.no_grad():
            log_probs = model.token_log_probs(
                inputs.to(device), targets.to(device), mask.to(device)
            )  # (B, T)
        totals = (log_probs.float().cpu() * scored).sum(1)  # (B,)
        for row, index in enumerate(chunk):
            totals_of[index] = float(totals[row])
    return [totals_of[index] for index in input_of]


def _model_device(model: object) -> torch.device:
    parameters = getattr(model, "parameters", None)
    if callable(parameters):
        for parameter in parameters():
            return parameter.device
    return torch.device("cpu")


@dataclass
class CaseResult:
    case: TestCase
    correct: int = 0
    total: int = 0
    pairs_with_unknown_words: int = 0
    #: the pairs with no word outside the vocabulary, and how many of them are right
    known_correct: int = 0
    known_total: int = 0
    conditions: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (correct, total)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.total if self.total else None

    @property
    def known_accuracy(self) -> float | None:
        return self.known_correct / self.known_total if self.known_total else None


@dataclass
class SynEvalResult:
    cases: list[CaseResult]
    template_set: str
    sentences_scored: int
    pairs_with_unknown_words: int
    pairs: int
    unknown_words: dict[str, int]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "template_set": self.template_set,
            "pairs": self.pairs,
            "pairs_with_unknown_words": self.pairs_with_unknown_words,
            "sentences_scored": self.sentences_scored,
            "unknown_words": dict(sorted(self.unknown_words.items(), key=lambda kv: -kv[1])),
            "seconds": self.seconds,
            "cases": [
                {
                    "dependency": result.case.dependency,
                    "phenomenon": result.case.phenomenon,
                    "case": result.case.name,
                    "key": result.case.key,
                    "files": list(result.case.files),
                    "accuracy": result.accuracy,
                    "correct": result.correct,
                    "total": result.total,
                    "pairs_with_unknown_words": result.pairs_with_unknown_words,
                    "known_accuracy": result.known_accuracy,
                    "known_correct": result.known_correct,
                    "known_total": result.known_total,
                    "paper_onlstm": result.case.paper_onlstm,
                    "paper_lstm": result.case.paper_lstm,
                    "conditions": {
                        name: {"correct": correct, "total": total}
                        for name, (correct, total) in result.conditions.items()
                    },
                }
                for result in self.cases
            ],
        }


def evaluate_syneval(
    model: LanguageModel,
    test_sets: TestSets,
    template_set: str = "current",
    cases: Sequence[TestCase] = TABLE3,
    batch_size: int = 64,
    include_end: bool = True,
    max_items_per_condition: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> SynEvalResult:
    """Accuracy of every Table 3 row whose files are in ``test_sets``; each distinct sentence is
    scored once."""
    start = time.perf_counter()
    selected = [case for case in cases if all(name in test_sets for name in case.files)]
    items = {
        name: {
            condition: _spread(tuples, max_items_per_condition)
            for condition, tuples in conds.items()
        }
        for name, conds in test_sets.items()
    }
    unique = sorted(
        {
            sentence
            for case in selected
            for name in case.files
            for tuples in items[name].values()
            for item in tuples
            for sentence in item
        }
    )
    if progress:
        progress(f"scoring {len(unique)} distinct sentences")
    scores = dict(
        zip(
            unique,
            sentence_log_probs(model, [s.split() for s in unique], batch_size, include_end),
        )
    )
    stoi = model.vocab.stoi
    unknown_words: dict[str, int] = {}
    for sentence in unique:
        for word in sentence.split():
            if word not in stoi:
                unknown_words[word] = unknown_words.get(word, 0) + 1

    def has_unknown(item: tuple[str, ...]) -> bool:
        return any(word not in stoi for sentence in item for word in sentence.split())

    results: list[CaseResult] = []
    affected_items: set[tuple[str, ...]] = set()
    all_items: set[tuple[str, ...]] = set()
    for case in selected:
        result = CaseResult(case)
        for name in case.files:
            for condition, tuples in items[name].items():
                correct = 0
                for item in tuples:
                    if len(item) <= max(case.better, case.worse):
                        raise SynEvalError(
                            f"{name}.json.gz, condition {condition}: {item!r} has {len(item)} "
                            f"sentences; case {case.name!r} compares sentences {case.better} and "
                            f"{case.worse}"
                        )
                    right = scores[item[case.better]] > scores[item[case.worse]]
                    correct += right
                    pair = (item[case.better], item[case.worse])
                    all_items.add(pair)
                    if has_unknown(pair):
                        result.pairs_with_unknown_words += 1
                        affected_items.add(pair)
                    else:
                        result.known_correct += right
                        result.known_total += 1
                result.conditions[f"{name}/{condition}"] = (correct, len(tuples))
                result.correct += correct
                result.total += len(tuples)
        results.append(result)
    return SynEvalResult(
        cases=results,
        template_set=template_set,
        sentences_scored=len(unique),
        pairs_with_unknown_words=len(affected_items),
        pairs=len(all_items),
        unknown_words=unknown_words,
        seconds=time.perf_counter() - start,
    )


def _spread(items: list[tuple[str, ...]], limit: int | None) -> list[tuple[str, ...]]:
    """At most ``limit`` items, evenly spaced over the list (templates are ordered by word)."""
    if limit is None or len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(index * step)] for index in range(limit)]


def format_table(result: SynEvalResult) -> str:
    """Table 3 layout: one line per test case, the model's accuracy (%) beside the paper's (its
    Table 3 prints fractions; here both are in %, as every report prints accuracies)."""
    lines = [
        f"{'':62} {'model %':>7} {'pairs':>7} {'w/ unk':>7} {'known %':>7} "
        f"{'ON-LSTM (paper) %':>17} {'LSTM (paper) %':>14}",
    ]
    dependency = phenomenon = None
    for case_result in result.cases:
        case = case_result.case
        if case.dependency != dependency:
            dependency, phenomenon = case.dependency, None
            lines.append(dependency)
        if case.phenomenon != phenomenon:
            phenomenon = case.phenomenon
            lines.append(f"  {phenomenon}:")
        lines.append(
            f"    {case.name:<58} {_percent(case_result.accuracy):>7} "
            f"{case_result.total:>7} {case_result.pairs_with_unknown_words:>7} "
            f"{_percent(case_result.known_accuracy):>7} "
            f"{_percent(case.paper_onlstm):>17} {_percent(case.paper_lstm):>14}"
        )
    lines.append(
        f"{result.pairs} distinct pairs, {result.pairs_with_unknown_words} with words outside the "
        f"vocabulary (mapped to <unk>; {len(result.unknown_words)} distinct words; 'known': the "
        f"accuracy on the pairs with none); '(paper)': ON-LSTM's Table 3; template set "
        f"{result.template_set}; {result.seconds:.1f} s"
    )
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def group_means(result: SynEvalResult, known: bool = False) -> dict[str, float]:
    """The unweighted mean accuracy over the rows of each group of Table 3 (rows without a pair
    left out), by `GROUP_KEYS` name."""
    by_group: dict[str, list[float]] = {}
    for case_result in result.cases:
        accuracy = case_result.known_accuracy if known else case_result.accuracy
        if accuracy is not None:
            by_group.setdefault(GROUP_KEYS[case_result.case.dependency], []).append(accuracy)
    return {group: sum(values) / len(values) for group, values in by_group.items()}


def syneval_metrics(result: SynEvalResult, prefix: str = "test/syneval") -> dict[str, float]:
    """Accuracies in % by metric key (see the module docstring): per row over all pairs and over
    the known pairs, and the short-/long-term group means of both."""
    metrics: dict[str, float] = {}
    for known, name in ((False, prefix), (True, f"{prefix}_known")):
        for case_result in result.cases:
            accuracy = case_result.known_accuracy if known else case_result.accuracy
            if accuracy is not None:
                metrics[f"{name}/{case_result.case.key}"] = 100.0 * accuracy
        for group, mean in group_means(result, known).items():
            metrics[f"{name}/{group}"] = 100.0 * mean
    return metrics
