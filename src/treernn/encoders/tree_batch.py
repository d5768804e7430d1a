"""Gold binary trees batched level by level, and the bottom-up skeleton of gold-tree encoders.

Recursive models over given trees (Tree-RNN, Tree-LSTM, the Gated Recursive Cell tree) compose a
parent from its two children. Doing that one node at a time in Python is slow; instead
`TreeBatch` schedules every internal node of every tree in the batch by its *height*
(leaves have height 0, a parent has 1 + the larger height of its children). All nodes of one
height depend only on lower nodes, so each height is one batched call of the composition
function over the whole batch.

Node numbering, as rows of one flat buffer of ``num_nodes`` rows (``levels`` and ``root_ids``):

* leaf ``t`` of example ``b`` is row ``b * T + t`` (``T = max_length``; with ``padding="left"``
  it is row ``b * T + (T - length_b) + t``), so the buffer starts with the (B, T) leaves
  flattened and padding leaves are rows that no parent reads;
* internal nodes follow, level by level (height 1 first), so each level's parents are contiguous
  rows. Within a level they are ordered by the height of the node that reads them (their own
  parent; roots last), then by example, then left to right.

Routing. Composing into a flat buffer and gathering children from it by row costs, in the
backward pass, a full-buffer gradient (zero-fill, scatter, accumulation) per level: O(levels x
nodes), which dominated the run time on deep trees. Every node is read exactly once (by its
parent, or as a root), so `compose_bottom_up` instead sends each level's states, split into
contiguous chunks (the ordering above makes them contiguous), to the levels that read them, and
keeps the work O(nodes):

* ``leaf_order``: the real leaf rows, sorted by the level that reads them;
* ``outgoing[s]``: ``(reading level, size)`` of each chunk of level ``s`` (0 = leaves), in row
  order; reading level ``len(levels) + 1`` stands for "root";
* a level's *inbox* is the concatenation of the chunks sent to it, by sending level;
  ``child_positions[k - 1]`` (2 n_k,) are the inbox rows of level k's left children then right
  children, and ``root_positions`` (B,) the rows of the roots in the root inbox.

Trees are nested tuples of leaf positions, e.g. ``((0, 1), (2, 3))``; a bare int is a one-word
tree. Tuples of one element are unary nodes and are collapsed to their child. Leaves that are not
ints (words, e.g. ``(("a", "b"), "c")``) are numbered left to right.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from treernn.encoders.base import Encoder, EncoderOutput, check_dropout, in_decided_precision
from treernn.errors import ConfigValueError

Tree = Any  # int | str | tuple[Tree, ...]


class TreeLevel(NamedTuple):
    """All internal nodes of one height, as flat-buffer rows: LongTensors of shape (n_level,)."""

    parent_ids: Tensor
    left_ids: Tensor
    right_ids: Tensor


@dataclass(frozen=True)
class TreeBatch:
    """A batch of binary trees as a level-by-level composition schedule (see module docstring).

    levels: one `TreeLevel` per height 1, 2, ..., in order.
    root_ids: (B,) row of each example's root (a leaf row for one-word trees).
    lengths: (B,) number of leaves per example.
    leaf_mask: (B, T) bool, True at the rows of real leaves.
    leaf_order, outgoing, child_positions, root_positions: the routing that
    `compose_bottom_up` runs on (module docstring).
    """

    levels: list[TreeLevel]
    root_ids: Tensor
    lengths: Tensor
    leaf_mask: Tensor
    num_nodes: int
    leaf_order: Tensor
    outgoing: list[list[tuple[int, int]]]
    child_positions: list[Tensor]
    root_positions: Tensor

    @property
    def batch_size(self) -> int:
        return self.leaf_mask.size(0)

    @property
    def max_length(self) -> int:
        return self.leaf_mask.size(1)

    @property
    def num_leaves(self) -> int:
        """Rows taken by leaves (real and padding): B * T."""
        return self.leaf_mask.numel()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TreeBatch:
        """A copy with every tensor on ``device`` (Lightning calls this on batch transfer)."""

        def move(tensor: Tensor) -> Tensor:
            return tensor.to(device, non_blocking=non_blocking)

        return TreeBatch(
            levels=[TreeLevel(*(move(ids) for ids in level)) for level in self.levels],
            root_ids=move(self.root_ids),
            lengths=move(self.lengths),
            leaf_mask=move(self.leaf_mask),
            num_nodes=self.num_nodes,
            leaf_order=move(self.leaf_order),
            outgoing=self.outgoing,
            child_positions=[move(positions) for positions in self.child_positions],
            root_positions=move(self.root_positions),
        )

    @classmethod
    def from_trees(
        cls,
        trees: Sequence[Tree],
        lengths: Sequence[int] | Tensor | None = None,
        max_length: int | None = None,
        padding: Literal["right", "left"] = "right",
    ) -> TreeBatch:
        """Schedule ``trees`` for a (B, T) padded batch.

        lengths: leaves per example; checked against the trees when given, inferred otherwise.
        max_length: T, the padded length of the batch the trees go with (default max length).
        padding: where the padding of the token batch sits ("right" or "left").
        """
        if padding not in ("right", "left"):
            raise ValueError(f"padding={padding!r}: use 'right' or 'left'")
        if len(trees) == 0:
            raise ValueError("TreeBatch.from_trees got no trees: pass at least one")
        parsed = [_binary_nodes(tree, index) for index, tree in enumerate(trees)]
        tree_lengths = [num_leaves for num_leaves, _, _ in parsed]
        if lengths is not None:
            given = [int(n) for n in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]
            if len(given) != len(trees):
                raise ValueError(f"got {len(trees)} trees but {len(given)} lengths")
            for index, (want, have) in enumerate(zip(given, tree_lengths)):
                if want != have:
                    raise ValueError(
                        f"tree {index} has {have} leaves but its length is {want}: "
                        "the tree must cover exactly the sentence's tokens"
                    )
        batch_size = len(trees)
        longest = max(tree_lengths)
        max_length = longest if max_length is None else int(max_length)
        if max_length < longest:
            raise ValueError(
                f"max_length={max_length} is shorter than the longest tree ({longest})"
            )
        leaf_offset = [
            b * max_length + (max_length - n if padding == "left" else 0)
            for b, n in enumerate(tree_lengths)
        ]

        # Internal nodes of the whole batch, indexed g. A child reference is g >= 0 for an
        # internal node and -1 - row for a leaf. `reader` is the height of the parent (-1: root).
        heights: list[int] = []
        lefts: list[int] = []
        rights: list[int] = []
        reader: list[int] = []
        leaf_reader: dict[int, int] = {}  # leaf row -> height of its parent (-1: one-word tree)
        roots: list[int] = []
        for (_, node_lefts, node_rights), offset in zip(parsed, leaf_offset):
            base = len(heights)
            for local_left, local_right in zip(node_lefts, node_rights):
                # Local leaf -1 - p becomes global -1 - (offset + p), i.e. -1 - (offset - 1 - c).
                refs = [
                    base + c if c >= 0 else -1 - (offset - 1 - c) for c in (local_left, local_right)
                ]
                height = 1 + max(heights[r] if r >= 0 else 0 for r in refs)
                for r in refs:
                    if r >= 0:
                        reader[r] = height
                    else:
                        leaf_reader[-1 - r] = height
                heights.append(height)
                lefts.append(refs[0])
                rights.append(refs[1])
                reader.append(-1)
            if node_lefts:
                roots.append(len(heights) - 1)
            else:
                roots.append(-1 - offset)
                leaf_reader[offset] = -1
        num_levels = max(heights, default=0)
        root_level = num_levels + 1  # roots are "read" by a level above the tallest tree
        reader = [r if r > 0 else root_level for r in reader]
        leaf_reader = {row: r if r > 0 else root_level for row, r in leaf_reader.items()}

        # Flat rows: by height, then by reading level; Python's stable sort keeps batch order.
        order = sorted(range(len(heights)), key=lambda g: (heights[g], reader[g]))
        first_internal_row = batch_size * max_length
        row_of = [0] * len(heights)
        for rank, g in enumerate(order):
            row_of[g] = first_internal_row + rank

        def row(ref: int) -> int:
            return row_of[ref] if ref >= 0 else -1 - ref

        # Routing. Every node is sent to the level that reads it; a level's inbox is the
        # concatenation, in order of sending level, of the chunks sent to it. Sending leaves first,
        # then each level's parents in row order, numbers the inbox rows with one counter per level.
        inbox_size = [0] * (root_level + 1)
        inbox_row: dict[int, int] = {}  # child reference -> its row in its reader's inbox
        outgoing: list[list[tuple[int, int]]] = []

        def send(refs: list[int], readers: list[int]) -> None:
            chunks: list[list[int]] = []  # [reading level, size], in row order
            for ref, reading in zip(refs, readers):
                inbox_row[ref] = inbox_size[reading]
                inbox_size[reading] += 1
                if chunks and chunks[-1][0] == reading:
                    chunks[-1][1] += 1
                else:
                    chunks.append([reading, 1])
            outgoing.append([(reading, size) for reading, size in chunks])

        leaf_rows = sorted(leaf_reader, key=lambda r: (leaf_reader[r], r))
        send([-1 - r for r in leaf_rows], [leaf_reader[r] for r in leaf_rows])
        levels: list[TreeLevel] = []
        child_positions: list[Tensor] = []
        start = 0
        for height in range(1, num_levels + 1):
            stop = start
            while stop < len(order) and heights[order[stop]] == height:
                stop += 1
            members = order[start:stop]
            levels.append(
                TreeLevel(
                    parent_ids=torch.arange(first_internal_row + start, first_internal_row + stop),
                    left_ids=torch.tensor([row(lefts[g]) for g in members], dtype=torch.long),
                    right_ids=torch.tensor([row(rights[g]) for g in members], dtype=torch.long),
                )
            )
            children = [lefts[g] for g in members] + [rights[g] for g in members]
            child_positions.append(torch.tensor([inbox_row[r] for r in children], dtype=torch.long))
            send(members, [reader[g] for g in members])
            start = stop

        positions = torch.arange(max_length)
        lengths_tensor = torch.tensor(tree_lengths, dtype=torch.long)
        if padding == "right":
            leaf_mask = positions.unsqueeze(0) < lengths_tensor.unsqueeze(1)
        else:
            leaf_mask = positions.unsqueeze(0) >= (max_length - lengths_tensor).unsqueeze(1)
        return cls(
            levels=levels,
            root_ids=torch.tensor([row(ref) for ref in roots], dtype=torch.long),
            lengths=lengths_tensor,
            leaf_mask=leaf_mask,
            num_nodes=first_internal_row + len(heights),
            leaf_order=torch.tensor(leaf_rows, dtype=torch.long),
            outgoing=outgoing,
            child_positions=child_positions,
            root_positions=torch.tensor([inbox_row[ref] for ref in roots], dtype=torch.long),
        )


def _binary_nodes(tree: Tree, index: int) -> tuple[int, list[int], list[int]]:
    """Number of leaves and the (left, right) children of each internal node, in post-order.

    A child is ``k >= 0`` for the k-th internal node and ``-1 - p`` for the leaf at position p.
    Iterative, so that deep (e.g. left-branching) trees of any length work.
    """
    lefts: list[int] = []
    rights: list[int] = []
    leaves: list[Any] = []
    stack: list[tuple[Tree, bool]] = [(tree, False)]  # (subtree, children already visited?)
    done: list[int] = []  # references of finished subtrees
    while stack:
        node, expanded = stack.pop()
        while isinstance(node, tuple | list) and len(node) == 1:  # unary: collapse to the child
            node = node[0]
        if not isinstance(node, tuple | list):
            if isinstance(node, bool) or node is None:
                raise ValueError(f"tree {index}: leaf {node!r} is neither a position nor a word")
            done.append(-1 - len(leaves))
            leaves.append(node)
        elif len(node) == 0:
            raise ValueError(f"tree {index}: empty subtree (); every bracket needs a child")
        elif len(node) > 2:
            raise ValueError(
                f"tree {index}: a node has {len(node)} children {node!r}; binarize the tree first"
            )
        elif expanded:
            right, left = done.pop(), done.pop()
            done.append(len(lefts))
            lefts.append(left)
            rights.append(right)
        else:
            stack.extend(((node, True), (node[1], False), (node[0], False)))
    if all(isinstance(leaf, int) for leaf in leaves):
        if leaves != list(range(len(leaves))):
            raise ValueError(
                f"tree {index}: leaf positions {leaves} are not 0..{len(leaves) - 1} in order"
            )
    elif any(isinstance(leaf, int) for leaf in leaves):
        raise ValueError(f"tree {index}: mixes int positions and words as leaves; use one kind")
    return len(leaves), lefts, rights


def compose_bottom_up(
    leaf_states: Tensor, tree: TreeBatch, compose: Callable[[Tensor, Tensor], Tensor]
) -> Tensor:
    """Root states (B, S) from the (B*T, S) leaf states, one ``compose`` call per level.

    ``compose(left (n, S), right (n, S)) -> (n, S)`` runs once per level on all its nodes, which
    it returns in the level's row order. Routing (module docstring) keeps the work O(nodes).
    """
    if leaf_states.size(0) != tree.num_leaves:
        raise ValueError(f"{leaf_states.size(0)} leaf states for {tree.num_leaves} leaf rows")
    inbox: dict[int, list[Tensor]] = defaultdict(list)  # reading level -> chunks sent to it

    def send(level: int, states: Tensor) -> None:
        readers, sizes = zip(*tree.outgoing[level])
        for reading, chunk in zip(readers, states.split(list(sizes))):
            inbox[reading].append(chunk)

    send(0, leaf_states.index_select(0, tree.leaf_order))
    for height, positions in enumerate(tree.child_positions, start=1):
        children = torch.cat(inbox.pop(height)).index_select(0, positions)  # (2 n, S)
        left, right = children.chunk(2, dim=0)  # (n, S) each
        send(height, compose(left, right))
    roots = torch.cat(inbox.pop(len(tree.child_positions) + 1))
    return roots.index_select(0, tree.root_positions)  # (B, S)


class TreeEncoder(Encoder):
    """Shared forward of gold-tree encoders: leaf transform, level-wise composition, outputs.

    Subclasses define ``embed_leaves`` (N, D) -> (N, S) with S the width of a node's state,
    ``compose`` ((n, S), (n, S)) -> (n, S), and ``node_output`` (N, S) -> (N, H), the part of the
    state a node exposes (all of it by default).
    ``hidden`` are the leaf outputs (B, T, H), zero at padding; ``pooled`` is the root's output.
    ``output_size`` other than ``hidden_size`` adds a linear projection of both.
    """

    input_view = "constituency_tree"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if num_layers != 1:
            raise ConfigValueError(
                f"{name}: num_layers={num_layers}, but a tree encoder composes with one cell; "
                "set num_layers=1 (model depth follows the tree)"
            )
        if input_size < 1 or hidden_size < 1:
            raise ConfigValueError(
                f"{name}: input_size={input_size}, hidden_size={hidden_size} must be >= 1"
            )
        check_dropout("dropout", dropout)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size or hidden_size
        self.projection: nn.Module = (
            nn.Linear(hidden_size, self.output_size)
            if self.output_size != hidden_size
            else nn.Identity()
        )

    def embed_leaves(self, x: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def compose(self, left: Tensor, right: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def node_output(self, states: Tensor) -> Tensor:
        return states

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        state: Any = None,
        tree: TreeBatch | None = None,
    ) -> EncoderOutput:
        name = type(self).__name__
        if tree is None:
            raise ValueError(
                f"{name} reads gold trees: call it with tree=TreeBatch.from_trees(trees, lengths)"
            )
        if state is not None:
            raise ValueError(f"{name} carries no state between batches: pass state=None")
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(
                f"{name}: x has shape {tuple(x.shape)}, expected (B, T, {self.input_size})"
            )
        batch, length, _ = x.shape
        if (batch, length) != tuple(tree.leaf_mask.shape):
            raise ValueError(
                f"{name}: x is (B={batch}, T={length}) but the TreeBatch was built for "
                f"{tuple(tree.leaf_mask.shape)}; pass max_length=T to TreeBatch.from_trees"
            )
        tree = tree.to(x.device)
        if mask is not None and not torch.equal(mask.bool(), tree.leaf_mask):
            raise ValueError(
                f"{name}: the padding mask and the trees' leaves disagree; build the TreeBatch "
                "with the batch's lengths and padding side"
            )
        encode = partial(self._encode, tree=tree)
        return in_decided_precision(
            self, encode, x, self.hidden_size, partial(_flops, self, tree), "tree"
        )

    def _encode(self, x: Tensor, tree: TreeBatch) -> EncoderOutput:
        batch, length, _ = x.shape
        leaf_states = self.embed_leaves(x.reshape(batch * length, -1))  # (B*T, S)
        root = self.node_output(compose_bottom_up(leaf_states, tree, self.compose))  # (B, H)
        leaf_outputs = self.node_output(leaf_states).view(batch, length, -1)
        hidden = self.projection(leaf_outputs) * tree.leaf_mask.unsqueeze(-1)  # (B, T, H_out)
        return EncoderOutput(hidden=hidden, pooled=self.projection(root))


def _flops(encoder: TreeEncoder, tree: TreeBatch) -> float:
    """About a tree encoder's products on ``tree``: one (2H x 4H) product per node."""
    nodes = 2.0 * float(tree.leaf_mask.sum())
    return 2.0 * nodes * 2 * encoder.hidden_size * 4 * encoder.hidden_size
