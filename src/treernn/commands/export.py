"""``python -m treernn export``: a trained model as a directory people can share
(`treernn.models.export`): weights as safetensors, config and vocabulary as text, a model card.

    python -m treernn export --ckpt outputs/ptb/onlstm/<run>[/checkpoints/last.ckpt] --out DIR

``--ckpt`` takes a checkpoint or a run directory (its best checkpoint, else ``last.ckpt``).
``treernn.load(DIR)`` reads the export back, with numbers equal to the checkpoint's to the last
digit, and runs no code from it. An export already in ``--out`` is replaced, whole, with
``--force`` only; a folder holding anything else is never replaced (``save_pretrained`` follows
the same rule, and replaces an export without being asked, as huggingface_hub's does).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a treernn checkpoint or run directory")
    parser.add_argument(
        "--out", required=True, help="a new or empty directory, or an export to replace (--force)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an export already in --out, whole (a folder holding anything else is "
        "never replaced)",
    )
    parser.add_argument(
        "--commit", default=None, help="the commit to name in the model card (default: the run's)"
    )


def run(args: argparse.Namespace) -> int:
    from treernn.models.export import check_target, export
    from treernn.models.load import load

    check_target(args.out, overwrite=args.force)  # before the model is read
    model = load(args.ckpt, device="cpu")
    out = export(model, args.out, commit=args.commit, overwrite=args.force)
    print(f"exported {model.kind.replace('_', ' ')} {model.meta.get('model')} to {out}")
    return 0
