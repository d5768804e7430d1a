"""The docs site builds with ``mkdocs build --strict`` (a broken link, a page missing from the
nav or an API page that cannot be read fails it), and the results pages, the commands page and
the README's claims excerpt are what ``python -m treernn report pages`` writes from the kept
runs."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from treernn.commands import command_parsers
from treernn.reporting.pages import planned_pages, stale_pages

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason='the docs tools: pip install -e ".[docs]"')
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for page in (
        "index.html",
        "results/index.html",
        "reference/api/index.html",
        "claims/index.html",
    ):
        assert (tmp_path / page).is_file(), page
    # the API page is read from the docstrings
    api_page = (tmp_path / "reference/api/index.html").read_text()
    assert "prob_superiority" in api_page
    # docstrings are Markdown (mkdocstrings renders no reStructuredText): a Sphinx role, an RST
    # table or directive would show on the page as typed
    text = html.unescape(re.sub(r"<[^>]+>", "", api_page))
    literal_rst = re.findall(
        r":(?:func|class|mod|meth|attr|data|exc|obj):`[^`]*`|^\s*={4,}\s|^\s*\.\. \w+::", text, re.M
    )
    assert not literal_rst, f"reStructuredText on the API page: {literal_rst[:5]}"
    # the commands page is the commands' --help, whose descriptions come from docstrings: it
    # shows them as a terminal does, without RST literals, roles or backquoted references
    commands = (tmp_path / "reference/commands/index.html").read_text()
    shown = html.unescape(re.sub(r"<[^>]+>", "", commands))
    markup = re.findall(r"``[^`]*``|:[a-z]+:`[^`]*`|`[^`\s][^`\n]*`", shown)
    assert not markup, f"raw markup on the commands page: {markup[:5]}"
    assert "usage: treernn parse" in shown and "python -m treernn parse" not in shown


def test_the_results_pages_are_what_report_pages_writes():
    """Complete sweeps only: a sweep still running beside the kept ones (untracked in a
    checkout that runs one) changes nothing."""
    parsers = command_parsers("treernn")
    files = planned_pages(
        REPO_ROOT / "results", REPO_ROOT / "docs", REPO_ROOT / "README.md", parsers
    )
    stale = stale_pages(files, REPO_ROOT / "docs")
    assert not stale, f"run `python -m treernn report pages` and commit: {stale}"
