"""The dependency LM task: tree and sequential models on the same words (the batch's two views),
learning on a small batch, and the lr schedule."""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace

import pytest
import torch

from treernn.callbacks.lr_halving import LearningRateHalving
from treernn.data.batch import MissingViewError
from treernn.data.dependency import DependencyTree, build_vocabulary, collate_trees, encode_tree
from treernn.encoders.lstm import LSTMEncoder
from treernn.encoders.td_treelstm import TopDownTreeLSTM
from treernn.tasks.dependency_lm import DependencyLanguageModel

TREES = [
    DependencyTree(("the", "dog", "barked"), (2, 3, 0)),
    DependencyTree(("dogs", "bark", "at", "the", "cat", "loudly"), (2, 0, 5, 5, 2, 2)),
]


@pytest.mark.parametrize("encoder", [partial(TopDownTreeLSTM, hidden_size=5),
                                     partial(LSTMEncoder, hidden_size=5)])  # fmt: skip
def test_log_probs_do_not_depend_on_batch_padding(encoder):
    vocab, _ = build_vocabulary([t.words for t in TREES], unk_threshold=0)
    task = DependencyLanguageModel(encoder, vocab_size=len(vocab), embedding_size=4).eval()
    together = task.sentence_log_probs(collate_trees([encode_tree(t, vocab) for t in TREES]))
    alone = torch.cat(
        [task.sentence_log_probs(collate_trees([encode_tree(t, vocab)])) for t in TREES]
    )
    torch.testing.assert_close(together, alone)
    _, mask = task.token_nll(collate_trees([encode_tree(t, vocab) for t in TREES]))
    assert mask.sum(1).tolist() == [3, 6]  # every word once, no end-of-sentence token


def test_uniform_model_perplexity_is_vocabulary_size():
    vocab, _ = build_vocabulary([t.words for t in TREES], unk_threshold=0)
    task = DependencyLanguageModel(
        partial(TopDownTreeLSTM, hidden_size=3), vocab_size=len(vocab), embedding_size=2
    ).eval()
    with torch.no_grad():
        task.decoder.weight.zero_()
        task.decoder.bias.zero_()
    nll, mask = task.token_nll(collate_trees([encode_tree(t, vocab) for t in TREES]))
    assert (nll.sum() / mask.sum()).item() == pytest.approx(math.log(len(vocab)))


def fake_trainer(lr: float) -> SimpleNamespace:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return SimpleNamespace(
        sanity_checking=False, callback_metrics={}, optimizers=[optimizer], should_stop=False
    )


def test_lr_halving_starts_at_the_first_miss_and_stops_at_the_next():
    callback = LearningRateHalving(monitor="val/ppl", min_relative_improvement=1e-4)
    trainer = fake_trainer(1.0)
    history = []
    # log ppl: 4.605, 4.4998 (better), 4.49980 (-2.5e-6 relative: a miss), 4.382 (better), same
    for ppl in (100.0, 90.0, 89.999, 80.0, 80.0):
        trainer.callback_metrics["val/ppl"] = torch.tensor(ppl)
        callback.on_validation_end(trainer, None)
        history.append((trainer.optimizers[0].param_groups[0]["lr"], trainer.should_stop))
    assert history == [
        (1.0, False), (1.0, False), (0.5, False), (0.25, False), (0.25, True),
    ]  # fmt: skip
    assert callback.state_dict() == {
        "best": pytest.approx(math.log(80.0)), "halving": True, "stopped": True,
    }  # fmt: skip


def test_lr_halving_stops_a_run_resumed_after_it_stopped_training():
    """Interrupted between the rule's stop and the test (it stopped at the epoch's validation,
    the epoch's checkpoint holds that): resumed, it stops again before training a batch."""
    callback = LearningRateHalving()
    callback.load_state_dict({"best": 4.0, "halving": True, "stopped": True})
    trainer = fake_trainer(0.25)
    callback.on_train_start(trainer, None)
    assert trainer.should_stop
    fresh = LearningRateHalving()
    fresh.load_state_dict({"best": 4.0, "halving": True})  # a checkpoint from before the flag
    trainer = fake_trainer(0.25)
    fresh.on_train_start(trainer, None)
    assert not trainer.should_stop and not fresh.stopped


def test_each_view_predicts_every_word_once():
    vocab, _ = build_vocabulary([t.words for t in TREES], unk_threshold=0)
    batch = collate_trees([encode_tree(t, vocab) for t in TREES])
    tree_view = batch.encoder_inputs("dependency_tree")
    assert tree_view.first_predicting_step == 1 and tree_view.kwargs["tree"] is batch.tree
    assert torch.equal(tree_view.targets, batch.tokens[:, 1:])
    sequence = batch.encoder_inputs("tokens")
    assert torch.equal(sequence.tokens, batch.sequence_tokens[:, :-1])
    assert torch.equal(sequence.targets, batch.sequence_tokens[:, 1:])
    # "the dog barked": ROOT the dog (+ padding) in, the dog barked out
    assert vocab.decode(sequence.targets[0, :3].tolist()) == ["the", "dog", "barked"]
    assert sequence.mask[0].tolist() == [True, True, True, False, False, False]
    for view in (tree_view, sequence):  # the same words, each once
        assert view.target_mask.sum(1).tolist() == [3, 6]
        words = view.targets[view.target_mask].sort().values
        assert torch.equal(words, batch.tokens[:, 1:][batch.mask[:, 1:]].sort().values)
    with pytest.raises(MissingViewError, match="'constituency_tree'.*tree_lstm"):
        batch.encoder_inputs("constituency_tree")


@pytest.mark.parametrize("encoder", [partial(TopDownTreeLSTM, hidden_size=8),
                                     partial(LSTMEncoder, hidden_size=8)])  # fmt: skip
def test_a_few_sgd_steps_fit_two_sentences(encoder):
    torch.manual_seed(0)
    vocab, _ = build_vocabulary([t.words for t in TREES], unk_threshold=0)
    task = DependencyLanguageModel(encoder, vocab_size=len(vocab), embedding_size=8)
    task.log = lambda *args, **kwargs: None  # no trainer attached
    batch = collate_trees([encode_tree(t, vocab) for t in TREES])
    optimizer = task.configure_optimizers()  # SGD, lr 1.0: the paper's
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["lr"] == 1.0
    optimizer.param_groups[0]["lr"] = 5.0  # a few steps only
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = task.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]
