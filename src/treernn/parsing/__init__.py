"""Unsupervised constituency parsing: WSJ gold trees, tree induction from syntactic distances,
bracket F1 and the trivial-tree baselines (ON-LSTM paper, Sec. 5.2 and Table 2)."""
