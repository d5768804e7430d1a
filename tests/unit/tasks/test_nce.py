"""Noise-contrastive estimation (Zhang et al. 2016, Section 2.5) against hand-computed numbers."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from treernn.encoders.td_treelstm import TopDownTreeLSTM
from treernn.tasks.dependency_lm import (
    DependencyLanguageModel,
    nce_loss,
    unigram_noise_log_probs,
)


def test_unigram_power():
    log_p = unigram_noise_log_probs([0, 16, 1], power=0.75)
    # 16^0.75 = 8, 1^0.75 = 1 -> (0, 8/9, 1/9)
    torch.testing.assert_close(log_p.exp(), torch.tensor([0.0, 8 / 9, 1 / 9]))


def test_nce_loss_hand_computed():
    # V=3, H=1; one target (word 1) and k=2 noise words (0 and 2)
    weight = torch.tensor([[1.0], [2.0], [0.0]])
    bias = torch.tensor([0.0, 0.5, 1.0])
    hidden = torch.tensor([[1.0]])
    log_z = torch.tensor(1.0)
    noise_probs = torch.tensor([0.5, 0.25, 0.25])
    loss = nce_loss(
        hidden, torch.tensor([1]), weight, bias, log_z, noise_probs.log(), torch.tensor([[0, 2]])
    )
    # P^(w) = exp(w.h + b - lnZ): word1 exp(1.5), word0 exp(0), word2 exp(0)
    # P_d(w) = P^ / (P^ + k Pn): word1 e^1.5/(e^1.5+0.5); word0 1/(1+1); word2 1/(1+0.5)
    p1 = math.exp(1.5) / (math.exp(1.5) + 2 * 0.25)
    p0 = 1 / (1 + 2 * 0.5)
    p2 = 1 / (1 + 2 * 0.25)
    expected = -(math.log(p1) + math.log(1 - p0) + math.log(1 - p2))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_nce_gradient_moves_log_z_and_eval_uses_exact_softmax():
    encoder = partial(TopDownTreeLSTM, hidden_size=3)
    task = DependencyLanguageModel(
        encoder, vocab_size=6, unigram_counts=[0, 1, 0, 5, 3, 2], embedding_size=4, loss="nce"
    )
    assert task.log_z.item() == 9.0 and task.log_z.requires_grad
    from treernn.data.dependency import DependencyTree, collate_trees, encode_tree
    from treernn.data.vocab import Vocabulary

    vocab = Vocabulary(["a", "b", "c"], specials=("<pad>", "<unk>", "<root>"))
    batch = collate_trees([encode_tree(DependencyTree(("a", "b", "c"), (2, 0, 2)), vocab)])
    loss = task.training_step(batch, 0)
    loss.backward()
    assert task.log_z.grad is not None and task.log_z.grad.abs() > 0
    # evaluation: exact log-softmax with the same Who, independent of ln Z
    before = task.sentence_log_probs(batch)
    with torch.no_grad():
        task.log_z.fill_(0.0)
    torch.testing.assert_close(task.sentence_log_probs(batch), before)
    hidden, targets, mask = task.hidden_and_targets(batch)
    exact = torch.log_softmax(task.decoder(hidden), -1).gather(-1, targets.unsqueeze(-1))
    torch.testing.assert_close(before, exact.squeeze(-1)[mask].sum().view(1))


def test_nce_without_counts_is_a_clear_error():
    with pytest.raises(ValueError, match="unigram_counts"):
        DependencyLanguageModel(partial(TopDownTreeLSTM, hidden_size=2), vocab_size=4, loss="nce")
