"""Transformer encoder baseline: positions, pooling, padding invariance, bad input, its precision
under bf16-mixed."""

from __future__ import annotations

import math

import pytest
import torch

from tests.fixtures.precision import OwnLoopDecision
from treernn.encoders.transformer import TransformerEncoder, sinusoidal_positions

SETTINGS = [
    {"positions": "learned", "pooling": "mean"},
    {"positions": "sinusoidal", "pooling": "cls"},
    {"positions": "learned", "pooling": "cls", "norm_first": True},
]


def make(**kwargs) -> TransformerEncoder:
    return TransformerEncoder(
        input_size=5, hidden_size=8, num_layers=2, num_heads=2, ff_size=16, **kwargs
    ).eval()


def test_sinusoids_match_section_3_5():
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...); d = 4 -> 10000^(2/4) = 100.
    encoding = sinusoidal_positions(torch.tensor([0, 3]), 4)
    expected = [[0.0, 1.0, 0.0, 1.0], [math.sin(3), math.cos(3), math.sin(0.03), math.cos(0.03)]]
    torch.testing.assert_close(encoding, torch.tensor(expected))
    assert sinusoidal_positions(torch.tensor([2]), 5).shape == (1, 5)  # odd width: truncated


@pytest.mark.parametrize("settings", SETTINGS)
def test_padding_and_padding_side_never_change_results(settings):
    model = make(**settings)
    lengths = [3, 6, 1]
    tight = torch.randn(3, 6, 5)
    tight_mask = torch.arange(6) < torch.tensor(lengths)[:, None]
    tight_out = model(tight, tight_mask)

    wide = torch.randn(3, 10, 5) * 100  # garbage in the padding
    left = torch.randn(3, 6, 5) * 100
    for b, n in enumerate(lengths):
        wide[b, :n] = tight[b, :n]
        left[b, 6 - n :] = tight[b, :n]
    wide_out = model(wide, torch.arange(10) < torch.tensor(lengths)[:, None])
    left_mask = torch.arange(6) >= 6 - torch.tensor(lengths)[:, None]
    left_out = model(left, left_mask)

    torch.testing.assert_close(wide_out.pooled, tight_out.pooled)
    torch.testing.assert_close(wide_out.hidden[:, :6], tight_out.hidden)
    assert wide_out.hidden[:, 6:].abs().sum() == 0 and tight_out.hidden[0, 3:].abs().sum() == 0
    torch.testing.assert_close(left_out.pooled, tight_out.pooled)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(left_out.hidden[b, 6 - n :], tight_out.hidden[b, :n])


def test_mean_pooling_averages_the_real_tokens_and_tokens_attend_to_each_other():
    model = make(pooling="mean")
    x = torch.randn(2, 4, 5)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    out = model(x, mask)
    torch.testing.assert_close(out.pooled[0], out.hidden[0, :2].mean(0))
    torch.testing.assert_close(out.pooled[1], out.hidden[1].mean(0))
    changed = x.clone()
    changed[0, 1] += 1.0  # a real token changes: the other real token's output must change too
    assert not torch.allclose(model(changed, mask).hidden[0, 0], out.hidden[0, 0])


def test_positions_matter_and_mask_none_means_all_real():
    model = make(positions="learned")
    x = torch.randn(1, 3, 5)
    out = model(x)
    torch.testing.assert_close(out.hidden, model(x, torch.ones(1, 3, dtype=torch.bool)).hidden)
    swapped = model(x[:, [1, 0, 2]])
    assert not torch.allclose(swapped.hidden[0, 1], out.hidden[0, 0])


def test_gradients_reach_every_parameter_and_output_size_projects():
    model = TransformerEncoder(
        input_size=5,
        hidden_size=8,
        num_layers=1,
        num_heads=2,
        output_size=3,
        pooling="cls",
        positions="learned",
    )
    mask = torch.tensor([[True, True, False]])
    out = model(torch.randn(1, 3, 5), mask)
    assert out.hidden.shape == (1, 3, 3) and out.pooled.shape == (1, 3)
    assert out.hidden[0, 2].abs().sum() == 0
    (out.pooled.sum() + out.hidden.sum()).backward()
    unused = [
        name for name, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0
    ]
    assert unused == []
    # Only the positions of the two real tokens are used.
    assert model.position_embedding.weight.grad[2:].abs().sum() == 0


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        TransformerEncoder(input_size=5, hidden_size=8, num_heads=3)
    with pytest.raises(ValueError, match="'mean' or 'cls'"):
        TransformerEncoder(input_size=5, hidden_size=8, pooling="max")
    with pytest.raises(ValueError, match="'learned' or 'sinusoidal'"):
        TransformerEncoder(input_size=5, hidden_size=8, positions="rotary")
    model = TransformerEncoder(input_size=5, hidden_size=8, positions="learned", max_length=4)
    with pytest.raises(ValueError, match="longer than max_length=4"):
        model(torch.randn(1, 5, 5))
    with pytest.raises(ValueError, match="no real token"):
        model(torch.randn(2, 3, 5), torch.tensor([[True, False, False], [False, False, False]]))
    with pytest.raises(ValueError, match=r"expected \(B, T, 5\)"):
        model(torch.randn(2, 3, 4))
    assert model.input_view == "tokens" and model.output_size == 8


def test_bf16_autocast_runs_fp32_where_the_encoders_own_probe_says_bf16_does_not_pay(monkeypatch):
    """Its layers are plain torch modules, which follow autocast: on an Intel Xeon without
    AVX512-BF16 (family 6 model 207 as its VM reports it) the ListOps preset's update ran at 0.51x
    fp32 under bf16-mixed. Under a bf16 autocast it asks kernels.keeps_autocast with its own
    forward and backward on the batch being read; where bf16 does not pay it runs exactly as with
    precision=32, else it follows autocast."""
    from treernn.kernels import gemm

    torch.manual_seed(0)
    model = make(dropout=0.3, output_size=6).train()
    x = torch.randn(2, 4, 5)
    decide = OwnLoopDecision()
    monkeypatch.setattr(gemm, "product_dtype", decide)
    (fp32, as_fp32), (_, as_bf16) = decide.fp32_and_autocast_outputs(lambda: model(x).pooled)
    torch.testing.assert_close(as_fp32, fp32, atol=0, rtol=0)
    assert (as_fp32.dtype, as_bf16.dtype) == (torch.float32, torch.bfloat16)
    assert all(parameter.grad is None for parameter in model.parameters())
    assert decide.asked == [(2, 8, 8, "TransformerEncoder", "transformer, training")] * 2
    # 8 tokens of 4: 2 * 8 * (5 * 8 + 2 layers * (4 * 8^2 + 2 * 8 * 16 + 2 * 4 * 8)), x3 training
    assert decide.flops == [3 * 2 * 8 * (5 * 8 + 2 * (4 * 64 + 2 * 8 * 16 + 2 * 4 * 8))] * 2
