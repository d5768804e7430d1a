"""The papers' numbers, for the "(paper)" rows of ``python -m treernn report table`` and the dashed
lines of the accuracy-by-length plot.

One entry per table of a paper: ``{paper kind: {model: {column: Reported}}}``. Columns use the
report's keys (`treernn.reporting.table`): ``ops<k>`` test accuracy (%) on pairs with k
operators, ``ops7-12`` their mean over the unseen lengths, ``sysgen_<A|B|C>`` accuracy (%) on a
systematic-generalisation partition, ``acc`` test accuracy (%), ``parse_f1/layer<k>`` corpus
(EVALB) parse F1 (%) of the k-th layer's induced trees and ``parse_f1_sentence/layer<k>`` their
sentence-averaged F1, ``val_ppl`` / ``ppl`` perplexity. A baseline tree (ON-LSTM Table 2) is a
row of its own, its F1 (``parse_f1`` or ``parse_f1_sentence``) under every layer. Only what the
papers print is here: a missing std or max was not reported.

Hu et al. (2020)'s SyntaxGym scores are not typed here: `hu2020_rows` computes them from their
published per-item files (`treernn.reporting.hu2020`), per model and corpus, with the mean,
sample std and max over their seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reported:
    """A number as a paper prints it: the mean over its runs, and where given the std and max."""

    mean: float
    std: float | None = None
    max: float | None = None


def _by_operators(*values: float | tuple[float, float]) -> dict[str, Reported]:
    """Accuracy at 7..12 operators (a value or (mean, std)), and their mean as ``ops7-12``."""
    cells = {}
    for operators, value in zip(range(7, 13), values, strict=True):
        mean, std = value if isinstance(value, tuple) else (value, None)
        cells[f"ops{operators}"] = Reported(mean, std)
    cells["ops7-12"] = Reported(round(sum(c.mean for c in cells.values()) / 6, 2))
    return cells


def _sysgen(a: float, b: float, c: float) -> dict[str, Reported]:
    return {"sysgen_A": Reported(a), "sysgen_B": Reported(b), "sysgen_C": Reported(c)}


PAPER_RESULTS: dict[str, dict[str, dict[str, Reported]]] = {
    # Ordered Memory (Shen et al., 2019), Table 1: test accuracy (%) of models trained on <= 6
    # operators, at 7..12 operators; OM's std over 5 runs; "Parsing F1" of OM's induced trees.
    "logic": {
        "Ordered Memory": {
            **_by_operators((98, 0.0), (97, 0.4), (96, 0.5), (94, 0.8), (93, 0.5), (92, 1.1)),
            "parse_f1/layer1": Reported(84.3, 14.4),
        },
        "ON-LSTM": _by_operators(91, 87, 85, 81, 78, 75),
        "LSTM": _by_operators(88, 84, 80, 78, 71, 69),
        "Tree-LSTM": _by_operators(94, 92, 92, 88, 87, 86),
        "Tree-RNN": _by_operators(98, 98, 97, 96, 95, 96),
    },
    # Ordered Memory, Table 1 "Sys. Gen." columns (partitions of Table 2): accuracy (%) on the
    # pairs matching the pattern excluded from training.
    "sysgen": {
        "Ordered Memory": _sysgen(94, 91, 81),
        "ON-LSTM": _sysgen(70, 63, 60),
        "LSTM": _sysgen(84, 60, 59),
        "Tree-LSTM": _sysgen(91, 84, 76),
        "Tree-RNN": _sysgen(94, 92, 86),
    },
    # Ordered Memory, Fig. 3a (the ListOps table): test accuracy (%) and parse F1 (%); LSTM and
    # the latent-tree models from Nangia and Bowman (2018).
    "listops": {
        "Ordered Memory": {"acc": Reported(99.97, 0.014), "parse_f1/layer1": Reported(100.0)},
        "LSTM": {"acc": Reported(71.5, 1.5)},
        "Transformer": {"acc": Reported(57.4, 0.4)},
        "RL-SPINN": {"acc": Reported(60.7, 2.6), "parse_f1/layer1": Reported(71.1)},
        "Gumbel Tree-LSTM": {"acc": Reported(57.6, 2.9), "parse_f1/layer1": Reported(57.3)},
    },
    # Ordered Memory, Table 3: SST-2 test accuracy (%); OM with GloVe, Tree-LSTM from Tai et al.
    "sst2": {
        "Ordered Memory": {"acc": Reported(90.4)},
        "Tree-LSTM": {"acc": Reported(88.0)},
    },
    # Ordered Memory, Table 3: SST-5 test accuracy (%).
    "sst5": {
        "Ordered Memory": {"acc": Reported(52.2)},
        "Tree-LSTM": {"acc": Reported(51.0)},
    },
    # (Ordered Memory's parse F1s above are EVALB's corpus F1: its listops.py scores the trees
    # with EVALB.)
    # ON-LSTM (Shen et al., 2019), Table 2: unlabeled F1 (%) on the WSJ test set (section 23),
    # mean (std) and max over 5 seeds, per layer of the 3-layer PTB model, and the trivial trees.
    # (WSJ10: layers 35.2 (4.1) / 65.1 (1.7) / 54.0 (3.9); random 31.7, balanced 43.4, left
    # 19.6, right 56.6.) Sentence-averaged F1: the authors' test_phrase_grammar.py returns the
    # mean of per-sentence F1s and computes no corpus F1, and the trivial trees, which no model
    # sways, agree: on the NLTK WSJ sample left-branching scores 8.6 sentence and 11.7 corpus F1
    # (the paper: 9.0), and 19.2 and 29.3 at 10 words or fewer (WSJ10: 19.6).
    "parsing": {
        "ON-LSTM": {
            "parse_f1_sentence/layer1": Reported(20.0, 2.8, 24.0),
            "parse_f1_sentence/layer2": Reported(47.7, 1.5, 49.4),
            "parse_f1_sentence/layer3": Reported(36.6, 3.3, 40.4),
        },
        "random trees": {"parse_f1_sentence": Reported(18.4, 0.1, 18.6)},
        "balanced trees": {"parse_f1_sentence": Reported(24.5, 0.0, 24.5)},
        "left-branching": {"parse_f1_sentence": Reported(9.0, 0.0, 9.0)},
        "right-branching": {"parse_f1_sentence": Reported(39.8, 0.0, 39.8)},
    },
    # ON-LSTM, Table 1: PTB perplexity, validation and test, 3-layer tied models.
    "ptb": {
        "ON-LSTM": {"val_ppl": Reported(58.29, 0.10), "ppl": Reported(56.17, 0.12)},
        "AWD-LSTM": {"val_ppl": Reported(60.0), "ppl": Reported(57.3)},
    },
}

PAPERS = tuple(PAPER_RESULTS)

#: Ordered Memory Table 1 at 7..12 operators, {"<model> (paper)": {operators: accuracy %}}:
#: the dashed lines of `treernn.reporting.accuracy.plot_accuracy_by_length`
PAPER_LENGTH_ACCURACY: dict[str, dict[int, float]] = {
    f"{model} (paper)": {
        int(key.removeprefix("ops")): cell.mean
        for key, cell in cells.items()
        if key.removeprefix("ops").isdigit()
    }
    for model, cells in PAPER_RESULTS["logic"].items()
}

#: Ordered Memory Table 1's Sys. Gen. columns, {"<model> (paper)": {"A": accuracy %, ...}}
PAPER_SYSGEN_ACCURACY: dict[str, dict[str, float]] = {
    f"{model} (paper)": {key.removeprefix("sysgen_"): cell.mean for key, cell in cells.items()}
    for model, cells in PAPER_RESULTS["sysgen"].items()
}


def hu2020_rows(results: Any) -> dict[str, dict[str, Reported]]:
    """Hu et al. (2020)'s ON-LSTM and LSTM per corpus (``ON-LSTM BLLIP-XS, Hu et al. 2020``):
    SG score, mean over all 34 suites and circuits (%), each the mean, sample std and max over
    their seeds, from their per-item ``results`` (`treernn.reporting.hu2020.hu2020_results`)."""
    from treernn.reporting.hu2020 import paper_rows

    return {
        label: {key: Reported(score.mean, score.std, score.max) for key, score in cells.items()}
        for label, cells in paper_rows(results).items()
    }
