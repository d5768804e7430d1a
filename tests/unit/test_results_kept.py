"""``results/`` keeps the claims' sweeps (scripts/run_claims.sh): finished jobs without weights,
committed, and unfinished jobs with their checkpoints, never committed but not ignored either, so
that a new checkout that recovers a lost machine's uncommitted files resumes those jobs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.paths import REPO_ROOT


def git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs a git checkout of treernn and the git command")
    return subprocess.run(
        ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )


def test_no_checkpoint_is_committed_under_results():
    tracked = git("ls-files", "results").stdout.splitlines()
    assert tracked, "results/ holds the kept sweeps; git ls-files found none"
    weights = [path for path in tracked if path.endswith(".ckpt") or "/checkpoints/" in path]
    assert weights == [], f"checkpoints committed under results/: {weights[:5]}"


def test_an_unfinished_jobs_kept_checkpoints_are_not_ignored_but_outputs_are():
    kept = "results/tables/logic/some-sweep/3/checkpoints/last.ckpt"
    ignored = ["outputs/logic/lstm/run/checkpoints/last.ckpt", "elsewhere/model.ckpt"]
    # check-ignore exits 0 for each path it ignores, 1 when none is
    assert git("check-ignore", "--no-index", kept).returncode == 1
    result = git("check-ignore", "--no-index", *ignored)
    assert result.stdout.split() == ignored
