"""Unsupervised constituency parsing: WSJ gold trees, tree induction from syntactic distances,
bracket F1 and the trivial-tree baselines (ON-LSTM paper, Sec. 5.2 and Table 2)."""

from treernn.parsing.induce import NoDistancesError, induce_distances, trees_from_distances
from treernn.parsing.metrics import TABLE2_LABELS, BracketCounts, ParseScores, score_trees
from treernn.parsing.trees import Tree, greedy_tree, to_bracketed
from treernn.parsing.wsj import GoldSentence, TreebankError, load_split, read_treebank

__all__ = [
    "TABLE2_LABELS",
    "BracketCounts",
    "GoldSentence",
    "NoDistancesError",
    "ParseScores",
    "Tree",
    "TreebankError",
    "greedy_tree",
    "induce_distances",
    "load_split",
    "read_treebank",
    "score_trees",
    "to_bracketed",
    "trees_from_distances",
]
