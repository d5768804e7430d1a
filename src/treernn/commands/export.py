"""``python -m treernn export``: a trained model as a directory people can share
(`treernn.sharing`): weights as safetensors, config and vocabulary as text, a model card.

    python -m treernn export --ckpt outputs/ptb/onlstm/<run>[/checkpoints/last.ckpt] --out DIR

``--ckpt`` takes a checkpoint or a run directory (its best checkpoint, else ``last.ckpt``).
``treernn.load(DIR)`` reads the export back, with numbers equal to the checkpoint's to the last
digit, and runs no code from it.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a treernn checkpoint or run directory")
    parser.add_argument("--out", required=True, help="a new (or empty) directory")
    parser.add_argument(
        "--commit", default=None, help="the commit to name in the model card (default: the run's)"
    )


def run(args: argparse.Namespace) -> int:
    from treernn.api import load
    from treernn.sharing import export

    model = load(args.ckpt, device="cpu")
    out = export(model, args.out, commit=args.commit)
    print(f"exported {model.kind.replace('_', ' ')} {model.meta.get('model')} to {out}")
    return 0
