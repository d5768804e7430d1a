"""The inference install: the wheel with its core dependencies only (``pip install treernn``), in
a new virtual environment that sees none of this environment's packages, loads an exported model
and scores with it, and says in one line what to install for what it lacks (training).

The environment gets torch as this one has it (the same version and build, so that pip takes it
from where this machine keeps it rather than downloading another build), then the wheel with
the dependencies its metadata names; the training stack must not come with them. The wheel
carries the license (LICENSE).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest
import torch

from tests.integration.helpers import REPO_ROOT

pytestmark = pytest.mark.slow

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "exported_onlstm_lm"
EXPECTED = json.loads((FIXTURE.parent / "exported_onlstm_lm_expected.json").read_text())
#: the packages of the train, hub and docs extras: an inference install has none of them
TRAINING_STACK = ("hydra", "omegaconf", "wandb", "tensorboard", "matplotlib", "scipy", "mkdocs")

PROBE = textwrap.dedent(
    """
    import importlib.util, json, sys, time
    started = time.perf_counter()
    import treernn
    model = treernn.load(sys.argv[1], device="cpu")
    sentences, pairs = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    out = {
        "module": treernn.__file__,
        "surprisals": [[(t.token, t.surprisal) for t in s] for s in model.surprisals(sentences)],
        "log_probs": model.log_probs(sentences),
        "trees": [t.trees for t in model.trees(sentences)],
        "perplexity": model.perplexity("\\n".join(sentences)),
        "tokens": [[(t.word, t.start, t.end, t.log_prob) for t in s]
                   for s in model.token_score(sentences)],
        "blimp": {method: [(item.good, item.bad) for item in model.blimp(pairs, method).items]
                  for method in ("full", "one_prefix", "two_prefix")},
        "seconds": time.perf_counter() - started,
        "loaded": sorted(name for name in sys.modules if name.partition(".")[0] in sys.argv[4:]),
        "installed": [name for name in sys.argv[4:] if importlib.util.find_spec(name)],
    }
    print(json.dumps(out))
    """
)
#: two BLiMP lines in BLiMP's keys, with what the prefix methods need
PAIRS = [
    {
        "sentence_good": "The cat sees a dog.", "sentence_bad": "The cat likes a dog.",
        "one_prefix_prefix": "The cat", "one_prefix_word_good": "sees",
        "one_prefix_word_bad": "likes", "field": "morphology",
        "linguistics_term": "subject_verb_agreement", "UID": "regular_plural_subject_verb",
        "pairID": "0",
    },
    {
        "sentence_good": "A woman buys the company.", "sentence_bad": "Company the buys woman a.",
        "two_prefix_prefix_good": "A woman buys", "two_prefix_prefix_bad": "A man sells",
        "two_prefix_word": "the", "field": "syntax", "linguistics_term": "argument_structure",
        "UID": "transitive", "pairID": "1",
    },
]  # fmt: skip


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **options)


def test_the_core_install_loads_an_export_and_scores_without_the_training_stack(tmp_path):
    started = time.perf_counter()
    wheels = tmp_path / "wheels"
    build = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), "."],
        cwd=REPO_ROOT,
        timeout=900,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("treernn-*.whl")
    # the wheel carries the project's license, and says which it is
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (license_file,) = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(license_file) == (REPO_ROOT / "LICENSE").read_bytes()
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        assert "License-Expression: MIT" in archive.read(metadata).decode().splitlines()
    # nothing of this environment: a checkout's src/ on PYTHONPATH would make pip take treernn
    # as installed already
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TREERNN_CACHE_DIR"] = str(tmp_path / "cache")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    python, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip"]
    # this environment's torch build (a CPU build here): pip would otherwise pick the newest
    # torch the constraints allow, which may be another build of many gigabytes
    torch_install = run([*pip, "install", f"torch=={torch.__version__}"], env=env, timeout=1800)
    assert torch_install.returncode == 0, torch_install.stderr[-3000:]
    install = run([*pip, "install", str(wheel)], env=env, timeout=1800)
    assert install.returncode == 0, install.stderr[-3000:]
    installed_at = time.perf_counter()
    listed = run([*pip, "list", "--format=json"], env=env, timeout=300)
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert {"treernn", "torch", "lightning", "safetensors", "nltk"} <= names
    for package in ("hydra-core", "omegaconf", "wandb", "tensorboard", "matplotlib", "scipy"):
        assert package not in names, f"{package} came with the core install"

    probe = run(
        [
            python,
            "-c",
            PROBE,
            str(FIXTURE),
            json.dumps(EXPECTED["sentences"]),
            json.dumps(PAIRS),
            *TRAINING_STACK,
        ],
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["module"].startswith(str(venv))  # the wheel's treernn, not the checkout's
    assert got["installed"] == [] and got["loaded"] == []
    for sentence, expected in zip(got["surprisals"], EXPECTED["surprisals"], strict=True):
        assert [token for token, _ in sentence] == [token for token, _ in expected]
        assert [value for _, value in sentence] == pytest.approx(
            [value for _, value in expected], rel=1e-5
        )
    assert got["log_probs"] == pytest.approx(EXPECTED["log_probs"], rel=1e-5)
    assert got["trees"] == EXPECTED["trees"]
    assert got["perplexity"] == pytest.approx(EXPECTED["perplexity"], rel=1e-5)
    # per-token scores with the input's spans, and BLiMP by each method: what this checkout's
    # install computes, pair by pair and token by token
    here = run(
        [sys.executable, "-c", PROBE, str(FIXTURE), json.dumps(EXPECTED["sentences"]),
         json.dumps(PAIRS)],
        cwd=tmp_path, env={**env, "TREERNN_CACHE_DIR": str(tmp_path / "cache-here")}, timeout=900,
    )  # fmt: skip
    assert here.returncode == 0, here.stderr[-3000:]
    expected = json.loads(here.stdout.strip().splitlines()[-1])
    assert [word for word, *_ in got["tokens"][0]] == ["the", "cat", "sees", "a", "dog", "<eos>"]
    text = EXPECTED["sentences"][0]
    assert [text[start:end] for _, start, end, _ in got["tokens"][0][:5]] == [
        "The", "cat", "sees", "a", "dog",
    ]  # fmt: skip
    for sentence, expected_sentence in zip(got["tokens"], expected["tokens"], strict=True):
        assert [row[:3] for row in sentence] == [row[:3] for row in expected_sentence]
        assert [row[3] for row in sentence] == pytest.approx(
            [row[3] for row in expected_sentence], rel=1e-5
        )
    # the full method scores both pairs; each prefix method the one pair with its keys
    assert {method: len(rows) for method, rows in got["blimp"].items()} == {
        "full": 2, "one_prefix": 1, "two_prefix": 1,
    }  # fmt: skip
    for method, rows in got["blimp"].items():
        assert [list(row) for row in rows] == [
            pytest.approx(list(row), rel=1e-5) for row in expected["blimp"][method]
        ]

    # the console script scores a file too, and the training entry says what it lacks
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(EXPECTED["sentences"]) + "\n")
    table = run(
        [
            str(venv / "bin" / "treernn"),
            "surprisals",
            "--ckpt",
            str(FIXTURE),
            "--input",
            str(sentences),
        ],
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert table.returncode == 0, table.stderr[-3000:]
    assert "cat" in table.stdout and "4.4796" in table.stdout
    drawn_at = time.perf_counter()
    drawing = run(
        [str(venv / "bin" / "treernn"), "trees", "--ckpt", str(FIXTURE), "--layer", "1",
         "--draw", EXPECTED["sentences"][0]],
        cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    draw_seconds = time.perf_counter() - drawn_at
    assert drawing.returncode == 0, drawing.stderr[-3000:]
    # the fixture's first layer, ((the (cat sees)) (a dog)), as nltk draws it
    assert drawing.stdout.splitlines()[1:] == [
        "  layer 1: ((the (cat sees)) (a dog))",
        "                 X",
        "          _______|________",
        "         X                |",
        "      ___|___             |",
        "     |       X            X",
        "     |    ___|___      ___|___",
        "     |   |       |    |       |",
        "    the cat     sees  a      dog",
    ]
    train = run([str(venv / "bin" / "treernn-train"), "task=ptb"], cwd=tmp_path, env=env)
    assert train.returncode == 1
    assert train.stderr.strip().splitlines() == [
        "error: training (treernn-train) needs hydra-core, which is not installed: "
        'pip install "treernn[train]"'
    ]
    assert not (tmp_path / "outputs").exists()

    size = run(["du", "-sh", str(venv)]).stdout.split()[0]
    (torch_dir,) = venv.glob("lib/python*/site-packages/torch")
    torch_size = run(["du", "-sh", str(torch_dir)]).stdout.split()[0]
    print(
        f"\ncore install: {len(names)} packages, {size} (torch {torch_size}); wheel and install "
        f"{installed_at - started:.0f} s; load and score (C++ kernels built on first use) "
        f"{got['seconds']:.1f} s; a drawn tree (the console script) {draw_seconds:.1f} s"
    )
    shutil.rmtree(venv)
