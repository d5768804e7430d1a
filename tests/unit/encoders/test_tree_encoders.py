"""Gold-tree encoders: the level-by-level schedule, batched vs node-at-a-time results, equations."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from tests.fixtures.precision import OwnLoopDecision
from treernn.encoders.grc_tree import GRCTreeEncoder
from treernn.encoders.tree_batch import TreeBatch
from treernn.encoders.tree_lstm import TreeLSTMEncoder
from treernn.encoders.tree_rnn import TreeRNNEncoder

ENCODERS = [TreeRNNEncoder, TreeLSTMEncoder, GRCTreeEncoder]


def random_tree(start: int, stop: int, rng: random.Random):
    """A uniformly random split point at every node over leaves start..stop-1."""
    if stop - start == 1:
        return start
    split = rng.randint(start + 1, stop - 1)
    return (random_tree(start, split, rng), random_tree(split, stop, rng))


def reference_encode(model, x: torch.Tensor, tree) -> torch.Tensor:
    """Node-at-a-time recursion over one example's nested tuple: x (T, D) -> root state (S,)."""
    if isinstance(tree, int):
        return model.embed_leaves(x[tree : tree + 1])[0]
    left = reference_encode(model, x, tree[0])
    right = reference_encode(model, x, tree[1])
    return model.compose(left.unsqueeze(0), right.unsqueeze(0))[0]


def ids(tensor: torch.Tensor) -> list[int]:
    return tensor.tolist()


# ---------------------------------------------------------------- TreeBatch schedule


def test_schedule_of_a_hand_made_batch():
    # Example 0: ((0 1) 2), 3 leaves padded to T=4 -> leaf rows 0..2; example 1: (0 (1 (2 3)))
    # -> leaf rows 4..7. Internal nodes follow the 8 leaf rows, by height, and within a height
    # by the height of their parent (roots last).
    tree = TreeBatch.from_trees([((0, 1), 2), (0, (1, (2, 3)))], [3, 4])
    assert [tuple(map(ids, level)) for level in tree.levels] == [
        ([8, 9], [0, 6], [1, 7]),  # height 1: (0 1) of ex. 0, (2 3) of ex. 1; both read at 2
        ([10, 11], [5, 8], [9, 2]),  # (1 (2 3)) read at 3, then the root of ex. 0
        ([12], [4], [10]),  # height 3: root of ex. 1
    ]
    assert ids(tree.root_ids) == [11, 12]
    assert ids(tree.lengths) == [3, 4]
    assert tree.num_nodes == 13
    assert tree.leaf_mask.tolist() == [[True, True, True, False], [True, True, True, True]]
    # Routing: real leaves sorted by the level that reads them (1: rows 0 1 6 7; 2: 2 5; 3: 4).
    assert ids(tree.leaf_order) == [0, 1, 6, 7, 2, 5, 4]
    # outgoing[s]: (reading level, size) of level s's chunks; level 4 means "root".
    assert tree.outgoing == [[(1, 4), (2, 2), (3, 1)], [(2, 2)], [(3, 1), (4, 1)], [(4, 1)]]
    # Level 1 reads [0 1 6 7]; level 2 reads leaves [2 5] then level 1 [8 9]; level 3 reads
    # leaf [4] then level 2's [10]. Positions index that concatenation, lefts then rights.
    assert [ids(p) for p in tree.child_positions] == [[0, 2, 1, 3], [1, 2, 3, 0], [0, 1]]
    assert ids(tree.root_positions) == [0, 1]  # roots: [11] from level 2, [12] from level 3


def test_left_padding_and_explicit_max_length_shift_leaf_rows():
    tree = TreeBatch.from_trees([(0, 1), ((0, 1), 2)], max_length=4, padding="left")
    # Example 0 occupies columns 2, 3 -> rows 2, 3; example 1 columns 1..3 -> rows 5..7.
    assert [tuple(map(ids, level)) for level in tree.levels] == [
        ([8, 9], [5, 2], [6, 3]),  # ex. 1's (0 1), read at height 2, before ex. 0's root
        ([10], [8], [7]),
    ]
    assert ids(tree.root_ids) == [9, 10]
    assert tree.leaf_mask.tolist() == [[False, False, True, True], [False, True, True, True]]


def test_one_word_tree_is_its_leaf_and_unary_nodes_collapse():
    tree = TreeBatch.from_trees([0, ((0,), (1,))])
    assert ids(tree.root_ids) == [0, 4]  # T = 2: ex. 1's leaves are rows 2, 3, its root row 4
    assert [tuple(map(ids, level)) for level in tree.levels] == [([4], [2], [3])]
    assert ids(tree.leaf_order) == [2, 3, 0] and tree.outgoing == [[(1, 2), (2, 1)], [(2, 1)]]
    assert ids(tree.root_positions) == [0, 1]  # the leaf root comes from level 0, first


def test_word_leaves_are_numbered_left_to_right():
    by_words = TreeBatch.from_trees([(("a", "b"), "c")])
    by_positions = TreeBatch.from_trees([((0, 1), 2)])
    assert [tuple(map(ids, lv)) for lv in by_words.levels] == [
        tuple(map(ids, lv)) for lv in by_positions.levels
    ]


def test_deep_left_branching_tree_needs_no_recursion():
    length = 3000  # deeper than Python's default recursion limit
    nested = 0
    for position in range(1, length):
        nested = (nested, position)
    tree = TreeBatch.from_trees([nested])
    assert len(tree.levels) == length - 1
    assert ids(tree.root_ids) == [2 * length - 2]


@pytest.mark.parametrize(
    ("trees", "kwargs", "message"),
    [
        ([(0, 1, 2)], {}, "binarize"),
        ([((0, 2), 1)], {}, "not 0..2 in order"),
        ([(1, 2)], {}, "not 0..1 in order"),
        ([(0, "b")], {}, "mixes"),
        ([((0, 1), ())], {}, "empty subtree"),
        ([(0, 1)], {"lengths": [3]}, "has 2 leaves but its length is 3"),
        ([(0, 1)], {"lengths": [2, 2]}, "1 trees but 2 lengths"),
        ([(0, (1, 2))], {"max_length": 2}, "shorter than the longest tree"),
        ([(0, 1)], {"padding": "middle"}, "'right' or 'left'"),
        ([], {}, "no trees"),
    ],
)
def test_malformed_trees_are_reported(trees, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TreeBatch.from_trees(trees, **kwargs)


def test_lightning_moves_a_tree_batch_inside_a_batch():
    from lightning.fabric.utilities.apply_func import move_data_to_device

    batch = {"tokens": torch.zeros(2, 3), "tree": TreeBatch.from_trees([(0, (1, 2)), (0, 1)])}
    moved = move_data_to_device(batch, torch.device("meta"))
    assert isinstance(moved["tree"], TreeBatch)
    assert moved["tree"].child_positions[1].device.type == "meta"


def test_to_moves_every_tensor():
    tree = TreeBatch.from_trees([((0, 1), 2), (0, 1)]).to("meta")
    tensors = [value for value in vars(tree).values() if isinstance(value, torch.Tensor)]
    tensors += [t for level in tree.levels for t in level] + tree.child_positions
    assert len(tensors) == 5 + 3 * 2 + 2
    assert all(t.device.type == "meta" for t in tensors)
    assert tree.num_nodes == 6 + 3


# ---------------------------------------------------------------- batched == node at a time


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_batched_levels_match_node_at_a_time_reference(encoder_class):
    rng = random.Random(1)
    lengths = [1, 2, 7, 5, 9, 3]
    trees = [random_tree(0, n, rng) for n in lengths]
    model = encoder_class(input_size=5, hidden_size=6).double()
    x = torch.randn(len(lengths), max(lengths), 5, dtype=torch.double, requires_grad=True)
    batch = TreeBatch.from_trees(trees, lengths)

    out = model(x, batch.leaf_mask, tree=batch)
    weights = torch.randn_like(out.pooled)
    (out.pooled * weights).sum().backward()  # gradients through every level of every tree
    batched_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None

    roots = torch.stack([reference_encode(model, x[b], t) for b, t in enumerate(trees)])
    reference = model.node_output(roots)  # (B, H)
    (reference * weights).sum().backward()
    reference_grads = [p.grad for p in model.parameters()] + [x.grad]

    torch.testing.assert_close(out.pooled, reference)
    for batched, expected in zip(batched_grads, reference_grads, strict=True):
        torch.testing.assert_close(batched, expected)
    # hidden holds the leaf states, zero at padding.
    leaf = model.node_output(model.embed_leaves(x[3, 2:3]))[0]
    torch.testing.assert_close(out.hidden[3, 2], leaf)
    assert out.hidden[0, 1:].abs().sum() == 0


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_padding_and_padding_side_never_change_results(encoder_class):
    rng = random.Random(2)
    lengths = [4, 6, 1]
    trees = [random_tree(0, n, rng) for n in lengths]
    model = encoder_class(input_size=3, hidden_size=4, output_size=5).eval()
    tight = torch.randn(3, 6, 3)
    tight_tree = TreeBatch.from_trees(trees, lengths)
    tight_out = model(tight, tight_tree.leaf_mask, tree=tight_tree)

    # Right-padded to T=9 with garbage in the padding.
    wide = torch.randn(3, 9, 3) * 100
    wide_tree = TreeBatch.from_trees(trees, lengths, max_length=9)
    for b, n in enumerate(lengths):
        wide[b, :n] = tight[b, :n]
    wide_out = model(wide, wide_tree.leaf_mask, tree=wide_tree)
    torch.testing.assert_close(wide_out.pooled, tight_out.pooled)
    torch.testing.assert_close(wide_out.hidden[:, :6], tight_out.hidden)
    assert wide_out.hidden[:, 6:].abs().sum() == 0  # projection bias does not leak into padding

    # Left padding: each row's tokens moved to the end.
    left = torch.randn(3, 6, 3) * 100
    for b, n in enumerate(lengths):
        left[b, 6 - n :] = tight[b, :n]
    left_tree = TreeBatch.from_trees(trees, lengths, padding="left")
    left_out = model(left, left_tree.leaf_mask, tree=left_tree)
    torch.testing.assert_close(left_out.pooled, tight_out.pooled)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(left_out.hidden[b, 6 - n :], tight_out.hidden[b, :n])
        assert left_out.hidden[b, : 6 - n].abs().sum() == 0


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_batch_order_does_not_change_results(encoder_class):
    rng = random.Random(3)
    lengths = [5, 2, 8]
    trees = [random_tree(0, n, rng) for n in lengths]
    model = encoder_class(input_size=3, hidden_size=4).eval()
    x = torch.randn(3, 8, 3)
    out = model(x, tree=TreeBatch.from_trees(trees, lengths))
    order = [2, 0, 1]
    flipped = model(x[order], tree=TreeBatch.from_trees([trees[i] for i in order]))
    torch.testing.assert_close(flipped.pooled, out.pooled[order])


# ---------------------------------------------------------------- equations on hand-computed cases


def test_tree_rnn_hand_computed_tree():
    model = TreeRNNEncoder(input_size=2, hidden_size=2)
    with torch.no_grad():
        model.leaf.weight.copy_(torch.eye(2))
        model.leaf.bias.zero_()
        model.composition.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, -1.0, 1.0, 0.0]]))
        model.composition.bias.copy_(torch.tensor([0.0, 0.5]))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # leaves x0, x1, x2
    out = model(x, tree=TreeBatch.from_trees([((0, 1), 2)]))
    # (0 1): W [x0; x1] + b = (1 + 1, -0 + 0 + 0.5) = (2, 0.5)
    inner = (math.tanh(2.0), math.tanh(0.5))
    # root: W [inner; x2] + b = (inner0 + 1, -inner1 + 1 + 0.5)
    root = (math.tanh(inner[0] + 1.0), math.tanh(-inner[1] + 1.5))
    torch.testing.assert_close(out.pooled, torch.tensor([root]))
    torch.testing.assert_close(out.hidden, x)  # identity leaf map


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def test_tree_lstm_hand_computed_two_leaf_tree():
    model = TreeLSTMEncoder(input_size=1, hidden_size=1)
    with torch.no_grad():
        model.leaf.weight.copy_(torch.tensor([[0.5], [-1.0], [2.0]]))  # rows i, o, u
        model.leaf.bias.zero_()
        # rows i, f_left, f_right, o, u; columns h_left, h_right
        model.composition.weight.copy_(
            torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [1.0, 1.0], [0.0, -1.0]])
        )
        model.composition.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 0.0, 0.1]))
    x = torch.tensor([[[1.0], [-2.0]]])
    out = model(x, tree=TreeBatch.from_trees([(0, 1)]))

    def leaf(value: float) -> tuple[float, float]:
        cell = sigmoid(0.5 * value) * math.tanh(2.0 * value)
        return sigmoid(-1.0 * value) * math.tanh(cell), cell

    (h1, c1), (h2, c2) = leaf(1.0), leaf(-2.0)
    cell = (
        sigmoid(h1) * math.tanh(-h2 + 0.1)
        + sigmoid(2.0 * h2) * c1  # f_left multiplies the left child's cell
        + sigmoid(-3.0 * h1) * c2
    )
    hidden = sigmoid(h1 + h2) * math.tanh(cell)
    torch.testing.assert_close(out.pooled, torch.tensor([[hidden]]))
    torch.testing.assert_close(out.hidden, torch.tensor([[[h1], [h2]]]))


def test_grc_tree_leaves_are_layer_normed_and_parents_use_the_cell():
    model = GRCTreeEncoder(input_size=3, hidden_size=4).eval()
    x = torch.randn(1, 2, 3)
    out = model(x, tree=TreeBatch.from_trees([(0, 1)]))
    leaves = F.layer_norm(
        x[0] @ model.leaf.weight.T + model.leaf.bias,
        (4,),
        model.layer_norm.weight,
        model.layer_norm.bias,
    )
    torch.testing.assert_close(out.hidden[0], leaves)
    # Ordered Memory's order: the vertical (first) input is the right child.
    torch.testing.assert_close(out.pooled, model.cell(leaves[1:], leaves[:1]))
    assert not torch.allclose(out.pooled, model.cell(leaves[:1], leaves[1:]))


def test_grc_tree_shares_its_layer_norm_with_the_cell_by_default():
    shared = GRCTreeEncoder(input_size=3, hidden_size=4)
    separate = GRCTreeEncoder(input_size=3, hidden_size=4, share_layer_norm=False)
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(separate) - count(shared) == 2 * 4  # one LayerNorm's weight and bias
    with torch.no_grad():
        shared.layer_norm.weight.mul_(0.0)  # zero gain: every normalised output becomes the bias
        shared.layer_norm.bias.fill_(0.25)
    out = shared.eval()(torch.randn(1, 2, 3), tree=TreeBatch.from_trees([(0, 1)]))
    torch.testing.assert_close(out.pooled, torch.full((1, 4), 0.25))


# ---------------------------------------------------------------- dropout and bad input


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_dropout_acts_in_training_only(encoder_class):
    model = encoder_class(input_size=3, hidden_size=8, dropout=0.5)
    x = torch.randn(2, 4, 3)
    tree = TreeBatch.from_trees([((0, 1), (2, 3)), (0, (1, (2, 3)))])
    first, second = model(x, tree=tree).pooled, model(x, tree=tree).pooled
    assert not torch.allclose(first, second)
    model.eval()
    torch.testing.assert_close(model(x, tree=tree).pooled, model(x, tree=tree).pooled)


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_bad_calls_say_what_to_do(encoder_class):
    model = encoder_class(input_size=3, hidden_size=4)
    x = torch.randn(2, 3, 3)
    tree = TreeBatch.from_trees([(0, (1, 2)), (0, 1)])
    with pytest.raises(ValueError, match="tree=TreeBatch.from_trees"):
        model(x, tree.leaf_mask)
    with pytest.raises(ValueError, match="pass max_length=T"):
        model(torch.randn(2, 5, 3), tree=tree)
    with pytest.raises(ValueError, match="mask and the trees' leaves disagree"):
        model(x, torch.ones(2, 3, dtype=torch.bool), tree=tree)
    with pytest.raises(ValueError, match=r"expected \(B, T, 3\)"):
        model(torch.randn(2, 3, 7), tree=tree)
    with pytest.raises(ValueError, match="state=None"):
        model(x, state=torch.zeros(1), tree=tree)
    with pytest.raises(ValueError, match="set num_layers=1"):
        encoder_class(input_size=3, hidden_size=4, num_layers=2)
    assert (
        model.input_view == "constituency_tree" and model.output_size == 4 and model.input_size == 3
    )


# ---------------------------------------------------------------- bf16-mixed


@pytest.mark.parametrize("encoder_class", ENCODERS)
def test_bf16_autocast_runs_fp32_where_the_encoders_own_probe_says_bf16_does_not_pay(
    encoder_class, monkeypatch
):
    """Under bf16-mixed a tree encoder asks kernels.keeps_autocast with its own forward (and
    backward, in training) on the batch being read, in fp32 and under bf16 autocast; where bf16
    does not pay it runs exactly as with precision=32, else it follows autocast."""
    from treernn.kernels import gemm

    torch.manual_seed(0)
    model = encoder_class(input_size=3, hidden_size=8, dropout=0.3)
    x = torch.randn(2, 4, 3)
    tree = TreeBatch.from_trees([((0, 1), (2, 3)), (0, (1, (2, 3)))])
    decide = OwnLoopDecision()
    monkeypatch.setattr(gemm, "product_dtype", decide)
    (fp32, as_fp32), (_, as_bf16) = decide.fp32_and_autocast_outputs(
        lambda: model(x, tree=tree).pooled
    )
    torch.testing.assert_close(as_fp32, fp32, atol=0, rtol=0)
    assert (as_fp32.dtype, as_bf16.dtype) == (torch.float32, torch.bfloat16)
    assert all(parameter.grad is None for parameter in model.parameters())
    name = encoder_class.__name__
    assert decide.asked == [(2, 8, 8, name, "tree, training")] * 2
