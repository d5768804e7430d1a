"""An exported model is data to its last file (`treernn.models.export_format`,
`treernn.models.export`): each damaged or hostile export below is refused with one line that
names the folder and the file, before anything is built from it; a link inside it is never read
or written through; a FIFO or device never blocks or fills memory; a config asking for more than
the weights hold is refused before it is allocated; an export cut short by a full disk leaves
nothing that loads; loading writes nothing into the folder.

Every case starts from a copy of the small exported language model in
``tests/fixtures/exported_onlstm_lm`` (format 2), damaged in one way."""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import treernn
from tests.fixtures.exports import record_files
from tests.paths import FIXTURES, REPO_ROOT
from treernn.errors import CheckpointError, StorageError, UserError
from treernn.models import export as sharing

FIXTURE = FIXTURES / "exported_onlstm_lm"


def copy_fixture(tmp_path: Path) -> Path:
    target = tmp_path / "export"
    shutil.copytree(FIXTURE, target)
    return target


def config_of(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def write_config(path: Path, config: dict) -> None:
    (path / "config.json").write_text(json.dumps(config, indent=2))


def refusal(path: Path) -> str:
    with pytest.raises(CheckpointError) as raised:
        treernn.load(path, device="cpu")
    message = str(raised.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def listing(folder: Path) -> dict[str, bytes]:
    """Every entry of a folder (hidden ones too) and its bytes, links as their target."""
    found = {}
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if entry.is_symlink():
            found[entry.name] = b"-> " + os.readlink(entry.path).encode()
        elif entry.is_file():
            found[entry.name] = Path(entry.path).read_bytes()
        else:
            found[entry.name] = b"<dir>"
    return found


# ----------------------------------------------------------------------------- config.json
def _without(key):
    return lambda config: config.pop(key)


def _set(*keys, value):
    def change(config):
        node = config
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return change


CONFIG_CASES = {
    "no kind": (_without("kind"), "config.json has no 'kind'"),
    "unknown kind": (_set("kind", value="parser"), "kind 'parser' is not one of language_model"),
    "task without class": (_set("task", value={"arguments": {}}), "task has no 'class'"),
    "task a string": (_set("task", value="LanguageModelTask"), "task is a string, not an object"),
    "arguments a list": (
        _set("encoder", "arguments", value=[8, 2]),
        "encoder.arguments is a list, not an object",
    ),
    "unknown argument": (
        _set("encoder", "arguments", "hidden_sise", value=8),
        "encoder.arguments 'hidden_sise' is not an argument ONLSTMEncoder takes",
    ),
    "a kind its task is not": (
        _set("kind", value="classifier"),
        "says kind 'classifier', but its task treernn.tasks.language_model.LanguageModelTask is "
        "not a ClassificationTask",
    ),
    "another vocabulary file": (
        _set("vocabulary", "file", value="../../etc/passwd"),
        "vocabulary.file must be 'vocab.txt'",
    ),
    "an unknown vocabulary form": (
        _set("vocabulary", "form", value="lists"),
        "vocabulary.form is 'lists', not vocabulary or list",
    ),
    "a list vocabulary for a language model": (
        _set("vocabulary", "form", value="list"),
        "vocabulary.form is 'list', but a language model reads its words through a vocabulary",
    ),
    "a negative size": (
        _set("encoder", "arguments", "hidden_size", value=-8),
        "does not describe a model that builds",
    ),
    "no record of a file": (
        lambda config: config["files"].pop("vocab.txt"),
        "config.json: files records no vocab.txt",
    ),
    "a file recorded outside": (
        _set("files", "../secret", value={"bytes": 1, "sha256": "0" * 64}),
        "files names '../secret', not a file of an export",
    ),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_a_damaged_config_is_one_line(tmp_path, case):
    change, expected = CONFIG_CASES[case]
    path = copy_fixture(tmp_path)
    config = config_of(path)
    change(config)
    write_config(path, config)
    assert expected in refusal(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"format": "treernn-model", "x": NaN}', "NaN is not a number JSON allows"),
        ('{"format": "treernn-model", "x": 1e400}', "holds inf, a number too large"),
        ("[" * 100_000 + "]" * 100_000, "nests 100000 levels deep (at most 32)"),
        (b"\xff\xfe{}", "config.json is not UTF-8 text (byte 0 is 0xff)"),
    ],
    ids=["NaN", "infinite", "deep", "not UTF-8"],
)
def test_config_json_that_is_not_plain_json_is_one_line(tmp_path, text, expected):
    path = copy_fixture(tmp_path)
    data = text if isinstance(text, bytes) else text.encode()
    (path / "config.json").write_bytes(data)
    assert expected in refusal(path)


def test_nan_sizes_in_a_real_config_are_refused(tmp_path):
    path = copy_fixture(tmp_path)
    text = (path / "config.json").read_text().replace('"hidden_size": 8', '"hidden_size": NaN')
    (path / "config.json").write_text(text)
    assert "NaN is not a number JSON allows" in refusal(path)


# ----------------------------------------------------------------------------- vocab.txt
def edit_vocab(path: Path, change) -> None:
    tokens = (path / "vocab.txt").read_text().split("\n")[:-1]
    (path / "vocab.txt").write_bytes(change(tokens))
    record_files(path)


def test_a_repeated_vocabulary_line_is_refused(tmp_path):
    path = copy_fixture(tmp_path)
    # the same size: the model's vocab_size alone would not notice; every later id would shift
    edit_vocab(
        path,
        lambda tokens: "".join(f"{t}\n" for t in [*tokens[:5], tokens[4], *tokens[6:]]).encode(),
    )
    message = refusal(path)
    assert "vocab.txt:6 repeats" in message and "of line 5" in message


def lines(tokens: list[str], end: str = "\n") -> bytes:
    return "".join(f"{token}{end}" for token in tokens).encode()


VOCABULARY_CASES = {
    "too few": (lambda tokens: lines(tokens[:10]), "holds 10 tokens, but the model's vocab_size"),
    "too many": (lambda tokens: lines([*tokens, "zebra"]), "holds 16 tokens"),
    "no eos": (lambda tokens: lines([t.replace("<eos>", "<end>") for t in tokens]), "has no <eos>"),
    "not UTF-8": (
        lambda tokens: b"the\n\xe9t\xe9\n" + lines(tokens[2:]),
        "vocab.txt is not UTF-8 text (byte 4 is 0xe9)",
    ),
    "CRLF": (lambda tokens: lines(tokens, "\r\n"), "vocab.txt:1 ends in a carriage return"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(VOCABULARY_CASES))
def test_a_vocabulary_that_does_not_fit_the_model_is_refused(tmp_path, case):
    change, expected = VOCABULARY_CASES[case]
    path = copy_fixture(tmp_path)
    edit_vocab(path, change)
    assert expected in refusal(path)


# ----------------------------------------------------------------------------- weights
def edit_header(path: Path, change) -> None:
    data = (path / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (path / "model.safetensors").write_bytes(
        struct.pack("<Q", len(text)) + text + data[8 + length :]
    )
    record_files(path)


def _tensor(name: str, **changes):
    return lambda header: header[name].update(changes)


def _rename(old: str, new: str):
    return lambda header: header.update({new: header.pop(old)})


HEADER_CASES = {
    "I32": (_tensor("decoder.bias", dtype="I32"), "decoder.bias is stored as I32, but the model"),
    "shape": (_tensor("decoder.bias", shape=[3, 5]), "decoder.bias has shape [3, 5], but the"),
    "offsets": (_tensor("decoder.bias", data_offsets=[0, 10**12]), "lies outside the file"),
    "renamed": (_rename("decoder.bias", "extra.weight"), "holds extra.weight, which the model"),
    "overlapping": (
        lambda header: header.update({"extra.weight": dict(header["decoder.bias"])}),
        "tensor extra.weight overlaps another",
    ),
    "missing": (lambda header: header.pop("decoder.bias"), "has no decoder.bias, which the model"),
    "dtype": (_tensor("decoder.bias", dtype="Q4"), "has dtype 'Q4', which safetensors does not"),
}


@pytest.mark.parametrize("case", sorted(HEADER_CASES))
def test_weights_that_are_not_the_models_are_refused_before_building(tmp_path, case):
    change, expected = HEADER_CASES[case]
    path = copy_fixture(tmp_path)
    edit_header(path, change)
    assert expected in refusal(path)


def test_a_header_longer_than_the_file_is_refused(tmp_path):
    path = copy_fixture(tmp_path)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", 10**9) + data[8:])
    record_files(path)
    assert "header claims 1000000000 bytes, more than the file holds" in refusal(path)


# the peak is the process's own VmHWM: ru_maxrss carries the parent's peak across fork and exec
# (a pytest worker that had used 1.2 GB made every child's ru_maxrss read 1.2 GB)
MEMORY_PROBE = textwrap.dedent(
    """
    import re, sys
    sys.path.insert(0, sys.argv[2])
    from treernn.commands import main
    code = main(sys.argv[3:])
    status = open("/proc/self/status").read()
    peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) * 1024
    print("PEAK", peak, "CODE", code)
    """
)


def run_measured(tmp_path: Path, *command: str, timeout: int = 120):
    """A ``python -m treernn`` command in a new process: its output, exit status and peak
    resident memory in bytes."""
    script = tmp_path / "probe.py"
    script.write_text(MEMORY_PROBE)
    result = subprocess.run(
        [sys.executable, str(script), "x", str(REPO_ROOT / "src"), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    words = result.stdout.split()
    peak = int(words[words.index("PEAK") + 1]) if "PEAK" in words else None
    return result, peak


def test_a_config_asking_for_millions_of_units_is_refused_before_allocating(tmp_path):
    path = copy_fixture(tmp_path)
    config = config_of(path)
    config["encoder"]["arguments"]["hidden_size"] = 4_000_000  # 640 GB of weights, fp32
    write_config(path, config)
    result, peak = run_measured(tmp_path, "trees", "--ckpt", str(path), "the cat")
    assert "CODE 1" in result.stdout, result.stderr[-2000:]
    assert "has shape [40, 6], but the model its config.json describes needs [20000000, 6]" in (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert peak < 1 << 30


# ----------------------------------------------------------------------------- kernel_choices.json
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('["aten"]', "kernel_choices.json holds a list, not an object"),
        ('{"choices": {"a": 1}}', "choices is not a map of names to choices"),
        ('{"choices": ', "kernel_choices.json is not valid JSON"),
    ],
)
def test_damaged_kernel_choices_are_one_line(tmp_path, text, expected):
    path = copy_fixture(tmp_path)
    (path / "kernel_choices.json").write_text(text)
    record_files(path)
    assert expected in refusal(path)


# ----------------------------------------------------------------------------- a folder whole
def test_a_file_altered_or_cut_short_is_refused(tmp_path):
    path = copy_fixture(tmp_path)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-4])
    assert "model.safetensors holds 5792 bytes, not the 5796 recorded" in refusal(path)
    weights.write_bytes(data[:-4] + b"\0\0\0\0")
    assert "does not match the SHA-256 recorded in config.json" in refusal(path)
    weights.write_bytes(data)
    (path / "README.md").unlink()
    assert "README.md is missing (the export is not whole)" in refusal(path)


def test_a_planted_file_beside_the_recorded_ones_is_refused(tmp_path):
    path = copy_fixture(tmp_path)
    (path / "kernel_choices.json").write_text('{"choices": {}}')
    assert "kernel_choices.json is not one of the files its config.json records" in refusal(path)


def test_an_export_cut_short_by_a_full_disk_leaves_nothing_that_loads(tmp_path, monkeypatch):
    model = treernn.load(FIXTURE, device="cpu")
    calls = []
    real_fsync = os.fsync

    def full_disk_at_the_third_file(descriptor):
        calls.append(descriptor)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(descriptor)

    monkeypatch.setattr(sharing.os, "fsync", full_disk_at_the_third_file)
    out = tmp_path / "models" / "lm"
    with pytest.raises(StorageError, match=r"cannot write .*lm: No space left on device; nothing"):
        sharing.save(model, out)
    assert len(calls) == 3
    assert sorted(os.listdir(tmp_path / "models")) == []  # no partial folder, no target
    # the same over an export: the export that was there stays whole and loads
    monkeypatch.setattr(sharing.os, "fsync", real_fsync)
    sharing.save(model, out)
    before = listing(out)
    calls.clear()
    monkeypatch.setattr(sharing.os, "fsync", full_disk_at_the_third_file)
    with pytest.raises(StorageError):
        sharing.save(model, out)
    assert listing(out) == before and sorted(os.listdir(tmp_path / "models")) == ["lm"]
    assert treernn.load(out, device="cpu").kind == "language_model"


def test_a_folder_a_writer_left_without_its_config_does_not_load(tmp_path):
    # what a writer killed before its last file leaves, renamed by hand: no config.json
    path = copy_fixture(tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        treernn.load(path, device="cpu")


@pytest.mark.parametrize("target", ["file", "under a file"])
def test_export_onto_a_file_or_under_one_is_one_line(tmp_path, target):
    model = treernn.load(FIXTURE, device="cpu")
    (tmp_path / "file").write_text("mine")
    out = tmp_path / "file" if target == "file" else tmp_path / "file" / "lm"
    with pytest.raises(UserError) as raised:
        sharing.save(model, out)
    assert "\n" not in str(raised.value) and str(out) in str(raised.value)
    assert (tmp_path / "file").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["file"]


# ----------------------------------------------------------------------------- links, FIFOs
def test_a_link_in_an_export_is_refused_and_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    path = copy_fixture(tmp_path)
    # a lock file the kernels' choices used to create, planted as a link to a file outside
    os.symlink(outside / "marker", path / ".kernel_choices.json.lock")
    message = refusal(path)
    assert ".kernel_choices.json.lock is a symbolic link" in message
    assert not (outside / "marker").exists()
    # a recorded file that is a link to a copy of itself: refused all the same
    os.unlink(path / ".kernel_choices.json.lock")
    shutil.move(path / "vocab.txt", outside / "vocab.txt")
    os.symlink(outside / "vocab.txt", path / "vocab.txt")
    assert "vocab.txt is a symbolic link" in refusal(path)


def test_saving_over_an_export_of_links_never_writes_through_them(tmp_path):
    model = treernn.load(FIXTURE, device="cpu")
    outside = tmp_path / "outside"
    shutil.copytree(FIXTURE, outside)
    before = listing(outside)
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in os.listdir(outside):
        os.symlink(outside / name, saved / name)
    sharing.save(model, saved)
    assert listing(outside) == before
    assert not any(entry.is_symlink() for entry in os.scandir(saved))
    assert treernn.load(saved, device="cpu").kind == "language_model"


@pytest.mark.parametrize("name", ["config.json", "kernel_choices.json", "vocab.txt"])
def test_a_fifo_in_an_export_is_refused_without_waiting(tmp_path, name):
    path = copy_fixture(tmp_path)
    (path / "kernel_choices.json").write_text('{"choices": {}}')
    record_files(path)
    (path / name).unlink()
    os.mkfifo(path / name)
    result, _ = run_measured(tmp_path, "trees", "--ckpt", str(path), "the cat", timeout=60)
    assert "CODE 1" in result.stdout, result.stderr[-2000:]
    assert f"{name} is a FIFO (named pipe), not a regular file" in result.stderr


def test_loading_writes_nothing_into_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    path = copy_fixture(tmp_path)
    (path / "kernel_choices.json").write_text('{"format": 1, "choices": {}}')
    record_files(path)
    before = listing(path)
    model = treernn.load(path, device="cpu")
    model.surprisals(["the cat sees a dog"])
    model.trees(["the cat sees a dog"])
    assert listing(path) == before
    # the kernels' choices made for it are kept in the user's cache, under the export's key
    kept = list((tmp_path / "cache" / "models").glob("*.json"))
    assert len(kept) == 1 and len(kept[0].stem) == 64


# ----------------------------------------------------------------------------- checkpoints
def write_checkpoint_bomb(path: Path, inflated: int) -> None:
    """A zip in torch's checkpoint layout whose ``data.pkl`` is a pickle of one string of
    ``inflated`` zero bytes, deflated to a few MB."""
    chunk = b"\0" * (1 << 24)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("archive/version", "3\n")
        with archive.open("archive/data.pkl", "w", force_zip64=True) as handle:
            handle.write(b"\x80\x04\x8d" + struct.pack("<Q", inflated))
            for _ in range(inflated // len(chunk)):
                handle.write(chunk)
            handle.write(b".")


def test_a_checkpoint_that_inflates_is_refused_before_inflating(tmp_path):
    bomb = tmp_path / "bomb.ckpt"
    write_checkpoint_bomb(bomb, 3 << 29)  # 1.5 GiB of zeros in about 7 MB
    assert bomb.stat().st_size < 16 << 20
    result, peak = run_measured(tmp_path, "trees", "--ckpt", str(bomb), "the cat")
    assert "CODE 1" in result.stdout, result.stderr[-2000:]
    assert "its member archive/data.pkl inflates from" in result.stderr
    assert "refused before inflating it" in result.stderr
    assert peak < 1 << 30
    from treernn.lifecycle.records import peek_global_step

    assert peek_global_step(bomb) is None  # sweep status's step, read without torch
