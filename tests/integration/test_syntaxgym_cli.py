"""``python -m treernn syntaxgym`` and ``python -m treernn lmzoo`` on the exported test language
model (``tests/fixtures/exported_onlstm_lm``, a copy with ``<unk>``) and two toy suites over its
vocabulary (``tests/fixtures/syntaxgym``): LM-Zoo's formats byte for byte, the result files,
``LanguageModel.syntaxgym`` equal to the command, Hu et al.'s comparison on fixture data, and the
``syntaxgym`` package's own code on the lmzoo outputs giving the same per-item results (skipped
where no Python imports the package)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import treernn
from tests.fixtures.exports import record_files
from treernn.commands import main
from treernn.evaluation.surprisal import SURPRISAL_HEADER

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SUITES = FIXTURES / "syntaxgym"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "syntaxgym_crosscheck.py"
SENTENCES = "The cat sees a zebra.\n\nA woman buys the company for $5.\n"


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """The test export with ``sells`` made its ``<unk>`` entry (the toy corpus has no <unk>)."""
    path = tmp_path_factory.mktemp("lm") / "export"
    shutil.copytree(FIXTURES / "exported_onlstm_lm", path)
    vocab = (path / "vocab.txt").read_text().split("\n")
    (path / "vocab.txt").write_text("\n".join("<unk>" if t == "sells" else t for t in vocab))
    record_files(path)
    return path


def lmzoo(capsys, export: Path, action: str, *args: str) -> str:
    assert main(["lmzoo", action, *args, "--ckpt", str(export), "--device", "cpu"]) == 0
    return capsys.readouterr().out


def test_lmzoo_writes_lm_zoos_formats(tmp_path, capsys, export):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(SENTENCES)
    tokens = lmzoo(capsys, export, "tokenize", str(sentences))
    # one line per input line, a blank one too (its <eos> alone); unknown words as they are
    assert tokens == "the cat sees a zebra <eos>\n<eos>\na woman buys the company for $ N <eos>\n"
    assert lmzoo(capsys, export, "tokenize", str(sentences), "--unk").splitlines()[0] == (
        "the cat sees a <unk> <eos>"
    )
    assert lmzoo(capsys, export, "unkify", str(sentences)) == "0 0 0 0 1 0\n0\n0 0 0 0 0 0 0 0 0\n"
    table = lmzoo(capsys, export, "get-surprisals", str(sentences))
    lines = table.split("\n")
    assert lines[0] == "sentence_id\ttoken_id\ttoken\tsurprisal" == "\t".join(SURPRISAL_HEADER)
    assert table.endswith("\n") and "\r" not in table
    rows = [line.split("\t") for line in lines[1:-1]]
    assert [(int(s), int(t)) for s, t, _, _ in rows[:7]] == [
        (1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 6), (2, 1),
    ]  # fmt: skip
    # the tokens are tokenize's, line by line; surprisals in bits, as LanguageModel.surprisals
    by_sentence: dict[int, list[str]] = {}
    for sentence_id, _, token, _ in rows:
        by_sentence.setdefault(int(sentence_id), []).append(token)
    assert [" ".join(by_sentence[k]) for k in (1, 2, 3)] == tokens.splitlines()
    model = treernn.load(export, device="cpu")
    expected = [t.surprisal for t in model.surprisals(["The cat sees a zebra."])[0]]
    assert [float(value) for _, _, _, value in rows[:6]] == expected  # written as repr: exact
    # a sentence's surprisals do not depend on the other lines of the file
    alone = tmp_path / "alone.txt"
    alone.write_text("A woman buys the company for $5.\n")
    again = lmzoo(capsys, export, "get-surprisals", str(alone)).split("\n")[1:-1]
    assert [row.split("\t")[2:] for row in again] == [row[2:] for row in rows[7:]]


def test_lmzoo_spec_is_json_with_lm_zoos_keys(capsys, export):
    spec = json.loads(lmzoo(capsys, export, "spec"))
    # the keys LM-Zoo's schema requires (docs/schemas/language_model_spec.json)
    assert {"name", "ref_url", "image", "vocabulary", "tokenizer"} <= set(spec)
    assert {"maintainer", "version", "datetime", "supported_features"} <= set(spec["image"])
    features = spec["image"]["supported_features"]
    assert set(features) == {
        "tokenize", "unkify", "get_surprisals", "get_predictions", "mount_checkpoint",
    }  # fmt: skip
    vocabulary = spec["vocabulary"]
    assert {"items", "unk_types", "prefix_types", "suffix_types", "special_types"} <= set(
        vocabulary
    )
    assert vocabulary["unk_types"] == ["<unk>"] and vocabulary["suffix_types"] == ["<eos>"]
    assert vocabulary["prefix_types"] == [] and "<pad>" not in vocabulary["items"]
    assert {"cat", "<eos>", "<unk>"} <= set(vocabulary["items"])
    assert spec["tokenizer"]["type"] == "word" and spec["tokenizer"]["cased"] is False
    assert spec["name"] == "onlstm_ptb" and "Ordered-Neurons" in spec["ref_url"]


def test_lmzoo_refusals_are_one_line(tmp_path, capsys, export):
    assert main(["lmzoo", "unkify", str(tmp_path / "none.txt"), "--ckpt", str(export)]) == 1
    assert "input " + str(tmp_path / "none.txt") + " does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: a file for spec, none for tokenize
        main(["lmzoo", "spec", "x.txt", "--ckpt", str(export)])
    with pytest.raises(SystemExit):
        main(["lmzoo", "tokenize", "--ckpt", str(export)])
    assert "the following arguments are required: input" in capsys.readouterr().err


def test_the_command_writes_json_and_hu_et_als_csv(tmp_path, capsys, export):
    out = tmp_path / "out"
    args = ["syntaxgym", str(SUITES), "--ckpt", str(export), "--out", str(out), "--device", "cpu"]
    assert main([*args, "--items"]) == 0
    printed = capsys.readouterr().out
    assert "SG score (2 suites)" in printed and "item   1: correct predictions T T" in printed
    record = json.loads((out / "syntaxgym.json").read_text())
    assert [suite["suite"] for suite in record["suites"]] == ["center_toy", "number_toy"]
    number = record["suites"][1]
    assert number["items"] == 5 and number["circuit"] == "Agreement"
    # "zebra" stands in a critical region of item 3 only ("sells" is the <unk> of item 2)
    assert [item["unk_in_critical"] for item in number["item_results"]] == [
        False, True, True, False, False,
    ]  # fmt: skip
    regions = number["item_results"][2]["regions"]["mismatch"]
    assert [r["tokens"] for r in regions] == [["the"], ["<unk>"], ["buys"], ["a", "cat"], ["<eos>"]]
    # Hu et al.'s layout: the header, <name>_<corpus>[_<seed>], the item from 0, True/False
    rows = list(csv.reader(io.StringIO((out / "syntaxgym_results.csv").read_text())))
    assert rows[0] == ["model", "suite", "item", "correct"]
    assert rows[1][:3] == ["onlstm_ptb", "center_toy", "0"] and rows[1][3] in ("True", "False")
    assert len(rows) == 1 + 2 + 5
    # the library gives the same
    result = treernn.load(export, device="cpu").syntaxgym(sorted(SUITES.glob("*.json")))
    assert result.csv_text() == (out / "syntaxgym_results.csv").read_text()
    # existing files are refused before any work, unless --force
    assert main(args) == 1
    assert "syntaxgym.json exists; pass --force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


def test_the_csv_loads_in_hu_et_als_layout(tmp_path, capsys, export, data_dir):
    from treernn.reporting.hu2020 import read_results

    theirs = data_dir / "syntaxgym" / "hu2020_results" / "syntaxgym_results_vanilla_bllip-xs.csv"
    header = theirs.read_text().split("\n", 1)[0]
    out = tmp_path / "out"
    suite = str(data_dir / "syntaxgym" / "suites" / "number_src.json")
    args = ["syntaxgym", suite, "--ckpt", str(export), "--out", str(out), "--device", "cpu"]
    assert main([*args, "--model-name", "onlstm_ptb_7"]) == 0
    ours = (out / "syntaxgym_results.csv").read_text()
    assert ours.split("\n", 1)[0] == header
    both = read_results([theirs, out / "syntaxgym_results.csv"])
    assert len(both["onlstm_ptb_7"]["number_src"]) == len(
        both["vanilla_bllip-xs_0111"]["number_src"]
    )
    assert sorted(both["onlstm_ptb_7"]["number_src"]) == list(range(19))
    capsys.readouterr()


def test_csv_suites_take_their_formulas(tmp_path, capsys, export):
    path = tmp_path / "toy.csv"
    path.write_text(
        "item_number,condition_name,region_number,region_name,content\n"
        "1,a,1,np,the cat\n1,a,2,verb,sees\n1,b,1,np,the cat\n1,b,2,verb,likes\n"
    )
    out = ["--out", str(tmp_path), "--ckpt", str(export), "--device", "cpu"]
    assert main(["syntaxgym", str(path), *out]) == 1
    assert "holds no predictions; give them with --formula" in capsys.readouterr().err
    assert main(["syntaxgym", str(path), *out, "--formula", "(2;%a%) < (2;%b%) + 1000"]) == 0
    record = json.loads((tmp_path / "syntaxgym.json").read_text())
    assert record["suites"][0]["suite"] == "toy" and record["suites"][0]["correct"] == 1


def test_compare_with_hu_et_al_on_fixture_data(tmp_path, capsys):
    from treernn.reporting.hu2020 import compare, read_results

    # treernn: two ON-LSTM seeds and one LSTM on two suites; Hu et al.: one seed of each
    ours = tmp_path / "ours.csv"
    ours.write_text(
        "model,suite,item,correct\n"
        "onlstm_ptb_1,number_src,0,True\nonlstm_ptb_1,number_src,1,True\n"
        "onlstm_ptb_2,number_src,0,True\nonlstm_ptb_2,number_src,1,False\n"
        "onlstm_ptb_1,fgd-embed3,0,True\nonlstm_ptb_2,fgd-embed3,0,True\n"
        "lstm_ptb_1,number_src,0,False\nlstm_ptb_1,number_src,1,False\n"
        "lstm_ptb_1,fgd-embed3,0,False\n"
    )
    theirs = tmp_path / "theirs.csv"
    theirs.write_text(
        "model,suite,item,correct\n"
        "ordered-neurons_bllip-xs_0111,number_src,0,False\n"
        "ordered-neurons_bllip-xs_0111,number_src,1,False\n"
        "ordered-neurons_bllip-xs_0111,fgd-embed3,0,True\n"
        "vanilla_bllip-xs_0111,number_src,0,True\nvanilla_bllip-xs_0111,number_src,1,False\n"
        "vanilla_bllip-xs_0111,fgd-embed3,0,True\n"
        "vanilla_bllip-sm_0111,number_src,0,True\nvanilla_bllip-sm_0111,number_src,1,True\n"
    )
    text = compare(read_results([ours]), read_results([theirs]), "bllip-xs")
    lines = text.splitlines()
    assert lines[0] == (
        "| suite | circuit | onlstm PTB (n=2) | lstm PTB (n=1) | ON-LSTM BLLIP-XS Hu et al. (n=1) "
        "| LSTM BLLIP-XS Hu et al. (n=1) | Δ onlstm PTB | Δ lstm PTB |"
    )
    # number_src: ON-LSTM seeds 100 and 50 -> 75 vs 0 (+75); LSTM 0 vs 50 (-50)
    assert "| number_src | Agreement | 75.0 | 0.0 | 0.0 | 50.0 | +75.0 | -50.0 |" in lines
    fgd = "| fgd-embed3 * | Long-Distance Dependencies | 100.0 | 0.0 | 100.0 | 100.0 | +0.0 |"
    assert fgd + " -100.0 |" in lines
    # the SG score leaves fgd-embed3 out; the mean of these suites does not
    assert "| **SG score** |  | 75.0 | 0.0 | 0.0 | 50.0 | +75.0 | -50.0 |" in lines
    assert "| **mean of these suites** |  | 87.5 | 0.0 | 50.0 | 75.0 | +37.5 | -75.0 |" in lines
    assert (
        "Largest differences, lstm PTB vs LSTM BLLIP-XS: fgd-embed3 -100.0, number_src -50.0"
        in text
    )


def test_the_command_compares_result_files_with_hu_et_al(tmp_path, capsys, data_dir):
    run = tmp_path / "run"
    run.mkdir()
    (run / "syntaxgym_results.csv").write_text(
        "model,suite,item,correct\nonlstm_ptb_1,nn-nv-rpl,0,True\n"
    )
    assert main(["syntaxgym", "--compare-hu2020", str(tmp_path), "--hu-corpus", "bllip-sm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ON-LSTM BLLIP-SM Hu et al. (n=3) | LSTM BLLIP-SM Hu et al. (n=3)" in lines[0]
    assert lines[2].startswith("| nn-nv-rpl * | - | 100.0 | ")
    assert main(["syntaxgym", "--compare-hu2020", str(tmp_path / "run" / "none")]) == 1
    assert "none does not exist" in capsys.readouterr().err
    assert main(["syntaxgym"]) == 1
    assert "needs --ckpt (a model to score) or --compare-hu2020" in capsys.readouterr().err


def test_a_published_results_file_in_another_layout_is_one_line(tmp_path):
    from treernn.errors import DataError
    from treernn.reporting.hu2020 import read_results

    path = tmp_path / "bad.csv"
    path.write_text("model,suite,item,correct\nx,number_src,one,True\n")
    with pytest.raises(DataError, match=r"bad.csv:2: 'x,number_src,one,True' is not model,suite"):
        read_results([path])


def syntaxgym_python() -> str | None:
    """A Python that imports the syntaxgym package: $TREERNN_SYNTAXGYM_PYTHON, else this one."""
    for python in (os.environ.get("TREERNN_SYNTAXGYM_PYTHON"), sys.executable):
        if not python:
            continue
        found = subprocess.run([python, "-c", "import syntaxgym"], capture_output=True)
        if found.returncode == 0:
            return python
    return None


@pytest.mark.slow
def test_the_syntaxgym_package_agrees_item_by_item(tmp_path, export):
    python = syntaxgym_python()
    if python is None:
        pytest.skip(
            "the syntaxgym package (0.6.0) is not importable: install it into a Python 3.10 "
            "venv as scripts/syntaxgym_crosscheck.py says and set TREERNN_SYNTAXGYM_PYTHON to "
            "its python"
        )
    command = [sys.executable, str(SCRIPT), str(SUITES), "--ckpt", str(export)]
    done = subprocess.run(
        [*command, "--syntaxgym-python", python, "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 items: 0 items differ in a prediction, 0 of 66 region values differ" in done.stdout
    # unknown words written <unk>, as LM-Zoo's ON-LSTM image writes them
    done = subprocess.run(
        [*command, "--syntaxgym-python", python, "--work", str(tmp_path / "unk"), "--unk"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(unknown words written as <unk>;" in done.stdout
