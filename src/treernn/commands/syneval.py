"""``python -m treernn syneval``: targeted syntactic evaluation (Marvin & Linzen 2018) of a
language-model checkpoint, in the layout of the ON-LSTM paper's Table 3
(`treernn.evaluation.syneval` says how sentences are scored and what "known" pairs are).

    python -m treernn syneval --ckpt PATH [--template-set current|EMNLP2018] [--out JSON]
    python -m treernn syneval --ckpt PATH --blimp FILE.jsonl [FILE.jsonl ...]
        [--method full|one_prefix|two_prefix] [--out JSON]

prints the Table 3 layout and writes it as JSON to ``--out``, by default
``syneval_<set>.json`` in the current working directory, with ``metrics``: the accuracies in %
under the keys the callback logs. The same evaluation runs after testing inside a run with the
``syneval`` callback (``conf/callbacks/syneval.yaml``), which logs its accuracies as test
metrics.

``--blimp``: BLiMP minimal-pair files (JSON lines, one pair per line, with ``sentence_good``,
``sentence_bad``, ``UID``, ...; `treernn.evaluation.blimp`) instead, by BLiMP's ``--method``:
``full`` (whole sentences, the default), ``one_prefix`` (the good and bad word given the shared
prefix) or ``two_prefix`` (the shared word given the good and bad prefix); accuracy per paradigm
(UID), phenomenon (``linguistics_term``), ``field`` and over all pairs, and every pair's two
scores and whether they tied, written as JSON to ``--out``, by default ``blimp.json`` (or
``blimp_<method>.json``) in the current working directory.

``--ckpt`` takes a checkpoint, a run directory or an exported model; nothing is ever written
beside it. An existing result file is refused before any work unless ``--force``; the
result is written whole (a temporary file renamed into place).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from treernn.errors import ConfigValueError
from treernn.evaluation.blimp import METHODS
from treernn.evaluation.syneval import (
    TEMPLATE_SETS,
    evaluate_syneval,
    format_table,
    load_test_sets,
    syneval_metrics,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.models.load import default_device

    parser.add_argument("--ckpt", required=True, help="a language-model checkpoint")
    parser.add_argument("--syneval-dir", default=None, help="default: <data dir>/syneval")
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument("--template-set", choices=TEMPLATE_SETS, default="current")
    parser.add_argument(
        "--blimp", nargs="+", default=None, metavar="JSONL", help="BLiMP minimal-pair files"
    )
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="full",
        help="BLiMP's method: whole sentences, or the critical word(s) given one or two prefixes",
    )
    parser.add_argument("--max-per-condition", type=int, default=None)
    parser.add_argument(
        "--no-end",
        action="store_true",
        help="leave log p(<eos>) out of the sentence score (the prefix methods never count it)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON path (default: syneval_<set>.json or blimp.json in the working directory)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    from treernn.data.download import default_data_dir
    from treernn.files import new_result_file
    from treernn.models.load import load

    if args.blimp:
        return run_blimp(args)
    if args.method != "full":
        raise ConfigValueError(
            f"--method {args.method}: the prefix methods are BLiMP's; give --blimp FILE.jsonl"
        )
    out = new_result_file(args.out, f"syneval_{args.template_set}.json", args.force)
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    test_sets = load_test_sets(args.syneval_dir or data_dir / "syneval", args.template_set)
    model = load(args.ckpt, args.device, kind="language_model", command="syneval")
    result = evaluate_syneval(
        model.module,
        test_sets,
        args.template_set,
        batch_size=args.batch_size,
        include_end=not args.no_end,
        max_items_per_condition=args.max_per_condition,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    print(format_table(result))
    record = result.as_dict() | {
        "checkpoint": str(args.ckpt),
        "max_pairs_per_condition": args.max_per_condition,
        # the keys the syneval callback logs (test/syneval/<case>, ...), from the same result
        "metrics": syneval_metrics(result),
    }
    write_record(record, out)
    return 0


def run_blimp(args: argparse.Namespace) -> int:
    from treernn.evaluation.blimp import format_blimp, read_blimp
    from treernn.files import new_result_file
    from treernn.models.load import load

    default = "blimp.json" if args.method == "full" else f"blimp_{args.method}.json"
    out = new_result_file(args.out, default, args.force)
    pairs = read_blimp(args.blimp)
    model = load(args.ckpt, args.device, kind="language_model", command="syneval")
    result = model.blimp(
        pairs, args.method, include_end=not args.no_end, batch_size=args.batch_size
    )
    print(format_blimp(result))
    record = result.as_dict() | {
        "checkpoint": str(args.ckpt),
        "files": [str(p) for p in args.blimp],
        "include_end": not args.no_end and args.method == "full",
    }
    write_record(record, out)
    return 0


def write_record(record: dict, out: Path) -> None:
    from treernn.files import write_result_text

    write_result_text(out, json.dumps(record, indent=2) + "\n")
    print(f"written: {out}", file=sys.stderr)
