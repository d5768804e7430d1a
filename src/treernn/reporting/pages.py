"""The results pages of the docs, written from the kept sweeps: ``python -m treernn report pages``.

From ``results/tables/<table>/<sweep>/`` (the claims' sweeps, committed job by job) it writes:

- ``docs/results/index.md``: the claims table of `treernn.reporting.claims` over the kept
  sweeps, and a link to each sweep's page;
- ``docs/results/<table>/<sweep>.md``: the sweep's command, its comparison table
  (`treernn.reporting.table`) and its learning curves (`treernn.reporting.curves`),
  with the figures the sweep wrote (``table.png``, ``curves.png``) copied beside it;
- the README's excerpt, a short claims table between the markers `START` and
  `END`, rewritten in place;
- ``docs/reference/commands.md``: every command's options, from the argparse parsers that
  the command hands over (this package does not import the commands).

Only complete sweeps are read: those whose every job (as many as their ``multirun.yaml`` makes)
has finished. A sweep still running, archived into ``results/`` while it trains, has no verdict
to show yet, and a clean clone (tracked files only) and a checkout with such a sweep beside the
kept ones write the same pages. ``--check`` writes nothing and fails, naming the files, where
the committed pages differ from what the command would write (the test suite runs it).
"""

from __future__ import annotations

import argparse
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from treernn.errors import UserError

START = "<!-- claims:start (python -m treernn report pages) -->"
END = "<!-- claims:end -->"
#: the figures of a sweep directory that its page shows
FIGURES = ("table.png", "curves.png")
#: the generated pages' tables are wide: the site's navigation and table of contents make room
WIDE = "---\nhide:\n  - navigation\n  - toc\n---\n"


@dataclass(frozen=True)
class KeptSweep:
    table: str
    name: str
    path: Path


def kept_sweeps(results: Path) -> list[KeptSweep]:
    """The complete sweeps under ``results/tables/<table>/<sweep>``, by table and name."""
    from treernn.lifecycle.sweeps.layout import sweep_size
    from treernn.reporting.run_records import load_runs

    kept = []
    for path in sorted((results / "tables").glob("*/*")):
        size = sweep_size(path) if path.is_dir() else None
        if size is None:
            continue
        runs, _ = load_runs([path], allow_empty=True)
        if len(runs) >= size:
            kept.append(KeptSweep(path.parent.name, path.name, path))
    return kept


def _command(sweep: KeptSweep) -> str:
    from omegaconf import OmegaConf

    config = OmegaConf.load(sweep.path / "multirun.yaml")
    overrides = OmegaConf.select(config, "hydra.overrides.task") or []
    return "python train.py -m " + " ".join(str(item) for item in overrides)


def _paragraphs(markdown: str) -> str:
    """A report's markdown with each note line under its table a paragraph of its own (markdown
    would run consecutive lines together)."""
    lines = []
    for line in markdown.rstrip("\n").splitlines():
        lines.append(line)
        if line and not line.startswith(("|", "- ")):
            lines.append("")
    return "\n".join(lines).rstrip("\n")


def sweep_page(sweep: KeptSweep, docs_dir: Path) -> tuple[str, dict[Path, Path]]:
    """The page of one sweep and the figures to copy (target -> source)."""
    from treernn.reporting.curves import learning_curves
    from treernn.reporting.curves import to_markdown as curves_markdown
    from treernn.reporting.table import report_table
    from treernn.reporting.table_output import to_markdown as table_markdown

    figures_dir = docs_dir / "results" / sweep.table / sweep.name
    copies = {
        figures_dir / name: sweep.path / name for name in FIGURES if (sweep.path / name).is_file()
    }
    table = report_table([sweep.path])
    lines = [
        WIDE,
        f"# {sweep.name} (table {sweep.table})",
        "",
        "Written by `python -m treernn report pages` from the kept runs in "
        f"`results/tables/{sweep.table}/{sweep.name}/`; `results/README.md` says where and with "
        "which code they ran.",
        "",
        "```bash",
        _command(sweep),
        "```",
        "",
        "## Test metrics",
        "",
        _paragraphs(table_markdown(table, paths_from=sweep.path)),
    ]
    if figures_dir / "table.png" in copies:
        lines += ["", f"![test accuracy by number of operators]({sweep.name}/table.png)"]
    try:
        curves = learning_curves([sweep.path])
    except UserError:
        curves = None
    if curves is not None:
        lines += ["", "## Learning curves", "", _paragraphs(curves_markdown(curves))]
        if figures_dir / "curves.png" in copies:
            lines += ["", f"![{curves.metric} by update]({sweep.name}/curves.png)"]
    return "\n".join(lines) + "\n", copies


def claims_sections(kept: list[KeptSweep], base: Path) -> tuple[str, str]:
    """The claims over the kept sweeps: the full report with its notes (the results page) and a
    short table (the README's excerpt). Sweeps are named relative to ``base`` (the folder that
    holds ``results/``), so that the page reads the same from any checkout."""
    from treernn.reporting.claims.plans import load_plans
    from treernn.reporting.claims.render import reading_notes, to_markdown
    from treernn.reporting.claims.rule import decide_claims
    from treernn.reporting.claims.sweeps import load_sweeps

    sweeps = load_sweeps([sweep.path for sweep in kept])
    plans = load_plans(base / "results" / "plans")
    decided = decide_claims(sweeps, plans=plans)
    short = ["| # | claim | verdict | A - B [95% interval], Holm-adjusted p |", "|---|---|---|---|"]
    for entry in decided:
        parts = []
        for outcome in entry.outcomes:
            text = f"{outcome.comparison.better} vs {outcome.comparison.worse}"
            test = outcome.test
            if test is not None:
                interval = (
                    f" [{test.low:+.2f}, {test.high:+.2f}]" if test.has_interval else " (no spread)"
                )
                text += f": {test.difference:+.2f}{interval}, p {outcome.adjusted:.2g}"
            elif outcome.reason:
                text += f": {outcome.reason}"
            parts.append(text.replace("trivial:best", "trivial trees"))
        verdict = f"**{entry.word}**" + (f", {entry.label}" if entry.label else "")
        short.append(f"| {entry.number} | {entry.claim.text} | {verdict} | {'; '.join(parts)} |")
    full = to_markdown(decided, plans=plans)
    notes = reading_notes(decided, sweeps)
    if notes:
        full += "\n" + "".join(f"- {note}.\n" for note in notes)
    if str(base) not in ("", "."):
        full = full.replace(f"{base}/", "")
    return full.rstrip("\n") + "\n", "\n".join(short) + "\n"


def results_index(kept: list[KeptSweep], claims: str) -> str:
    lines = [
        WIDE,
        "# Results",
        "",
        "Written by `python -m treernn report pages` from the complete sweeps kept in "
        "`results/tables/` (`results/README.md` lists each sweep's command, code and machine). "
        "The rule behind each word is on [the claims rule](../claims.md) page.",
        "",
        "## The papers' claims",
        "",
        claims.rstrip("\n"),
        "",
        "## Kept sweeps",
        "",
        "| table | sweep | page |",
        "|---|---|---|",
    ]
    lines += [
        f"| {sweep.table} | {sweep.name} | [{sweep.name}]({sweep.table}/{sweep.name}.md) |"
        for sweep in kept
    ]
    return "\n".join(lines) + "\n"


def replace_excerpt(readme: str, excerpt: str) -> str:
    """``readme`` with the text between `START` and `END` replaced by ``excerpt``."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise UserError(
            f"the README and docs/claims.md need one line '{START}' and one '{END}' around the "
            "claims excerpt"
        )
    before, rest = readme.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{excerpt}{END}{after}"


#: the commands page's width: its code blocks hold this many characters beside the table of
#: contents on a 1024 px screen, so that no line scrolls sideways
HELP_COLUMNS = 86


def _help(parser) -> str:
    """``parser``'s help as the commands page shows it: argparse's text at `HELP_COLUMNS`. A
    docstring keeps its own line breaks, wider than that: a paragraph of its prose with a longer
    line is filled again as one (wrapping line by line left a word or two on a line of its own),
    and any other longer line is wrapped at its indentation."""
    import os

    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS + 2)  # argparse leaves two columns free
    try:
        text = parser.format_help().rstrip("\n")
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width
    lines: list[str] = []
    for block, indent in _prose_blocks(text.splitlines()):
        if len(block) > 1 and max(map(len, block)) > HELP_COLUMNS:
            lines += _wrapped(" ".join(line.strip() for line in block), indent)
        else:
            for line in block:
                lines += _wrapped(line, line[: len(line) - len(line.lstrip())])
    return "\n".join(lines)


#: how a docstring's list item starts: never filled into the line before it
_ITEM = re.compile(r"(?:[-*]|\d+\.) ")


def _prose_blocks(lines: list[str]) -> list[tuple[list[str], str]]:
    """``lines`` cut into blocks, each with the indentation its continuation lines have: runs of
    unindented prose (a paragraph; a list item with its continuation lines indented under its
    text), and single lines (indented, blank or anything else)."""
    blocks: list[tuple[list[str], str]] = []
    for line in lines:
        indent = line[: len(line) - len(line.lstrip())]
        item = _ITEM.match(line)
        if blocks and line.strip() and not item and blocks[-1][1] == indent:
            blocks[-1][0].append(line)
        elif line.strip() and not indent:  # a paragraph or a list item starts
            blocks.append(([line], " " * item.end() if item else ""))
        else:
            blocks.append(([line], None))
    return [(block, indent or "") for block, indent in blocks]


def _wrapped(text: str, indent: str) -> list[str]:
    """``text`` wrapped at `HELP_COLUMNS`, its later lines at ``indent``."""
    import textwrap

    return textwrap.wrap(
        text,
        HELP_COLUMNS,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [text]


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands_page(
    program: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser]
) -> str:
    """``docs/reference/commands.md``: the program's help, then every command and subcommand with
    its options, as its argparse parser prints them. The command that writes the pages hands
    the parsers over (`treernn.commands.command_parsers`), named as the console script whichever
    way that command was run, so that the page does not change with it."""
    lines = [
        "# Commands",
        "",
        "Written by `python -m treernn report pages` from the commands' parsers: each section is "
        "what `treernn <command> --help` prints (`python -m treernn <command>` is the same "
        "program). Training is `treernn-train`, or `python train.py` in a clone "
        "(see [Configuration](config.md)).",
        "",
        "```text",
        _help(program),
        "```",
    ]
    for name, command in commands.items():
        lines += ["", f"## {name}", "", "```text", _help(command), "```"]
        for sub_name, sub in _subparsers(command).items():
            lines += ["", f"### {name} {sub_name}", "", "```text", _help(sub), "```"]
    return "\n".join(lines) + "\n"


def planned_pages(
    results: Path,
    docs_dir: Path,
    readme: Path,
    parsers: tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]],
) -> dict[Path, str | Path]:
    """Every file the command writes: path -> its text, or the file it is a copy of.
    ``parsers``: the program's and each command's (`commands_page`)."""
    kept = kept_sweeps(results)
    if not kept:
        raise UserError(
            f"no complete sweep under {results}/tables/<table>/<sweep>: give --results the "
            "folder that holds the kept sweeps"
        )
    full, short = claims_sections(kept, results.parent)
    from treernn.reporting.claims.plans import load_plans
    from treernn.reporting.claims.render import plans_lines

    plans = load_plans(results / "plans")
    files: dict[Path, str | Path] = {
        docs_dir / "results" / "index.md": results_index(kept, full),
        docs_dir / "reference" / "commands.md": commands_page(*parsers),
    }
    for sweep in kept:
        text, copies = sweep_page(sweep, docs_dir)
        files[docs_dir / "results" / sweep.table / f"{sweep.name}.md"] = text
        files.update(copies)
    if readme.is_file():
        files[readme] = replace_excerpt(readme.read_text(), short)
    rule = docs_dir / "claims.md"
    if rule.is_file():
        plan_text = "\n".join(plans_lines(plans)) or "No plan yet."
        files[rule] = replace_excerpt(rule.read_text(), f"{short}\nPlans:\n\n{plan_text}\n")
    return files


def _differs(path: Path, content: str | Path) -> bool:
    if not path.is_file():
        return True
    if isinstance(content, Path):
        return path.read_bytes() != content.read_bytes()
    return path.read_text() != content


def write_pages(files: dict[Path, str | Path]) -> list[Path]:
    """Write what differs; the paths written."""
    written = []
    for path, content in files.items():
        if not _differs(path, content):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_text(content)
        written.append(path)
    return written


def stale_pages(files: dict[Path, str | Path], docs_dir: Path) -> list[Path]:
    """The files that differ from what the command writes, and pages under
    ``docs/results`` that it would not write (a sweep no longer kept)."""
    stale = [path for path, content in files.items() if _differs(path, content)]
    results_dir = docs_dir / "results"
    if results_dir.is_dir():
        stale += sorted(
            path for path in results_dir.rglob("*") if path.is_file() and path not in files
        )
    return stale
