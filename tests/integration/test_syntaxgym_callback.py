"""The syntaxgym callback (``callbacks=[default,syntaxgym]``) in a real PTB run: after testing it
logs SyntaxGym scores as test metrics and writes Hu et al.'s CSV, and they are what ``python -m
treernn syntaxgym --ckpt`` gives on the checkpoint that was tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import TINY_LM, TINY_PARSE, compose_config, train_in_process
from treernn.commands import main
from treernn.errors import ConfigValueError

pytestmark = pytest.mark.usefixtures("data_dir")

SUITES = sorted(str(p) for p in (Path(__file__).parents[1] / "fixtures" / "syntaxgym").glob("*"))


@pytest.mark.slow
def test_logged_scores_equal_the_command_on_the_tested_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    suites = "[" + ",".join(SUITES) + "]"
    metrics = train_in_process(
        [
            "model=lstm", "trainer=smoke", "test_ckpt=last", "seed=4", *TINY_LM, *TINY_PARSE,
            "callbacks=[default,syntaxgym]", f"callbacks.syntaxgym.suites={suites}",
        ],
        run_dir,
    )  # fmt: skip
    logged = {key: value for key, value in metrics.items() if "syntaxgym" in key}
    assert set(logged) >= {
        "test/syntaxgym/sg_score", "test/syntaxgym/sg_score_all", "test/syntaxgym/unk_items",
        "test/syntaxgym/circuit/agreement", "test/syntaxgym_suite/number_toy",
    }  # fmt: skip
    from_callback = json.loads((run_dir / "syntaxgym.json").read_text())
    rows = (run_dir / "syntaxgym_results.csv").read_text().splitlines()
    assert rows[1].startswith("lstm_ptb_4,center_toy,0,")  # <model>_<corpus>_<seed>

    out = tmp_path / "command"
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    args = ["syntaxgym", *SUITES, "--ckpt", str(ckpt), "--out", str(out), "--device", "cpu"]
    assert main([*args, "--batch-size", "256"]) == 0
    assert "SG score (2 suites)" in capsys.readouterr().out
    from_command = json.loads((out / "syntaxgym.json").read_text())
    for ours, theirs in zip(from_callback["suites"], from_command["suites"], strict=True):
        assert ours["item_results"] == theirs["item_results"]
    assert (out / "syntaxgym_results.csv").read_text() == "\n".join(rows) + "\n"
    # what was logged is the same number (logged as a float32 tensor)
    for key, value in from_callback["metrics"].items():
        assert logged[key] == pytest.approx(value, rel=1e-6)
    assert from_callback["sg_score"] == pytest.approx(from_command["sg_score"])


def test_a_task_that_is_not_a_language_model_is_refused(tmp_path):
    from hydra.utils import instantiate

    from treernn.callbacks.syntaxgym import SyntaxGymCallback

    cfg = compose_config(["task=logic", "model=lstm", "callbacks=[default,syntaxgym]"], tmp_path)
    callback = instantiate(cfg.callbacks.syntaxgym)
    assert isinstance(callback, SyntaxGymCallback) and callback.label.startswith("lstm_logic_")
    with pytest.raises(ConfigValueError, match="leave callbacks/syntaxgym out"):
        callback.setup(trainer=None, pl_module=object(), stage="fit")  # type: ignore[arg-type]


def test_bad_options_name_the_key():
    from treernn.callbacks.syntaxgym import SyntaxGymCallback

    with pytest.raises(ConfigValueError, match="batch_size=0"):
        SyntaxGymCallback(batch_size=0)
    with pytest.raises(ConfigValueError, match="suites='number_src': give a list"):
        SyntaxGymCallback(suites="number_src")  # type: ignore[arg-type]
