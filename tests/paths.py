"""Where the repository's files are, for a test in any folder under ``tests/``: one place, so that a
test moved to another folder finds them without counting its parents again."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
