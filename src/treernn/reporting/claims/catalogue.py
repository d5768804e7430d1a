"""The claims of the three papers, as data: each `Claim` is one or more `Comparison`s "A is
better than B on a metric of a table", in the papers' order (claim numbers are positions in
`CLAIMS`, from 1). `treernn.reporting.claims.plans` holds each claim's plan (budget, seeds,
alpha, margins) and `treernn.reporting.claims.rule` decides them.
"""

from __future__ import annotations

from dataclasses import dataclass

TRIVIAL_BEST = "trivial:best"


@dataclass(frozen=True)
class Comparison:
    """ "``better`` beats ``worse`` on ``metric`` (a ``report table`` column) in a table"."""

    tables: tuple[str, ...]  # table names (conf/table/) whose sweeps hold it, first preferred
    metric: str
    better: str  # a model's name, as its runs' config names it
    worse: str  # a model's name, or TRIVIAL_BEST
    higher_is_better: bool = True

    def __str__(self) -> str:
        sign = ">" if self.higher_is_better else "<"
        worse = "best trivial trees" if self.worse == TRIVIAL_BEST else self.worse
        return f"{self.better} {sign} {worse} on {self.metric}"


@dataclass(frozen=True)
class Claim:
    paper: str
    text: str
    comparisons: tuple[Comparison, ...]
    #: what keeps this reproduction from deciding the paper's claim as the paper states it
    limits: str = ""


def _pair(tables, metric, better, worse, higher=True) -> Comparison:
    return Comparison(tuple(tables), metric, better, worse, higher)


#: The comparisons of the three papers, in the papers' order, and Hu et al. (2020)'s SyntaxGym
#: comparison of ON-LSTM and LSTM (claim 11).
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ON-LSTM Table 1",
        "ON-LSTM language model beats the AWD-LSTM baseline (test perplexity)",
        (_pair(["lm"], "ppl", "onlstm", "lstm", higher=False),),
        "scaled-down widths (embedding 200, hidden 400, not 400 and 1,150) and a budget of "
        "epochs, not the paper's 1,000",
    ),
    Claim(
        "ON-LSTM Table 2",
        "ON-LSTM's induced trees beat the trivial trees (parse F1, best layer)",
        (_pair(["lm"], "parse_f1/layer*", "onlstm", TRIVIAL_BEST),),
        "scaled-down widths; the NLTK WSJ sample lies inside PTB's training text (the paper "
        "scores the WSJ test section); corpus F1, where the paper's is sentence-averaged",
    ),
    Claim(
        "ON-LSTM Table 3",
        "Marvin & Linzen: ON-LSTM better on long-term dependencies, LSTM on short-term "
        "(pairs within the PTB vocabulary)",
        (
            _pair(["lm"], "syneval_known/long_term", "onlstm", "lstm"),
            _pair(["lm"], "syneval_known/short_term", "lstm", "onlstm"),
        ),
        "scaled-down widths; Marvin & Linzen pairs restricted to PTB's 10k vocabulary (the "
        "paper's models read a Wikipedia vocabulary)",
    ),
    Claim(
        "ON-LSTM Fig. 3",
        "ON-LSTM beats LSTM on logic at 7-12 operators",
        # the paper's width (table=logic_onlstm) where it ran, else the logic table's
        (_pair(["logic_onlstm", "logic"], "ops7-12", "onlstm", "lstm"),),
        "the paper's width only where table=logic_onlstm ran; fewer updates than the paper",
    ),
    Claim(
        "Ordered Memory Table 1",
        "Ordered Memory beats LSTM on logic at 7-12 operators",
        (_pair(["logic"], "ops7-12", "ordered_memory", "lstm"),),
        "scaled-down widths (embedding and hidden 80, not 200) and budgets",
    ),
    Claim(
        "Ordered Memory Table 1 (Sys. Gen.)",
        "Ordered Memory beats LSTM on systematic generalisation (partitions A, B, C)",
        tuple(_pair(["sysgen"], f"sysgen_{split}", "ordered_memory", "lstm") for split in "ABC"),
        "scaled-down widths (embedding and hidden 80, not 200) and budgets",
    ),
    Claim(
        "Ordered Memory Fig. 3a",
        "Ordered Memory beats LSTM and Transformer on ListOps",
        (
            _pair(["listops"], "acc", "ordered_memory", "lstm"),
            _pair(["listops"], "acc", "ordered_memory", "transformer"),
        ),
        "scaled-down widths (embedding and hidden 64, not 128) and budgets",
    ),
    Claim(
        "Ordered Memory Fig. 3a",
        "Ordered Memory's induced ListOps trees beat the trivial trees",
        (_pair(["listops"], "parse_f1/layer*", "ordered_memory", TRIVIAL_BEST),),
        "scaled-down widths (embedding and hidden 64, not 128) and budgets",
    ),
    Claim(
        "Ordered Memory Table 3",
        "Ordered Memory beats LSTM on SST-2",
        (_pair(["sst2"], "acc", "ordered_memory", "lstm"),),
        "hidden 100 with embeddings trained from scratch (no GloVe; the paper: hidden 300, GloVe)",
    ),
    Claim(
        "Top-down Tree LSTM Tables 1-2",
        "LdTreeLSTM > TD-TreeLSTM > LSTM (EWT: perplexity, completion, reranking)",
        (
            _pair(["tdlm"], "ppl", "ld_treelstm", "td_treelstm", higher=False),
            _pair(["tdlm"], "ppl", "td_treelstm", "lstm", higher=False),
            _pair(["tdlm"], "completion_acc", "ld_treelstm", "td_treelstm"),
            _pair(["tdlm"], "completion_acc", "td_treelstm", "lstm"),
            _pair(["tdlm"], "rerank_uas", "ld_treelstm", "td_treelstm"),
        ),
        "scaled-down widths; UD English-EWT and its stand-ins for the paper's MSR and k-best "
        "sets; the halving rule gives seeds different budgets",
    ),
    Claim(
        "Hu et al. 2020, Fig. 2",
        "ON-LSTM's SyntaxGym score beats an LSTM's at about 1M training tokens",
        (_pair(["lm"], "syntaxgym/sg_score", "onlstm", "lstm"),),
        "PTB (0.93M tokens, a 10k vocabulary) against BLLIP-XS (about 1M); the lm table's CPU "
        "widths and budget, not Hu et al.'s models",
    ),
)


def claim_number(claim: Claim) -> int:
    """A claim's number in the report (its position in `CLAIMS`, from 1)."""
    return CLAIMS.index(claim) + 1
