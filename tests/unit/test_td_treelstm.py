"""TreeLSTM / LdTreeLSTM: the level-batched schedule against a node-at-a-time reference."""

from __future__ import annotations

import pytest
import torch

from tests.fixtures.dependency import FIGURE_2_HEADS, FIGURE_2_WORDS
from treernn.data.dependency import DependencyTree, build_vocabulary, collate_trees, encode_tree
from treernn.encoders.td_treelstm import RIGHT, LdTreeLSTM, TopDownTreeLSTM

# The luxury auto manufacturer last year sold 1,214 cars in the U.S. (paper Figure 2)
FIGURE_2 = DependencyTree(FIGURE_2_WORDS, FIGURE_2_HEADS)
SMALL_TREES = [
    FIGURE_2,
    DependencyTree(("a",), (0,)),
    DependencyTree(tuple(["x", "y", "z", "w"]), (2, 0, 2, 3)),
    DependencyTree(tuple(["p", "q", "r", "s", "t"]), (5, 5, 5, 5, 0)),  # four left dependents
]


def node_at_a_time(encoder: TopDownTreeLSTM, x: torch.Tensor, example) -> torch.Tensor:
    """Reference: Eq. 2/4/6/7 applied one step at a time with ``nn.LSTMCell`` calls."""
    steps = example.steps
    states = {0: encoder.root_state(1)}
    outputs = [states[0][-1][0][0]]
    for t in range(1, len(steps.word_index)):
        z, pred = steps.edge_type[t], steps.predecessor[t]
        inputs = x[pred].unsqueeze(0)  # (1, D): the predecessor's word embedding
        if z == RIGHT and encoder.uses_left_dependents:
            deps = list(steps.left_dependents[t])
            q = torch.zeros(1, encoder.left_dependent_size)
            if deps:
                lstm = encoder.left_dependent_lstm
                h, c = torch.zeros(1, lstm.hidden_size), torch.zeros(1, lstm.hidden_size)
                for d in deps:  # farthest first
                    gates = x[d] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0
                    gates = gates + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
                    i, f, g, o = gates.chunk(4, -1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                    h = torch.sigmoid(o) * torch.tanh(c)
                q = h
            inputs = torch.cat([inputs, q], -1)
        new_state, below = [], inputs
        for layer, cell in enumerate(encoder.cells[z]):
            h, c = cell(below, states[pred][layer])
            new_state.append((h, c))
            below = h
        states[t] = new_state
        outputs.append(below[0])
    return torch.stack(outputs)


@pytest.mark.parametrize("cls", [TopDownTreeLSTM, LdTreeLSTM])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_batched_equals_node_at_a_time(cls, num_layers):
    vocab, _ = build_vocabulary([w for t in SMALL_TREES for w in t.words], unk_threshold=0)
    examples = [encode_tree(t, vocab) for t in SMALL_TREES]
    batch = collate_trees(examples)
    encoder = cls(input_size=6, hidden_size=5, num_layers=num_layers).eval()
    embedding = torch.nn.Embedding(len(vocab), 6)
    x = embedding(batch["tokens"])  # (B, T+1, D)
    hidden = encoder(x, batch["mask"], tree=batch["tree"]).hidden  # (B, T+1, H)
    for row, example in enumerate(examples):
        expected = node_at_a_time(encoder, x[row], example)
        torch.testing.assert_close(hidden[row, : len(expected)], expected, atol=1e-6, rtol=1e-5)
        assert bool((hidden[row, len(expected) :] == 0).all())


def test_root_state_is_constant_and_padding_does_not_change_results():
    vocab, _ = build_vocabulary([w for t in SMALL_TREES for w in t.words], unk_threshold=0)
    encoder = LdTreeLSTM(input_size=4, hidden_size=3).eval()
    embedding = torch.nn.Embedding(len(vocab), 4)
    alone = collate_trees([encode_tree(SMALL_TREES[2], vocab)])
    padded = collate_trees([encode_tree(t, vocab) for t in (SMALL_TREES[2], FIGURE_2)])
    h_alone = encoder(embedding(alone["tokens"]), alone["mask"], tree=alone["tree"]).hidden
    h_padded = encoder(embedding(padded["tokens"]), padded["mask"], tree=padded["tree"]).hidden
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
    x = torch.nn.Embedding(len(vocab), 4)(batch["tokens"])
    h_ld = ld(x, batch["mask"], tree=batch["tree"]).hidden[0]
    h_plain = plain(x, batch["mask"], tree=batch["tree"]).hidden[0]
    # steps 1-3 (sold, year, manufacturer) and 6-9 (descendants of year, manufacturer) use no
    # right-dependent state; cars (4) reads q_K of (manufacturer, year) and differs.
    same = [0, 1, 2, 3, 6, 7, 8, 9]
    torch.testing.assert_close(h_ld[same], h_plain[same])
    assert not torch.allclose(h_ld[4], h_plain[4])


def test_dropout_between_layers_only_in_training():
    vocab, _ = build_vocabulary(FIGURE_2.words, unk_threshold=0)
    batch = collate_trees([encode_tree(FIGURE_2, vocab)])
    encoder = TopDownTreeLSTM(input_size=4, hidden_size=3, num_layers=2, dropout=0.5)
    x = torch.nn.Embedding(len(vocab), 4)(batch["tokens"])
    encoder.train()
    a = encoder(x, batch["mask"], tree=batch["tree"]).hidden
    b = encoder(x, batch["mask"], tree=batch["tree"]).hidden
    assert not torch.allclose(a, b)
    encoder.eval()
    c = encoder(x, batch["mask"], tree=batch["tree"]).hidden
    d = encoder(x, batch["mask"], tree=batch["tree"]).hidden
    torch.testing.assert_close(c, d)


def test_parameters_uniform_in_paper_range_and_gradients_flow():
    encoder = LdTreeLSTM(input_size=4, hidden_size=3)
    for parameter in encoder.parameters():
        assert float(parameter.detach().abs().max()) <= 0.1
    vocab, _ = build_vocabulary(FIGURE_2.words, unk_threshold=0)
    batch = collate_trees([encode_tree(FIGURE_2, vocab)])
    x = torch.randn(*batch["tokens"].shape, 4)
    encoder(x, batch["mask"], tree=batch["tree"]).hidden.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


def test_missing_tree_is_a_clear_error():
    with pytest.raises(ValueError, match="tree="):
        TopDownTreeLSTM(input_size=2, hidden_size=2)(torch.zeros(1, 2, 2))
