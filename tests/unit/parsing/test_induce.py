"""Tree induction from tree signals: the words' positions, batching with padding, eval mode,
and the dispatch on the signal's kind (distances or Ordered Memory attention)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from treernn.encoders.base import Encoder, EncoderOutput, TreeSignal
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.parsing.induce import (
    NoDistancesError,
    induce_distances,
    sentence_signals,
    trees_from_distances,
    trees_from_sentence_signals,
    trees_from_signal,
)

EOS = 1


class EchoEncoder(Encoder):
    """Distances of layer l at step t = (l + 1) * x[t, 0]: shows which steps are kept."""

    tree_signal_kind = "distances"

    def __init__(self) -> None:
        super().__init__()
        self.input_size = self.output_size = 1
        self.calls: list[tuple[Tensor, Tensor | None, bool]] = []

    def forward(self, x: Tensor, mask: Tensor | None = None, state=None) -> EncoderOutput:
        self.calls.append((x[..., 0].clone(), mask, self.training))
        value = x[..., 0]  # (B, T)
        distances = TreeSignal("distances", torch.stack([value, 2 * value]))  # (L=2, B, T)
        return EncoderOutput(hidden=x, pooled=x[:, -1], tree_signal=distances)


def identity_embedding(size: int = 20) -> nn.Embedding:
    embedding = nn.Embedding(size, 1)
    with torch.no_grad():
        embedding.weight.copy_(torch.arange(size, dtype=torch.float).unsqueeze(1))
    return embedding


def test_word_distances_are_the_steps_reading_each_word():
    encoder = EchoEncoder()
    sentences = [[5, 7, 3], [9], [4, 6]]
    distances = induce_distances(identity_embedding(), encoder, sentences, EOS, batch_size=8)
    assert [d.tolist() for d in distances] == [
        [[5, 7, 3], [10, 14, 6]],
        [[9], [18]],
        [[4, 6], [8, 12]],
    ]
    # one batch, sorted by length, <eos> on both sides, right padding with a mask
    ((inputs, mask, training),) = encoder.calls
    assert inputs.tolist() == [[EOS, 9, EOS, EOS, EOS], [EOS, 4, 6, EOS, EOS], [EOS, 5, 7, 3, EOS]]
    assert mask.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    assert training is False


def test_modes_are_restored_and_bad_input_is_refused():
    embedding, encoder = identity_embedding(), EchoEncoder()
    embedding.train()
    encoder.train()
    induce_distances(embedding, encoder, [[2, 3]], EOS)
    assert encoder.calls[-1][2] is False
    assert embedding.training and encoder.training
    with pytest.raises(ValueError, match="sentence 1 has no words"):
        induce_distances(embedding, encoder, [[2], []], EOS)
    encoder.tree_signal_kind = None
    with pytest.raises(NoDistancesError, match="EchoEncoder has no syntactic distances"):
        induce_distances(embedding, encoder, [[2]], EOS)


def test_trees_per_layer():
    distances = [torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 2.0]]), torch.tensor([[0.3], [0.1]])]
    assert trees_from_distances(distances) == [[(0, (1, 2)), 0], [((0, 1), 2), 0]]


def test_batched_onlstm_gives_the_same_trees_as_one_sentence_at_a_time():
    torch.manual_seed(0)
    embedding = nn.Embedding(30, 8)
    encoder = ONLSTMEncoder(
        input_size=8, hidden_size=12, num_layers=3, chunk_size=3, dropout=0.3, weight_drop=0.2
    )
    encoder.train()  # induction must switch dropout off itself
    generator = torch.Generator().manual_seed(1)
    lengths = [7, 1, 12, 3, 9, 2, 12, 5]
    sentences = [torch.randint(2, 30, (n,), generator=generator).tolist() for n in lengths]
    batched = induce_distances(embedding, encoder, sentences, EOS, batch_size=3)
    single = [induce_distances(embedding, encoder, [s], EOS, batch_size=1)[0] for s in sentences]
    for sentence, one_batch, alone in zip(sentences, batched, single):
        assert one_batch.shape == (3, len(sentence))
        torch.testing.assert_close(one_batch, alone, rtol=0, atol=1e-6)
    assert trees_from_distances(batched) == trees_from_distances(single)
    # the distances of a sentence read alone equal the encoder's own output at steps 1..n
    with torch.no_grad():
        encoder.eval()
        ids = torch.tensor([[EOS, *sentences[0], EOS]])
        direct = encoder(embedding(ids)).tree_signal.values[:, 0, 1:-1]
    torch.testing.assert_close(single[0], direct)
    # not all layers agree on every tree (the check is not vacuous)
    trees = trees_from_distances(batched)
    assert any(trees[0][i] != trees[1][i] for i in range(len(sentences)))


def test_trees_from_signal_reads_distances_at_the_leaves_and_attention_by_algorithm_2():
    # distances: row 1 of a 2-row batch, leaves at tokens 1, 3, 4 (brackets at 0, 2)
    values = torch.tensor([[[0.0] * 5, [0.9, 0.1, 0.8, 0.3, 0.5]]])  # (L=1, B=2, T=5)
    signal = TreeSignal("distances", values)
    assert trees_from_signal(signal, [[1, 3, 4]], rows=[1]) == [[((0, 1), 2)]]
    assert trees_from_signal(signal, [[1, 3, 4]], rows=[1], bracket_distances="max") == [
        [(0, (1, 2))]
    ]
    assert trees_from_signal(signal, [], rows=[]) == [[]]  # one (empty) list per layer
    # attention: slots pushed deeper and deeper give a right-branching tree, one layer
    slots = [None, 3, 2, 1]  # first word: no pointer
    attention = torch.zeros(1, 1, 4, 5)
    for step, slot in enumerate(slots):
        if slot is not None:
            attention[0, 0, step, slot] = 1.0
    mask = torch.ones(1, 4, dtype=torch.bool)
    tree = trees_from_signal(TreeSignal("attention", attention), [range(4)], mask)
    assert tree == [[(0, (1, (2, 3)))]]


def test_sentence_signals_keep_each_row_and_give_the_same_trees_as_distances():
    encoder = EchoEncoder()
    sentences = [[5, 7, 3], [9], [4, 6]]
    signals = sentence_signals(identity_embedding(), encoder, sentences, EOS, batch_size=2)
    # each sentence's own row over <eos> w_1 .. w_n <eos>, in the input order
    assert [s.values[0, 0].tolist() for s in signals] == [[1, 5, 7, 3, 1], [1, 9, 1], [1, 4, 6, 1]]
    distances = induce_distances(identity_embedding(), encoder, sentences, EOS, batch_size=2)
    assert trees_from_sentence_signals(signals) == trees_from_distances(distances)
    assert trees_from_sentence_signals(signals)[0] == [(0, (1, 2)), 0, (0, 1)]


def test_an_encoder_without_a_tree_signal_is_named():
    encoder = EchoEncoder()
    encoder.forward = lambda x, mask=None, state=None: EncoderOutput(hidden=x, pooled=x[:, -1])
    with pytest.raises(NoDistancesError, match="EchoEncoder returned no tree signal"):
        sentence_signals(identity_embedding(), encoder, [[2, 3]], EOS)
