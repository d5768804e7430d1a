"""Ordered Memory: the Gated Recursive Cell, the masked attention, the memory update on hand-derived
steps, the fused path against the readable reference (Algorithm 1, ``impl="reference"``), the
hand-written backward of the slot chain against autograd, padding invariance, slot counts,
dropout and gradients."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from torch import nn

from tests.fixtures.precision import fp32_and_bf16_runs
from treernn.encoders.ordered_memory import (
    GatedRecursiveCell,
    OrderedMemoryEncoder,
    OrderedMemoryRecurrence,
    masked_attention,
)
from treernn.kernels import cpp_ext, gemm
from treernn.kernels import ordered_memory as om_kernel
from treernn.kernels.ordered_memory import slot_chain, slot_chain_autograd


# ----------------------------------------------------------------------------- cell
def test_grc_matches_hand_computation():
    cell = GatedRecursiveCell(3)
    with torch.no_grad():
        cell.first_layer.weight.zero_()
        cell.first_layer.bias.zero_()
        cell.second_layer.weight.zero_()
        # gate logits 0 -> every gate 0.5; candidate u = (0, 0, 6)
        cell.second_layer.bias.copy_(torch.tensor([0.0] * 9 + [0.0, 0.0, 6.0]))
    left, right = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[3.0, 2.0, 1.0]])
    # 0.5 * (1,2,3) + 0.5 * (3,2,1) + 0.5 * (0,0,6) = (2,2,5): mean 3, variance 2
    expected = torch.tensor([[-1.0, -1.0, 2.0]]) / math.sqrt(2.0 + 1e-5)
    torch.testing.assert_close(cell(left, right), expected)


def test_grc_shares_the_given_layer_norm_and_split_path_agrees():
    norm = nn.LayerNorm(4)
    cell = GatedRecursiveCell(4, layer_norm=norm)
    assert cell.layer_norm is norm
    left, right = torch.randn(5, 4), torch.randn(5, 4)
    weight_left, weight_right, bias = cell.split_first_layer()
    first = left @ weight_left.t() + right @ weight_right.t() + bias
    torch.testing.assert_close(cell.compose(left, right, first, None), cell(left, right))
    with pytest.raises(ValueError, match="hidden_size=4"):
        cell(torch.randn(5, 3), torch.randn(5, 3))


def test_grc_given_dropout_masks_are_used():
    cell = GatedRecursiveCell(4, dropout=0.5).train()
    left, right = torch.randn(2, 4), torch.randn(2, 4)
    ones = (torch.ones(2, 8), torch.ones(2, 16))
    cell.eval()
    reference = cell(left, right)
    cell.train()
    torch.testing.assert_close(cell(left, right, dropout_masks=ones), reference)
    masks = cell.sample_dropout_masks(2, left)
    assert set(masks[0].unique().tolist()) <= {0.0, 2.0}


# ----------------------------------------------------------------------------- attention
def test_masked_attention_hand_case():
    scores = torch.tensor([[5.0, math.log(2.0), 0.0]])
    allowed = torch.tensor([[0.0, 1.0, 0.5]])
    # slot 0 masked out; weights 2 * 1 and 1 * 0.5 -> (0, 0.8, 0.2)
    torch.testing.assert_close(masked_attention(scores, allowed), torch.tensor([[0.0, 0.8, 0.2]]))


def test_masked_attention_drops_mask_values_below_the_authors_threshold():
    scores = torch.zeros(1, 3)
    allowed = torch.tensor([[5e-6, 2e-5, 1.0]], requires_grad=True)
    # 5e-6 < 1e-5 counts as 0 (process_softmax); 2e-5 keeps its weight: (0, 2e-5, 1) / (1 + 2e-5)
    weights = masked_attention(scores, allowed)
    expected = torch.tensor([[0.0, 2e-5, 1.0]]) / (1.0 + 2e-5)
    torch.testing.assert_close(weights, expected, atol=0, rtol=1e-6)
    assert weights[0, 0] == 0
    weights[0, 0].backward()
    assert allowed.grad[0, 0] == 0  # no gradient into a dropped mask value


# ----------------------------------------------------------------------------- steps by hand
def make_encoder(**kwargs) -> OrderedMemoryEncoder:
    torch.manual_seed(0)
    options = {"input_size": 5, "hidden_size": 6, "memory_slots": 3}
    options.update(kwargs)
    return OrderedMemoryEncoder(**options).eval()


def test_first_steps_follow_the_paper_by_hand():
    encoder = make_encoder(memory_slots=2)
    memory = encoder.forward_memory
    x = torch.randn(1, 3, 5)
    out = encoder(x)
    attention = out.tree_signal.values[0, 0]  # (T, N)
    with torch.no_grad():
        x1, x2, x3 = memory.layer_norm(memory.input_projection(x[0])).unbind(0)  # eq. (1)
        cell = memory.cell
        # t = 1: no attention, every candidate slot is x1, output x1
        torch.testing.assert_close(attention[0], torch.zeros(2))
        torch.testing.assert_close(out.hidden[0, 0], x1)
        # t = 2: only the last slot is allowed; M_2 = M_hat_1 = (x1, x1); output cell(x2, x1)
        torch.testing.assert_close(attention[1], torch.tensor([0.0, 1.0]))
        candidate_2_last = cell(x2[None], x1[None])[0]
        torch.testing.assert_close(out.hidden[0, 1], candidate_2_last)
        # t = 3: p = (p0, p1); cp = (p0, 1), rcp = (1, p1)
        p0, p1 = attention[2]
        assert 0 < p0 < 1 and torch.isclose(p0 + p1, torch.tensor(1.0))
        memory_0 = x2  # rcp^0 = 1: M_hat_2^0 (= x2, its cp was 0)
        memory_1 = x1 * (1 - p1) + candidate_2_last * p1  # eq. (5)
        candidate_0 = x3 * (1 - p0) + cell(x3[None], memory_0[None])[0] * p0  # eq. (7)
        output_3 = cell(candidate_0[None], memory_1[None])[0]  # cp^1 = 1
        torch.testing.assert_close(out.hidden[0, 2], output_3, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.pooled[0], output_3, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_batched_encoder_matches_plain_algorithm_and_ignores_padding(padding_side):
    encoder = make_encoder(memory_slots=3, padding_side=padding_side)
    reference = make_encoder(memory_slots=3, impl="reference")  # Algorithm 1 as written
    reference.load_state_dict(encoder.state_dict())
    lengths = [7, 2, 5, 1, 4]
    steps = max(lengths)
    sequences = [torch.randn(length, 5) for length in lengths]
    x = torch.full((len(lengths), steps, 5), 9.0)  # padding values must not matter
    mask = torch.zeros(len(lengths), steps, dtype=torch.bool)
    for row, sequence in enumerate(sequences):
        positions = (
            slice(0, lengths[row])
            if padding_side == "right"
            else slice(steps - lengths[row], steps)
        )
        x[row, positions] = sequence
        mask[row, positions] = True
    with torch.no_grad():
        out = encoder(x, mask)
        for row, sequence in enumerate(sequences):
            alone = reference(sequence[None])  # one unpadded sequence
            expected_hidden, expected_attention = alone.hidden[0], alone.tree_signal.values[0, 0]
            torch.testing.assert_close(
                out.hidden[row][mask[row]], expected_hidden, atol=1e-5, rtol=1e-4
            )
            torch.testing.assert_close(
                out.tree_signal.values[0, row][mask[row]], expected_attention, atol=1e-5, rtol=1e-4
            )
            torch.testing.assert_close(out.pooled[row], expected_hidden[-1], atol=1e-5, rtol=1e-4)
            assert out.hidden[row][~mask[row]].abs().sum() == 0


def test_left_and_right_padding_give_the_same_outputs_bidirectional():
    torch.manual_seed(1)
    right = OrderedMemoryEncoder(4, 6, memory_slots=4, bidirectional=True).eval()
    left = OrderedMemoryEncoder(
        4, 6, memory_slots=4, bidirectional=True, padding_side="left"
    ).eval()
    left.load_state_dict(right.state_dict())
    lengths = torch.tensor([5, 3, 1])
    x = torch.randn(3, 5, 4)
    mask_right = torch.arange(5)[None] < lengths[:, None]
    x_left = torch.zeros_like(x)
    for row in range(3):
        x_left[row, 5 - lengths[row] :] = x[row, : lengths[row]]
    mask_left = mask_right.flip(1)
    with torch.no_grad():
        out_right, out_left = right(x, mask_right), left(x_left, mask_left)
        alone = right(x[1:2, :3])
    assert out_right.pooled.shape == (3, 12) and right.output_size == 12
    torch.testing.assert_close(out_right.pooled, out_left.pooled, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out_right.hidden[1, :3], alone.hidden[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(
        out_right.hidden[mask_right], out_left.hidden[mask_left], atol=1e-6, rtol=1e-5
    )


def test_more_slots_at_test_time():
    encoder = OrderedMemoryEncoder(4, 6, memory_slots=12, test_memory_slots=24)
    x = torch.randn(2, 30, 4)
    encoder.train()
    assert encoder(x).tree_signal.values.shape == (1, 2, 30, 12)
    encoder.eval()
    with torch.no_grad():
        attention = encoder(x).tree_signal.values[0]
    assert attention.shape == (2, 30, 24)
    # step k (0-based) can reach at most min(N, k) slots: the last k
    for step in range(1, 24):
        assert attention[:, step, : 24 - step].abs().sum() == 0 and attention[:, step, -1].min() > 0
    torch.testing.assert_close(attention[:, 1:].sum(-1), torch.ones(2, 29))


def test_validation_uses_the_training_slot_count_and_test_the_test_count():
    """The authors validate with the training count (12 on logic) and test with 24; the task sets
    its eval stage around its validation loop (tasks.base.Task, Encoder.set_eval_stage)."""
    from treernn.tasks.base import Task

    encoder = OrderedMemoryEncoder(4, 6, memory_slots=3, test_memory_slots=5).eval()
    x = torch.randn(2, 7, 4)
    assert encoder(x).tree_signal.values.shape[-1] == 5  # eval mode alone: the test count
    task = Task.__new__(Task)  # only the hooks are exercised
    nn.Module.__init__(task)
    task.encoder = encoder
    task.on_validation_start()
    assert encoder(x).tree_signal.values.shape[-1] == 3
    task.on_validation_end()
    assert encoder(x).tree_signal.values.shape[-1] == 5
    task.on_validation_start()
    task.on_test_start()  # a test pass after an interrupted validation still uses the test count
    assert encoder(x).tree_signal.values.shape[-1] == 5
    encoder.train()
    assert encoder(x).tree_signal.values.shape[-1] == 3


def test_gradients_reach_every_parameter():
    encoder = OrderedMemoryEncoder(4, 6, memory_slots=3, dropout=0.1, memory_dropout=0.1).train()
    x = torch.randn(3, 6, 4, requires_grad=True)
    mask = torch.arange(6)[None] < torch.tensor([[6], [4], [2]])
    encoder(x, mask).pooled.pow(2).sum().backward()
    for name, parameter in encoder.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert x.grad[2, 2:].abs().sum() == 0 and x.grad[2, :2].abs().sum() > 0


def test_dropout_only_in_training_and_zero_dropout_is_deterministic():
    torch.manual_seed(0)
    encoder = OrderedMemoryEncoder(
        4,
        6,
        memory_slots=3,
        dropout=0.3,
        memory_dropout=0.3,
        input_dropout=0.2,
        output_dropout=0.2,
        locked_input_dropout=True,
    )
    x = torch.randn(2, 5, 4)
    encoder.eval()
    reference = encoder(x).pooled
    torch.testing.assert_close(encoder(x).pooled, reference)
    encoder.train()
    assert not torch.allclose(encoder(x).pooled, reference)
    plain = OrderedMemoryEncoder(4, 6, memory_slots=3)
    torch.testing.assert_close(plain.train()(x).pooled, plain.eval()(x).pooled)


def test_long_sequences_run_with_a_full_stack_and_output_size_projection():
    encoder = OrderedMemoryEncoder(4, 6, memory_slots=2, output_size=3).eval()
    out = encoder(torch.randn(2, 9, 4))
    assert out.hidden.shape == (2, 9, 3) and out.pooled.shape == (2, 3)
    assert torch.isfinite(out.hidden).all()


def test_bad_arguments_and_masks_are_reported():
    with pytest.raises(ValueError, match="num_layers=2"):
        OrderedMemoryEncoder(4, 6, num_layers=2)
    with pytest.raises(ValueError, match="memory_slots=0"):
        OrderedMemoryEncoder(4, 6, memory_slots=0)
    encoder = OrderedMemoryEncoder(4, 6)
    with pytest.raises(ValueError, match="not right-padded"):
        encoder(torch.randn(1, 3, 4), torch.tensor([[False, True, True]]))
    with pytest.raises(ValueError, match=r"\(B, T, 4\)"):
        encoder(torch.randn(1, 3, 5))


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_authors_left_padding_composes_the_first_token_with_a_zero_memory(impl):
    """``padding_mode=authors_left``: a row shorter than the batch starts as the authors'
    left-padded rows do, its first token an ordinary step over the zero state: output
    cell(x_1, 0) into the last slot, then two slots attendable at its second token. The default
    treatment ignores padding; a row that fills the batch is the same under both."""
    torch.manual_seed(0)
    options = {"input_size": 5, "hidden_size": 6, "memory_slots": 3, "impl": impl}
    invariant = OrderedMemoryEncoder(**options, padding_side="left").eval()
    authors = OrderedMemoryEncoder(**options, padding_side="left", padding_mode="authors_left")
    authors.eval().load_state_dict(invariant.state_dict())
    sequence = torch.randn(4, 5)
    x = torch.zeros(2, 6, 5)
    x[0, 2:] = sequence  # two pads on the left
    x[1] = torch.randn(6, 5)  # fills the batch
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, :2] = False
    with torch.no_grad():
        alone = invariant(sequence[None])
        plain, padded = invariant(x, mask), authors(x, mask)
        memory = invariant.forward_memory
        x_1 = memory.layer_norm(memory.input_projection(sequence[:1]))  # eq. (1), (1, H)
        composed_with_zero = memory.cell(x_1, torch.zeros_like(x_1))
    close = {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(plain.hidden[0, 2:], alone.hidden[0], **close)  # invariant
    torch.testing.assert_close(padded.hidden[1], plain.hidden[1], **close)  # no padding
    torch.testing.assert_close(padded.hidden[0, 2], composed_with_zero[0], **close)
    torch.testing.assert_close(plain.hidden[0, 2], x_1[0], **close)  # first-token treatment
    # attention: the last slot at the first token, two slots at the second
    torch.testing.assert_close(padded.tree_signal.values[0, 0, 2], torch.tensor([0.0, 0.0, 1.0]))
    second = padded.tree_signal.values[0, 0, 3]
    assert second[0] == 0 and 0 < second[1] < 1
    assert (padded.hidden[0, 3:] - plain.hidden[0, 3:]).abs().amin(-1).gt(1e-4).all()
    # the same with the batch right-padded: "as if left-padded to the batch's width"
    right = OrderedMemoryEncoder(**options, padding_mode="authors_left").eval()
    right.load_state_dict(invariant.state_dict())
    x_right = torch.stack([torch.cat([sequence, torch.zeros(2, 5)]), x[1]])
    with torch.no_grad():
        out_right = right(x_right, mask.flip(1))
    torch.testing.assert_close(out_right.hidden[0, :4], padded.hidden[0, 2:], **close)
    with pytest.raises(ValueError, match="padding_mode='authors'"):
        OrderedMemoryEncoder(4, 6, padding_mode="authors")


def test_carried_state_continues_the_sequence():
    encoder = make_encoder(memory_slots=3)
    x = torch.randn(2, 7, 5)
    mask = torch.arange(7)[None] < torch.tensor([[7], [5]])
    with torch.no_grad():
        whole = encoder(x, mask)
        first = encoder(x[:, :3], mask[:, :3])
        second = encoder(x[:, 3:], mask[:, 3:], state=first.state)
    torch.testing.assert_close(second.pooled, whole.pooled, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(second.hidden, whole.hidden[:, 3:], atol=1e-6, rtol=1e-5)
    assert second.state.tokens_seen.tolist() == [7, 5]


# ----------------------------------------------------------------------------- fused slot chain
def run_with_gradients(encoder, x, mask, seed, state=None, memory_in_loss=True):
    """Output, attention, input gradient and parameter gradients of one seeded forward pass."""
    encoder.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    torch.manual_seed(seed)  # the same dropout masks for the fused and the reference path
    out = encoder(x, mask, state=state)
    attention = out.tree_signal.values
    loss = out.pooled.sin().sum() + out.hidden.cos().sum() + attention.pow(2).sum()
    loss = loss + out.state.cumulative_pointer.sum()
    if memory_in_loss:
        loss = loss + out.state.memory.tanh().sum()
    loss.backward()
    gradients = {name: p.grad for name, p in encoder.named_parameters()}
    return out, x.grad, gradients


def run_with_autograd_slot_chain(monkeypatch, *args, **kwargs):
    """`run_with_gradients` with the fused path's slot chain swapped for its autograd twin."""
    with monkeypatch.context() as patch:
        patch.setattr(om_kernel, "slot_chain", slot_chain_autograd)
        return run_with_gradients(*args, **kwargs)


@pytest.fixture(params=["kernel", "torch"])
def chain_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: the slot chain's elementwise work on the compiled kernels
    (``csrc/om_chain.cpp``, which must build wherever the tests run: a failed build is a bug, not a
    skip), and on torch ops (``TREERNN_CPP_EXT=0``)."""
    if request.param == "kernel":
        monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
        assert om_kernel.chain_kernel(torch.zeros(1)) is not None, (
            "the om_chain C++ extension did not build; see the log"
        )
    else:
        monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
        assert om_kernel.chain_kernel(torch.zeros(1)) is None
    return request.param


def fused_and_reference(**kwargs):
    torch.manual_seed(0)
    options = {"input_size": 5, "hidden_size": 6, "memory_slots": 3, "dropout": 0.2}
    options.update(memory_dropout=0.2, input_dropout=0.1, output_dropout=0.1)
    options.update(kwargs)
    fused = OrderedMemoryEncoder(**options, impl="fast").double()
    reference = OrderedMemoryEncoder(**options, impl="reference").double()
    reference.load_state_dict(fused.state_dict())
    return fused, reference


def assert_same_pass(first, second):
    (out_a, grad_x_a, grads_a), (out_b, grad_x_b, grads_b) = first, second
    close = {"atol": 1e-6, "rtol": 1e-6}
    torch.testing.assert_close(out_a.hidden, out_b.hidden, **close)
    torch.testing.assert_close(out_a.pooled, out_b.pooled, **close)
    torch.testing.assert_close(out_a.tree_signal.values, out_b.tree_signal.values, **close)
    torch.testing.assert_close(out_a.state.candidate, out_b.state.candidate, **close)
    torch.testing.assert_close(grad_x_a, grad_x_b, **close)
    for name, gradient in grads_a.items():
        assert gradient is not None and grads_b[name] is not None, name
        torch.testing.assert_close(gradient, grads_b[name], **close, msg=name)


@pytest.mark.parametrize(
    ("padding_side", "padding_mode"),
    [("right", "invariant"), ("left", "invariant"), ("left", "authors_left")],
)
@pytest.mark.parametrize("training", [True, False])
def test_hand_written_slot_chain_backward_matches_autograd(
    padding_side, padding_mode, training, monkeypatch, chain_path
):
    fused, _ = fused_and_reference(
        padding_side=padding_side, padding_mode=padding_mode, memory_slots=4
    )
    fused.train(training)
    lengths = torch.tensor([[9], [6], [2], [1], [8]])
    positions = torch.arange(9)[None]
    mask = positions < lengths if padding_side == "right" else positions >= 9 - lengths
    x = torch.randn(5, 9, 5, dtype=torch.float64)
    assert_same_pass(
        run_with_gradients(fused, x, mask, seed=3),
        run_with_autograd_slot_chain(monkeypatch, fused, x, mask, seed=3),
    )


def test_hand_written_slot_chain_backward_matches_autograd_with_carried_state(
    monkeypatch, chain_path
):
    fused, _ = fused_and_reference(memory_slots=3)
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor([[7], [4], [6]])
    results = []
    for run in (run_with_gradients, partial(run_with_autograd_slot_chain, monkeypatch)):
        torch.manual_seed(5)
        with torch.no_grad():
            state = fused(x[:, :4], mask[:, :4]).state
        results.append(run(fused, x[:, 4:], mask[:, 4:], seed=6, state=state))
    assert_same_pass(*results)


@pytest.mark.parametrize(
    ("padding_side", "padding_mode"),
    [("right", "invariant"), ("left", "invariant"), ("left", "authors_left")],
)
def test_fused_path_matches_the_reference_with_gradients(padding_side, padding_mode, chain_path):
    """Eval mode: in training the fused path hands the same dropout masks to rows in length
    order. ``state.memory`` stays out of the loss: the fused path leaves the memory of slots that
    were never attended as it was (they are never read), where eq. (5) copies M_hat into it."""
    fused, reference = fused_and_reference(
        padding_side=padding_side, padding_mode=padding_mode, memory_slots=4
    )
    fused.eval()
    reference.eval()
    lengths = torch.tensor([[9], [6], [2], [1], [8]])
    positions = torch.arange(9)[None]
    mask = positions < lengths if padding_side == "right" else positions >= 9 - lengths
    x = torch.randn(5, 9, 5, dtype=torch.float64)
    assert_same_pass(
        run_with_gradients(fused, x, mask, seed=3, memory_in_loss=False),
        run_with_gradients(reference, x, mask, seed=3, memory_in_loss=False),
    )


@pytest.mark.parametrize("training", [True, False])
def test_fused_path_skips_unreachable_slots_exactly(training, monkeypatch, chain_path):
    """Sharp attention leaves mask values below the authors' threshold, so some steps' windows
    shrink (no composition where every row's cp is exactly 0). The outputs and gradients stay
    those of the reference (eval) and of the autograd slot chain (training, with dropout)."""
    fused, reference = fused_and_reference(memory_slots=6, hidden_size=8)
    with torch.no_grad():
        for encoder in (fused, reference):
            encoder.forward_memory.score.weight.mul_(400.0)  # peaked softmax
    windows = []

    def spy(mask_pointer, threshold):
        window = reachable_window(mask_pointer, threshold)
        windows.append((mask_pointer.size(1) + 1, window))
        return window

    reachable_window = om_kernel._reachable_window
    monkeypatch.setattr(om_kernel, "_reachable_window", spy)
    fused.train(training)
    reference.train(training)
    x = torch.randn(4, 14, 5, dtype=torch.float64)
    mask = torch.arange(14)[None] < torch.tensor([[14], [11], [3], [14]])
    first = run_with_gradients(fused, x, mask, seed=3, memory_in_loss=False)
    assert any(window < scheduled for scheduled, window in windows), windows
    if training:  # dropout masks go to rows in another order: compare with the autograd chain
        second = run_with_autograd_slot_chain(
            monkeypatch, fused, x, mask, seed=3, memory_in_loss=False
        )
    else:
        second = run_with_gradients(reference, x, mask, seed=3, memory_in_loss=False)
    assert_same_pass(first, second)


def test_fused_path_matches_the_reference_with_carried_state():
    fused, reference = fused_and_reference(memory_slots=3)
    fused.eval()
    reference.eval()
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor([[7], [4], [6]])
    results = []
    for encoder in (fused, reference):
        with torch.no_grad():
            state = encoder(x[:, :4], mask[:, :4]).state
        results.append(
            run_with_gradients(
                encoder, x[:, 4:], mask[:, 4:], seed=6, state=state, memory_in_loss=False
            )
        )
    assert_same_pass(*results)


def test_fused_inference_path_equals_the_autograd_path():
    fused, _ = fused_and_reference()
    fused.eval()
    x = torch.randn(2, 6, 5, dtype=torch.float64)
    with torch.no_grad():
        expected = fused(x).hidden
    torch.testing.assert_close(fused(x.requires_grad_()).hidden, expected, atol=0, rtol=0)


def test_slot_chain_gradcheck(chain_path):
    torch.manual_seed(0)
    rows, width, size = 3, 3, 2

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=torch.float64) * scale).requires_grad_()

    cumulative = torch.rand(rows, width, dtype=torch.float64).cumsum(1).div(2.0).requires_grad_()
    inputs = (
        tensor(rows, size),  # x_t
        tensor(rows, width, size),  # memory
        tensor(width, rows, 4 * size),  # right_projected
        cumulative,
        tensor(4 * size, size),  # weight_left
        tensor(4 * size, 4 * size, scale=0.5),  # weight_second
        tensor(4 * size),  # bias_second
        (1.0 + torch.rand(size, dtype=torch.float64)).requires_grad_(),  # norm_weight
        tensor(size),  # norm_bias
    )
    left_mask = torch.bernoulli(torch.full((rows, size), 0.7, dtype=torch.float64)) / 0.7
    hidden_mask = torch.rand(rows, 4 * size, dtype=torch.float64) * 2.0  # any non-negative mask
    for masks in ((None, None), (left_mask, hidden_mask)):
        assert torch.autograd.gradcheck(
            lambda *args, masks=masks: slot_chain(*args, *masks), inputs
        )
        # overwrite_right (the encoder's call): the ReLU layers go into right_projected itself
        results = []
        for overwrite in (False, True):
            copies = [t.detach().clone().requires_grad_() for t in inputs]
            right = copies[2].detach().clone()  # a non-leaf the chain may overwrite
            right.requires_grad_()
            given = right * 1.0
            out = slot_chain(*copies[:2], given, *copies[3:], *masks, overwrite_right=overwrite)
            out.sin().sum().backward()
            assert torch.equal(given, right) != overwrite  # written in place only when asked
            results.append((out, right.grad, *(t.grad for t in copies if t.grad is not None)))
        for first, second in zip(*results, strict=True):
            torch.testing.assert_close(first, second, atol=1e-12, rtol=1e-12)


def chain_in_two_precisions(products: torch.dtype, overwrite_right: bool):
    """slot_chain with a float64 state and its products in ``products`` (the operands'
    precision, as bf16 operands under a float32 state): the output and every gradient."""
    torch.manual_seed(0)
    rows, width, size = 5, 4, 6

    def tensor(*shape, scale=1.0):
        return (torch.randn(*shape, dtype=torch.float64) * scale).requires_grad_()

    cumulative = torch.rand(rows, width, dtype=torch.float64).cumsum(1).div(3.0).requires_grad_()
    weights = (tensor(4 * size, size), tensor(4 * size, 4 * size, scale=0.5), tensor(4 * size))
    inputs = (
        tensor(rows, size),  # x_t
        tensor(rows, width, size),  # memory
        cumulative,
        (1.0 + torch.rand(size, dtype=torch.float64)).requires_grad_(),  # norm_weight
        tensor(size),  # norm_bias
    )
    right_projected = tensor(width, rows, 4 * size).detach().to(products).requires_grad_()
    left_mask = torch.bernoulli(torch.full((rows, size), 0.7, dtype=torch.float64)) / 0.7
    hidden_mask = (torch.rand(rows, 4 * size) * 2.0).to(products)
    operands = om_kernel.slot_chain_operands(*weights, products, gemm_backend="aten")
    x_t, memory, cumulative, norm_weight, norm_bias = inputs
    right = right_projected * 1.0  # a non-leaf the chain may overwrite
    out = slot_chain(
        x_t, memory, right, cumulative, *weights, norm_weight, norm_bias, left_mask,
        hidden_mask, 1e-5, operands, overwrite_right=overwrite_right,
    )  # fmt: skip
    out.sin().sum().backward()
    leaves = (*inputs, right_projected, *weights)
    return out.detach(), [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("overwrite_right", [False, True])
def test_kernels_run_the_chain_under_lower_precision_products(monkeypatch, overwrite_right):
    """Products in a lower precision than the state (bf16 under a float32 state; here float32
    under float64, where both paths' products see the same inputs): the compiled kernels do the
    chain's elementwise work in the state's precision, and give the torch-ops path's result."""
    calls = {"compose_forward": 0, "compose_backward": 0}
    kernel = om_kernel.chain_kernel(torch.zeros(1, dtype=torch.float64))
    assert kernel is not None, "the om_chain C++ extension did not build; see the log"

    class Counted:
        def __getattr__(self, name):
            if name in calls:
                calls[name] += 1
            return getattr(kernel, name)

    chain_module = __import__("treernn.kernels.ordered_memory_chain", fromlist=["x"])
    monkeypatch.setattr(chain_module, "chain_kernel", lambda like: Counted())
    out, grads = chain_in_two_precisions(torch.float32, overwrite_right)
    assert calls == {"compose_forward": 4, "compose_backward": 4}  # one per slot
    monkeypatch.setattr(chain_module, "chain_kernel", lambda like: None)
    out_torch, grads_torch = chain_in_two_precisions(torch.float32, overwrite_right)
    torch.testing.assert_close(out, out_torch, atol=1e-6, rtol=1e-6)
    for grad, grad_torch in zip(grads, grads_torch, strict=True):
        assert grad.dtype == grad_torch.dtype
        torch.testing.assert_close(grad, grad_torch, atol=1e-5, rtol=1e-5)


def test_bf16_autocast_trains_and_stays_close_to_fp32(monkeypatch, chain_path):
    # bf16 products even where this CPU has no bf16 kernels (slow, but the arithmetic is the same)
    monkeypatch.setattr(gemm, "bf16_pays", lambda *shape: True)
    torch.manual_seed(0)
    encoder = OrderedMemoryEncoder(
        16, 32, memory_slots=5, dropout=0.1, memory_dropout=0.1, bidirectional=True
    ).train()
    x = torch.randn(4, 9, 16)
    mask = torch.arange(9)[None] < torch.tensor([[9], [7], [3], [9]])
    results = []
    for out, grads in fp32_and_bf16_runs(encoder, x, mask, lambda out: out.pooled.pow(2).sum()):
        assert out.hidden.dtype == torch.float32 and out.pooled.dtype == torch.float32
        assert all(torch.isfinite(g).all() for g in grads.values())
        results.append((out.hidden.detach(), grads))
    (hidden, grads), (hidden_bf16, grads_bf16) = results
    assert (hidden_bf16 - hidden).norm() / hidden.norm() < 5e-2
    for name in ("forward_memory.cell.second_layer.weight", "backward_memory.layer_norm.weight"):
        assert (grads_bf16[name] - grads[name]).norm() / grads[name].norm() < 1e-1, name
    # the reference path ignores autocast (fp32 throughout) and must not crash under it
    reference = OrderedMemoryEncoder(16, 32, memory_slots=5, impl="reference")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert reference(x, mask).hidden.dtype == torch.float32


def test_precision_is_probed_on_the_recurrences_own_loop(monkeypatch):
    """The products' precision is decided by timing the recurrence's fast path itself, fp32
    against bf16 products (a product faster alone made an H100's training step slower, and a
    loop of full rows chose bf16 where an AMX Xeon's logic update ran at 0.85x fp32): both loops
    run it with their dtype on rows of the batch's lengths (scaled to the probe's 16 tokens),
    forward and backward in training, with the module's dropout there, drawing nothing from the
    run's random streams and leaving ``.grad`` alone; the encoder asks with its loop, training or
    inference, on the CPU."""
    torch.manual_seed(0)
    recurrence = OrderedMemoryRecurrence(6, 8, dropout=0.1, memory_dropout=0.2)
    seen = []
    fused = om_kernel.fused_ordered_memory

    def spy(x, mask, state, weights, masks, dtype, *rest):
        dropout = masks.query is not None and masks.cell_input is not None
        seen.append((dtype, dropout, x.shape, mask.sum(1).tolist()))
        out = fused(x, mask, state, weights, masks, dtype, *rest)
        seen[-1] += (out[0].requires_grad,)
        return out

    monkeypatch.setattr(om_kernel, "fused_ordered_memory", spy)
    state = torch.get_rng_state()
    steps = om_kernel.PROBE_STEPS
    assert steps == 16
    # the batch's lengths (of 40 tokens) scaled to 16 tokens, rounded up; a short batch as it is
    batches = [([40, 27, 13, 1], 40, [16, 11, 6, 1]), ([7, 3, 5], 7, [7, 3, 5])]
    # a CPU with bf16 GEMM kernels (the bf16 loops run on torch's reference loop elsewhere)
    monkeypatch.setattr(om_kernel.gemm, "bf16_kernels", lambda device: True)
    for training, (lengths, tokens, expected) in zip((True, False), batches, strict=True):
        recurrence.train(training)
        mask = torch.arange(tokens)[None] < torch.tensor(lengths)[:, None]
        loops, flops = om_kernel.precision_runs(recurrence, mask, 5, training, torch.device("cpu"))
        assert flops == 2.0 * sum(expected) * 32 * 32 * (3 if training else 1)
        with torch.no_grad():  # as gemm.time_in_turns calls them
            loops["float32"]()
            loops["bfloat16"]()
        shape = (len(lengths), min(tokens, steps), 6)
        assert seen[-2:] == [
            (None, training, shape, expected, training),
            (torch.bfloat16, training, shape, expected, training),
        ]
    assert torch.equal(state, torch.get_rng_state())
    assert all(parameter.grad is None for parameter in recurrence.parameters())
    # without bf16 GEMM kernels (an AVX2-only CPU) there is no bf16 loop to time: fp32 is kept
    monkeypatch.setattr(om_kernel.gemm, "bf16_kernels", lambda device: False)
    loops, _ = om_kernel.precision_runs(recurrence, mask, 5, False, torch.device("cpu"))
    assert set(loops) == {"float32"}
    # the decision's name says which loop it timed; without the loop, the product alone
    asked = []
    monkeypatch.setattr(om_kernel.gemm, "product_dtype", lambda *args: asked.append(args))
    x = torch.zeros(3, 5, 6)
    om_kernel.product_dtype(x, 8, runs="loops")
    with torch.no_grad():
        om_kernel.product_dtype(x, 8, runs="loops")
    om_kernel.product_dtype(x, 8)
    assert [args[5:] for args in asked] == [
        ("cell and projections, training", "loops"),
        ("cell and projections, inference", "loops"),
        ("cell and projections", None),
    ]
    assert asked[0][:4] == (3, 32, 32, x.device)
    asked.clear()
    encoder = OrderedMemoryEncoder(6, 8, memory_slots=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        encoder(torch.randn(3, 5, 6))
    assert [args[5] for args in asked] == ["cell and projections, training"]
    assert callable(asked[0][6])  # the encoder's own loop


def test_bf16_autocast_keeps_fp32_products_without_bf16_kernels(monkeypatch):
    monkeypatch.setattr(gemm, "bf16_pays", lambda *shape: False)
    torch.manual_seed(0)
    encoder = OrderedMemoryEncoder(8, 16, memory_slots=4).eval()
    x = torch.randn(3, 6, 8)
    with torch.no_grad():
        expected = encoder(x).hidden
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = encoder(x).hidden
    torch.testing.assert_close(hidden, expected, atol=0, rtol=0)


@pytest.mark.parametrize("backend", ["mkl", "onednn", "treernn"])
def test_fused_path_per_gemm_backend_float32(backend, monkeypatch, chain_path):
    """Each packed-GEMM backend forced for the slot chain's products (float32, training, with
    dropout and padding) against the aten products: the same outputs, attention and gradients to
    float32 rounding (1e-5); and in eval against the readable reference to 1e-5."""
    usable = gemm.candidates(torch.device("cpu"), torch.float32)
    if backend == "treernn" and chain_path == "torch":
        # treernn's GEMM is a C++ extension: with the extensions off it must not be offered
        assert backend not in usable
        return
    if backend not in usable:
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    fused, reference = fused_and_reference(memory_slots=4)
    fused, reference = fused.float(), reference.float()
    x = torch.randn(5, 9, 5)
    mask = torch.arange(9)[None] < torch.tensor([[9], [6], [2], [1], [8]])
    close = {"atol": 1e-5, "rtol": 1e-5}
    for training in (True, False):
        fused.train(training)
        reference.train(training)
        runs = {}
        for name in ("aten", backend):
            monkeypatch.setenv(gemm.ENV_VAR, name)
            runs[name] = run_with_gradients(fused, x, mask, seed=3, memory_in_loss=False)
        if not training:
            monkeypatch.setenv(gemm.ENV_VAR, "aten")
            runs["reference"] = run_with_gradients(reference, x, mask, seed=3, memory_in_loss=False)
        (out_a, grad_x_a, grads_a), *others = runs.values()
        for out_b, grad_x_b, grads_b in others:
            torch.testing.assert_close(out_b.hidden, out_a.hidden, **close)
            torch.testing.assert_close(out_b.tree_signal.values, out_a.tree_signal.values, **close)
            torch.testing.assert_close(grad_x_b, grad_x_a, **close)
            for name, gradient in grads_a.items():
                torch.testing.assert_close(grads_b[name], gradient, **close, msg=name)


def test_slot_chain_operands_pack_only_where_a_packed_gemm_runs(monkeypatch):
    weights = torch.randn(24, 6), torch.randn(24, 24), torch.randn(24)
    for name in ("mkl", "onednn", "aten"):
        monkeypatch.setenv(gemm.ENV_VAR, name)
        packed = om_kernel.slot_chain_operands(*weights, torch.float32, batch=4)[-1]
        usable = name in gemm.candidates(torch.device("cpu"), torch.float32) and name != "aten"
        assert (packed is not None) == usable
        assert om_kernel.slot_chain_operands(*weights, torch.float64, batch=4)[-1] is None


@pytest.mark.parametrize(
    ("padding_side", "padding_mode"),
    [("right", "invariant"), ("left", "invariant"), ("left", "authors_left")],
)
def test_steps_on_rows_rounded_up_to_a_multiple_give_the_same_pass(
    padding_side, padding_mode, monkeypatch, chain_path
):
    """Where products run on oneDNN a step computes its active rows rounded up to a multiple
    (row_multiple), the extra rows' results dropped: outputs, final state and every gradient are
    the ones of the exact row counts, in training with dropout."""
    fused, _ = fused_and_reference(
        padding_side=padding_side, padding_mode=padding_mode, memory_slots=4
    )
    lengths = torch.tensor([[9], [6], [2], [1], [8], [5], [3]])
    positions = torch.arange(9)[None]
    mask = positions < lengths if padding_side == "right" else positions >= 9 - lengths
    x = torch.randn(7, 9, 5, dtype=torch.float64)
    chain_rows = []

    def recording_chain(x_t, *args, **kwargs):
        chain_rows.append(x_t.size(0))
        return slot_chain(x_t, *args, **kwargs)

    monkeypatch.setattr(om_kernel, "slot_chain", recording_chain)
    passes = {}
    for multiple in (1, 3):
        monkeypatch.setattr(om_kernel, "row_multiple", lambda *args, m=multiple: m)
        chain_rows.clear()
        passes[multiple] = run_with_gradients(fused.train(), x, mask, seed=3)
        rows = set(chain_rows)
        if multiple == 1:
            assert rows & {1, 2, 4, 5}, rows  # row counts that are no multiple of 3
        else:  # multiples of 3, or the whole batch
            assert rows <= {3, 6, 7} and rows != {7}, rows
    assert_same_pass(passes[1], passes[3])


def test_rows_are_rounded_up_where_the_products_run_on_onednn(monkeypatch):
    cpu, weights = torch.device("cpu"), (torch.randn(24, 6), torch.randn(24, 24), torch.randn(24))
    monkeypatch.setenv(gemm.ENV_VAR, "aten")
    on_aten = om_kernel.slot_chain_operands(*weights, torch.float32, batch=4)
    assert om_kernel.row_multiple(cpu, None, on_aten) == 1  # fp32 on aten (MKL's sgemm)
    assert om_kernel.row_multiple(cpu, torch.bfloat16, on_aten) == om_kernel.ROW_MULTIPLE == 16
    assert om_kernel.row_multiple(torch.device("cuda"), torch.bfloat16, on_aten) == 1
    for name in ("mkl", "onednn", "treernn"):
        if name in gemm.candidates(cpu, torch.float32):
            monkeypatch.setenv(gemm.ENV_VAR, name)
            operands = om_kernel.slot_chain_operands(*weights, torch.float32, batch=4)
            expected = 16 if name == "onednn" else 1
            assert om_kernel.row_multiple(cpu, None, operands) == expected, name
