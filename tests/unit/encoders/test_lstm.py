"""The LSTM baseline: nn.LSTM equivalence, AWD weight drop, padding and carried state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from treernn.encoders.lstm import LSTMEncoder
from treernn.kernels import gemm


def test_matches_nn_lstm_without_dropout():
    encoder = LSTMEncoder(5, 7, num_layers=1).eval()
    reference = nn.LSTM(5, 7, batch_first=True)
    reference.load_state_dict(encoder.layers[0].state_dict())
    x = torch.randn(3, 6, 5)
    expected, (h, c) = reference(x)
    out = encoder(x)
    assert torch.allclose(out.hidden, expected, atol=1e-6)
    assert torch.allclose(out.state[0][0], h[0], atol=1e-6)


def test_weight_drop_one_rescaled_mask_per_call_and_identity_in_eval():
    torch.manual_seed(0)
    encoder = LSTMEncoder(4, 50, weight_drop=0.5).train()
    seen = []
    original = torch.func.functional_call

    def spy(module, params, args):
        seen.append(params["weight_hh_l0"].detach().clone())
        return original(module, params, args)

    import treernn.encoders.lstm as lstm_module

    lstm_module.functional_call = spy
    try:
        encoder(torch.randn(2, 5, 4))
        encoder(torch.randn(2, 5, 4))
    finally:
        lstm_module.functional_call = original
    raw = encoder.layers[0].weight_hh_l0.detach()
    first, second = seen
    ratio = first[raw != 0] / raw[raw != 0]
    assert set(torch.round(ratio, decimals=4).unique().tolist()) <= {
        0.0,
        2.0,
    }  # rescaled by 1/(1-p)
    assert 0.4 < (first == 0).float().mean() < 0.6
    assert not torch.equal(first, second)  # a new mask for each forward call
    encoder.eval()
    x = torch.randn(2, 5, 4)
    assert torch.equal(encoder(x).hidden, encoder(x).hidden)


def test_padding_and_batch_order_do_not_change_results():
    encoder = LSTMEncoder(4, 8, num_layers=2).eval()
    x = torch.randn(3, 6, 4)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    out = encoder(x, mask)
    alone = encoder(x[1:2, :4])
    assert torch.allclose(out.hidden[1, :4], alone.hidden[0], atol=1e-6)
    assert out.state is None  # its rows end at different steps: no state to carry
    assert torch.allclose(out.pooled[1], alone.hidden[0, -1], atol=1e-6)
    flipped = encoder(x.flip(0), mask.flip(0))
    assert torch.allclose(flipped.hidden.flip(0), out.hidden, atol=1e-6)


def test_carried_state_equals_one_long_run():
    encoder = LSTMEncoder(3, 6, num_layers=2).eval()
    x = torch.randn(2, 10, 3)
    whole = encoder(x)
    first = encoder(x[:, :4])
    second = encoder(x[:, 4:], state=first.state)
    assert torch.allclose(torch.cat([first.hidden, second.hidden], 1), whole.hidden, atol=1e-6)


def test_negative_dropout_is_rejected():
    with pytest.raises(ValueError, match="dropout=-0.1"):
        LSTMEncoder(3, 6, dropout=-0.1)


@pytest.mark.parametrize("pays", [False, True])
def test_bf16_autocast_runs_bf16_only_where_it_pays(pays: bool, monkeypatch) -> None:
    """bf16-mixed: oneDNN's bf16 LSTM where the probe finds bf16 products faster (injected here),
    the fp32 results exactly where it does not (and on CPUs without any bf16 LSTM primitive)."""
    if pays and not gemm.onednn_available(torch.bfloat16):
        pytest.skip("no oneDNN bf16 kernels (and so no bf16 LSTM primitive) on this CPU")
    monkeypatch.setattr(gemm, "bf16_pays", lambda *shape: pays)
    torch.manual_seed(0)
    encoder = LSTMEncoder(4, 6, num_layers=2)
    x = torch.randn(2, 5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = encoder(x)
    out.hidden.float().sum().backward()
    expected = encoder(x).hidden
    assert out.hidden.dtype == (torch.bfloat16 if pays else torch.float32)
    if pays:
        assert not torch.equal(out.hidden.float(), expected)
        torch.testing.assert_close(out.hidden.float(), expected, atol=0.05, rtol=0.05)
    else:
        torch.testing.assert_close(out.hidden, expected, atol=0, rtol=0)


def test_bf16_is_decided_apart_for_training_and_inference(monkeypatch) -> None:
    """A bf16 LSTM whose forward wins and whose backward loses (oneDNN's primitive on an AMD Zen 5
    at the paper's size): bf16 in inference, fp32 in training, each from its own probe."""
    if not gemm.onednn_available(torch.bfloat16):
        pytest.skip("no oneDNN bf16 kernels (and so no bf16 LSTM primitive) on this CPU")
    labels = []

    def pays(*shape_and_label):
        labels.append(shape_and_label[-1])
        return "inference" in shape_and_label[-1]

    monkeypatch.setattr(gemm, "bf16_pays", pays)
    encoder = LSTMEncoder(4, 6)
    x = torch.randn(2, 5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        trained = encoder(x)
        with torch.no_grad():
            inferred = encoder(x)
    assert (trained.hidden.dtype, inferred.hidden.dtype) == (torch.float32, torch.bfloat16)
    assert [label.strip() for label in labels] == [
        "LSTM nn.LSTM layer, training", "LSTM nn.LSTM layer, inference",
    ]  # fmt: skip


@pytest.mark.parametrize("training", [False, True])
def test_the_bf16_probe_times_what_the_mode_runs(training: bool, monkeypatch) -> None:
    """The probe's runs: forward only for inference; forward and backward for training (three
    products' FLOPs), timed in fp32 and (where oneDNN has bf16 kernels) under bf16 autocast,
    drawing nothing from the run's random stream."""
    from tests.fixtures.precision import OwnLoopDecision

    decide = OwnLoopDecision()
    monkeypatch.setattr(gemm, "product_dtype", decide)
    calls = []
    original = torch.Tensor.backward
    monkeypatch.setattr(torch.Tensor, "backward", lambda *a, **k: calls.append(original(*a, **k)))
    encoder = LSTMEncoder(3, 4)
    x = torch.randn(2, 5, 3)
    with torch.set_grad_enabled(training), torch.autocast("cpu", dtype=torch.bfloat16):
        assert encoder(x).hidden.dtype == torch.float32  # the stand-in answers fp32
    loops = 2 if gemm.bf16_kernels(torch.device("cpu")) else 1
    assert len(calls) == (loops if training else 0)
    assert decide.flops == [2.0 * (3 if training else 1) * 16 * 2 * (3 + 4) * 16]
