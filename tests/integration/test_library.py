"""treernn as a library, end to end: a checkpoint and its export give the same numbers to the
last digit in fresh processes, as does what ``save_pretrained`` writes (the same files as the
export), and a wheel built from the checkout, installed into a new virtual
environment, trains from an empty directory (``treernn-train``) and serves the run through
``treernn.load`` and the ``treernn`` console script."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.exports import EXPORT_FILES, export_contents
from tests.integration.helpers import REPO_ROOT, train_in_process

pytestmark = pytest.mark.slow

#: a 2-layer ON-LSTM of hidden size 8 on a toy corpus in PTB's layout: trains in seconds
TOY_LM = [
    "model=onlstm",
    "trainer=smoke",
    "model.hidden_size=8",
    "model.num_layers=2",
    "model.chunk_size=2",
    "task.module.embedding_size=6",
    "task.datamodule.verify_checksums=false",
    "task.datamodule.batch_size=4",
    "task.datamodule.eval_batch_size=2",
    "~task.callbacks.parse_f1",
]

#: what a user asks of a model, printed as JSON with every float's exact repr; the model read
#: with treernn.load, or with Model.from_pretrained when the second argument says so
PROBE = textwrap.dedent(
    """
    import json, sys
    import treernn
    if sys.argv[2:] == ["from_pretrained"]:
        from treernn.api import Model
        model = Model.from_pretrained(sys.argv[1], device="cpu")
    else:
        model = treernn.load(sys.argv[1], device="cpu")
    out = {"kind": model.kind, "module": treernn.__file__}
    if model.kind == "language_model":
        sentences = ["The cat sees a dog.", "A man buys the company for $5."]
        surprisals = model.surprisals(sentences)
        out["surprisals"] = [[(t.token, t.surprisal) for t in s] for s in surprisals]
        out["log_probs"] = model.log_probs(sentences)
        out["trees"] = [t.trees for t in model.trees(sentences)]
        out["perplexity"] = model.perplexity("\\n".join(sentences))
    else:
        pairs = [("( not a )", "a"), ("(a or b)", "( b or a )")]
        out["predict"] = [(p.label, p.probabilities) for p in model.predict(pairs)]
        out["trees"] = [t.trees for t in model.trees(["( not ( a and b ) )", "(a or (b and c))"])]
    print(json.dumps(out))
    """
)


def write_toy_ptb(data_dir: Path) -> Path:
    """ptb/ptb.{train,valid,test}.txt of short sentences over 14 words (with $ and N)."""
    rng = random.Random(0)
    nouns, verbs = ["cat", "dog", "man", "woman", "company"], ["sees", "likes", "buys", "sells"]

    def sentence() -> str:
        words = [rng.choice(["the", "a"]), rng.choice(nouns), rng.choice(verbs)]
        words += [rng.choice(["the", "a"]), rng.choice(nouns)]
        if rng.random() < 0.3:
            words += ["for", "$", "N"]
        return " " + " ".join(words) + " "

    folder = data_dir / "ptb"
    folder.mkdir(parents=True)
    for split, count in (("train", 200), ("valid", 30), ("test", 30)):
        (folder / f"ptb.{split}.txt").write_text("\n".join(sentence() for _ in range(count)) + "\n")
    return data_dir


def probe(python: str, path: Path, cwd: Path, env: dict[str, str], *how: str) -> dict:
    result = subprocess.run(
        [python, "-c", PROBE, str(path), *how],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def venv_seeing_this_environment(venv: Path) -> str:
    """A new virtual environment that reuses the torch, Lightning and Hydra of the environment
    running the tests, behind its own packages (so a wheel installed into it wins over any
    treernn installed here); returns its interpreter.

    `venv --system-site-packages` would give it the base interpreter's packages, which lack
    them where the tests run in a virtual environment; a `.pth` file adds this environment's
    site directories instead (with `site.addsitedir`, so that their own `.pth` files count)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        here.append(site.getusersitepackages())
    lines = [f"import site; site.addsitedir({path!r})" for path in here if Path(path).is_dir()]
    (Path(own) / "_tests_running_environment.pth").write_text("\n".join(lines) + "\n")
    return python


def test_an_export_gives_the_checkpoints_numbers_in_a_new_process(tmp_path, monkeypatch):
    data = write_toy_ptb(tmp_path / "data")
    monkeypatch.setenv("TREERNN_DATA_DIR", str(data))
    run_dir = tmp_path / "run"
    train_in_process(TOY_LM, run_dir)
    # the kernels' choices (GEMM backends, placements) are the run's, recorded with it and kept
    # with the export: every process computes as the run did, however busy the machine
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    env.pop("TREERNN_GEMM_BACKEND", None)
    export = tmp_path / "export"
    result = subprocess.run(
        [sys.executable, "-m", "treernn", "export", "--ckpt", str(run_dir), "--out", str(export)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in export.iterdir()) == [
        "README.md",
        "config.json",
        "kernel_choices.json",
        "model.safetensors",
        "vocab.txt",
    ]
    card = (export / "README.md").read_text()
    assert "Ordered Neurons" in card and "test/ppl" in card
    # no local path in what is shared (the run's directory is under tmp_path), and the commit of
    # the checkout that trained it
    for name in ("README.md", "config.json", "kernel_choices.json"):
        assert str(tmp_path) not in (export / name).read_text(), name
    provenance = json.loads((export / "config.json").read_text())["provenance"]
    assert provenance["commit"] and f"at commit `{provenance['commit']}`" in card
    # the run's seed (conf/config.yaml's 141) names the export in SyntaxGym's and LM-Zoo's
    # outputs, <model>_<corpus>_<seed>, as it names the checkpoint
    import treernn
    from treernn.data.syntaxgym import model_label
    from treernn.evaluation.lmzoo import model_name_parts

    assert provenance["seed"] == 141
    for source in (run_dir, export):
        loaded = treernn.load(source, device="cpu")
        assert model_label(*model_name_parts(loaded)) == "onlstm_ptb_141"
    if importlib.util.find_spec("huggingface_hub") is not None:
        from huggingface_hub import ModelCard

        metrics = json.loads((run_dir / "metrics.json").read_text())
        results = ModelCard(card).data.eval_results
        assert {r.metric_name: r.metric_value for r in results if r.dataset_split == "test"} == {
            key: value for key, value in metrics.items() if key.startswith("test/")
        }
    from_checkpoint = probe(sys.executable, run_dir, tmp_path, env)
    from_export = probe(sys.executable, export, tmp_path, env)
    assert from_export == from_checkpoint  # every float, to the last digit
    assert from_checkpoint["surprisals"][1][-2][0] == "N"  # "$5" read as "$ N"
    # a second export into the same directory is refused, and replaces it with --force
    command = [sys.executable, "-m", "treernn", "export", "--ckpt", str(run_dir)]
    again = subprocess.run(
        [*command, "--out", str(export)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 1 and "holds an exported model already: add --force" in again.stderr
    before = export_contents(export, sorted(p.name for p in export.iterdir()))
    (export / "README.md").write_text("edited")  # replaced whole: the edit goes
    forced = subprocess.run(
        [*command, "--out", str(export), "--force"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert export_contents(export, sorted(before)) == before


@pytest.mark.skipif(
    importlib.util.find_spec("huggingface_hub") is None,
    reason='the hub extra: pip install "treernn[hub]"',
)
def test_save_pretrained_writes_the_export_of_a_checkpoint(tmp_path, monkeypatch):
    import treernn
    from treernn.commands import main

    data = write_toy_ptb(tmp_path / "data")
    monkeypatch.setenv("TREERNN_DATA_DIR", str(data))
    run_dir = tmp_path / "run"
    train_in_process(TOY_LM, run_dir)
    export, saved = tmp_path / "export", tmp_path / "saved"
    assert main(["export", "--ckpt", str(run_dir), "--out", str(export)]) == 0
    treernn.load(run_dir, device="cpu").save_pretrained(saved)
    files = sorted(path.name for path in export.iterdir())
    assert files == sorted([*EXPORT_FILES, "kernel_choices.json"])
    assert sorted(path.name for path in saved.iterdir()) == files
    assert export_contents(saved, files) == export_contents(export, files)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src"))
    env.pop("TREERNN_GEMM_BACKEND", None)
    from_checkpoint = probe(sys.executable, run_dir, tmp_path, env)
    assert probe(sys.executable, saved, tmp_path, env, "from_pretrained") == from_checkpoint


def test_a_wheel_trains_from_an_empty_directory_and_serves_its_run(tmp_path, data_dir):
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), "."],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("treernn-*.whl")
    # no build output left behind that git would show
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored=no", "build", "dist"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert status.returncode != 0 or status.stdout == ""
    venv = tmp_path / "venv"
    python = venv_seeing_this_environment(venv)
    # without PYTHONPATH: a checkout's src/ on it (its egg-info) would make pip take treernn as
    # installed already, and install no console scripts
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    env.update(TREERNN_DATA_DIR=str(data_dir), WANDB_MODE="offline", TREERNN_GEMM_BACKEND="aten")
    # the console scripts' help names them, not the modules behind them
    for script, first in (
        ("treernn-train", "treernn-train: train and test a treernn model."),
        ("treernn", "usage: treernn [-h] <command> ..."),
    ):
        shown = subprocess.run(
            [str(venv / "bin" / script), "--help"], cwd=empty, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert shown.returncode == 0 and shown.stdout.splitlines()[0] == first, shown.stderr
    train = subprocess.run(
        [str(venv / "bin" / "treernn-train"), "task=logic", "model=onlstm", "trainer=smoke"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = (empty / "outputs" / "logic" / "onlstm").iterdir()
    from_run = probe(python, run_dir, empty, env)
    assert from_run["module"].startswith(str(venv))  # the wheel's treernn, not the checkout's
    assert len(from_run["predict"]) == 2 and len(from_run["trees"][0]) == 2  # two layers
    for label, probabilities in from_run["predict"]:
        assert label in probabilities and sum(probabilities.values()) == pytest.approx(1.0)
    export = empty / "exported"
    exported = subprocess.run(
        [str(venv / "bin" / "treernn"), "export", "--ckpt", str(run_dir), "--out", str(export)],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert probe(python, export, empty, env) == from_run
