"""TreeLSTM / LdTreeLSTM: the level-batched schedule (``impl="fast"``) against the node-at-a-time
reference (``impl="reference"``), the left-dependent LSTM against a hand-written one, padding,
dropout, initialisation and gradients."""

from __future__ import annotations

import pytest
import torch

from tests.fixtures.dependency import FIGURE_2_HEADS, FIGURE_2_WORDS
from tests.fixtures.precision import OwnLoopDecision
from treernn.data.dependency import DependencyTree, build_vocabulary, collate_trees, encode_tree
from treernn.encoders.td_treelstm import LdTreeLSTM, TopDownTreeLSTM

# The luxury auto manufacturer last year sold 1,214 cars in the U.S. (paper Figure 2)
FIGURE_2 = DependencyTree(FIGURE_2_WORDS, FIGURE_2_HEADS)
SMALL_TREES = [
    FIGURE_2,
    DependencyTree(("a",), (0,)),
    DependencyTree(tuple(["x", "y", "z", "w"]), (2, 0, 2, 3)),
    DependencyTree(tuple(["p", "q", "r", "s", "t"]), (5, 5, 5, 5, 0)),  # four left dependents
]


@pytest.mark.parametrize("cls", [TopDownTreeLSTM, LdTreeLSTM])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_batched_equals_node_at_a_time(cls, num_layers):
    vocab, _ = build_vocabulary([w for t in SMALL_TREES for w in t.words], unk_threshold=0)
    examples = [encode_tree(t, vocab) for t in SMALL_TREES]
    batch = collate_trees(examples)
    encoder = cls(input_size=6, hidden_size=5, num_layers=num_layers).eval()
    reference = cls(input_size=6, hidden_size=5, num_layers=num_layers, impl="reference").eval()
    reference.load_state_dict(encoder.state_dict())
    embedding = torch.nn.Embedding(len(vocab), 6)
    x = embedding(batch.tokens)  # (B, T+1, D)
    hidden = encoder(x, batch.mask, tree=batch.tree).hidden  # (B, T+1, H)
    for row, example in enumerate(examples):
        # the reference reads one tree alone: no batch, no padding
        alone = collate_trees([example])
        expected = reference(x[row : row + 1, : len(example.steps.word_index)], tree=alone.tree)
        expected = expected.hidden[0]
        assert expected.shape[0] == len(example.steps.word_index)
        torch.testing.assert_close(hidden[row, : len(expected)], expected, atol=1e-6, rtol=1e-5)
        assert bool((hidden[row, len(expected) :] == 0).all())


def test_left_dependent_summary_is_the_lstm_of_eq_6():
    """q_K by hand (i, f, g, o gates, farthest dependent first) and by nn.LSTM agree."""
    encoder = LdTreeLSTM(input_size=4, hidden_size=3).eval()
    lstm = encoder.left_dependent_lstm
    dependents = torch.randn(3, 4)
    h, c = torch.zeros(1, 3), torch.zeros(1, 3)
    for d in dependents:  # farthest first
        gates = (
            d @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        )
        i, f, g, o = gates.chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    torch.testing.assert_close(encoder.left_dependent_summary(dependents), h)
    _, (last, _) = lstm(dependents[None])
    torch.testing.assert_close(encoder.left_dependent_summary(dependents), last[0])
    assert bool((encoder.left_dependent_summary(dependents[:0]) == 0).all())


def test_root_state_is_constant_and_padding_does_not_change_results():
    vocab, _ = build_vocabulary([w for t in SMALL_TREES for w in t.words], unk_threshold=0)
    encoder = LdTreeLSTM(input_size=4, hidden_size=3).eval()
    embedding = torch.nn.Embedding(len(vocab), 4)
    alone = collate_trees([encode_tree(SMALL_TREES[2], vocab)])
    padded = collate_trees([encode_tree(t, vocab) for t in (SMALL_TREES[2], FIGURE_2)])
    h_alone = encoder(embedding(alone.tokens), alone.mask, tree=alone.tree).hidden
    h_padded = encoder(embedding(padded.tokens), padded.mask, tree=padded.tree).hidden
    torch.testing.assert_close(h_padded[0, :5], h_alone[0])
    assert torch.allclose(h_alone[0, 0], torch.full((3,), 0.01))


def test_left_dependents_change_only_right_dependents():
    """LdTreeLSTM differs from TreeLSTM (same weights) only from the first right dependent on."""
    vocab, _ = build_vocabulary(FIGURE_2.words, unk_threshold=0)
    batch = collate_trees([encode_tree(FIGURE_2, vocab)])
    ld = LdTreeLSTM(input_size=4, hidden_size=3).eval()
    plain = TopDownTreeLSTM(input_size=4, hidden_size=3).eval()
    with torch.no_grad():
        for z in range(4):
            cell_ld, cell_plain = ld.cells[z][0], plain.cells[z][0]
            cell_plain.weight_ih.copy_(cell_ld.weight_ih[:, :4])
            cell_plain.weight_hh.copy_(cell_ld.weight_hh)
            cell_plain.bias_ih.copy_(cell_ld.bias_ih)
            cell_plain.bias_hh.copy_(cell_ld.bias_hh)
    x = torch.nn.Embedding(len(vocab), 4)(batch.tokens)
    h_ld = ld(x, batch.mask, tree=batch.tree).hidden[0]
    h_plain = plain(x, batch.mask, tree=batch.tree).hidden[0]
    # steps 1-3 (sold, year, manufacturer) and 6-9 (descendants of year, manufacturer) use no
    # right-dependent state; cars (4) reads q_K of (manufacturer, year) and differs.
    same = [0, 1, 2, 3, 6, 7, 8, 9]
    torch.testing.assert_close(h_ld[same], h_plain[same])
    assert not torch.allclose(h_ld[4], h_plain[4])


def test_dropout_between_layers_only_in_training():
    vocab, _ = build_vocabulary(FIGURE_2.words, unk_threshold=0)
    batch = collate_trees([encode_tree(FIGURE_2, vocab)])
    encoder = TopDownTreeLSTM(input_size=4, hidden_size=3, num_layers=2, dropout=0.5)
    x = torch.nn.Embedding(len(vocab), 4)(batch.tokens)
    encoder.train()
    a = encoder(x, batch.mask, tree=batch.tree).hidden
    b = encoder(x, batch.mask, tree=batch.tree).hidden
    assert not torch.allclose(a, b)
    encoder.eval()
    c = encoder(x, batch.mask, tree=batch.tree).hidden
    d = encoder(x, batch.mask, tree=batch.tree).hidden
    torch.testing.assert_close(c, d)


def test_parameters_uniform_in_paper_range_and_gradients_flow():
    encoder = LdTreeLSTM(input_size=4, hidden_size=3)
    for parameter in encoder.parameters():
        assert float(parameter.detach().abs().max()) <= 0.1
    vocab, _ = build_vocabulary(FIGURE_2.words, unk_threshold=0)
    batch = collate_trees([encode_tree(FIGURE_2, vocab)])
    x = torch.randn(*batch.tokens.shape, 4)
    encoder(x, batch.mask, tree=batch.tree).hidden.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


def test_missing_tree_and_unknown_impl_are_clear_errors():
    with pytest.raises(ValueError, match="tree="):
        TopDownTreeLSTM(input_size=2, hidden_size=2)(torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="impl='batched'"):  # the spelling before 278ea5f
        TopDownTreeLSTM(input_size=2, hidden_size=2, impl="batched")


def test_bf16_autocast_runs_fp32_where_the_encoders_own_probe_says_bf16_does_not_pay(monkeypatch):
    """Under bf16-mixed the encoder asks kernels.keeps_autocast with its own forward and backward on
    the batch being read (encoders.base.in_decided_precision); where bf16 does not pay it runs
    exactly as with precision=32, else its LSTM cells follow autocast."""
    from treernn.kernels import gemm

    vocab, _ = build_vocabulary([w for tree in SMALL_TREES for w in tree.words], unk_threshold=0)
    batch = collate_trees([encode_tree(tree, vocab) for tree in SMALL_TREES])
    torch.manual_seed(0)
    encoder = LdTreeLSTM(input_size=4, hidden_size=3, num_layers=2, dropout=0.3)
    x = torch.randn(*batch.tokens.shape, 4)
    decide = OwnLoopDecision()
    monkeypatch.setattr(gemm, "product_dtype", decide)
    (fp32, as_fp32), (fp32_again, as_bf16) = decide.fp32_and_autocast_outputs(
        lambda: encoder(x, batch.mask, tree=batch.tree).hidden
    )
    torch.testing.assert_close(as_fp32, fp32, atol=0, rtol=0)
    # bf16 products: close to fp32, not equal
    assert not torch.equal(as_bf16, fp32_again)
    torch.testing.assert_close(as_bf16.float(), fp32_again, atol=0.05, rtol=0.05)
    assert all(parameter.grad is None for parameter in encoder.parameters())
    assert decide.asked == [(len(SMALL_TREES), 3, 3, "LdTreeLSTM", "encoder, training")] * 2


def test_bf16_level_products_run_on_rounded_rows_with_the_same_results(monkeypatch):
    """Under bf16 autocast (the encoder's probe answering bf16) every level's products run on
    row counts rounded up to a multiple of 16 (oneDNN builds a kernel per new shape) and the
    left-dependent LSTM of Eq. 6 in fp32; outputs and gradients are the unrounded run's."""
    from treernn.kernels import gemm

    vocab, _ = build_vocabulary([w for tree in SMALL_TREES for w in tree.words], unk_threshold=0)
    batch = collate_trees([encode_tree(tree, vocab) for tree in SMALL_TREES])
    torch.manual_seed(0)
    encoder = LdTreeLSTM(input_size=4, hidden_size=3, num_layers=2).eval()
    x = torch.randn(*batch.tokens.shape, 4)
    decide = OwnLoopDecision()
    decide.pays = True
    monkeypatch.setattr(gemm, "product_dtype", decide)
    linear, rows = torch.nn.functional.linear, []

    def recording(inputs, weight, bias=None):
        if torch.is_autocast_enabled("cpu"):  # not the probe's fp32 loop
            rows.append(inputs.numel() // inputs.size(-1))
        return linear(inputs, weight, bias)

    monkeypatch.setattr(torch.nn.functional, "linear", recording)
    summaries = []  # (packed input, q_K) of each call of Eq. 6's LSTM
    hook = encoder.left_dependent_lstm.register_forward_hook(
        lambda module, args, out: summaries.append((args[0], out[1][0].detach()))
    )
    runs = []
    for rounding in (gemm.rounding, lambda count, device: 1):
        monkeypatch.setattr(gemm, "rounding", rounding)
        encoder.zero_grad(set_to_none=True)
        rows.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = encoder(x, batch.mask, tree=batch.tree).hidden
        hidden.float().square().sum().backward()
        runs.append((hidden, {n: p.grad for n, p in encoder.named_parameters()}, list(rows)))
    (rounded, rounded_grads, rounded_rows), (plain, plain_grads, plain_rows) = runs
    assert rounded_rows and all(count % 16 == 0 for count in rounded_rows)
    assert any(count % 16 for count in plain_rows)
    torch.testing.assert_close(rounded, plain, atol=0, rtol=0)
    hook.remove()
    assert len(summaries) > 2
    with torch.no_grad():  # each call (bf16 runs included) gave the fp32 summary exactly
        for packed, summary in summaries:
            expected = encoder.left_dependent_lstm(packed)[1][0]
            torch.testing.assert_close(summary, expected, atol=0, rtol=0)
    for name, grad in rounded_grads.items():
        torch.testing.assert_close(grad, plain_grads[name], atol=1e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("cls", [TopDownTreeLSTM, LdTreeLSTM])
def test_level_products_arriving_in_bf16_are_stored_at_the_states_precision(cls, monkeypatch):
    """Under CUDA autocast the level products come back in bf16 and, unlike on the CPU, autocast
    does not promote ``index_copy`` to one dtype: the first layer's projections are stored in
    the states' fp32 (the GPU smoke run under bf16-mixed stopped there with "index_copy_(): self
    and source expected to have the same dtype"). Emulated here without autocast."""
    import torch.nn.functional as F

    from treernn.kernels import td_treelstm as td_kernel

    vocab, _ = build_vocabulary([w for tree in SMALL_TREES for w in tree.words], unk_threshold=0)
    batch = collate_trees([encode_tree(tree, vocab) for tree in SMALL_TREES])
    torch.manual_seed(0)
    encoder = cls(input_size=4, hidden_size=3, num_layers=2).eval()
    x = torch.randn(*batch.tokens.shape, 4)
    expected = encoder(x, batch.mask, tree=batch.tree).hidden
    monkeypatch.setattr(
        td_kernel,
        "rounded_rows_linear",
        lambda inputs, weight, bias=None: F.linear(inputs, weight, bias).to(torch.bfloat16),
    )
    hidden = encoder(x, batch.mask, tree=batch.tree).hidden
    assert not torch.equal(hidden.float(), expected)
    torch.testing.assert_close(hidden.float(), expected, atol=0.05, rtol=0.05)
