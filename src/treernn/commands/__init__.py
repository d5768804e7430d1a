"""``python -m treernn <command>``: the programs that use trained models and their outputs.

One module per command, each with ``add_arguments(parser)`` and ``run(args) -> int``; the
one-line summaries are in `COMMANDS`. `main` builds one argparse parser with a
subcommand per module, runs the chosen one, and prints a `treernn.errors.UserError` as
one line ``error: ...`` with exit status 1 (the traceback too under ``TREERNN_DEBUG=1`` or
``HYDRA_FULL_ERROR=1``); output cut short by its reader (``| head``) ends it quietly with
status 141, as SIGPIPE would; any other exception is a bug and keeps its traceback. Training is
``python train.py``; benchmarks are in ``scripts/``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence

from treernn.errors import UserError, say
from treernn.extras import missing_extra
from treernn.invocation import commands_name

#: how the docstrings name the program; the help says it as the user typed it
PROGRAM = "python -m treernn"

#: command -> (module under treernn.commands, its one-line summary), in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "parse": ("parse", "parse F1 of a model's or a file's trees, with baselines (Table 2)"),
    "trees": ("trees", "a language model's induced trees of given sentences (Appendix A)"),
    "surprisals": ("surprisals", "a language model's surprisal of every token (LM-Zoo's table)"),
    "syneval": ("syneval", "Marvin & Linzen or BLiMP minimal pairs (Table 3)"),
    "syntaxgym": ("syntaxgym", "SyntaxGym test suites (Hu et al. 2020): SG score and circuits"),
    "lmzoo": ("lmzoo", "LM-Zoo's tokenize, unkify, get-surprisals and spec for a language model"),
    "msr": ("msr", "MSR Sentence Completion accuracy of a (tree) language model"),
    "rerank": ("rerank", "rerank k-best dependency parses with a tree LM: UAS/LAS"),
    "generate": ("generate", "sample dependency trees from a TreeLSTM / LdTreeLSTM"),
    "export": ("export", "a trained model as a shareable directory (safetensors, config, card)"),
    "report": (
        "report",
        "a sweep's table beside the papers', accuracy by length, tree F1 of a run, throughput",
    ),
    "sweep": ("sweep", "a sweep's jobs and their state; resume a sweep; keep its results"),
}


def build_parser(argv: Sequence[str] = (), prog: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the command named in ``argv`` (if any) is imported and given its
    arguments, so that ``--help`` and each command start quickly. ``prog``: the program's name
    in the help (default: as it was typed, ``treernn`` or ``python -m treernn``)."""
    prog = prog or commands_name()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Evaluate and inspect treernn models (train them with treernn-train, or "
        "python train.py in a clone).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (module_name, summary) in COMMANDS.items():
        if name != chosen:
            commands.add_parser(name, help=summary)
            continue
        module = importlib.import_module(f"treernn.commands.{module_name}")
        command = commands.add_parser(
            name,
            help=summary,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.set_defaults(run=module.run)
        module.add_arguments(command)
        _plain_help(command, prog)
    return parser


def command_parsers(
    prog: str,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The program's parser and each command's with its arguments, in `COMMANDS`' order: what
    the docs' commands page shows (`treernn.reporting.pages.commands_page`)."""
    commands = {}
    for name in COMMANDS:
        (subparsers,) = [
            action
            for action in build_parser([name], prog=prog)._actions
            if isinstance(action, argparse._SubParsersAction)
        ]
        commands[name] = subparsers.choices[name]
    return build_parser(prog=prog), commands


#: the markup of docstrings, which a terminal (and the docs' copy of --help) would show as typed
_MARKUP = re.compile(r"(?::[a-z]+:)?``?([^`]+?)``?")


def plain_text(text: str, prog: str) -> str:
    """Help text as a terminal shows it: ``code`` and `references` as their words, and the
    program named as it was typed."""
    return _MARKUP.sub(r"\1", text).replace(PROGRAM, prog)


def _plain_help(parser: argparse.ArgumentParser, prog: str) -> None:
    """The description and every option's help of ``parser`` and its subcommands in plain text
    (`plain_text`): the commands' docstrings are written for the API docs."""
    for each in [parser, *_subcommands(parser)]:
        for attribute in ("description", "epilog"):
            if getattr(each, attribute):
                setattr(each, attribute, plain_text(getattr(each, attribute), prog))
        for action in each._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                action.help = plain_text(action.help, prog)


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += [sub, *_subcommands(sub)]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (1 for a user's mistake)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
        return int(args.run(args) or 0)
    except BrokenPipeError:
        # the reader went away (``... | head``): stop quietly, with the status a shell gives a
        # program killed by SIGPIPE; stdout goes to /dev/null so that the flush at exit does
        # not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except UserError as error:
        say(error)
        return 1
    except ModuleNotFoundError as error:
        # a command that needs an extra the install lacks (report and sweep: the train extra)
        missing = missing_extra(error, " ".join([commands_name(), *argv[:1]]))
        if missing is None:
            raise
        say(missing)
        return 1
