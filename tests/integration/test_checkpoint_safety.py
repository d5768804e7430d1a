"""Checkpoints are data: hostile files run nothing, a stored config builds only trusted classes,
``mode=test`` tests the model as trained, and commands check the checkpoint's task. Each test is
one way a user (or a file from someone else) broke a run, replayed through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.integration.helpers import TINY_LM, TINY_PARSE, one_line_error, run_cli, treernn_cli
from treernn import checkpoints

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

SMOKE = ["trainer=smoke", *TINY_LM, *TINY_PARSE]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The last.ckpt of a tiny ON-LSTM language model trained for three steps."""
    log_dir = tmp_path_factory.mktemp("trained")
    result = run_cli([*SMOKE, f"paths.log_dir={log_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    (ckpt,) = log_dir.glob("ptb/onlstm/*/checkpoints/last.ckpt")
    return ckpt


class _RunsAShellCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_whose_pickle_runs_a_command_is_refused_and_nothing_runs(tmp_path, trained):
    marker = tmp_path / "it-ran"
    hostile = tmp_path / "hostile.ckpt"
    genuine = torch.load(trained, weights_only=True)
    genuine["treernn"]["wandb_id"] = _RunsAShellCommand(marker)
    torch.save(genuine, hostile)

    test = run_cli([*SMOKE, "mode=test", f"ckpt_path={hostile}", f"paths.log_dir={tmp_path}"])
    one_line_error(test, str(hostile), "posix.system", "refused")
    parse = treernn_cli("parse", "--ckpt", str(hostile))
    one_line_error(parse, str(hostile), "posix.system")
    assert not marker.exists()


def test_a_stored_config_that_names_an_untrusted_target_builds_nothing(tmp_path, trained):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    hostile = tmp_path / "hostile_config.ckpt"
    checkpoint = torch.load(trained, weights_only=True)
    model = checkpoint["treernn"]["config"]["model"]
    model.clear()
    model.update({"_target_": "builtins.open", "file": str(victim), "mode": "w", "name": "onlstm"})
    torch.save(checkpoint, hostile)
    assert checkpoints.read_checkpoint(hostile)  # plain data: it loads with weights_only=True

    parse = treernn_cli("parse", "--ckpt", str(hostile))
    one_line_error(parse, "model._target_='builtins.open'", "refused")
    test = run_cli([*SMOKE, "mode=test", f"ckpt_path={hostile}", f"paths.log_dir={tmp_path}"])
    one_line_error(test, "builtins.open", "refused")
    assert victim.read_text() == "keep me"


def test_mode_test_builds_the_model_the_checkpoint_was_trained_with(tmp_path, trained):
    # the command line's model is the default size (hidden 400); the checkpoint's is 40
    result = run_cli(
        ["trainer=smoke", "mode=test", f"ckpt_path={trained}", f"paths.log_dir={tmp_path}"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the model as the checkpoint trained it" in result.stdout + result.stderr
    assert "test/ppl" in result.stdout


def test_mode_test_refuses_an_explicit_override_that_does_not_fit_before_loading_data(
    tmp_path, trained
):
    result = run_cli(
        [
            "trainer=smoke",
            "mode=test",
            f"ckpt_path={trained}",
            f"paths.log_dir={tmp_path}",
            "model.hidden_size=60",
            # a missing data directory would fail if the data were read first
            f"paths.data_dir={tmp_path / 'no-data-here'}",
        ]
    )
    one_line_error(result, "model.hidden_size", "does not match the weights", "drop those")


@pytest.mark.parametrize("command", ["msr", "rerank", "generate"])
def test_commands_check_the_task_of_the_checkpoint(command, trained):
    args = {
        "msr": ["msr", "--ckpt", str(trained)],
        "rerank": ["rerank", "score", "--ckpt", str(trained), "--candidates", "x", "--gold", "y"],
        "generate": ["generate", "--ckpt", str(trained)],
    }[command]
    result = treernn_cli(*args)
    one_line_error(result, f"{command}: checkpoint", "task=ptb", "task=dependency_lm")
