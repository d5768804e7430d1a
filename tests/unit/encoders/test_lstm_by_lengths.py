"""The LSTM over right-padded rows on the CPU (`treernn.encoders.lstm.run_by_lengths`): one
oneDNN call over the padded batch instead of a packed sequence, with the packed sequence's
outputs (zero past each row's length) and gradients, in the LSTM baseline and in LdTreeLSTM's
left-dependent LSTM; a padded batch carries no state."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from treernn.encoders import lstm as lstm_module
from treernn.encoders.lstm import LSTMEncoder, run_by_lengths
from treernn.encoders.td_treelstm import LdTreeLSTM


def packed_reference(run, x, lengths, hx=None):
    """What the encoders ran before: the packed sequence, padded back."""
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, _ = run(packed, hx)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    return out


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


# lengths: repeated, 1, the longest below the batch's width (9), out of order
LENGTHS = torch.tensor([3, 8, 1, 3, 5, 8, 2])


def test_outputs_and_gradients_are_the_packed_sequences():
    torch.manual_seed(0)
    lstm = nn.LSTM(5, 6, batch_first=True)
    x = torch.randn(len(LENGTHS), 9, 5)
    h0, c0 = torch.randn(1, len(LENGTHS), 6), torch.randn(1, len(LENGTHS), 6)
    weights = torch.randn(len(LENGTHS), 9, 6)
    results = []
    for run in (run_by_lengths, packed_reference):
        inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
        lstm.zero_grad()
        out = run(lstm, inputs[0], LENGTHS, (inputs[1], inputs[2]))
        (out * weights).sum().backward()
        grads = [t.grad for t in inputs] + [p.grad.clone() for p in lstm.parameters()]
        results.append((out, grads))
    (out, grads), (out_ref, grads_ref) = results
    assert out.shape == (len(LENGTHS), 9, 6)
    assert bool((out[1, 8:] == 0).all()) and bool((out[2, 1:] == 0).all())  # past each length
    assert bool((out[2, 0] != 0).all())
    close(out, out_ref)
    for grad, grad_ref in zip(grads, grads_ref):
        close(grad, grad_ref)


def test_the_cpu_path_packs_no_sequence():
    """The point of it: on the CPU no packed sequence (which leaves oneDNN's LSTM primitive for
    torch's step-by-step LSTM), one LSTM call over the padded batch."""
    lstm = nn.LSTM(4, 3, batch_first=True)
    calls = []
    lstm.register_forward_hook(lambda module, args, output: calls.append(args[0]))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run_by_lengths(lstm, torch.randn(len(LENGTHS), 8, 4), LENGTHS)
    names = {event.name for event in profile.events()}
    assert not any("pack" in name for name in names), sorted(n for n in names if "pack" in n)
    assert [tuple(step_inputs.shape) for step_inputs in calls] == [(len(LENGTHS), 8, 4)]


@pytest.mark.parametrize("training", [False, True])
def test_the_lstm_encoder_gives_the_packed_sequences_numbers(training, monkeypatch):
    """The whole encoder (two layers, weight drop and locked dropout in training, one mask each
    per call): the same outputs, pooled vector and gradients as with packed sequences; a padded
    batch returns no state, an unpadded one the state that continues it."""
    encoder = LSTMEncoder(5, 6, num_layers=2, dropout=0.3, weight_drop=0.4).train(training)
    x = torch.randn(len(LENGTHS), 9, 5)
    mask = torch.arange(9) < LENGTHS.unsqueeze(1)
    results = []
    for run in (run_by_lengths, packed_reference):
        monkeypatch.setattr(lstm_module, "run_by_lengths", run)
        torch.manual_seed(2)  # the same dropout and DropConnect masks
        encoder.zero_grad()
        out = encoder(x, mask)
        (out.hidden.sum() + out.pooled.sum()).backward()
        results.append((out, [p.grad.clone() for p in encoder.parameters()]))
    (out, grads), (ref, grads_ref) = results
    close(out.hidden, ref.hidden)
    close(out.pooled, ref.pooled)
    for grad, grad_ref in zip(grads, grads_ref):
        close(grad, grad_ref)
    assert out.state is None
    unpadded = encoder(x, torch.ones_like(mask))
    assert [tuple(h.shape) for h, _ in unpadded.state] == [(len(LENGTHS), 6)] * 2


def test_left_dependents_summary_is_the_packed_sequences():
    """LdTreeLSTM's Eq. 6: q_K, the left-dependent LSTM's output after each node's last left
    dependent (zero for a node without any)."""
    torch.manual_seed(3)
    encoder = LdTreeLSTM(input_size=4, hidden_size=5)
    sequences = torch.randn(6, 4, 4)
    lengths = torch.tensor([2, 0, 4, 1, 2, 0])
    summary = encoder.summarise_left_dependents(sequences, lengths)
    rows = lengths.nonzero().squeeze(1)
    packed = pack_padded_sequence(
        sequences[rows], lengths[rows], batch_first=True, enforce_sorted=False
    )
    _, (h_ref, _) = encoder.left_dependent_lstm(packed)
    assert bool((summary[lengths == 0] == 0).all())
    close(summary[rows], h_ref[0])
