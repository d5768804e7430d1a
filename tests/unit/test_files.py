"""What the commands read and where they write, on a copy of the small exported language model
``tests/fixtures/exported_onlstm_lm``: an input is one item per line split at ``\\n`` only, text
that is not UTF-8 or a file that is not a regular file is one line naming it, ``-`` is standard
input for ``surprisals``, and a result goes to ``--out`` or the working directory, never into
the model's folder, as a new file unless ``--force``."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

import treernn
from tests.paths import FIXTURES
from treernn.commands import main
from treernn.errors import ConfigValueError, DataError
from treernn.evaluation.surprisal import read_surprisal_table
from treernn.files import decode_input_text, new_result_file, read_input_text, text_lines

FIXTURE = FIXTURES / "exported_onlstm_lm"
#: words of the fixture's vocabulary
SENTENCES = ["the cat sees a dog", "a man buys the company", "the woman likes the cat"]


@pytest.fixture
def export(tmp_path) -> Path:
    """A copy of the export in a folder of its own (``models/onlstm``)."""
    target = tmp_path / "models" / "onlstm"
    shutil.copytree(FIXTURE, target)
    return target


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """The working directory the commands run in."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (hidden ones too) with its bytes; folders as ``b"<dir>"``."""
    return {
        str(path.relative_to(folder)): b"<dir>" if path.is_dir() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
    }


def surprisals(export: Path, *args: str) -> int:
    return main(["surprisals", "--ckpt", str(export), *args])


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# ----------------------------------------------------------------------------- reading lines
def test_lines_end_at_newline_only():
    text = "a\x0cb\nc\u2028d\x85e\r\nf\rg\n\nlast"
    assert text_lines(text) == ["a\x0cb", "c\u2028d\x85e", "f\rg", "", "last"]
    assert len(text.splitlines()) == 9  # what each of those breaks made of it before
    assert text_lines("one\n") == ["one"] and text_lines("") == []


def test_text_that_is_not_utf8_names_the_byte_and_its_line():
    assert decode_input_text(b"\xef\xbb\xbfthe cat\n", "x") == "the cat\n"  # a BOM is dropped
    with pytest.raises(DataError) as error:
        decode_input_text(b"the cat\nthe caf\xe9 man\n", "sents.txt")
    assert str(error.value) == (
        "sents.txt: not UTF-8 text (byte 15 is 0xe9, on line 2); save it as UTF-8"
    )


def test_a_device_or_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(DataError, match=r"--input /dev/zero is a character device, not a regular"):
        read_input_text("/dev/zero", "--input")
    with pytest.raises(DataError, match=r"--input .*nothing does not exist"):
        read_input_text(tmp_path / "nothing", "--input")


def test_surprisals_ids_count_newlines_only(export, tmp_path):
    # a form feed and U+2028 inside a line: Python's splitlines made these 3 lines 5 sentences
    lines = ["the cat\x0csees a dog", "a man\u2028buys the company", "the woman likes the cat"]
    text = tmp_path / "sentences.txt"
    text.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    out = tmp_path / "table.tsv"
    assert surprisals(export, "--input", str(text), "--out", str(out)) == 0
    ids = [line.split("\t")[0] for line in out.read_text().split("\n")[1:] if line]
    assert sorted(set(ids)) == ["1", "2", "3"]
    # the form feed and U+2028 separate words as a space does
    expected = treernn.load(export, device="cpu").surprisals(SENTENCES)
    assert read_surprisal_table(out) == [[(t.token, t.surprisal) for t in s] for s in expected]


def test_surprisals_of_text_that_is_not_utf8_is_one_line(export, tmp_path, capsys):
    text = tmp_path / "sents.txt"
    text.write_bytes(b"the cat\nthe caf\xe9 man\n")
    assert surprisals(export, "--input", str(text)) == 1
    assert one_error_line(capsys) == (
        f"error: {text}: not UTF-8 text (byte 15 is 0xe9, on line 2); save it as UTF-8"
    )


def test_a_fifo_as_input_is_refused_without_waiting(export, tmp_path, capsys):
    fifo = tmp_path / "sentences.fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would block for ever

    def waited(signum, frame):
        raise TimeoutError("surprisals waited on the FIFO")

    previous = signal.signal(signal.SIGALRM, waited)
    signal.alarm(20)
    try:
        assert surprisals(export, "--input", str(fifo)) == 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert one_error_line(capsys) == (
        f"error: --input {fifo} is a FIFO (named pipe), not a regular file; give a text file "
        "(- reads standard input)"
    )


def test_surprisals_reads_standard_input_as_lm_zoo_does(export, tmp_path, monkeypatch, capsys):
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    assert surprisals(export, "--input", str(text)) == 0
    from_file = capsys.readouterr().out
    stdin = io.TextIOWrapper(io.BytesIO(text.read_bytes()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert surprisals(export, "--input", "-") == 0
    from_stdin = capsys.readouterr().out
    assert from_stdin == from_file
    assert from_stdin.count("\t<eos>\t") == 3


def test_a_line_of_punctuation_keeps_its_id_and_its_end(export, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text(f"{SENTENCES[0]}\n...\n{SENTENCES[1]}\n")
    out = tmp_path / "table.tsv"
    assert surprisals(export, "--input", str(text), "--out", str(out)) == 0
    table = read_surprisal_table(out)
    assert len(table) == 3
    model = treernn.load(export, device="cpu")
    first, third = model.surprisals([SENTENCES[0], SENTENCES[1]])
    assert table[0] == [(t.token, t.surprisal) for t in first]
    assert table[2] == [(t.token, t.surprisal) for t in third]
    # "..." has no word left: its one row is its <eos>, -log2 p(<eos> | <eos>) from a fresh
    # state, which is also the first row of the one-word sentence "<eos>"
    ((token, surprisal),) = table[1]
    (end_after_end, _) = model.surprisals([["<eos>"]])[0]
    assert token == "<eos>"
    assert surprisal == pytest.approx(end_after_end.surprisal, rel=1e-6)
    assert 0.0 < surprisal < 20.0


# ----------------------------------------------------------------------------- writing results
def test_a_result_file_is_new_unless_forced(tmp_path, work):
    assert new_result_file(None, "blimp.json") == work / "blimp.json"
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    with pytest.raises(ConfigValueError, match=r"kept.json exists; pass --force to replace it"):
        new_result_file(kept, "blimp.json")
    assert new_result_file(kept, "blimp.json", force=True) == kept
    with pytest.raises(ConfigValueError, match="is a character device; name a file"):
        new_result_file(os.devnull, "blimp.json", force=True)


def test_surprisals_never_replaces_a_table_unless_forced(export, tmp_path, capsys):
    text = tmp_path / "sentences.txt"
    text.write_text(SENTENCES[0] + "\n")
    out = tmp_path / "table.tsv"
    out.write_text("a table kept\n")
    assert surprisals(export, "--input", str(text), "--out", str(out)) == 1
    assert "exists; pass --force" in one_error_line(capsys)
    assert out.read_text() == "a table kept\n"
    assert surprisals(export, "--input", str(text), "--out", str(out), "--force") == 0
    assert len(read_surprisal_table(out)[0]) == len(SENTENCES[0].split()) + 1


def test_parse_of_an_export_writes_into_the_working_directory(export, tmp_path, work, capsys):
    gold = tmp_path / "gold.txt"
    gold.write_text(
        "(S (NP (DT the) (NN cat)) (VP (VBZ sees) (NP (DT a) (NN dog))))\n"
        "(S (NP (DT a) (NN man)) (VP (VBZ buys) (NP (DT the) (NN company))))\n"
    )
    models = export.parent
    (models / "parse_eval.json").write_text("someone's own results\n")  # beside the export
    before = files_under(models)
    args = ["parse", "--ckpt", str(export), "--gold", str(gold)]
    assert main(args) == 0
    assert files_under(models) == before
    written = json.loads((work / "parse_eval.json").read_text())
    assert [table["gold"]["sentences"] for table in written["tables"]] == [2]
    assert written["tables"][0]["checkpoints"] == [str(export.resolve())]
    capsys.readouterr()
    # again: the result there is kept, refused before any work
    result = (work / "parse_eval.json").read_bytes()
    assert main(args) == 1
    assert one_error_line(capsys) == (
        f"error: --out {work / 'parse_eval.json'} exists; pass --force to replace it, or name "
        "another file with --out"
    )
    assert (work / "parse_eval.json").read_bytes() == result
    assert main([*args, "--force"]) == 0
    assert files_under(models) == before


def test_blimp_of_an_export_writes_into_the_working_directory(export, tmp_path, work, capsys):
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"sentence_good": "the cat sees a dog", "sentence_bad": "the cat a dog sees", "UID": "x"},
        {"sentence_good": "a man buys the company", "sentence_bad": "a man the buys", "UID": "x"},
    ]
    pairs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    before = files_under(export.parent)
    args = ["syneval", "--ckpt", str(export), "--blimp", str(pairs)]
    assert main(args) == 0
    assert "all" in capsys.readouterr().out  # the table
    assert files_under(export.parent) == before
    written = json.loads((work / "blimp.json").read_text())
    assert written["pairs"] == 2 and written["files"] == [str(pairs)]
    assert main(args) == 1
    assert "blimp.json exists; pass --force" in one_error_line(capsys)
    assert files_under(export.parent) == before
