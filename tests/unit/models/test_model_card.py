"""What an export shares about its run: a model card with the Hub's metadata (license, library,
tags, datasets, metrics and a ``model-index`` of the run's test and validation metrics), read
back by ``huggingface_hub.ModelCard``; no local path in any of its files; the commit where the run
recorded one. And the one rule for writing over a folder that ``export`` and ``save`` share."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import treernn
from tests.paths import FIXTURES
from treernn.commands import main
from treernn.errors import OutputError
from treernn.models import export as sharing

FIXTURE = FIXTURES / "exported_onlstm_lm"
#: a local path in a file's text: absolute (after a space, a quote, '=', '(' or '[') or in $HOME
ABSOLUTE = re.compile(r"""(?:^|[\s"'=(\[`])(?:/|~/)[\w.-]""", re.M)
METRICS = {"test/ppl": 31.8636, "val/ppl": 22.7869, "val/parse_f1": 0.3125, "test/loss": 3.46}


def fixture_config() -> dict:
    return json.loads((FIXTURE / "config.json").read_text())


def parsed(card: str):
    hub = pytest.importorskip("huggingface_hub", reason='the hub extra: pip install "treernn[hub]"')
    return hub.ModelCard(card).data


def test_the_card_has_the_hubs_metadata_with_the_runs_metrics():
    config = fixture_config()
    config["provenance"]["metrics"] = METRICS
    data = parsed(sharing.model_card(config))
    assert data.license == "mit" and data.library_name == "treernn"
    assert data.datasets == ["ptb-text-only/ptb_text_only"]
    assert data.tags == ["treernn", "onlstm", "language-model", "ptb"]
    assert data.metrics == ["perplexity", "loss", "f1"]
    assert data.model_name == "treernn-onlstm-ptb"
    found = {
        result.metric_name: (
            result.metric_type,
            result.metric_value,
            result.dataset_split,
            result.task_type,
            result.dataset_type,
        )
        for result in data.eval_results
    }
    ptb = "ptb-text-only/ptb_text_only"
    assert found == {
        "test/ppl": ("perplexity", 31.8636, "test", "text-generation", ptb),
        "test/loss": ("loss", 3.46, "test", "text-generation", ptb),
        "val/ppl": ("perplexity", 22.7869, "validation", "text-generation", ptb),
        "val/parse_f1": ("f1", 0.3125, "validation", "text-generation", ptb),
    }


def test_a_dataset_the_hub_does_not_hold_is_named_but_not_linked():
    config = fixture_config()
    config["kind"], config["meta"]["dataset"], config["meta"]["task"] = (
        "classifier",
        "logic",
        "logic",
    )
    config["provenance"]["metrics"] = {"test/acc": 0.9375}
    data = parsed(sharing.model_card(config))
    assert data.datasets is None
    (result,) = data.eval_results
    assert (result.task_type, result.dataset_type, result.dataset_name) == (
        "text-classification",
        "logic",
        "Logical inference (Bowman et al. 2015)",
    )
    assert (result.metric_type, result.metric_value) == ("accuracy", 0.9375)


def test_a_run_without_metrics_has_no_model_index():
    data = parsed(sharing.model_card(fixture_config()))
    assert data.eval_results is None and data.license == "mit"
    assert data.to_dict().get("model-index") is None


def test_the_committed_fixture_card_is_the_one_this_code_writes():
    # the fixture was saved again after the card changed; its config records the card's hash
    config = fixture_config()
    assert (FIXTURE / "README.md").read_text() == sharing.model_card(config)
    assert not ABSOLUTE.search((FIXTURE / "README.md").read_text())
    assert not ABSOLUTE.search((FIXTURE / "config.json").read_text())


def test_the_command_is_shared_without_local_paths_and_is_stable():
    recorded = {
        "command": "/work/main/train.py model=onlstm ~task.callbacks.parse_f1 seed=0 "
        "hydra.run.dir=/tmp/runs/lm paths.log_dir=~/outputs ckpt_path=C:\\runs\\last.ckpt "
        "+extra=[a,/b] paths.data_dir=../shared/data",
    }
    shared = sharing.shareable(recorded)
    assert shared == {
        "command": "python train.py model=onlstm ~task.callbacks.parse_f1 seed=0 "
        "paths.data_dir=../shared/data",
        "left_out": ["hydra.run.dir", "paths.log_dir", "ckpt_path", "extra"],
    }
    assert sharing.shareable(shared) == shared
    installed = sharing.shareable({"command": "/venv/bin/treernn-train task=ptb"})
    assert installed == {"command": "treernn-train task=ptb"}


def write_run(run_dir: Path, machines: list[dict]) -> Path:
    """A run directory's records and a checkpoint that holds only what `_provenance` reads."""
    (run_dir / "checkpoints").mkdir(parents=True)
    checkpoint = run_dir / "checkpoints" / "epoch002.ckpt"
    torch.save({"treernn": {"config": {}}, "epoch": 2, "global_step": 30}, checkpoint)
    status = {
        "command": f"{run_dir.parent}/train.py model=onlstm hydra.run.dir={run_dir}",
        "machines": machines,
    }
    (run_dir / "status.json").write_text(json.dumps(status))
    (run_dir / "metrics.json").write_text(json.dumps({"test/ppl": 91.5, "train/loss": 4.0}))
    return checkpoint


def test_the_provenance_holds_the_runs_commit_and_no_local_path(tmp_path):
    run_dir = tmp_path / "run"
    checkpoint = write_run(
        run_dir,
        [{"host": "a", "commit": "0123456789ab"}, {"host": "b", "commit": "ba9876543210+changes"}],
    )
    provenance = sharing._provenance(run_dir, checkpoint, None, 7)
    assert provenance == {
        "checkpoint": "epoch002.ckpt",
        "epoch": 2,
        "global_step": 30,
        "command": "python train.py model=onlstm",
        "commit": "ba9876543210+changes",  # the last attempt's
        "seed": 7,
        "metrics": {"test/ppl": 91.5},
        "left_out": ["hydra.run.dir"],
    }
    config = {**fixture_config(), "provenance": provenance}
    card = sharing.model_card(config)
    assert str(tmp_path) not in card and not ABSOLUTE.search(card)
    assert "at commit `ba9876543210+changes`" in card
    assert "(local paths left out: hydra.run.dir)" in card
    # the commit given on the command line wins
    assert sharing._provenance(run_dir, checkpoint, "fedcba987654")["commit"] == "fedcba987654"


def test_unknown_is_said_only_where_the_run_recorded_no_commit(tmp_path):
    run_dir = tmp_path / "run"
    # a resumed run whose last attempt ran outside a checkout: the commit of the one that had it
    checkpoint = write_run(run_dir, [{"host": "a", "commit": "0123456789ab"}, {"host": "b"}])
    assert sharing._provenance(run_dir, checkpoint, None)["commit"] == "0123456789ab"
    shutil.rmtree(run_dir)
    checkpoint = write_run(run_dir, [{"host": "a"}])
    provenance = sharing._provenance(run_dir, checkpoint, None)
    assert provenance["commit"] is None
    card = sharing.model_card({**fixture_config(), "provenance": provenance})
    assert "at a commit the run did not record (it ran outside a git checkout)" in card


def test_saving_an_export_that_holds_local_paths_shares_none(tmp_path):
    source = tmp_path / "old"
    shutil.copytree(FIXTURE, source)
    config = json.loads((source / "config.json").read_text())
    config["provenance"]["command"] = "/home/someone/treernn/train.py hydra.run.dir=/tmp/x seed=1"
    (source / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    saved = tmp_path / "saved"
    sharing.save(treernn.load(source, device="cpu"), saved)
    for path in sorted(saved.iterdir()):
        if path.suffix in (".json", ".md", ".txt"):
            assert not ABSOLUTE.search(path.read_text()), path.name
    shared = json.loads((saved / "config.json").read_text())["provenance"]
    assert shared["command"] == "python train.py seed=1"
    assert shared["left_out"] == ["hydra.run.dir"]


# ----------------------------------------------------------------------------- overwriting
def test_export_and_save_replace_only_an_export_and_export_asks_first(tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(FIXTURE, export)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    # the command checks --out before it reads the checkpoint (which does not exist here)
    missing = str(tmp_path / "no.ckpt")
    assert main(["export", "--ckpt", missing, "--out", str(export)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {export} holds an exported model already: add --force to replace it (it is "
        "replaced whole), or export into a new directory"
    )
    for force in ([], ["--force"]):
        assert main(["export", "--ckpt", missing, "--out", str(other), *force]) == 1
        assert "holds files and is not an exported model" in capsys.readouterr().err
    assert main(["export", "--ckpt", missing, "--out", str(export), "--force"]) == 1
    assert "does not exist" in capsys.readouterr().err  # past the target's check
    # the library's rule is the same, save replacing as huggingface_hub's save_pretrained does
    sharing.check_target(export)
    with pytest.raises(OutputError, match="holds an exported model already"):
        sharing.check_target(export, overwrite=False)
    for overwrite in (True, False):
        with pytest.raises(OutputError, match="holds files and is not an exported model"):
            sharing.check_target(other, overwrite=overwrite)
    model = treernn.load(FIXTURE, device="cpu")
    with pytest.raises(OutputError, match="holds files and is not an exported model"):
        sharing.save(model, other)
    assert (other / "notes.txt").read_text() == "mine"
    sharing.save(model, export)
    assert treernn.load(export, device="cpu").kind == "language_model"
