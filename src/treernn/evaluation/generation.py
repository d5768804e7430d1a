"""Tree generation with a trained TreeLSTM / LdTreeLSTM (Zhang et al. 2016, Section 3.4, Figure 5).

The tree LM says which word to put at a node but not whether to add a node: four binary classifiers
decide that. For a generated node t with word w_t:

    ADD-LEFT      does w_t get a (first) left dependent?       then GEN-L generates it from t
    ADD-RIGHT     does w_t get a (first) right dependent?      then GEN-R (with q_K for LdTreeLSTM)
    ADD-NX-LEFT   (t is a left dependent) a further left sibling?   then GEN-NX-L from t
    ADD-NX-RIGHT  (t is a right dependent) a further right sibling? then GEN-NX-R from t

Features (paper): the hidden state that generated t, h_t = H[:, t], and the output embedding of its
word, Who[w_t]; two-layer rectifier networks of 300 units (here: two ReLU hidden layers and a
logit), trained with AdaGrad (lr 0.01) on labels read off the training trees, with the LM's features
frozen. ROOT always gets exactly one right dependent. Sampling draws each word from the softmax of
Eq. 3 (``<unk>``, ``<pad>`` and ``<root>`` excluded) and follows the breadth-first order of
generation. ``treernn.load(...).generate(n, trees)`` and ``python -m treernn generate`` run it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn.data.dependency import ROOT_TOKEN, DependencyTree, collate_trees, encode_tree
from treernn.data.vocab import Vocabulary
from treernn.encoders.top_down_tree import LEFT, NX_LEFT, NX_RIGHT, RIGHT

CLASSIFIERS = ("ADD-LEFT", "ADD-RIGHT", "ADD-NX-LEFT", "ADD-NX-RIGHT")
ADD_LEFT, ADD_RIGHT, ADD_NX_LEFT, ADD_NX_RIGHT = range(4)


class EdgeClassifiers(nn.Module):
    """Four binary classifiers over [h_t ; Who[w_t]] -> logit of adding that kind of edge."""

    def __init__(self, feature_size: int, hidden_size: int = 300) -> None:
        super().__init__()
        self.networks = nn.ModuleList(
            nn.Sequential(
                nn.Linear(feature_size, hidden_size),
                nn.ReLU(),
                nn.Linear(hidden_size, hidden_size),
                nn.ReLU(),
                nn.Linear(hidden_size, 1),
            )
            for _ in CLASSIFIERS
        )

    def forward(self, features: Tensor, classifier: int) -> Tensor:
        """(N, F) -> (N,) logits of classifier ``classifier``."""
        return self.networks[classifier](features).squeeze(-1)


def edge_labels(tree: DependencyTree) -> tuple[list[list[int]], list[list[bool]]]:
    """Per classifier, the BFS steps it applies to and their true/false labels."""
    from treernn.data.dependency import linearise

    steps = linearise(tree.heads)
    n = len(tree)
    has_left, has_right = [False] * (n + 1), [False] * (n + 1)
    for dependent, head in enumerate(tree.heads, start=1):
        if dependent < head:
            has_left[head] = True
        elif head > 0:
            has_right[head] = True
    successor_of = {steps.predecessor[t]: t for t in range(1, n + 1)
                    if steps.edge_type[t] in (NX_LEFT, NX_RIGHT)}  # fmt: skip
    applies: list[list[int]] = [[], [], [], []]
    labels: list[list[bool]] = [[], [], [], []]
    for t in range(1, n + 1):
        word = steps.word_index[t] + 1
        for classifier, value in ((ADD_LEFT, has_left[word]), (ADD_RIGHT, has_right[word])):
            applies[classifier].append(t)
            labels[classifier].append(value)
        side = steps.edge_type[t]
        if side in (LEFT, NX_LEFT):
            applies[ADD_NX_LEFT].append(t)
            labels[ADD_NX_LEFT].append(t in successor_of)
        elif side in (RIGHT, NX_RIGHT) and steps.predecessor[t] != 0:
            applies[ADD_NX_RIGHT].append(t)
            labels[ADD_NX_RIGHT].append(t in successor_of)
    return applies, labels


@torch.no_grad()
def edge_features(task, trees: list[DependencyTree], batch_size: int = 64):
    """Features and labels of the four classifiers over ``trees``, from the frozen tree LM."""
    vocab = Vocabulary(task.vocab, specials=())
    lowercase = bool(task.hparams.get("lowercase", True))
    features: list[list[Tensor]] = [[], [], [], []]
    labels: list[list[Tensor]] = [[], [], [], []]
    task.eval()
    for start in range(0, len(trees), batch_size):
        chunk = trees[start : start + batch_size]
        batch = collate_trees([encode_tree(t, vocab, lowercase) for t in chunk], vocab.pad_index)
        embedded = task.embedding(batch.tokens)
        hidden = task.encoder(embedded, batch.mask, tree=batch.tree).hidden  # (B, T+1, H)
        node_features = torch.cat([hidden, task.decoder.weight[batch.tokens]], -1)
        for row, tree in enumerate(chunk):
            applies, values = edge_labels(tree)
            for classifier in range(4):
                if applies[classifier]:
                    features[classifier].append(node_features[row, applies[classifier]])
                    labels[classifier].append(torch.tensor(values[classifier]))
    return (
        [torch.cat(f) if f else torch.zeros(0, node_features.size(-1)) for f in features],
        [torch.cat(v).float() if v else torch.zeros(0) for v in labels],
    )


def train_classifiers(
    features: list[Tensor],
    labels: list[Tensor],
    hidden_size: int = 300,
    epochs: int = 2,
    lr: float = 0.01,
    batch_size: int = 256,
) -> EdgeClassifiers:
    classifiers = EdgeClassifiers(features[0].size(-1), hidden_size)
    optimizer = torch.optim.Adagrad(classifiers.parameters(), lr=lr)
    for _ in range(epochs):
        for classifier in range(4):
            order = torch.randperm(labels[classifier].numel())
            for start in range(0, order.numel(), batch_size):
                index = order[start : start + batch_size]
                logits = classifiers(features[classifier][index], classifier)
                loss = F.binary_cross_entropy_with_logits(logits, labels[classifier][index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return classifiers.eval()


@torch.no_grad()
def classifier_accuracy(classifiers, features, labels) -> dict[str, float]:
    return {
        name: 100.0 * float(((classifiers(features[c], c) > 0).float() == labels[c]).float().mean())
        for c, name in enumerate(CLASSIFIERS)
        if labels[c].numel()
    }


@dataclass
class _Node:
    word: int
    state: list
    left: list[_Node] = field(default_factory=list)
    right: list[_Node] = field(default_factory=list)


@torch.no_grad()
def sample_tree(task, classifiers: EdgeClassifiers, max_nodes: int = 40, temperature: float = 1.0):
    """Sample one tree; returns (words in sentence order, 1-based heads)."""
    encoder, vocab = task.encoder, task.vocab
    banned = [vocab.index(x) for x in ("<pad>", "<unk>", ROOT_TOKEN) if x in vocab]
    root_id = vocab.index(ROOT_TOKEN)

    def embed(word: int) -> Tensor:
        return task.embedding.weight[word].unsqueeze(0)  # (1, E)

    def generate(edge: int, inputs: Tensor, state) -> _Node:
        new_state = encoder.step(edge, inputs, state)
        logits = task.decoder(new_state[-1][0])[0] / temperature
        logits[banned] = float("-inf")
        word = int(torch.multinomial(torch.softmax(logits, -1), 1))
        return _Node(word, new_state)

    def decide(node: _Node, classifier: int) -> bool:
        features = torch.cat([node.state[-1][0], task.decoder.weight[node.word].unsqueeze(0)], -1)
        return bool(torch.sigmoid(classifiers(features, classifier)) > torch.rand(()))

    def right_input(head: _Node) -> Tensor:
        inputs = embed(head.word)
        if encoder.uses_left_dependents:
            lefts = [embed(n.word) for n in reversed(head.left)]  # farthest first
            if lefts:
                sequence = torch.cat(lefts).unsqueeze(0)
                summary = encoder.summarise_left_dependents(sequence, torch.tensor([len(lefts)]))
            else:
                summary = inputs.new_zeros(1, encoder.left_dependent_size)
            inputs = torch.cat([inputs, summary], -1)
        return inputs

    root = _Node(root_id, encoder.root_state(1))
    count = 1
    root.right.append(generate(RIGHT, right_input(root), root.state))
    queue = deque([root.right[0]])
    while queue and count < max_nodes:
        node = queue.popleft()
        for side, first, nxt, first_edge, next_edge in (
            ("left", ADD_LEFT, ADD_NX_LEFT, LEFT, NX_LEFT),
            ("right", ADD_RIGHT, ADD_NX_RIGHT, RIGHT, NX_RIGHT),
        ):
            children = node.left if side == "left" else node.right
            if count >= max_nodes or not decide(node, first):
                continue
            inputs = embed(node.word) if side == "left" else right_input(node)
            child = generate(first_edge, inputs, node.state)
            children.append(child)
            count += 1
            while count < max_nodes and decide(child, nxt):
                child = generate(next_edge, embed(child.word), child.state)
                children.append(child)
                count += 1
            queue.extend(children)
    top = root.right[0]
    in_order: list[_Node] = []

    def visit(node: _Node) -> None:
        for child in reversed(node.left):  # farthest first = sentence order
            visit(child)
        in_order.append(node)
        for child in node.right:
            visit(child)

    visit(top)
    position = {id(node): index for index, node in enumerate(in_order, start=1)}
    heads = [0] * len(in_order)
    stack = [(top, 0)]
    while stack:
        node, head = stack.pop()
        heads[position[id(node)] - 1] = head
        stack.extend((child, position[id(node)]) for child in node.left + node.right)
    return [vocab[node.word] for node in in_order], heads


def format_tree(words: list[str], heads: list[int]) -> str:
    """Indented tree, head first, dependents below it in sentence order."""
    children: dict[int, list[int]] = {}
    for index, head in enumerate(heads, start=1):
        children.setdefault(head, []).append(index)
    lines = [" ".join(words)]

    def show(node: int, depth: int) -> None:
        for child in children.get(node, []):
            lines.append("  " * depth + words[child - 1])
            show(child, depth + 1)

    show(0, 1)
    return "\n".join(lines)
