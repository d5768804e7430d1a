"""The contract of a model (CONTRIBUTING, "Adding a model"), checked for every model config there
is: ``conf/model/*.yaml`` (a new yaml is picked up without editing any test) and the worked
example of CONTRIBUTING (``tests/fixtures/example_model/``).

Each model is built small from its own config (``hidden_size=20``, its other keys as they are) and
must return what `treernn.encoders.base.EncoderOutput` promises (sizes, finite numbers,
gradients); give the same numbers whatever the padding and the order of the rows; continue from
its carried state exactly as if two segments were one (where it carries a state); and return the
tree signal it declares (``tree_signal_kind``), from which `treernn.parsing` builds one tree
per sentence over exactly its leaves, the same with or without padding. Then it trains a few
steps (``trainer=smoke``, tiny data) and tests on every task whose batches offer the input view it
reads, through the code path of ``train.py`` (in-process compose): its numbers, run record,
checkpoint, the task's reports and, for a model with a tree signal, the induced-tree F1 (and the
parse scoreboard of ``python -m treernn parse --ckpt`` on PTB).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import hydra
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from tests.fixtures.dependency import FIGURE_2_HEADS, FIGURE_2_WORDS
from tests.integration.helpers import (
    EXAMPLE_CONF,
    REPO_ROOT,
    TINY_LM,
    WITH_EXAMPLE,
    compose_config,
    model_configs,
    run_cli,
    train_in_process,
)
from treernn.checkpoints import constructor_config
from treernn.commands import main as commands_main
from treernn.data.classification import ClassificationBatch, Collator, Example, Sentence
from treernn.data.dependency import (
    DependencyBatch,
    DependencyTree,
    build_vocabulary,
    collate_trees,
    encode_tree,
)
from treernn.encoders.base import INPUT_VIEWS, TREE_SIGNAL_KINDS, Encoder
from treernn.lifecycle.runs import read_status
from treernn.parsing.induce import trees_from_signal
from treernn.parsing.trees import balanced, leaves, left_branching, right_branching
from treernn.tasks.base import build_encoder
from treernn.tasks.language_model import detach_state

MODELS = model_configs()
TASKS = sorted(path.stem for path in (REPO_ROOT / "conf" / "task").glob("*.yaml"))
#: the input views each task's batches offer (a PTB stream is tokens only)
TASK_VIEWS = {
    "ptb": ("tokens",),
    "logic": ClassificationBatch.views,
    "listops": ClassificationBatch.views,
    "sst": ClassificationBatch.views,
    "dependency_lm": DependencyBatch.views,
}
#: every model is built at this size; a model with a size rule lets it pass (ON-LSTM: chunk 10)
SMALL = ["model.hidden_size=20"]
EMBEDDING = 8
#: a few steps of each task on a little of its data (not per model: any model runs with these)
TINY_TASK = {
    "ptb": TINY_LM[2:],
    "logic": [
        "task.datamodule.max_train_ops=2",
        "task.datamodule.batch_size=16",
        "task.datamodule.eval_batch_size=512",
    ],
    "listops": [
        "task.datamodule.train_source=generate",
        "task.datamodule.standin_size=300",
        "task.datamodule.test_limit=200",
        "task.datamodule.batch_size=16",
        "trainer.limit_test_batches=null",
    ],
    "sst": [
        "task.datamodule.train_subtrees=false",
        "task.datamodule.train_limit=200",
        "task.datamodule.batch_size=16",
    ],
    "dependency_lm": ["task.datamodule.max_sentences=200", "task.datamodule.batch_size=16"],
}


def test_the_lists_cover_every_task_and_the_example():
    assert set(TASK_VIEWS) == set(TINY_TASK) == set(TASKS)
    assert "example_gru" in MODELS and len(MODELS) >= 10


def config_path(model: str) -> Path:
    path = REPO_ROOT / "conf" / "model" / f"{model}.yaml"
    return path if path.is_file() else EXAMPLE_CONF / "model" / f"{model}.yaml"


@cache
def encoder_class(model: str) -> type[Encoder]:
    """The class a model config builds (its ``_target_``), without composing anything."""
    return hydra.utils.get_class(OmegaConf.load(config_path(model))["_target_"])


def small_encoder(model: str, tmp_path: Path, **sizes) -> Encoder:
    """The model built from its config as a task builds it, small, in eval mode."""
    cfg = compose_config([f"model={model}", *SMALL, *WITH_EXAMPLE], tmp_path)
    factory = hydra.utils.instantiate(constructor_config(cfg.model))
    return build_encoder(factory, input_size=EMBEDDING, **sizes).eval()


# ----------------------------------------------------------------------------- batches
LENGTHS = [7, 4, 1, 5]
TREES = [right_branching, balanced, left_branching, balanced]


def _sentence(row: int, length: int) -> Sentence:
    ids = tuple(1 + (3 * row + 5 * k) % 11 for k in range(length))  # ids 1..11, 0 = padding
    return Sentence(ids, ids, TREES[row % len(TREES)](length))


def classification_batch(order: list[int], longest: int = 0) -> ClassificationBatch:
    """The sentences of ``order`` (rows of LENGTHS), plus one of ``longest`` words (more
    padding for the others) when given."""
    sentences = [_sentence(row, LENGTHS[row]) for row in order]
    if longest:
        sentences.append(_sentence(9, longest))
    return Collator(pad_index=0)([Example((sentence,), label=0) for sentence in sentences])


DEPENDENCY_TREES = [
    DependencyTree(FIGURE_2_WORDS, FIGURE_2_HEADS),
    DependencyTree(("x", "y", "z", "w"), (2, 0, 2, 3)),
    DependencyTree(("a",), (0,)),
    DependencyTree(("p", "q", "r", "s", "t"), (5, 5, 5, 5, 0)),
]
DEPENDENCY_VOCAB, _ = build_vocabulary(
    [w for tree in DEPENDENCY_TREES for w in tree.words], unk_threshold=0
)


def dependency_batch(order: list[int], longest: int = 0) -> DependencyBatch:
    trees = [DEPENDENCY_TREES[row] for row in order]
    if longest:
        trees.append(DependencyTree(("w",) * longest, (0, *([1] * (longest - 1)))))
    return collate_trees([encode_tree(tree, DEPENDENCY_VOCAB) for tree in trees])


def batch_for(view: str, order: list[int], longest: int = 0):
    if view == "dependency_tree":
        return dependency_batch(order, longest)
    return classification_batch(order, longest)


def encode(encoder: Encoder, embedding: nn.Module, batch) -> tuple:
    """What a task does: the batch's inputs of the encoder's view, embedded, through it."""
    inputs = batch.encoder_inputs(encoder.input_view)
    output = encoder(embedding(inputs.tokens), inputs.mask, **inputs.kwargs)
    return inputs, output


def real_lengths(inputs) -> list[int]:
    if inputs.mask is None:
        return [inputs.tokens.size(1)] * inputs.tokens.size(0)
    return inputs.mask.long().sum(1).tolist()


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------- the encoder
@pytest.mark.parametrize("model", MODELS)
def test_the_config_builds_the_encoder_it_names(model, tmp_path):
    """Named after its file (or no name: the file's name is the default), built by the task at
    the input and output sizes it asks for (10: ON-LSTM's chunks divide it), declaring a known
    view and tree signal."""
    declared = OmegaConf.load(config_path(model))
    assert declared.get("name", model) == model
    assert declared.get("_partial_") is True
    cfg = compose_config([f"model={model}", *WITH_EXAMPLE], tmp_path)
    assert cfg.model.name == model
    encoder = small_encoder(model, tmp_path)
    assert isinstance(encoder, Encoder)
    assert encoder.input_view in INPUT_VIEWS
    assert encoder.tree_signal_kind in (*TREE_SIGNAL_KINDS, None)
    assert encoder.input_size == EMBEDDING
    resized = small_encoder(model, tmp_path, output_size=10)  # a tied language model's
    assert resized.output_size == 10


@pytest.mark.parametrize("model", MODELS)
def test_outputs_padding_and_row_order(model, tmp_path):
    encoder = small_encoder(model, tmp_path)
    view = encoder.input_view
    embedding = nn.Embedding(max(len(DEPENDENCY_VOCAB), 12), EMBEDDING)
    rows = list(range(len(LENGTHS)))
    with torch.no_grad():
        inputs, out = encode(encoder, embedding, batch_for(view, rows))
        _, padded = encode(encoder, embedding, batch_for(view, rows, longest=12))
        _, reordered = encode(encoder, embedding, batch_for(view, rows[::-1]))
    batch, width = inputs.tokens.shape
    assert out.hidden.shape == (batch, width, encoder.output_size)
    assert out.pooled.shape == (batch, encoder.output_size)
    assert torch.isfinite(out.hidden).all() and torch.isfinite(out.pooled).all()
    for row, length in enumerate(real_lengths(inputs)):
        # more padding in the batch changes nothing
        close(padded.hidden[row, :length], out.hidden[row, :length])
        close(padded.pooled[row], out.pooled[row])
        # neither does the order of the rows
        close(reordered.hidden[batch - 1 - row, :length], out.hidden[row, :length])
        close(reordered.pooled[batch - 1 - row], out.pooled[row])


@pytest.mark.parametrize("model", MODELS)
def test_gradients_reach_the_parameters(model, tmp_path):
    encoder = small_encoder(model, tmp_path).train()
    embedding = nn.Embedding(max(len(DEPENDENCY_VOCAB), 12), EMBEDDING)
    _, out = encode(encoder, embedding, batch_for(encoder.input_view, [0, 1, 2, 3]))
    (out.hidden.sum() + out.pooled.sum()).backward()
    grads = [p.grad for p in encoder.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(bool(g.abs().sum() > 0) for g in grads)


@pytest.mark.parametrize("model", MODELS)
def test_the_declared_tree_signal_gives_trees_over_the_leaves(model, tmp_path):
    encoder = small_encoder(model, tmp_path)
    embedding = nn.Embedding(max(len(DEPENDENCY_VOCAB), 12), EMBEDDING)
    view = encoder.input_view
    with torch.no_grad():
        inputs, out = encode(encoder, embedding, batch_for(view, [0, 1, 2, 3]))
        padded_inputs, padded = encode(encoder, embedding, batch_for(view, [0, 1, 2, 3], 12))
    returned = out.tree_signal.kind if out.tree_signal is not None else None
    assert returned == encoder.tree_signal_kind
    if returned is None:
        return
    lengths = real_lengths(inputs)
    positions = [list(range(length)) for length in lengths]
    trees = trees_from_signal(out.tree_signal, positions, inputs.mask)
    if returned == "distances":
        assert len(trees) == out.tree_signal.num_layers
    for layer in trees:
        assert len(layer) == len(lengths)
        for tree, length in zip(layer, lengths):
            assert sorted(leaves(tree)) == list(range(length))
    rows = list(range(len(lengths)))
    assert trees_from_signal(padded.tree_signal, positions, padded_inputs.mask, rows) == trees


TOKEN_MODELS = [model for model in MODELS if encoder_class(model).input_view == "tokens"]


@pytest.mark.parametrize("model", TOKEN_MODELS)
def test_a_carried_state_continues_the_sequence(model, tmp_path):
    """A token model that returns a state (what a language model carries across BPTT segments,
    detached) reads two segments as it reads them in one; one that returns none (a Transformer)
    reads every segment afresh."""
    encoder = small_encoder(model, tmp_path)
    x = torch.randn(3, 10, EMBEDDING)  # (B, T, D), no padding: a language-model stream
    with torch.no_grad():
        whole = encoder(x)
        if whole.state is None:
            return
        first = encoder(x[:, :6])
        second = encoder(x[:, 6:], state=detach_state(first.state))
    close(first.hidden, whole.hidden[:, :6])
    close(second.hidden, whole.hidden[:, 6:])


# ----------------------------------------------------------------------------- every task
# the fast tier (pytest -m "not slow") trains every model on its first task of this order (the main
# job's task for the token models); the other pairs are slow
FAST_TASK_ORDER = ["ptb", "logic", "sst", "listops", "dependency_lm"]


def _pairs() -> list:
    pairs = []
    for model in MODELS:
        tasks = [task for task in TASKS if encoder_class(model).input_view in TASK_VIEWS[task]]
        fast = min(tasks, key=[*FAST_TASK_ORDER, *TASKS].index, default=None)
        for task in tasks:
            marks = () if task == fast else pytest.mark.slow
            pairs.append(pytest.param(model, task, id=f"{model}-{task}", marks=marks))
    return pairs


PAIRS = _pairs()


@pytest.mark.parametrize(("model", "task"), PAIRS)
def test_the_model_trains_and_tests_on_the_task(
    model, task, tmp_path, monkeypatch, data_dir, data_cache
):  # data_cache: the ListOps stand-in
    # the example lives outside treernn: its checkpoints name it, and a user trusts their package
    monkeypatch.setenv("TREERNN_TRUSTED_MODULES", "tests.fixtures.example_model")
    run_dir = tmp_path / "run"
    overrides = [f"task={task}", f"model={model}", "trainer=smoke", *SMALL, *WITH_EXAMPLE]
    overrides += ["task.module.embedding_size=20", *TINY_TASK[task]]
    cfg = compose_config(overrides, run_dir)
    metrics = train_in_process(overrides, run_dir)
    assert read_status(run_dir)["status"] == "finished"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    stage, name = cfg.task.monitor.split("/")
    assert math.isfinite(metrics[f"test/{name}"]), metrics
    assert json.loads((run_dir / "metrics.json").read_text())[f"test/{name}"] == pytest.approx(
        metrics[f"test/{name}"]
    )
    callbacks = set(cfg.task.get("callbacks") or {})
    if "accuracy_report" in callbacks:
        _check_accuracy_report(metrics, run_dir, model)
    has_trees = encoder_class(model).tree_signal_kind is not None
    scored = callbacks & {"tree_f1", "parse_f1"}
    assert any(k.startswith("val/parse_f1/") for k in metrics) == bool(has_trees and scored)
    if has_trees and "tree_f1" in callbacks:
        _check_tree_f1(metrics, run_dir)
    if has_trees and "parse_f1" in callbacks:
        _check_parse_scoreboard(metrics, run_dir, encoder_class(model).tree_signal_kind)


def _check_accuracy_report(metrics, run_dir: Path, model: str) -> None:
    """The per-length table as json and png; the overall test accuracy is the count-weighted
    mean of the per-length ones, as metrics.json says."""
    report = json.loads((run_dir / "test_results.json").read_text())
    assert report["label"] == model
    result = next(iter(report["results"].values()))
    buckets = result["buckets"].values()
    assert sum(cell["count"] for cell in buckets) == result["count"] > 0
    weighted = sum(cell["acc"] * cell["count"] for cell in buckets) / result["count"]
    assert weighted == pytest.approx(result["acc"]) == pytest.approx(metrics["test/acc"])
    assert (run_dir / "accuracy_by_length.png").stat().st_size > 1000


def _check_tree_f1(metrics, run_dir: Path) -> None:
    """Induced trees against the batches' gold trees: logged while training and testing, written
    to tree_f1.json, and again from the checkpoint (``python -m treernn report tree-f1``)."""
    for key in ("val/parse_f1/layer1", "val/parse_f1_sentence/layer1", "test/parse_f1/layer1"):
        assert key in metrics  # in percent: compared with tree_f1.json's fractions below
    scores = json.loads((run_dir / "tree_f1.json").read_text())["test"]["layer1"]
    assert 100 * scores["corpus_f1"] == pytest.approx(metrics["test/parse_f1/layer1"], abs=1e-4)
    out = run_dir / "tree_f1_test.json"
    ckpt = str(run_dir / "checkpoints" / "last.ckpt")
    commands_main(
        ["report", "tree-f1", "--ckpt", ckpt, "--max-sentences", "200", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert set(result["layers"]) >= {"layer1"}
    assert 0.0 <= result["layers"]["layer1"]["corpus_f1"] <= 1.0
    assert set(result["baselines"]) == {"random", "balanced", "left_branching", "right_branching"}


def _check_parse_scoreboard(metrics, run_dir: Path, kind: str) -> None:
    """A language model with a tree signal on PTB: the tested weights are the validated ones
    (one smoke epoch), so the test-time scoreboard of the same sentences gives the validation
    parse F1; parse_eval.json holds both columns with the trivial trees, as ``python -m treernn
    parse --ckpt`` writes them, and the command scores a checkpoint with syntactic distances the
    same way (it takes no other kind of model)."""
    layers = sorted(k.split("/")[-1] for k in metrics if k.startswith("val/parse_f1/"))
    for layer in layers:
        key = f"parse_f1/{layer}"
        assert metrics[f"test/{key}"] == pytest.approx(metrics[f"val/{key}"], abs=1e-4)
        assert 0 <= metrics[f"test/parse_f1_short/{layer}"] <= 100
    tables = json.loads((run_dir / "parse_eval.json").read_text())["tables"]
    assert [table["gold"]["name"] for table in tables] == ["sample10", "sample"]
    rows = tables[1]["rows"]
    assert [row["kind"] for row in rows[: len(layers)]] == ["system"] * len(layers)
    assert {"left_branching", "right_branching", "random", "balanced"} <= {
        row["name"] for row in rows
    }
    last = rows[len(layers) - 1]["corpus_f1"]["mean"]
    assert 100 * last == pytest.approx(metrics[f"test/parse_f1/{layers[-1]}"], abs=1e-4)
    if kind != "distances":
        return
    out = run_dir / "parse.json"
    ckpt = str(run_dir / "checkpoints" / "last.ckpt")
    args = ["parse", "--ckpt", ckpt, "--gold", "sample", "--max-sentences", "128"]
    assert commands_main([*args, "--out", str(out)]) == 0
    (table,) = json.loads(out.read_text())["tables"]
    rows = {row["name"]: row["corpus_f1"]["mean"] for row in table["rows"]}
    for row in tables[1]["rows"][: len(layers)]:  # the same sentences: the same numbers
        assert rows[row["name"]] == pytest.approx(row["corpus_f1"]["mean"])


def test_a_key_the_model_does_not_take_is_one_line(tmp_path):
    """``model=gru`` on a preset written for the LSTM used to fail with a TypeError from inside
    the task (``unexpected keyword argument 'weight_drop'``)."""
    result = run_cli(
        [
            "model=example_gru",
            "+model.weight_drop=0.2",
            "trainer=smoke",
            f"paths.log_dir={tmp_path}",
            *TINY_LM,
            *WITH_EXAMPLE,
        ]
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: model.weight_drop is not a setting of GRUEncoder "
        "(tests.fixtures.example_model.gru.GRUEncoder); remove it (~model.weight_drop on the "
        "command line) or use one of: input_size, hidden_size, num_layers, dropout, output_size"
    ]
