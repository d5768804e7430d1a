"""``python -m treernn syntaxgym``: SyntaxGym test suites (Hu et al. 2020) scored on a language
model, as the ``syntaxgym`` package scores them (`treernn.evaluation.syntaxgym` says how), and
treernn's scores beside Hu et al.'s published ones.

    python -m treernn syntaxgym --ckpt PATH                       # Hu et al.'s 34 suites
    python -m treernn syntaxgym --ckpt PATH suite.json [folder ...] [--items] [--out DIR]
    python -m treernn syntaxgym --ckpt PATH suite.csv --formula '[(3;%a%) < (3;%b%)]'
    python -m treernn syntaxgym --compare-hu2020 RESULTS.csv|DIR [...] [--hu-corpus bllip-xs]
    python -m treernn syntaxgym --ckpt PATH --compare-hu2020

prints a table per suite and circuit (accuracy, and the share of items with ``<unk>`` in a
critical region), the circuits' means, the SG score (Hu et al.'s 31 suites) and the mean over
every suite (``--items``: each item's correctness and each prediction's truth), and writes
``syntaxgym.json`` (scores, every suite and item; with ``--items`` each region's tokens,
surprisals and value too) and ``syntaxgym_results.csv`` (Hu et al.'s layout,
``model,suite,item,correct``) into ``--out`` (default: the working directory; existing files
are refused before any work unless ``--force``).

Suites: SyntaxGym JSON files, folders of them, or CSV files in the layout of Hu et al.'s
``test_suites/csv/`` with ``--formula`` (one per prediction) and ``--metric``; none given: Hu et
al.'s 34, from ``<data dir>/syntaxgym/suites`` (``--data-dir``, default ``$TREERNN_DATA_DIR``)
or downloaded from their repository and checked. ``--model-name`` names the model in the CSV
(default ``<model>_<corpus>_<seed>``). ``--ckpt`` takes a checkpoint, a run directory or an
exported model; nothing is written beside it.

``--compare-hu2020``: per suite, the accuracy of each model in the given result CSVs (or
folders holding ``syntaxgym_results.csv``, such as runs with the syntaxgym callback), grouped by
model and corpus and averaged over seeds, beside Hu et al.'s ON-LSTM and LSTM trained on
``--hu-corpus`` (computed from their per-item files), with the differences and where they are
largest; with ``--ckpt``, the model just scored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from treernn.data.syntaxgym import METRICS
from treernn.reporting.hu2020 import CORPORA

RESULTS_FILE = "syntaxgym_results.csv"
RECORD_FILE = "syntaxgym.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.models.load import default_device

    parser.add_argument(
        "paths",
        nargs="*",
        help="suites (.json, .csv, folders); with "
        "--compare-hu2020 and no --ckpt: result CSVs or folders holding one",
    )
    parser.add_argument("--ckpt", default=None, help="a language model: checkpoint, run or export")
    parser.add_argument("--items", action="store_true", help="print per-item results")
    parser.add_argument("--out", default=None, help="folder for the result files (default: .)")
    parser.add_argument("--force", action="store_true", help="replace existing result files")
    parser.add_argument("--model-name", default=None, help="the model's name in the CSV")
    parser.add_argument(
        "--formula", action="append", default=[], help="a CSV suite's prediction (repeatable)"
    )
    parser.add_argument("--metric", choices=METRICS, default="sum", help="a CSV suite's metric")
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument(
        "--compare-hu2020", action="store_true", help="beside Hu et al.'s ON-LSTM and LSTM"
    )
    parser.add_argument("--hu-corpus", choices=CORPORA, default="bllip-xs")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    from treernn.errors import ConfigValueError

    if args.ckpt is None and not args.compare_hu2020:
        raise ConfigValueError(
            "syntaxgym needs --ckpt (a model to score) or --compare-hu2020 (result files to "
            "compare)"
        )
    if args.ckpt is None:
        return compare_files(args)
    return score(args)


def score(args: argparse.Namespace) -> int:
    from treernn.data.syntaxgym import read_suite_csv
    from treernn.errors import ConfigValueError
    from treernn.evaluation.syntaxgym import format_items, format_table, read_suites
    from treernn.files import new_result_file, write_result_text
    from treernn.models.load import load

    if args.batch_size < 1:
        raise ConfigValueError(f"--batch-size {args.batch_size}: use a positive number")
    out = Path(args.out) if args.out else Path.cwd()
    record_path = new_result_file(out / RECORD_FILE, RECORD_FILE, args.force)
    csv_path = new_result_file(out / RESULTS_FILE, RESULTS_FILE, args.force)
    csv_suites = [Path(path) for path in args.paths if str(path).endswith(".csv")]
    if csv_suites and not args.formula:
        raise ConfigValueError(
            f"{csv_suites[0]}: a suite in the CSV layout holds no predictions; give them with "
            "--formula (one per prediction)"
        )
    if args.formula and not csv_suites:
        raise ConfigValueError("--formula is for suites in the CSV layout; none is given")
    suites = []
    for path in args.paths or [None]:
        if path is None:
            suites += read_suites(data_dir=args.data_dir)
        elif str(path).endswith(".csv"):
            suites.append(read_suite_csv(path, args.formula, args.metric))
        else:
            suites += read_suites([path])
    model = load(args.ckpt, args.device, kind="language_model", command="syntaxgym")
    result = model.syntaxgym(
        suites,
        batch_size=args.batch_size,
        name=args.model_name,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.items:
        print(format_items(result))
        print()
    print(format_table(result))
    record = result.as_dict(regions=args.items) | {"checkpoint": str(args.ckpt)}
    write_result_text(record_path, json.dumps(record, indent=1) + "\n")
    write_result_text(csv_path, result.csv_text())
    print(f"written: {record_path}, {csv_path}", file=sys.stderr)
    if args.compare_hu2020:
        from treernn.reporting.hu2020 import compare, hu2020_results, read_results

        print()
        print(compare(read_results([csv_path]), hu2020_results(args.data_dir), args.hu_corpus))
    return 0


def compare_files(args: argparse.Namespace) -> int:
    from treernn.errors import ConfigValueError
    from treernn.reporting.hu2020 import compare, hu2020_results, read_results

    if not args.paths:
        raise ConfigValueError(
            "--compare-hu2020 without --ckpt compares result files: give result CSVs "
            f"(model,suite,item,correct) or folders that hold {RESULTS_FILE}"
        )
    files = []
    for path in map(Path, args.paths):
        if path.is_dir():
            found = sorted(path.rglob(RESULTS_FILE))
            if not found:
                raise ConfigValueError(f"{path} holds no {RESULTS_FILE}")
            files += found
        else:
            files.append(path)
    print(compare(read_results(files), hu2020_results(args.data_dir), args.hu_corpus))
    return 0
