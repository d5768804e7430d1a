"""Dependency-parse raw or pre-tokenised text into `DependencyTree` objects with spaCy.

Zhang et al. (2016) parsed the MSR questions and training novels with Stanford CoreNLP; here any
installed spaCy pipeline with a ``parser`` component does the job (spaCy's English pipelines use
ClearNLP-style labels, close to Stanford basic dependencies). The model is loaded from what is
installed locally, by package name (``en_core_web_sm``) or by directory; nothing is downloaded.

When spaCy or the model is missing, `ParserUnavailableError` says what to install::

    pip install spacy && python -m spacy download en_core_web_sm

The fallback without a parser is a pre-parsed CoNLL-U file (one tree per input sentence, in order),
written by this module's CLI on a machine that has one (or by any other parser)::

    python -m treernn.data.dependency_parser --input sentences.txt --output parsed.conllu \
        [--model en_core_web_sm] [--msr]   # --msr strips the "<s> ... </s>" of MSR's lm_format
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

from treernn.data.dependency_reading import DependencyTree, write_conllu
from treernn.errors import DataError, UserError
from treernn.files import read_input_text, text_lines

DEFAULT_MODEL = "en_core_web_sm"
INSTALL_HINT = (
    "pip install spacy && python -m spacy download en_core_web_sm "
    "(or pass --model with the directory of any installed spaCy pipeline that has a parser; "
    "without one, parse elsewhere and pass the CoNLL-U file with --parsed)"
)


class ParserUnavailableError(UserError, RuntimeError):
    """No usable dependency parser is installed (the user's set-up: one line, no traceback)."""


class SpacyDependencyParser:
    """Wraps a locally installed spaCy pipeline; the input tokenisation is kept as given."""

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 256) -> None:
        try:
            import spacy
        except ImportError as error:
            raise ParserUnavailableError(f"spaCy is not installed: {INSTALL_HINT}") from error
        try:
            self.nlp = spacy.load(model, exclude=["ner", "lemmatizer"])
        except OSError as error:
            raise ParserUnavailableError(
                f"spaCy model {model!r} is not installed: {INSTALL_HINT}"
            ) from error
        if "parser" not in self.nlp.pipe_names:
            raise ParserUnavailableError(f"spaCy model {model!r} has no parser: {INSTALL_HINT}")
        self.model = model
        self.batch_size = batch_size

    def parse_tokenised(self, sentences: Sequence[Sequence[str]]) -> list[DependencyTree]:
        """One tree per sentence of given words; the sentence is never split by the parser."""
        from spacy.tokens import Doc

        docs = []
        for words in sentences:
            # One sentence per Doc: forbid sentence starts after the first word.
            doc = Doc(
                self.nlp.vocab, words=list(words), sent_starts=[True] + [False] * (len(words) - 1)
            )
            docs.append(doc)
        trees = []
        for doc in self.nlp.pipe(docs, batch_size=self.batch_size):
            heads = tuple(0 if token.head.i == token.i else token.head.i + 1 for token in doc)
            labels = tuple(token.dep_ for token in doc)
            trees.append(DependencyTree(tuple(t.text for t in doc), heads, labels))
        return trees

    def parse_text(self, lines: Iterable[str]) -> list[DependencyTree]:
        """Whitespace-tokenised lines, one sentence each."""
        return self.parse_tokenised([line.split() for line in lines])


def strip_msr_markers(line: str) -> list[str]:
    """``<s> word ... </s>`` -> words."""
    return [w for w in line.split() if w not in ("<s>", "</s>")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", required=True, help="one whitespace-tokenised sentence a line")
    parser.add_argument("--output", required=True, help="CoNLL-U file to write")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="spaCy package name or directory")
    parser.add_argument("--msr", action="store_true", help="strip <s> and </s> (MSR lm_format)")
    args = parser.parse_args(argv)
    try:
        spacy_parser = SpacyDependencyParser(args.model)
    except ParserUnavailableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:  # lines end at \n only: the candidates' order is the questions'
        lines = text_lines(read_input_text(args.input, "--input"))
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    sentences = [strip_msr_markers(x) if args.msr else x.split() for x in lines]
    empty = [i + 1 for i, words in enumerate(sentences) if not words]
    if empty:
        print(f"error: {args.input}:{empty[0]}: empty sentence line", file=sys.stderr)
        return 2
    trees = spacy_parser.parse_tokenised(sentences)
    write_conllu(trees, args.output)
    print(f"wrote {len(trees)} trees to {args.output} (parser: spaCy {args.model})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
