"""The AWD-LSTM recipe's pieces on small cases: dropouts, AR/TAR, BPTT, NT-ASGD, perplexity."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import torch
from torch import nn

from treernn.callbacks.ntasgd import NTASGD, should_switch
from treernn.data.ptb import TokenStreamBatch, sample_bptt_lengths
from treernn.encoders.base import LockedDropout
from treernn.encoders.lstm import LSTMEncoder
from treernn.metrics import Perplexity
from treernn.tasks.language_model import LanguageModelTask, embedded_dropout


def test_locked_dropout_shares_one_mask_over_time_and_rescales():
    drop = LockedDropout(0.5).train()
    x = torch.ones(4, 30, 16)
    y = drop(x)
    # every time step of a sequence sees the same mask
    assert torch.equal(y, y[:, :1].expand_as(y))
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    # masks differ between sequences of the batch
    assert not torch.equal(y[0, 0], y[1, 0])
    assert torch.equal(drop.eval()(x), x)


def test_embedding_dropout_drops_whole_words_everywhere():
    torch.manual_seed(3)
    embedding = nn.Embedding(50, 8)
    words = torch.tensor([[1, 2, 1, 3], [2, 1, 3, 3]])
    out = embedded_dropout(embedding, words, p=0.5, training=True)
    expected_scale = {0.0, 2.0}
    for word in (1, 2, 3):
        rows = out[words == word]  # every occurrence of a word has the same fate
        ratio = rows / embedding.weight[word]
        assert torch.allclose(ratio, ratio[:1].expand_as(ratio))
        assert round(ratio[0, 0].item(), 5) in expected_scale
    assert torch.equal(embedded_dropout(embedding, words, 0.5, training=False), embedding(words))


def test_bptt_lengths_follow_awd_distribution():
    rng = np.random.default_rng(0)
    lengths = sample_bptt_lengths(200_000, 70, rng)
    assert sum(lengths) == 200_000 - 1  # the segments cover the stream (targets need one more)
    body = np.array(lengths[:-1])
    assert body.min() >= 5
    # 95% N(70, 5), 5% N(35, 5), truncated by int() as AWD-LSTM does (mean drops by 0.5):
    # 0.95 * 69.5 + 0.05 * 34.5 = 67.75
    assert abs(body.mean() - 67.75) < 0.3
    short = (body < 52).mean()
    assert 0.04 < short < 0.06
    assert abs(body[body >= 52].std() - 5) < 0.3


def test_ntasgd_switch_rule_is_awd_lstms():
    # needs more than nonmono past validations, then compares with the best before the last nonmono
    assert not should_switch([5.0, 4.0, 3.0], 10.0, nonmono=5)
    history = [5.0, 4.0, 3.9, 3.8, 3.7, 3.6]
    assert not should_switch(
        history, 4.9, nonmono=5
    )  # 4.9 < min([5.0]) is false -> 4.9 < 5.0: no switch
    assert should_switch(history, 5.1, nonmono=5)
    assert should_switch(history + [3.5], 4.1, nonmono=5)  # best before the window is 4.0


def test_ntasgd_average_is_the_mean_of_iterates_since_the_switch():
    module = nn.Linear(2, 1)
    callback = NTASGD()
    callback.start_averaging(module)
    iterates = []
    for step in range(3):
        with torch.no_grad():
            module.weight.fill_(float(step + 1))
        iterates.append(module.weight.detach().clone())
        callback.on_train_batch_end(None, module, None, None, step)
    assert torch.allclose(callback.averaged["weight"], torch.stack(iterates).mean(0))
    callback._swap_in(module)
    assert torch.allclose(module.weight, torch.full_like(module.weight, 2.0))
    callback._swap_out(module)
    assert torch.allclose(module.weight, torch.full_like(module.weight, 3.0))


def test_ntasgd_finetune_epoch_restarts_the_average():
    module = nn.Linear(2, 1)
    module.print = print  # what the callback calls on a LightningModule
    callback = NTASGD(finetune_epoch=2)
    callback.start_averaging(module)
    for value in (1.0, 2.0):
        with torch.no_grad():
            module.weight.fill_(value)
        callback.on_train_batch_end(None, module, None, None, 0)
    assert torch.allclose(callback.averaged["weight"], torch.full((1, 2), 1.5))

    class Trainer:
        current_epoch = 1

    callback.on_train_epoch_start(Trainer, module)  # not the fine-tuning epoch: average kept
    assert callback.n_averaged == 2
    Trainer.current_epoch = 2
    callback.on_train_epoch_start(Trainer, module)  # fresh average from the current weights
    assert callback.averaging and callback.n_averaged == 0
    with torch.no_grad():
        module.weight.fill_(5.0)
    callback.on_train_batch_end(None, module, None, None, 0)
    assert torch.allclose(callback.averaged["weight"], torch.full((1, 2), 5.0))


def test_perplexity_is_exp_of_token_weighted_nll():
    metric = Perplexity()
    metric.update(torch.tensor(2.0), 10)
    metric.update(torch.tensor(4.0), 30)
    assert metric.compute().item() == pytest.approx(math.exp((20 + 120) / 40), rel=1e-5)


def _tiny_task(**kwargs) -> LanguageModelTask:
    encoder = partial(LSTMEncoder, hidden_size=12, num_layers=2)
    return LanguageModelTask(encoder, vocab_size=20, embedding_size=6, **kwargs)


def test_lm_ties_weights_and_initialises_like_awd():
    task = _tiny_task()
    assert task.decoder.weight is task.embedding.weight
    assert task.embedding.weight.abs().max() <= 0.1
    assert torch.count_nonzero(task.decoder.bias) == 0
    assert task.encoder.output_size == 6


def test_ar_and_tar_terms_match_hand_computation():
    task = _tiny_task(
        embedding_dropout=0.0,
        input_dropout=0.0,
        output_dropout=0.0,
        ar_alpha=2.0,
        tar_beta=1.0,
        rescale_lr=False,
    ).train()
    task.log = lambda *args, **kwargs: None  # no trainer attached
    inputs = torch.randint(0, 20, (3, 7))
    targets = torch.randint(0, 20, (3, 7))
    logits, out, _ = task(inputs)
    raw = nn.functional.cross_entropy(logits.reshape(-1, 20), targets.reshape(-1))
    h = out.hidden  # (B, T, H): AR on the last layer's undropped output, TAR on its differences
    expected = raw + 2.0 * (h**2).mean() + 1.0 * ((h[:, 1:] - h[:, :-1]) ** 2).mean()
    loss = task.training_step(TokenStreamBatch(inputs, targets), 0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    h, c = task._state[0]  # the state is carried to the next batch, detached
    assert not h.requires_grad and h.shape == (3, 12)


def test_token_log_probs_sum_to_sentence_log_prob():
    task = _tiny_task().eval()
    inputs = torch.randint(0, 20, (2, 5))
    targets = torch.randint(0, 20, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    scores = task.token_log_probs(inputs, targets, mask)
    single = task.token_log_probs(inputs[1:, :3], targets[1:, :3])
    assert torch.allclose(scores[1, :3], single[0], atol=1e-6)
    assert torch.all(scores[1, 3:] == 0)
