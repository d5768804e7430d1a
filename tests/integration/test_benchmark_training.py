"""scripts/benchmark_training.py end to end: real fits through train.py in both precisions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO_ROOT, TINY_LM

SCRIPT = REPO_ROOT / "scripts" / "benchmark_training.py"


def run_script(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *options], cwd=REPO_ROOT, capture_output=True, text=True
    )


def one_tiny_round(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    """One round of the tiny ON-LSTM LM, 4 updates a fit, with extra train.py overrides."""
    return run_script(
        "--cases", "onlstm", "--rounds", "1", "--steps", "4", "--warmup", "1",
        "--out", str(tmp_path), "--", *TINY_LM, *overrides,
    )  # fmt: skip


def test_unknown_case_names_the_valid_ones():
    result = run_script("--cases", "onlstm,gru")
    assert result.returncode == 2
    assert "--cases: unknown gru; choose from onlstm, lstm, om-logic" in result.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("data_dir")
def test_one_round_times_both_precisions_of_a_real_fit(tmp_path):
    result = one_tiny_round(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for precision in ("32-true", "bf16-mixed"):
        record_file = tmp_path / "onlstm" / f"{precision}-0" / "step_times.json"
        record = json.loads(record_file.read_text())
        assert record["precision"] == precision and len(record["seconds"]) == 4
        assert f"onlstm           {precision}" in result.stdout
    assert "bf16/fp32 speed" in result.stdout


@pytest.mark.slow
@pytest.mark.usefixtures("data_dir")
def test_a_failed_fit_stops_the_benchmark_with_its_error(tmp_path):
    result = one_tiny_round(tmp_path, "model.chunk_size=7")
    assert result.returncode == 1
    assert "exited 1 without" in result.stderr and "chunk_size" in result.stderr
