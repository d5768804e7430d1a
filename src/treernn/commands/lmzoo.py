"""``python -m treernn lmzoo``: a treernn language model behind LM-Zoo's command contract, so
that tools written for LM-Zoo images (the ``syntaxgym`` package, psycholinguistic pipelines)
can call it as they call ``lm-zoo <command> <model> <file>``.

    python -m treernn lmzoo tokenize       --ckpt CKPT_OR_DIR sentences.txt
    python -m treernn lmzoo unkify         --ckpt CKPT_OR_DIR sentences.txt
    python -m treernn lmzoo get-surprisals --ckpt CKPT_OR_DIR sentences.txt
    python -m treernn lmzoo spec           --ckpt CKPT_OR_DIR
    ... | python -m treernn lmzoo get-surprisals --ckpt CKPT_OR_DIR -

The input (a UTF-8 text file, or ``-``: standard input) holds one natural-language sentence per
line, not tokenised; lines end at ``\\n`` only, and each line is one sentence with its number,
a blank one too (its ``<eos>`` alone), as LM-Zoo counts them. What each writes to standard output
(or to ``--out``, a new file unless ``--force``; `treernn.evaluation.lmzoo` has the details):

- ``tokenize``: each sentence's tokens as the model's tokenizer writes them (PTB's normalisation:
  lower case, numbers as ``N``, punctuation dropped), then ``<eos>``, separated by spaces; a word
  outside the vocabulary as it is (``--unk``: as ``<unk>``);
- ``unkify``: ``0``/``1`` per token of ``tokenize``'s line (``1``: read as ``<unk>``);
- ``get-surprisals``: ``sentence_id token_id token surprisal``, tab-separated, ids from 1, one row
  per token of ``tokenize``'s line, surprisal ``-log2 p`` in bits, each sentence read alone
  after ``<eos>`` from a fresh state;
- ``spec``: the model as LM-Zoo describes an image, one line of JSON (name, ``ref_url``,
  ``image``, ``vocabulary`` with its ``unk_types``/``prefix_types``/``suffix_types``/
  ``special_types``, ``tokenizer``).

``--ckpt`` takes a checkpoint, a run directory or an exported model; nothing is written beside it.
"""

from __future__ import annotations

import argparse
import sys

from treernn.evaluation.lmzoo import ACTIONS

#: each command's summary, as LM-Zoo's documentation states it
SUMMARIES = {
    "tokenize": "each sentence's tokens, one line per sentence",
    "unkify": "0/1 per token: whether the model reads it as <unk>",
    "get-surprisals": "sentence_id token_id token surprisal (bits), tab-separated",
    "spec": "the model's description, one line of JSON",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treernn.models.load import default_device

    actions = parser.add_subparsers(dest="action", required=True, metavar="<command>")
    for action in ACTIONS:
        command = actions.add_parser(action, help=SUMMARIES[action])
        if action != "spec":
            command.add_argument("input", help="sentences, one per line (- reads standard input)")
        command.add_argument(
            "--ckpt", required=True, help="a language model: checkpoint, run or export"
        )
        if action in ("tokenize", "get-surprisals"):
            command.add_argument("--unk", action="store_true", help="unknown words as <unk>")
        command.add_argument("--out", default=None, help="write here (default: standard output)")
        command.add_argument("--force", action="store_true", help="replace an existing --out")
        if action == "get-surprisals":
            command.add_argument("--batch-size", type=int, default=64)
        command.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    from treernn.errors import ConfigValueError
    from treernn.evaluation.lmzoo import lmzoo_output
    from treernn.files import new_result_file, read_input_text, text_lines, write_result_text
    from treernn.models.load import load

    batch_size = getattr(args, "batch_size", 64)
    if batch_size < 1:
        raise ConfigValueError(f"--batch-size {batch_size}: use a positive number")
    out = None if args.out is None else new_result_file(args.out, "lmzoo.txt", args.force)
    sentences: list[str] = []
    if args.action != "spec":
        sentences = text_lines(read_input_text(args.input, "input", standard_input=True))
    model = load(args.ckpt, args.device, kind="language_model", command=f"lmzoo {args.action}")
    unk = getattr(args, "unk", False)
    text = lmzoo_output(model, args.action, sentences, unk, batch_size)
    if out is None:
        sys.stdout.write(text)
        return 0
    write_result_text(out, text)
    print(f"written: {out}", file=sys.stderr)
    return 0
