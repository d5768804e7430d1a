"""The syneval callback (``callbacks=[default,syneval]``) in a real PTB run: after testing it logs
Marvin & Linzen accuracies as test metrics, and they are the numbers ``python -m treernn syneval
--ckpt`` gives on the checkpoint that was tested."""

from __future__ import annotations

import json

import pytest

from tests.integration.helpers import TINY_LM, TINY_PARSE, compose_config, train_in_process
from treernn.commands import main
from treernn.errors import ConfigValueError
from treernn.evaluation.syneval import TABLE3

pytestmark = pytest.mark.usefixtures("data_dir")

PAIRS_PER_CONDITION = 3
SYNEVAL = [
    "callbacks=[default,syneval]",
    f"callbacks.syneval.max_pairs_per_condition={PAIRS_PER_CONDITION}",
    "callbacks.syneval.batch_size=64",
]


def test_logged_accuracies_equal_the_command_on_the_tested_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # test_ckpt=last: the weights tested are checkpoints/last.ckpt, which the command then reads
    metrics = train_in_process(
        ["model=lstm", "trainer=smoke", "test_ckpt=last", *TINY_LM, *TINY_PARSE, *SYNEVAL],
        run_dir,
    )
    logged = {key: value for key, value in metrics.items() if key.startswith("test/syneval")}
    for case in TABLE3:
        assert f"test/syneval/{case.key}" in logged
    for group in ("short_term", "long_term"):
        assert 0.0 <= logged[f"test/syneval/{group}"] <= 100.0
    assert any(key.startswith("test/syneval_known/") for key in logged)
    from_callback = json.loads((run_dir / "syneval_current.json").read_text())
    assert from_callback["max_pairs_per_condition"] == PAIRS_PER_CONDITION
    assert from_callback["cases"][0]["total"] == 2 * PAIRS_PER_CONDITION  # 2 conditions

    out = tmp_path / "command.json"
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    args = ["syneval", "--ckpt", str(ckpt), "--max-per-condition", str(PAIRS_PER_CONDITION)]
    assert main([*args, "--batch-size", "64", "--device", "cpu", "--out", str(out)]) == 0
    assert "Long-Term Dependency" in capsys.readouterr().out
    from_command = json.loads(out.read_text())
    # the same pairs, the same counts, the same accuracies, exactly
    assert from_command["metrics"] == from_callback["metrics"]
    for ours, theirs in zip(from_callback["cases"], from_command["cases"], strict=True):
        for key in ("key", "correct", "total", "known_correct", "known_total", "conditions"):
            assert ours[key] == theirs[key]
    # what was logged is the same number (logged as a float32 tensor)
    assert set(logged) == set(from_command["metrics"])
    for key, value in from_command["metrics"].items():
        assert logged[key] == pytest.approx(value, rel=1e-6)


def test_a_task_that_is_not_a_language_model_is_refused(tmp_path):
    from hydra.utils import instantiate

    from treernn.callbacks.syneval import SynEvalCallback

    cfg = compose_config(["task=logic", "model=lstm", "callbacks=[default,syneval]"], tmp_path)
    callback = instantiate(cfg.callbacks.syneval)
    assert isinstance(callback, SynEvalCallback)
    with pytest.raises(ConfigValueError, match="leave callbacks/syneval out"):
        callback.setup(trainer=None, pl_module=object(), stage="fit")  # type: ignore[arg-type]


def test_bad_options_name_the_key():
    from treernn.callbacks.syneval import SynEvalCallback

    with pytest.raises(ConfigValueError, match="max_pairs_per_condition=0"):
        SynEvalCallback("unused", max_pairs_per_condition=0)
    with pytest.raises(ConfigValueError, match="template_set='future'"):
        SynEvalCallback("unused", template_set="future")
