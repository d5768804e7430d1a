"""``python -m treernn surprisals``: every token's surprisal under a language model, as LM-Zoo's
``get-surprisals`` writes it (the table SyntaxGym and psycholinguistic studies read).

    python -m treernn surprisals --ckpt CKPT_OR_DIR --input sentences.txt [--out table.tsv]

The input has one sentence per line (blank lines are skipped). Each is tokenised as the model's
training data was (PTB: Treebank tokenisation, lower case, numbers and ``%`` as ``N``, punctuation
dropped; `treernn.data.raw_text`) and read alone after ``<eos>`` from a fresh state. The
table (tab-separated, to ``--out`` or standard output) has the header ``sentence_id token_id
token surprisal`` and one row per token: ids from 1, the token as the model read it (``<unk>``
for a word outside the vocabulary; ``--words`` writes the word instead), the closing ``<eos>``
last, the surprisal ``-log2 p(token | <eos> and the tokens before)`` in bits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.loading import default_device

    parser.add_argument("--ckpt", required=True, help="a language model: checkpoint, run or export")
    parser.add_argument("--input", required=True, help="text, one sentence per line")
    parser.add_argument("--out", default=None, help="the table (default: standard output)")
    parser.add_argument(
        "--words", action="store_true", help="write unknown words as they are, not as <unk>"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    from treernn.api import load
    from treernn.errors import DataError
    from treernn.evaluation.surprisal import write_surprisal_table

    path = Path(args.input)
    if not path.is_file():
        raise DataError(f"--input {path} does not exist: give a text file, one sentence per line")
    sentences = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not sentences:
        raise DataError(f"--input {path} has no sentence")
    model = load(args.ckpt, args.device, kind="language_model", command="surprisals")
    results = model.surprisals(sentences, batch_size=args.batch_size)
    rows = [
        [(token.word if args.words else token.token, token.surprisal) for token in sentence]
        for sentence in results
    ]
    if args.out is None:
        write_surprisal_table(rows, sys.stdout)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            write_surprisal_table(rows, handle)
        print(f"written: {args.out} ({sum(map(len, rows))} tokens)", file=sys.stderr)
    return 0
