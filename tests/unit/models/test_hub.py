"""``save_pretrained`` / ``from_pretrained`` (huggingface_hub's ``ModelHubMixin``, the hub extra)
write and read exactly the export format: on the small exported language model of
``tests/fixtures/exported_onlstm_lm``, a saved directory holds the export's files with the same
bytes (the safetensors header compared as JSON: `tests.fixtures.exports`) and gives the same
numbers to the last digit through ``from_pretrained`` and ``treernn.load``; ``from_pretrained``
refuses what ``treernn.load`` refuses, with the same line; the mixin's own writes never touch a
directory that is not an export. There is no network here: a Hub repository is read from
huggingface_hub's cache with ``local_files_only``, and ``push_to_hub`` (``save_pretrained`` into a
temporary directory, then an upload) is not exercised. ``tests/integration/test_library.py``
checks that ``save_pretrained`` of a checkpoint writes what ``python -m treernn export`` writes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import treernn
from tests.fixtures.exports import EXPORT_FILES, export_contents, record_files
from tests.paths import FIXTURES
from treernn.api import Classifier, LanguageModel, Model
from treernn.errors import CheckpointError, OutputError
from treernn.models import export as sharing
from treernn.models.hub import HubDownloadError

FIXTURE = FIXTURES / "exported_onlstm_lm"
SENTENCES = json.loads((FIXTURE.parent / "exported_onlstm_lm_expected.json").read_text())[
    "sentences"
]

needs_hub = pytest.mark.skipif(
    importlib.util.find_spec("huggingface_hub") is None,
    reason='the hub extra: pip install "treernn[hub]"',
)


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    return treernn.load(FIXTURE, device="cpu")


def answers(model: Model) -> dict:
    """Everything the language model computes, floats as they are (compared with ==)."""
    return {
        "surprisals": model.surprisals(SENTENCES),
        "log_probs": model.log_probs(SENTENCES),
        "trees": model.trees(SENTENCES),
        "perplexity": model.perplexity("\n".join(SENTENCES)),
    }


#: a run's record of one kernel choice, as an export keeps it
RECORD = '{"format": 1, "choices": {"a product | of aten mkl": "aten"}}\n'


def copy_fixture(tmp_path: Path) -> Path:
    target = tmp_path / "export"
    shutil.copytree(FIXTURE, target)
    return target


@needs_hub
def test_save_pretrained_writes_the_export_format(model, tmp_path):
    saved = tmp_path / "saved"
    assert model.save_pretrained(saved) is None  # nothing pushed
    assert sorted(path.name for path in saved.iterdir()) == EXPORT_FILES
    written, kept = export_contents(saved), export_contents(FIXTURE)
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        assert written[name] == kept[name], name
    config = json.loads((saved / "config.json").read_text())
    assert config["format"] == "treernn-model" and config["format_version"] == 2
    # the model card is the export's (the fixture's copy was reformatted by ruff since)
    assert (saved / "README.md").read_text() == sharing.model_card(config)


@needs_hub
def test_saved_and_exported_models_give_the_same_numbers_to_the_last_digit(model, tmp_path):
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    expected = answers(model)
    for loaded in (
        Model.from_pretrained(saved, device="cpu"),
        LanguageModel.from_pretrained(str(saved), device="cpu"),
        treernn.load(saved, device="cpu"),
        Model.from_pretrained(FIXTURE, device="cpu"),  # an export, read as saved
    ):
        assert isinstance(loaded, LanguageModel) and not loaded.module.training
        assert answers(loaded) == expected


@needs_hub
def test_saving_over_an_export_replaces_its_files(model, tmp_path):
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    before = export_contents(saved)
    # another model's kernel choices: the fixture's model has none, so they go
    (saved / "kernel_choices.json").write_text(RECORD)
    record_files(saved)
    model.save_pretrained(saved)
    assert export_contents(saved) == before
    assert not (saved / "kernel_choices.json").exists()
    # a model saved over the directory it was loaded from keeps the choices it was loaded with
    (saved / "kernel_choices.json").write_text(RECORD)
    record_files(saved)
    Model.from_pretrained(saved, device="cpu").save_pretrained(saved)
    same = ["README.md", "model.safetensors", "vocab.txt"]  # config.json records the choices too
    assert export_contents(saved, same) == {name: before[name] for name in same}
    assert json.loads((saved / "kernel_choices.json").read_text()) == json.loads(RECORD)


@needs_hub
def test_the_kernels_choices_travel_with_the_model(tmp_path):
    source = copy_fixture(tmp_path)
    (source / "kernel_choices.json").write_text(RECORD)
    record_files(source)
    treernn.load(source, device="cpu").save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "kernel_choices.json").read_text())
    assert saved == json.loads(RECORD)


@needs_hub
def test_a_hub_repository_in_the_cache_loads_offline(model, tmp_path):
    # huggingface_hub's cache as a download leaves it (models--<owner>--<name>, a ref naming a
    # snapshot), read with local_files_only: from_pretrained takes a repository id to the Hub's
    # files, and then reads them as an export; nothing goes out to the network
    repo = tmp_path / "models--owner--onlstm-ptb"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    model.save_pretrained(repo / "snapshots" / ("0" * 40))
    loaded = Model.from_pretrained(
        "owner/onlstm-ptb", cache_dir=tmp_path, local_files_only=True, device="cpu"
    )
    assert loaded.source == repo / "snapshots" / ("0" * 40)
    assert answers(loaded) == answers(model)
    # a repository the cache lacks, or a mistyped relative folder, which reads as an owner/name
    # id: one line naming both places looked in, not huggingface_hub's paragraph
    for missing in ("owner/other-lm", "models/onlstm-ptbx", "a/b/c"):
        with pytest.raises(HubDownloadError) as raised:
            Model.from_pretrained(missing, cache_dir=tmp_path, local_files_only=True)
        message = str(raised.value)
        assert message.startswith(f"{missing}: no such directory here, and the Hugging Face Hub ")
        assert "\n" not in message


@needs_hub
def test_a_newer_format_is_refused_with_treernn_loads_line(tmp_path):
    path = copy_fixture(tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(config, format_version=3)))
    with pytest.raises(CheckpointError) as from_load:
        treernn.load(path, device="cpu")
    with pytest.raises(CheckpointError) as from_hub:
        Model.from_pretrained(path, device="cpu")
    assert str(from_hub.value) == str(from_load.value)
    assert "has format version 3; this treernn reads versions up to 2" in str(from_hub.value)
    assert "\n" not in str(from_hub.value)


@needs_hub
def test_from_pretrained_reads_exports_only(tmp_path):
    with pytest.raises(CheckpointError, match="is not an exported treernn model"):
        (tmp_path / "config.json").write_text('{"model_type": "bert"}')
        Model.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="config.json is not valid JSON"):
        (tmp_path / "config.json").write_text("{")
        Model.from_pretrained(tmp_path)
    # a path that is no directory is not sent to the Hub as a repository id
    for path in (tmp_path / "nothing", tmp_path / "config.json", "./nothing"):
        with pytest.raises(CheckpointError, match="is not a directory: from_pretrained reads"):
            Model.from_pretrained(path)


@needs_hub
def test_a_kinds_class_refuses_another_kind():
    with pytest.raises(CheckpointError, match="is an exported language model; Classifier"):
        Classifier.from_pretrained(FIXTURE, device="cpu")


@needs_hub
def test_save_pretrained_never_touches_a_directory_that_is_not_an_export(model, tmp_path):
    # huggingface_hub's save_pretrained deletes the config.json it finds before saving
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.json").write_text('{"mine": true}')
    with pytest.raises(OutputError, match="holds files and is not an exported model"):
        model.save_pretrained(project)
    assert sorted(path.name for path in project.iterdir()) == ["config.json"]
    assert (project / "config.json").read_text() == '{"mine": true}'
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is a file: save into a new directory"):
        model.save_pretrained(tmp_path / "file")


WITHOUT_HUB = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.modules["huggingface_hub"] = None  # import huggingface_hub: ImportError
    import treernn
    from treernn.api import Model
    from treernn.errors import UserError
    model = Model(None, "language_model", {}, Path("."), None)
    for call in (
        lambda: model.save_pretrained(sys.argv[1]),
        lambda: Model.from_pretrained(sys.argv[1]),
        lambda: model.push_to_hub("owner/name"),
    ):
        try:
            call()
        except UserError as error:
            print(type(error).__name__, error)
    """
)


def test_without_huggingface_hub_the_methods_say_what_to_install(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_HUB, str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(treernn.__file__).parents[1])),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hint = 'needs huggingface_hub, which is not installed: pip install "treernn[hub]"'
    assert result.stdout.splitlines() == [
        f"HubUnavailableError {method} {hint}"
        for method in ("save_pretrained", "from_pretrained", "push_to_hub")
    ]
