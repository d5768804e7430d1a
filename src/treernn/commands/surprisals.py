"""``python -m treernn surprisals``: every token's surprisal under a language model, as LM-Zoo's
``get-surprisals`` writes it (the table SyntaxGym and psycholinguistic studies read).

    python -m treernn surprisals --ckpt CKPT_OR_DIR --input sentences.txt [--out table.tsv]
    ... | python -m treernn surprisals --ckpt CKPT_OR_DIR --input -

The input (a UTF-8 text file, or ``-``: standard input) has one sentence per line, lines ending
at ``\\n`` only (a form feed or U+2028 inside a line is part of it); blank lines are skipped
and keep their numbers (``sentence_id`` is the line's number, as in ``lmzoo get-surprisals``).
Each is tokenised as the model's training data was (PTB: Treebank tokenisation, lower case,
numbers and ``%`` as ``N``, punctuation dropped; `treernn.data.raw_text`; a line already in that
form keeps its words; ``--tokenized``: the words between spaces, as they are) and read alone
after ``<eos>`` from a fresh state. The table (tab-separated, to standard output or to
``--out``, a new file unless ``--force``) has the header ``sentence_id token_id token
surprisal`` and one row per token: ids from 1, the token as the model read it (``<unk>`` for a
word outside the vocabulary; ``--words`` writes the word instead), the closing ``<eos>`` last,
the surprisal ``-log2 p(token | <eos> and the tokens before)`` in bits. A line with no word left
(only punctuation: ``...``) keeps its id and has the one row of its ``<eos>``. A long input
shows a progress bar on standard error when that is a terminal (``--no-progress``: never).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.models.load import default_device

    parser.add_argument("--ckpt", required=True, help="a language model: checkpoint, run or export")
    parser.add_argument(
        "--input", required=True, help="text, one sentence per line (- reads standard input)"
    )
    parser.add_argument("--out", default=None, help="the table (default: standard output)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument(
        "--words", action="store_true", help="write unknown words as they are, not as <unk>"
    )
    parser.add_argument(
        "--tokenized", action="store_true", help="take each line's words between spaces"
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar on standard error"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    import io

    from treernn.errors import DataError
    from treernn.evaluation.surprisal import write_surprisal_table
    from treernn.files import new_result_file, read_input_text, text_lines, write_result_text
    from treernn.models.load import load

    out = None if args.out is None else new_result_file(args.out, "surprisals.tsv", args.force)
    text = read_input_text(args.input, "--input", standard_input=True)
    # a blank line is left out and keeps its number: sentence_id is the line's, as in the
    # table lmzoo get-surprisals writes for the same file (which scores it as its <eos> alone)
    numbered = [(number, line) for number, line in enumerate(text_lines(text), 1) if line.strip()]
    ids = [number for number, _ in numbered]
    sentences = [line for _, line in numbered]
    if not sentences:
        raise DataError(f"--input {args.input} has no sentence")
    model = load(args.ckpt, args.device, kind="language_model", command="surprisals")
    # a line whose words are all punctuation keeps its id: the model scores it as its <eos>
    results = model.token_score(
        sentences,
        tokenized=args.tokenized,
        batch_size=args.batch_size,
        progress=False if args.no_progress else None,
    )
    rows = [
        [(token.word if args.words else token.token, token.surprisal) for token in sentence]
        for sentence in results
    ]
    if out is None:
        write_surprisal_table(rows, sys.stdout, ids)
        return 0
    table = io.StringIO()
    write_surprisal_table(rows, table, ids)
    write_result_text(out, table.getvalue())
    print(f"written: {out} ({sum(map(len, rows))} tokens)", file=sys.stderr)
    return 0
