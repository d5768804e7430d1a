"""Induced-tree F1 on classification batches: which distance belongs to which leaf, and the
callback's per-layer scores against hand-computed trees."""

from __future__ import annotations

import functools
import json

import lightning.pytorch as pl
import pytest
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from treernn.callbacks.tree_f1 import TreeF1Callback
from treernn.data.batch import EncodedBatch
from treernn.data.classification import Collator, Example, Sentence
from treernn.encoders.base import Encoder, EncoderOutput, TreeSignal
from treernn.encoders.lstm import LSTMEncoder
from treernn.evaluation.tree_f1 import induce_batch_trees, scored_rows
from treernn.parsing.induce import NoDistancesError, leaf_distances
from treernn.parsing.trees import greedy_tree
from treernn.tasks.classification import ClassificationTask

# token ids: 0 <pad>, 1 "(", 2 ")", 3 a, 4 b, 5 and; the stub's distance of each token
DISTANCE_OF_TOKEN = torch.tensor([0.0, 0.9, 0.7, 0.1, 0.5, 0.3])


class DistanceStub(Encoder):
    """A one-layer 'model' whose distance at a token is the token's 1-d embedding."""

    tree_signal_kind = "distances"

    def __init__(self, input_size: int, hidden_size: int = 1, **kwargs) -> None:
        super().__init__()
        self.input_size = self.output_size = input_size
        self.num_layers = 1
        self.scale = torch.nn.Parameter(torch.ones(1))  # something for the optimiser

    def forward(self, x: Tensor, mask: Tensor | None = None, state=None, **kwargs) -> EncoderOutput:
        distances = TreeSignal("distances", x[..., 0].unsqueeze(0))  # (L=1, B, T)
        return EncoderOutput(
            hidden=x * self.scale, pooled=x[:, 0] * self.scale, tree_signal=distances
        )


def _task(encoder=DistanceStub, num_sentences: int = 2) -> ClassificationTask:
    task = ClassificationTask(
        encoder=encoder,
        vocab_size=6,
        num_classes=2,
        num_sentences=num_sentences,
        group_names=["length", "sysgen_A"],
        embedding_size=1,
        mlp_layers=0,
    )
    with torch.no_grad():
        task.embedding.weight[:, 0] = DISTANCE_OF_TOKEN
    return task.eval()


# "( a ( and b ) )": leaves a and b at token positions 1, 3, 4; gold (a (and b))
NESTED = Sentence((1, 3, 1, 5, 4, 2, 2), (3, 5, 4), (0, (1, 2)), leaf_positions=(1, 3, 4))
# "( b a )": leaves at 1, 2; gold (b a)
FLAT = Sentence((1, 4, 3, 2), (4, 3), (0, 1), leaf_positions=(1, 2))


def test_leaf_distances_drop_brackets_or_take_the_gap_maximum():
    distances = torch.tensor([[0.9, 0.1, 0.8, 0.3, 0.5, 0.7, 0.6]])  # (L=1, T=7)
    dropped = leaf_distances(distances, [1, 3, 4], "drop")
    torch.testing.assert_close(dropped, torch.tensor([[0.1, 0.3, 0.5]]))
    # gaps: tokens 0..1, 2..3, 4..4
    widest = leaf_distances(distances, [1, 3, 4], "max")
    torch.testing.assert_close(widest, torch.tensor([[0.9, 0.8, 0.5]]))
    assert greedy_tree(dropped[0].tolist()) == ((0, 1), 2)
    assert greedy_tree(widest[0].tolist()) == (0, (1, 2))
    with pytest.raises(ValueError, match="bracket_distances"):
        leaf_distances(distances, [1], "mean")


def test_scored_rows_keep_only_first_group_sentences_at_test_time():
    batch = Collator(0)([Example((NESTED, FLAT), 0, group=0), Example((FLAT, NESTED), 1, group=1)])
    assert scored_rows(batch, first_group_only=False) == [0, 1, 2, 3]
    assert scored_rows(batch, first_group_only=True) == [0, 2]  # premise and hypothesis of pair 0


def test_batch_trees_read_the_distance_at_each_leaf():
    batch = Collator(0)([Example((NESTED, FLAT), 0)])
    trees, gold = induce_batch_trees(_task(), batch)
    # NESTED: leaf distances a .1, and .3, b .5 -> split before b; FLAT: b .5, a .1 -> (b a)
    assert trees == [[((0, 1), 2), (0, 1)]]
    assert gold == [(0, (1, 2)), (0, 1)]
    trees, _ = induce_batch_trees(_task(), batch, bracket_distances="max")
    # NESTED gaps: "( a" .9, "( and" .9, "b" .5 -> (a (and b)); FLAT: "( b" .9, "a" .1
    assert trees == [[(0, (1, 2)), (0, 1)]]


def test_models_without_distances_are_refused():
    task = _task(functools.partial(LSTMEncoder, hidden_size=3, num_layers=1))
    batch = Collator(0)([Example((NESTED, FLAT), 0)])
    with pytest.raises(NoDistancesError, match="induces no trees"):
        induce_batch_trees(task, batch)


# the slot an Ordered Memory stub attends to at each token id: "(" 3, ")" 3, a 3, b 1, and 2
SLOT_OF_TOKEN = torch.tensor([0.0, 3.0, 3.0, 3.0, 1.0, 2.0])


class AttentionStub(Encoder):
    """An Ordered-Memory-like 'model' (5 slots) whose pointer at a token is a fixed slot."""

    tree_signal_kind = "attention"

    def __init__(self, input_size: int, hidden_size: int = 1, **kwargs) -> None:
        super().__init__()
        self.input_size = self.output_size = input_size
        self.scale = torch.nn.Parameter(torch.ones(1))
        self.calls = 0

    def forward(self, x: Tensor, mask: Tensor | None = None, state=None, **kwargs) -> EncoderOutput:
        self.calls += 1
        attention = torch.nn.functional.one_hot(x[..., 0].round().long(), 5).float()
        signal = TreeSignal("attention", attention.unsqueeze(0))  # (1, B, T, N)
        return EncoderOutput(hidden=x * self.scale, pooled=x[:, 0] * self.scale, tree_signal=signal)


def _attention_task() -> ClassificationTask:
    task = _task(AttentionStub)
    with torch.no_grad():
        task.embedding.weight[:, 0] = SLOT_OF_TOKEN
    return task


def test_ordered_memory_trees_come_from_the_attention_without_the_brackets():
    batch = Collator(0)([Example((NESTED, FLAT), 0)])
    trees, gold = induce_batch_trees(_attention_task(), batch)
    # NESTED "( a ( and b ) )": split depths [5, 3, 3, 2, 1, 3, 3] -> Algorithm 2 gives
    # ((((0 1) (2 (3 4))) 5) 6); keeping the leaves 1, 3, 4 leaves (a (and b)).
    # FLAT "( b a )": depths [5, 1, 3, 3] -> (((0 1) 2) 3) -> (b a)
    assert trees == [[(0, (1, 2)), (0, 1)]]
    assert trees[0] == gold


def test_callback_scores_ordered_memory_trees_reusing_the_evaluation_pass():
    examples = [Example((NESTED, FLAT), 0), Example((FLAT, NESTED), 1, group=1)]
    loader = DataLoader(examples, batch_size=1, collate_fn=Collator(0))
    task = _attention_task()
    validated = _trainer(TreeF1Callback()).validate(task, dataloaders=loader, verbose=False)[0]
    assert validated["val/parse_f1/layer1"] == pytest.approx(100.0)  # percent
    assert "val/parse_f1/layer2" not in validated
    assert task.encoder.calls == 2  # one forward per batch: the trees reuse validation_step's


def _trainer(callback: TreeF1Callback) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        logger=False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_callback_logs_corpus_and_sentence_f1_per_layer(tmp_path):
    examples = [Example((NESTED, FLAT), 0), Example((FLAT, NESTED), 1, group=1)]
    loader = DataLoader(examples, batch_size=1, collate_fn=Collator(0))
    callback = TreeF1Callback(output_dir=tmp_path)
    validated = _trainer(callback).validate(_task(), dataloaders=loader, verbose=False)[0]
    # validation scores all 4 sentences: NESTED twice (1 of 2 brackets, sentence F1 0), FLAT
    # twice (1 of 1, no gold span below the sentence: sentence F1 1) -> 2 * 4 / (6 + 6), 1/2
    assert validated["val/parse_f1/layer1"] == pytest.approx(200 / 3)
    assert validated["val/parse_f1_sentence/layer1"] == pytest.approx(50.0)
    assert callback.results["val"]["layer1"]["sentences"] == 4
    tested = _trainer(callback).test(_task(), dataloaders=loader, verbose=False)[0]
    # test keeps the first group only: one NESTED and one FLAT -> the same F1 over 2 sentences
    assert tested["test/parse_f1/layer1"] == pytest.approx(200 / 3)
    assert callback.results["test"]["layer1"]["sentences"] == 2
    # beside them the trivial trees of the same 2 sentences: NESTED (0 (1 2)) is right-branching
    # (2 of 2 brackets); left-branching ((0 1) 2) has 1 of 2 there (sentence F1 0); FLAT 1 of 1
    written = json.loads((tmp_path / "tree_f1.json").read_text())
    baselines = written["baselines"]
    assert baselines["right_branching"]["corpus_f1"] == pytest.approx(1.0)
    assert baselines["right_branching"]["sentence_f1"] == pytest.approx(1.0)
    assert baselines["left_branching"]["corpus_f1"] == pytest.approx(2 / 3)
    assert baselines["left_branching"]["sentence_f1"] == pytest.approx(0.5)
    assert baselines["left_branching"]["sentences"] == 2
    assert written["test"]["layer1"]["corpus_f1"] == pytest.approx(2 / 3)


def test_callback_skips_models_without_distances():
    task = _task(functools.partial(LSTMEncoder, hidden_size=3, num_layers=1))
    loader = DataLoader([Example((NESTED, FLAT), 0)], batch_size=1, collate_fn=Collator(0))
    with pytest.warns(UserWarning, match="TreeF1Callback is skipped"):
        validated = _trainer(TreeF1Callback()).validate(task, dataloaders=loader, verbose=False)
    assert not any("parse_f1" in key for key in validated[0])


def test_evaluation_steps_hand_the_encoder_pass_to_callbacks():
    batch = Collator(0)([Example((NESTED, FLAT), 0)])
    task = _attention_task()
    task.log = lambda *args, **kwargs: None  # no trainer attached
    encoded = task.validation_step(batch, 0)
    assert isinstance(encoded, EncodedBatch) and encoded.inputs.view == "tokens"
    assert encoded.output.tree_signal.values.shape == (1, 2, 7, 5)  # a pair, 7 tokens, 5 slots
    trees, _ = induce_batch_trees(task, batch, encoded=encoded)
    assert task.encoder.calls == 1 and trees == [[(0, (1, 2)), (0, 1)]]
