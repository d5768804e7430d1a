"""ON-LSTM encoder: the cell's equations on hand-computed cases, cumax, DropConnect semantics,
the paper's parameter count, padding / batch-order invariance and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from treernn.encoders.onlstm import ONLSTMEncoder, ONLSTMLayer, cumax

IMPLS = ["reference", "fast"]


def _sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def _cumax(logits: list[float]) -> list[float]:
    exps = [math.exp(v) for v in logits]
    total = sum(exps)
    out, running = [], 0.0
    for e in exps:
        running += e / total
        out.append(running)
    return out


def _plain_step(gates: list[float], c_prev: list[float], chunk_size: int):
    """One ON-LSTM step from the 2n + 4H gate pre-activations, in plain Python arithmetic."""
    hidden = len(c_prev)
    n = hidden // chunk_size
    master_input = [1.0 - v for v in _cumax(gates[:n])]
    master_forget = _cumax(gates[n : 2 * n])
    neuron = gates[2 * n :]
    h, c = [], []
    for j in range(hidden):
        k = j // chunk_size
        o = _sigmoid(neuron[j])
        candidate = math.tanh(neuron[hidden + j])
        i = _sigmoid(neuron[2 * hidden + j])
        f = _sigmoid(neuron[3 * hidden + j])
        overlap = master_forget[k] * master_input[k]
        f_hat = f * overlap + (master_forget[k] - overlap)
        i_hat = i * overlap + (master_input[k] - overlap)
        c.append(f_hat * c_prev[j] + i_hat * candidate)
        h.append(o * math.tanh(c[-1]))
    return h, c, 1.0 - sum(master_forget) / n, sum(master_input) / n


def _plain_layer(layer: ONLSTMLayer, inputs: list[list[float]], h: list[float], c: list[float]):
    """Run one layer over a sequence with plain Python (no DropConnect)."""
    w_ih, b_ih = layer.ih.weight.tolist(), layer.ih.bias.tolist()
    w_hh, b_hh = layer.hh.weight.tolist(), layer.hh.bias.tolist()
    outputs, forget_d, input_d = [], [], []
    for x in inputs:
        gates = []
        for g in range(len(b_ih)):
            from_input = sum(w * v for w, v in zip(w_ih[g], x))
            from_hidden = sum(w * v for w, v in zip(w_hh[g], h))
            gates.append(b_ih[g] + b_hh[g] + from_input + from_hidden)
        h, c, fd, idist = _plain_step(gates, c, layer.chunk_size)
        outputs.append(h)
        forget_d.append(fd)
        input_d.append(idist)
    return outputs, h, c, forget_d, input_d


@pytest.mark.parametrize("impl", IMPLS)
def test_hand_computed_step(impl: str) -> None:
    # H = 4, chunk 2 -> 2 chunks. Zero weights, gates set by the biases:
    # master-input logits [ln 3, 0] -> softmax [.75, .25] -> master_input = 1 - [.75, 1] = [.25, 0]
    # master-forget logits [0, ln 3] -> softmax [.25, .75] -> master_forget = [.25, 1]
    # o, i, f logits 0 -> 0.5; candidate logit ln 2 -> tanh = 0.6
    encoder = ONLSTMEncoder(2, 4, num_layers=1, chunk_size=2, impl=impl)
    layer = encoder.layers[0]
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()
        bias = [math.log(3), 0.0, 0.0, math.log(3)] + [0.0] * 4 + [math.log(2)] * 4 + [0.0] * 8
        layer.ih.bias.copy_(torch.tensor(bias))
    c0 = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    out = encoder(torch.zeros(1, 1, 2), state=[(torch.zeros(1, 4), c0)])
    # chunk 0: overlap = .25 * .25 = .0625; f_hat = i_hat = .5 * .0625 + .25 - .0625 = .21875
    # chunk 1: master_forget 1, master_input 0 -> overlap 0, f_hat 1, i_hat 0: c is kept.
    expected_c = [0.21875 * 1 + 0.21875 * 0.6, 0.21875 * 2 + 0.21875 * 0.6, 3.0, 4.0]
    assert expected_c[:2] == pytest.approx([0.35, 0.56875])
    h, c = out.state[0]
    torch.testing.assert_close(c, torch.tensor([expected_c]))
    torch.testing.assert_close(h, torch.tensor([[0.5 * math.tanh(v) for v in expected_c]]))
    torch.testing.assert_close(out.hidden[0, 0], h[0])
    # forget distance 1 - (.25 + 1) / 2 = .375; input distance (.25 + 0) / 2 = .125
    torch.testing.assert_close(out.tree_signal.values, torch.tensor([[[0.375]]]))
    torch.testing.assert_close(out.extras["input_distances"], torch.tensor([[[0.125]]]))


@pytest.mark.parametrize("impl", IMPLS)
def test_two_layers_match_plain_python(impl: str) -> None:
    encoder = ONLSTMEncoder(3, 6, num_layers=2, chunk_size=2, output_size=4, impl=impl).double()
    x = torch.randn(1, 4, 3, dtype=torch.double)
    h0 = [torch.randn(1, 6, dtype=torch.double), torch.randn(1, 4, dtype=torch.double)]
    c0 = [torch.randn(1, 6, dtype=torch.double), torch.randn(1, 4, dtype=torch.double)]
    out = encoder(x, state=list(zip(h0, c0)))

    inputs = x[0].tolist()
    for index, layer in enumerate(encoder.layers):
        outputs, h, c, forget_d, input_d = _plain_layer(
            layer, inputs, h0[index][0].tolist(), c0[index][0].tolist()
        )
        torch.testing.assert_close(out.layer_outputs[index][0], torch.tensor(outputs).double())
        torch.testing.assert_close(out.state[index][0][0], torch.tensor(h).double())
        torch.testing.assert_close(out.state[index][1][0], torch.tensor(c).double())
        torch.testing.assert_close(
            out.tree_signal.values[index, 0], torch.tensor(forget_d).double()
        )
        torch.testing.assert_close(
            out.extras["input_distances"][index, 0], torch.tensor(input_d).double()
        )
        inputs = outputs
    torch.testing.assert_close(out.hidden, out.layer_outputs[-1])
    torch.testing.assert_close(out.pooled, out.hidden[:, -1])
    assert encoder.tree_signal_kind == "distances" and out.tree_signal.values.shape == (2, 1, 4)


def test_cumax_monotone_and_in_unit_interval() -> None:
    logits = torch.randn(50, 17) * 10
    values = cumax(logits)
    assert (values >= 0).all() and (values <= 1 + 1e-6).all()
    assert (values.diff(dim=-1) >= 0).all()
    torch.testing.assert_close(values[:, -1], torch.ones(50))
    torch.testing.assert_close(cumax(torch.zeros(1, 4)), torch.tensor([[0.25, 0.5, 0.75, 1.0]]))


def test_dropconnect_weight_sampling() -> None:
    layer = ONLSTMLayer(5, 40, chunk_size=4, weight_drop=0.3)
    weight = layer.hh.weight.detach()
    first, second = layer.recurrent_weight().detach(), layer.recurrent_weight().detach()
    for sample in (first, second):
        kept = sample != 0
        torch.testing.assert_close(sample[kept], weight[kept])  # no 1/(1-p) rescaling
        assert 0.65 < kept.float().mean().item() < 0.75  # 6,720 weights, keep rate 0.7
    assert not torch.equal(first, second)  # a fresh mask every call
    layer.eval()
    torch.testing.assert_close(layer.recurrent_weight(), weight * 0.7)
    layer.weight_drop = 0.0
    layer.train()
    assert layer.recurrent_weight() is layer.hh.weight


@pytest.mark.parametrize("impl", IMPLS)
def test_dropconnect_one_mask_per_call_shared_over_time_and_batch(impl: str) -> None:
    encoder = ONLSTMEncoder(3, 8, num_layers=2, chunk_size=4, weight_drop=0.5, impl=impl)
    sampled: list[torch.Tensor] = []
    for layer in encoder.layers:
        original = layer.scaled_recurrent_weight

        def recording(original=original):
            weight, scale = original()
            sampled.append(weight.detach().clone() * scale)
            return weight, scale

        layer.scaled_recurrent_weight = recording
    row = torch.randn(1, 6, 3)
    x = torch.cat([row, torch.randn(1, 6, 3), row])  # rows 0 and 2 identical
    out = encoder(x)
    assert len(sampled) == 2  # one mask per layer per forward call
    # The same mask for every batch row: identical rows give identical outputs.
    torch.testing.assert_close(out.hidden[0], out.hidden[2], rtol=0, atol=0)
    # The same mask at every time step: a DropConnect-free copy holding the sampled weights
    # reproduces the whole sequence.
    plain = ONLSTMEncoder(3, 8, num_layers=2, chunk_size=4, impl=impl)
    plain.load_state_dict(encoder.state_dict())
    with torch.no_grad():
        for layer, weight in zip(plain.layers, sampled):
            layer.hh.weight.copy_(weight)
    torch.testing.assert_close(plain(x).hidden, out.hidden)
    # A new mask on the next call.
    assert not torch.allclose(encoder(x).hidden, out.hidden)
    assert not torch.equal(sampled[2], sampled[0])
    # Eval: deterministic, weights scaled by (1 - p).
    encoder.eval()
    with torch.no_grad():
        for layer, original in zip(plain.layers, encoder.layers):
            layer.hh.weight.copy_(original.hh.weight * 0.5)
    torch.testing.assert_close(encoder(x).hidden, plain(x).hidden)


def test_paper_parameter_count() -> None:
    encoder = ONLSTMEncoder(400, 1150, num_layers=3, chunk_size=10, output_size=400)
    encoder_params = sum(p.numel() for p in encoder.parameters())
    assert encoder_params == 21_222_180
    # Tied 10k x 400 embedding/decoder plus the decoder bias: the paper model's 25,232,180.
    assert encoder_params + 10_000 * 400 + 10_000 == 25_232_180


@pytest.mark.parametrize("impl", IMPLS)
def test_padding_and_batch_order_invariance(impl: str) -> None:
    encoder = ONLSTMEncoder(4, 6, num_layers=2, chunk_size=3, dropout=0.3, impl=impl).eval()
    lengths = [5, 2, 4]
    x = torch.randn(3, 5, 4)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    x = x.masked_fill(~mask[..., None], 7.0)  # garbage in the padding must not matter
    out = encoder(x, mask)
    for row, length in enumerate(lengths):
        alone = encoder(x[row : row + 1, :length])
        torch.testing.assert_close(out.hidden[row, :length], alone.hidden[0])
        torch.testing.assert_close(out.pooled[row], alone.pooled[0])
        torch.testing.assert_close(
            out.tree_signal.values[:, row, :length], alone.tree_signal.values[:, 0]
        )
        for (h, c), (h_alone, c_alone) in zip(out.state, alone.state):
            torch.testing.assert_close(h[row], h_alone[0])
            torch.testing.assert_close(c[row], c_alone[0])
    assert (out.hidden[~mask] == 0).all() and (out.tree_signal.values[:, ~mask] == 0).all()

    order = torch.tensor([2, 0, 1])
    shuffled = encoder(x[order], mask[order])
    torch.testing.assert_close(shuffled.hidden, out.hidden[order])
    torch.testing.assert_close(shuffled.tree_signal.values, out.tree_signal.values[:, order])
    torch.testing.assert_close(shuffled.state[1][1], out.state[1][1][order])


@pytest.mark.parametrize("impl", IMPLS)
def test_carried_state_equals_one_long_run(impl: str) -> None:
    encoder = ONLSTMEncoder(3, 4, num_layers=2, chunk_size=2, impl=impl)
    x = torch.randn(2, 7, 3)
    whole = encoder(x)
    first = encoder(x[:, :3])
    second = encoder(x[:, 3:], state=[(h.detach(), c.detach()) for h, c in first.state])
    torch.testing.assert_close(torch.cat([first.hidden, second.hidden], 1), whole.hidden)
    torch.testing.assert_close(second.state[0][1], whole.state[0][1])


def test_bad_input_fails_clearly() -> None:
    with pytest.raises(ValueError, match="not divisible by chunk_size=10"):
        ONLSTMEncoder(400, 1155, chunk_size=10)
    with pytest.raises(ValueError, match="not divisible by chunk_size=10"):
        ONLSTMEncoder(400, 1150, chunk_size=10, output_size=405)
    with pytest.raises(ValueError, match="dropout=-0.1"):
        ONLSTMEncoder(4, 4, chunk_size=2, dropout=-0.1)
    with pytest.raises(ValueError, match="weight_drop=1.0"):
        ONLSTMEncoder(4, 4, chunk_size=2, weight_drop=1.0)
    with pytest.raises(ValueError, match="impl='cuda'"):
        ONLSTMEncoder(4, 4, chunk_size=2, impl="cuda")  # type: ignore[arg-type]
    encoder = ONLSTMEncoder(4, 4, num_layers=1, chunk_size=2)
    with pytest.raises(ValueError, match=r"expects x of shape \(B, T, 4\)"):
        encoder(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="mask has shape"):
        encoder(torch.zeros(2, 3, 4), torch.ones(2, 4, dtype=torch.bool))
