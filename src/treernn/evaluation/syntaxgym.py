"""SyntaxGym (Hu et al. 2020, ACL: "A Systematic Assessment of Syntactic Generalization in Neural
Language Models") of a language model: the evaluation that ``python -m treernn syntaxgym``,
``LanguageModel.syntaxgym`` and the test-time callback
`treernn.callbacks.syntaxgym.SyntaxGymCallback` all run, exact to the ``syntaxgym`` package
(0.6.0) on the outputs of ``python -m treernn lmzoo`` (``scripts/syntaxgym_crosscheck.py``
checks it item by item).

For each item and condition of a suite (`treernn.data.syntaxgym`):

1. the sentence is the regions joined as the package joins them (`Condition.sentence`) and is
   read by the model alone, after ``<eos>`` from a fresh state: each word's surprisal
   ``-log2 p`` in bits, and the closing ``<eos>``'s;
2. its words are the model's own tokenisation of the sentence (PTB's normalisation for a PTB
   model: lower case, numbers as ``N``, punctuation dropped); each region holds as many of
   them, in order, as the tokenizer makes of the region's text alone (a tokenizer that ran a
   word across a region boundary is one line naming the item);
3. ``<eos>`` belongs where the text after the last word begins, as the package assigns it: to
   the last word's region when text the model drops (the final period) follows the word there,
   else to the next region, even an empty one (the last region keeps it). A PTB model has no
   punctuation, so ``<eos>`` stands for the final period the suites write;
4. a region's value combines its tokens' surprisals by the suite's metric (``sum``: 0 for an
   empty region; ``mean``, ``median``, ``max``, ``min``, ``range``: not a number for an empty
   region, which makes every comparison with it false);
5. each prediction (`treernn.data.syntaxgym_formula`) is evaluated on the item's region values;
   the item is correct when all of them hold; a suite's accuracy is its share of correct items.

A word outside the vocabulary is read as ``<unk>``; each region counts its ``<unk>`` tokens, and
each suite reports the share of its items whose critical regions (those a prediction reads)
hold one: a 10k-word PTB vocabulary meets words that the suites' authors did not pick for it.

Scores (`treernn.data.syntaxgym`): the SG score is Hu et al.'s, the mean suite accuracy over
their 31 suites (`EXCLUDED` left out); beside it the mean over every suite scored, and the mean
over each circuit's suites. Metrics (`syntaxgym_metrics`, in %): ``<prefix>/sg_score``,
``<prefix>/sg_score_all``, ``<prefix>/circuit/<key>`` (`CIRCUIT_KEYS`), ``<prefix>/unk_items``
(the share of items with ``<unk>`` in a critical region, over all suites) and
``<prefix>_suite/<suite>`` (each suite's accuracy).

Results are written as JSON (`SyntaxGymResult.as_dict`) and as a CSV in Hu et al.'s layout,
``model,suite,item,correct`` (`SyntaxGymResult.csv_text`; ``item``: the item's position in its
suite from 0, as their files count), so that their analysis reads treernn's results beside theirs.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from treernn.data.syntaxgym import (
    CIRCUIT_KEYS,
    Condition,
    Suite,
    SuiteError,
    circuit_of,
    circuit_scores,
    in_sg_score,
    read_suite,
    sg_score,
    suite_files,
)
from treernn.data.syntaxgym_formula import value_of
from treernn.errors import ConfigValueError

EOS, UNK = "<eos>", "<unk>"
#: the columns of Hu et al.'s per-item result files
CSV_HEADER = ("model", "suite", "item", "correct")


class Scorer(Protocol):
    """What a suite needs from a model: its tokenizer, its vocabulary and its surprisals."""

    def words(self, text: str) -> list[str]: ...

    def known(self, word: str) -> bool: ...

    def surprisals(self, sentences: Sequence[Sequence[str]]) -> list[list[float]]:
        """Bits per word and one more for the closing ``<eos>``, each sentence read alone."""
        ...


class TaskScorer:
    """A language-model task (``LanguageModelTask``) as a `Scorer`: ``words`` the model's
    tokenizer (default: PTB's normalisation with the task's vocabulary,
    `treernn.data.raw_text.ptb_words`), surprisals by
    `treernn.evaluation.lmzoo.shared_surprisals`."""

    def __init__(
        self,
        task: Any,
        batch_size: int = 64,
        words: Callable[[str], list[str]] | None = None,
    ) -> None:
        self.task = task
        self.vocab = task.vocab
        self.batch_size = batch_size
        self._words = words

    def words(self, text: str) -> list[str]:
        if self._words is not None:
            return self._words(text)
        from treernn.data.raw_text import ptb_words

        return ptb_words(text, self.vocab)

    def known(self, word: str) -> bool:
        return word in self.vocab

    def surprisals(self, sentences: Sequence[Sequence[str]]) -> list[list[float]]:
        from treernn.evaluation.lmzoo import shared_surprisals

        if UNK not in self.vocab:
            for words in sentences:
                unknown = [word for word in words if word not in self.vocab]
                if unknown:
                    raise ConfigValueError(
                        f"{unknown[0]!r} (in {' '.join(words)!r}) is not in the model's "
                        "vocabulary, which has no <unk> to read unknown words as"
                    )
        return shared_surprisals(self.task, sentences, self.batch_size)


# ----------------------------------------------------------------------------- results
@dataclass
class RegionScore:
    number: int
    #: the region's tokens as the model read them (``<unk>`` for an unknown word; ``<eos>``)
    tokens: list[str]
    surprisals: list[float]
    value: float
    unknown: int


@dataclass
class ItemScore:
    number: int
    #: the item's position in its suite, from 0 (the ``item`` of Hu et al.'s files)
    position: int
    predictions: list[bool]
    unknown_in_critical: bool
    #: condition -> its regions, in the suite's order
    regions: dict[str, list[RegionScore]] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return all(self.predictions)


@dataclass
class SuiteScore:
    name: str
    metric: str
    formulas: list[str]
    items: list[ItemScore]
    seconds: float = 0.0
    source: str = ""

    @property
    def circuit(self) -> str | None:
        return circuit_of(self.name)

    @property
    def in_sg_score(self) -> bool:
        return in_sg_score(self.name)

    @property
    def correct(self) -> int:
        return sum(item.correct for item in self.items)

    @property
    def accuracy(self) -> float:
        return self.correct / len(self.items)

    @property
    def unknown_items(self) -> int:
        return sum(item.unknown_in_critical for item in self.items)

    @property
    def unknown_share(self) -> float:
        return self.unknown_items / len(self.items)


@dataclass
class SyntaxGymResult:
    model: str
    suites: list[SuiteScore]
    seconds: float = 0.0

    @property
    def accuracies(self) -> dict[str, float]:
        return {suite.name: suite.accuracy for suite in self.suites}

    @property
    def sg_score(self) -> float | None:
        """Hu et al.'s SG score over the scored suites they count (a fraction)."""
        return sg_score(self.accuracies)

    @property
    def mean_all(self) -> float:
        """The mean accuracy over every scored suite."""
        return statistics.fmean(self.accuracies.values())

    @property
    def circuits(self) -> dict[str, float]:
        return circuit_scores(self.accuracies)

    @property
    def unknown_share(self) -> float:
        items = [item for suite in self.suites for item in suite.items]
        return sum(item.unknown_in_critical for item in items) / len(items)

    def as_dict(self, regions: bool = False) -> dict[str, Any]:
        """The JSON record: scores as fractions, each suite and item; ``regions``: every item's
        region values, tokens and surprisals too."""
        return {
            "model": self.model,
            "sg_score": self.sg_score,
            "sg_score_suites": sum(suite.in_sg_score for suite in self.suites),
            "mean_all_suites": self.mean_all,
            "suites_scored": len(self.suites),
            "circuits": self.circuits,
            "unk_share": self.unknown_share,
            "seconds": self.seconds,
            "suites": [_suite_record(suite, regions) for suite in self.suites],
        }

    def csv_text(self) -> str:
        """Hu et al.'s layout (module docstring)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        for suite in self.suites:
            for item in suite.items:
                writer.writerow([self.model, suite.name, item.position, item.correct])
        return out.getvalue()


def _suite_record(suite: SuiteScore, regions: bool) -> dict[str, Any]:
    items = []
    for item in suite.items:
        record: dict[str, Any] = {
            "item_number": item.number,
            "item": item.position,
            "correct": item.correct,
            "predictions": item.predictions,
            "unk_in_critical": item.unknown_in_critical,
        }
        if regions:
            record["regions"] = {
                condition: [
                    {
                        "region_number": region.number,
                        "value": None if math.isnan(region.value) else region.value,
                        "tokens": region.tokens,
                        "surprisals": region.surprisals,
                        "unk": region.unknown,
                    }
                    for region in condition_regions
                ]
                for condition, condition_regions in item.regions.items()
            }
        items.append(record)
    return {
        "suite": suite.name,
        "source": suite.source,
        "circuit": suite.circuit,
        "in_sg_score": suite.in_sg_score,
        "metric": suite.metric,
        "predictions": suite.formulas,
        "items": len(suite.items),
        "correct": suite.correct,
        "accuracy": suite.accuracy,
        "items_with_unk_in_critical": suite.unknown_items,
        "unk_share": suite.unknown_share,
        "seconds": suite.seconds,
        "item_results": items,
    }


# ----------------------------------------------------------------------------- scoring
def align(condition: Condition, scorer: Scorer, where: str = "") -> tuple[list[list[str]], int]:
    """The words of each region of a condition's sentence, and the index of the region that
    holds ``<eos>`` (module docstring, steps 2 and 3)."""
    regions = condition.regions
    region_words = [scorer.words(region.content) for region in regions]
    sentence_words = scorer.words(condition.sentence)
    if sum(map(len, region_words)) != len(sentence_words):
        raise SuiteError(
            f"{where}condition {condition.name}: the model's tokenizer makes "
            f"{len(sentence_words)} words of the sentence {condition.sentence!r} but "
            f"{sum(map(len, region_words))} of its regions one by one; a word runs across a "
            "region boundary"
        )
    assigned, start = [], 0
    for words in region_words:
        assigned.append(sentence_words[start : start + len(words)])
        start += len(words)
    with_words = [index for index, words in enumerate(region_words) if words]
    if not with_words:
        return assigned, 0
    last = with_words[-1]
    text = regions[last].content.strip()
    # text the tokenizer drops after the last word (a final period) keeps <eos> in its region
    dropped_after = not scorer.words(text[-1])
    return assigned, last if dropped_after or last == len(regions) - 1 else last + 1


def combine(metric: str, values: Sequence[float]) -> float:
    """A region's value from its tokens' surprisals (module docstring, step 4)."""
    if metric == "sum":
        return sum(values, 0.0)
    if not values:
        return math.nan
    if metric == "mean":
        return sum(values, 0.0) / len(values)
    if metric == "median":
        return float(statistics.median(values))
    if metric == "max":
        return max(values)
    if metric == "min":
        return min(values)
    return max(values) - min(values)  # range


class _SameWords:
    """A scorer whose tokenizer remembers each text it read: a suite repeats its regions across
    conditions and items."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self.seen: dict[str, list[str]] = {}

    def words(self, text: str) -> list[str]:
        if text not in self.seen:
            self.seen[text] = self.scorer.words(text)
        return list(self.seen[text])

    def known(self, word: str) -> bool:
        return self.scorer.known(word)

    def surprisals(self, sentences: Sequence[Sequence[str]]) -> list[list[float]]:
        return self.scorer.surprisals(sentences)


def score_suite(suite: Suite, scorer: Scorer) -> SuiteScore:
    """Every item of ``suite`` under the model (module docstring)."""
    start = time.perf_counter()
    scorer = _SameWords(scorer)
    layout = []
    for item in suite.items:
        where = f"suite {suite.name}, item {item.number}, "
        layout.append([align(condition, scorer, where) for condition in item.conditions])
    sentences = [
        [word for words in region_words for word in words]
        for conditions in layout
        for region_words, _ in conditions
    ]
    surprisals = iter(scorer.surprisals(sentences))
    critical = suite.critical
    items = []
    for position, (item, conditions) in enumerate(zip(suite.items, layout)):
        values: dict[tuple[str, int], float] = {}
        regions: dict[str, list[RegionScore]] = {}
        unknown_in_critical = False
        for condition, (region_words, eos_region) in zip(item.conditions, conditions):
            bits = next(surprisals)
            offset = 0
            condition_regions = []
            for index, (region, words) in enumerate(zip(condition.regions, region_words)):
                tokens = [word if scorer.known(word) else UNK for word in words]
                token_bits = bits[offset : offset + len(words)]
                offset += len(words)
                if index == eos_region:
                    tokens.append(EOS)
                    token_bits.append(bits[-1])
                unknown = tokens.count(UNK)
                value = combine(suite.metric, token_bits)
                values[(condition.name, region.number)] = value
                condition_regions.append(
                    RegionScore(region.number, tokens, token_bits, value, unknown)
                )
                if unknown and (condition.name, region.number) in critical:
                    unknown_in_critical = True
            regions[condition.name] = condition_regions
        predictions = [bool(value_of(p.expression, values)) for p in suite.predictions]
        items.append(ItemScore(item.number, position, predictions, unknown_in_critical, regions))
    return SuiteScore(
        suite.name,
        suite.metric,
        [prediction.formula for prediction in suite.predictions],
        items,
        time.perf_counter() - start,
        suite.source,
    )


def evaluate_suites(
    suites: Sequence[Suite],
    scorer: Scorer,
    model: str = "model",
    progress: Callable[[str], None] | None = None,
) -> SyntaxGymResult:
    """Every suite under the model, one after the other; ``model`` names it in the CSV."""
    start = time.perf_counter()
    names = [suite.name for suite in suites]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigValueError(
            f"two suites are named {repeated[0]!r}; results are kept by suite name"
        )
    scores = []
    for suite in suites:
        score = score_suite(suite, scorer)
        scores.append(score)
        if progress:
            progress(
                f"{suite.name}: {score.correct}/{len(score.items)} items correct "
                f"({score.seconds:.1f} s)"
            )
    return SyntaxGymResult(model, scores, time.perf_counter() - start)


def _below(folder: Path) -> str:
    """Where suites lie one level down (SyntaxGym's layout keeps them in ``suites/``), said as
    the folder to pass instead; nothing when none does."""
    holding = sorted(sub for sub in folder.iterdir() if sub.is_dir() and any(sub.glob("*.json")))
    if not holding:
        return ""
    which = "that folder" if len(holding) == 1 else "one or more of those folders"
    return "; suites are in " + ", ".join(str(sub) for sub in holding) + f": pass {which}"


def read_suites(
    paths: Sequence[str | Path] = (), data_dir: str | Path | None = None
) -> list[Suite]:
    """Suites from JSON files and folders of them (``*.json``, sorted by name); none given: Hu
    et al.'s 34, from the data directory or downloaded (`treernn.data.syntaxgym.suite_files`)."""
    if not paths:
        return [read_suite(path) for path in suite_files(data_dir=data_dir)]
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise SuiteError(f"suite folder {path} holds no suite (*.json){_below(path)}")
            files += found
        elif path.suffix == ".csv":
            raise SuiteError(
                f"suite {path}: the CSV layout holds no predictions; read it with "
                "treernn.data.syntaxgym.read_suite_csv(path, formulas) (--formula on the command "
                "line)"
            )
        else:
            files.append(path)
    return [read_suite(path) for path in files]


# ----------------------------------------------------------------------------- reporting
def syntaxgym_metrics(result: SyntaxGymResult, prefix: str = "test/syntaxgym") -> dict[str, float]:
    """The scores in % by metric key (module docstring)."""
    metrics: dict[str, float] = {}
    if result.sg_score is not None:
        metrics[f"{prefix}/sg_score"] = 100 * result.sg_score
    metrics[f"{prefix}/sg_score_all"] = 100 * result.mean_all
    for circuit, value in result.circuits.items():
        metrics[f"{prefix}/circuit/{CIRCUIT_KEYS[circuit]}"] = 100 * value
    metrics[f"{prefix}/unk_items"] = 100 * result.unknown_share
    for suite in result.suites:
        metrics[f"{prefix}_suite/{suite.name}"] = 100 * suite.accuracy
    return metrics


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_table(result: SyntaxGymResult) -> str:
    """One line per suite by circuit (accuracy %, items, the share of items with ``<unk>`` in
    a critical region), the circuits' means, the SG score and the mean over all suites."""
    lines = [f"{'suite':<26} {'items':>5} {'acc %':>6} {'<unk> items %':>13}"]
    by_circuit: dict[str | None, list[SuiteScore]] = {}
    for suite in result.suites:
        by_circuit.setdefault(suite.circuit, []).append(suite)
    for circuit, suites in sorted(by_circuit.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        lines.append(circuit or "(no circuit)")
        for suite in suites:
            mark = "" if suite.in_sg_score else "  (not in the SG score)"
            lines.append(
                f"  {suite.name:<24} {len(suite.items):>5} {_percent(suite.accuracy):>6} "
                f"{_percent(suite.unknown_share):>13}{mark}"
            )
    lines.append("")
    for circuit, value in result.circuits.items():
        lines.append(f"{circuit:<35} {_percent(value):>6}")
    counted = sum(suite.in_sg_score for suite in result.suites)
    lines += [
        f"{f'SG score ({counted} suites)':<35} {_percent(result.sg_score):>6}",
        f"{f'mean of all {len(result.suites)} suites':<35} {_percent(result.mean_all):>6}",
        f"{result.model}: {_percent(result.unknown_share)}% of the items have <unk> in a "
        f"critical region; {result.seconds:.1f} s",
    ]
    return "\n".join(lines)


def format_items(result: SyntaxGymResult) -> str:
    """Per item: whether it is correct, each prediction's truth, and whether a critical region
    holds ``<unk>``."""
    lines = []
    for suite in result.suites:
        lines.append(f"{suite.name} ({suite.metric}):")
        for index, formula in enumerate(suite.formulas, start=1):
            lines.append(f"  prediction {index}: {formula.strip()}")
        for item in suite.items:
            truths = " ".join("T" if truth else "F" for truth in item.predictions)
            unknown = "  <unk> in a critical region" if item.unknown_in_critical else ""
            lines.append(
                f"  item {item.number:>3}: {'correct' if item.correct else 'wrong':<7} "
                f"predictions {truths}{unknown}"
            )
    return "\n".join(lines)
