"""Sample dependency trees from a trained TreeLSTM / LdTreeLSTM (Zhang et al. 2016, Section 3.4,
Figure 5): four edge classifiers are trained on the model's features of the training trees, then
trees are sampled (`treernn.evaluation.generation` says how).

    python -m treernn generate --ckpt X.ckpt --num-trees 5 [--classifier-epochs 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from treernn.errors import CheckpointError
from treernn.evaluation.generation import (  # noqa: F401  (the names this command offers)
    ADD_LEFT,
    ADD_NX_LEFT,
    ADD_NX_RIGHT,
    ADD_RIGHT,
    CLASSIFIERS,
    EdgeClassifiers,
    classifier_accuracy,
    edge_features,
    edge_labels,
    format_tree,
    sample_tree,
    train_classifiers,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a tree-LM checkpoint (td/ld_treelstm)")
    parser.add_argument("--train-file", default=None, help="CoNLL-U for the classifiers")
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument("--max-train-sentences", type=int, default=3000)
    parser.add_argument("--classifier-epochs", type=int, default=2)
    parser.add_argument("--num-trees", type=int, default=5)
    parser.add_argument("--max-nodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from treernn.data.download import default_data_dir
    from treernn.models.load import load

    hint = "a tree language model's checkpoint (task=dependency_lm, td_treelstm or ld_treelstm)"
    model = load(args.ckpt, "cpu", kind="dependency_lm", command="generate", hint=hint)
    if model.encoder.input_view != "dependency_tree":
        raise CheckpointError(f"generate: {args.ckpt} is a sequence model; generate needs {hint}")
    train_file = args.train_file
    if train_file is None:
        data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
        train_file = data_dir / model.meta["train_file"]
    result = model.generate(
        args.num_trees,
        train_file,
        max_nodes=args.max_nodes,
        classifier_epochs=args.classifier_epochs,
        max_train_sentences=args.max_train_sentences,
        seed=args.seed,
    )
    accuracy = result.classifier_accuracy
    print("held-out classifier accuracy: "
          + ", ".join(f"{name} {value:.1f}%" for name, value in accuracy.items()))  # fmt: skip
    for index, (words, heads) in enumerate(result.trees):
        print(f"\n# tree {index + 1}\n" + format_tree(words, heads))
    return 0
