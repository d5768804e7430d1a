"""The classification task: counts per group and bucket, pair features, padding, tree encoders,
the batch's input views, learning on a small batch and the optimiser set-up."""

from __future__ import annotations

import functools

import pytest
import torch

from treernn.data.batch import MissingViewError
from treernn.data.classification import (
    Collator,
    Example,
    LengthBucketBatchSampler,
    Sentence,
    _pad_with_lengths,
)
from treernn.encoders.lstm import LSTMEncoder
from treernn.encoders.tree_batch import TreeBatch
from treernn.encoders.tree_rnn import TreeRNNEncoder
from treernn.reporting.accuracy import accuracy_table, length_curve
from treernn.tasks.classification import ClassificationTask, GroupedAccuracy


def test_grouped_accuracy_counts_by_hand():
    metric = GroupedAccuracy(num_groups=2, num_buckets=3)
    preds = torch.tensor([1, 0, 2, 2, 1])
    target = torch.tensor([1, 1, 2, 0, 1])
    groups = torch.tensor([0, 0, 0, 1, 1])
    buckets = torch.tensor([0, 0, 2, 2, 1])
    metric.update(preds, target, groups, buckets)
    correct, total = metric.compute()
    assert total.tolist() == [[2, 0, 1], [0, 1, 1]]
    assert correct.tolist() == [[1, 0, 1], [0, 1, 0]]


def _task(encoder, num_sentences=2, **kwargs):
    return ClassificationTask(
        encoder=encoder,
        vocab_size=6,
        num_classes=3,
        num_sentences=num_sentences,
        bucket_names=["ops0", "ops1", "ops2"],
        group_names=["length", "sysgen_A"],
        embedding_size=4,
        **kwargs,
    ).eval()


def _example(premise, hypothesis, label=0, bucket=0, group=0):
    def sentence(ids):
        return Sentence(tuple(ids), tuple(ids), tuple(range(len(ids))) if len(ids) > 1 else 0)

    return Example((sentence(premise), sentence(hypothesis)), label, bucket, group)


def test_pair_features_are_u_v_product_and_distance():
    lstm = functools.partial(LSTMEncoder, hidden_size=5)
    task = _task(lstm, mlp_layers=0)
    batch = Collator(0)([_example([1, 2], [3]), _example([4], [5, 1, 2])])
    pooled = task.encode(batch)  # (4, 5): premises then hypotheses
    u, v = pooled[:2], pooled[2:]
    expected = task.classifier(torch.cat([u, v, u * v, (u - v).abs()], -1))
    torch.testing.assert_close(task(batch), expected)


def test_padding_and_batch_company_do_not_change_the_logits():
    lstm = functools.partial(LSTMEncoder, hidden_size=5)
    task = _task(lstm)
    alone = task(Collator(0)([_example([1, 2], [3])]))
    together = task(Collator(0)([_example([1, 2], [3]), _example([4, 4, 4, 4], [5, 1, 2, 3, 1])]))
    torch.testing.assert_close(alone[0], together[0])


def test_tree_encoder_reads_leaves_with_tree_batch():
    tree_rnn = functools.partial(TreeRNNEncoder, hidden_size=5)
    task = _task(tree_rnn, num_sentences=1)
    sentence = Sentence((1, 2, 3), (1, 2, 3), ((0, 1), 2))
    other = Sentence((1, 2, 3), (1, 2, 3), (0, (1, 2)))
    batch = Collator(0)([Example((sentence,), 0), Example((other,), 1)])
    inputs = task.encoder_inputs(batch)  # the view the tree encoder declares
    assert inputs.view == "constituency_tree" and isinstance(inputs.kwargs["tree"], TreeBatch)
    logits = task(batch)
    assert logits.shape == (2, 3)
    # same words, different trees: a tree model must tell them apart
    assert not torch.allclose(logits[0], logits[1])


def test_test_metrics_keys_and_summary():
    lstm = functools.partial(LSTMEncoder, hidden_size=5)
    task = _task(lstm)
    correct = torch.tensor([[3, 0, 1], [0, 1, 0]])
    total = torch.tensor([[4, 0, 2], [0, 2, 0]])
    results = task.summarise(correct, total)
    assert results["length"]["acc"] == pytest.approx(4 / 6)
    assert results["length"]["buckets"] == {
        "ops0": {"acc": 0.75, "count": 4},
        "ops2": {"acc": 0.5, "count": 2},
    }
    metrics = task.flat_metrics(results)
    assert metrics == {
        "test/acc": pytest.approx(4 / 6),
        "test/acc/ops0": 0.75,
        "test/acc/ops2": 0.5,
        "test/sysgen_A/acc": 0.5,
        "test/sysgen_A/acc/ops1": 0.5,
    }
    assert length_curve(results) == {0: 75.0, 2: 50.0}
    table = accuracy_table(results)
    assert "ops0" in table and "75.00" in table and "66.67" in table


def test_length_bucket_sampler_groups_similar_lengths_and_covers_everything():
    lengths = [5, 1, 9, 2, 8, 3, 7, 4, 6, 10]
    sampler = LengthBucketBatchSampler(
        list(range(10)), batch_size=3, lengths=lengths, pool_batches=100, shuffle_batches=False
    )
    batches = list(sampler)
    assert [[lengths[i] for i in batch] for batch in batches] == [
        [1, 2, 3],
        [4, 5, 6],
        [7, 8, 9],
        [10],
    ]


def test_bad_settings_fail_with_clear_messages():
    lstm = functools.partial(LSTMEncoder, hidden_size=5)
    with pytest.raises(ValueError, match="num_sentences=3"):
        _task(lstm, num_sentences=3)
    with pytest.raises(ValueError, match="output_dropout=1.5"):
        _task(lstm, output_dropout=1.5)


def test_pretrained_embeddings_are_copied_and_frozen():
    vectors = torch.randn(20, 6)
    task = ClassificationTask(
        functools.partial(LSTMEncoder, hidden_size=5),
        vocab_size=20,
        num_classes=3,
        embedding_size=6,
        pretrained_embeddings=vectors,
    )
    assert torch.equal(task.embedding.weight, vectors)
    assert not task.embedding.weight.requires_grad
    trained = {id(p) for group in task.configure_optimizers().param_groups for p in group["params"]}
    assert id(task.embedding.weight) not in trained
    with pytest.raises(ValueError, match="embedding_size"):
        ClassificationTask(
            functools.partial(LSTMEncoder, hidden_size=5),
            vocab_size=20,
            num_classes=3,
            embedding_size=8,
            pretrained_embeddings=vectors,
        )


def test_summarise_accepts_scalar_counts_of_one_group_and_bucket():
    task = ClassificationTask(
        functools.partial(LSTMEncoder, hidden_size=5), vocab_size=20, num_classes=3
    )
    results = task.summarise(torch.tensor(3), torch.tensor(4))
    assert results["test"]["acc"] == 0.75 and results["test"]["buckets"]["all"]["count"] == 4


def test_the_token_view_reads_brackets_and_the_tree_view_the_leaves():
    # "( a b )": the leaves a, b sit at token positions 1 and 2
    bracketed = Sentence((1, 3, 4, 2), (3, 4), (0, 1), leaf_positions=(1, 2))
    batch = Collator(0)([Example((bracketed,), 0)])
    tokens = batch.encoder_inputs("tokens")
    assert tokens.tokens.tolist() == [[1, 3, 4, 2]] and tokens.kwargs == {}
    leaves = batch.encoder_inputs("constituency_tree")
    assert leaves.tokens.tolist() == [[3, 4]] and leaves.mask.tolist() == [[True, True]]
    assert batch.leaf_positions("tokens", [0]) == [[1, 2]]
    assert batch.leaf_positions("constituency_tree", [0]) == [[0, 1]]
    with pytest.raises(MissingViewError, match="'dependency_tree'.*td_treelstm"):
        batch.encoder_inputs("dependency_tree")


@pytest.mark.parametrize(
    "encoder",
    [
        functools.partial(LSTMEncoder, hidden_size=8),
        functools.partial(TreeRNNEncoder, hidden_size=8),
    ],
)
def test_a_few_steps_fit_a_small_batch(encoder):
    torch.manual_seed(0)
    adam = functools.partial(torch.optim.Adam, lr=0.03)
    task = _task(encoder, optimizer=adam).train()
    task.log = lambda *args, **kwargs: None  # no trainer attached
    batch = Collator(0)(
        [_example([1, 2], [3], 0), _example([4, 5], [1, 3], 1), _example([2], [5, 4], 2)]
    )
    optimizer = task.configure_optimizers()
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = task.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_optimiser_and_plateau_scheduler_from_the_partials():
    task = _task(
        functools.partial(LSTMEncoder, hidden_size=5),
        optimizer=functools.partial(torch.optim.Adam, lr=0.01),
        scheduler=functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="max"),
        monitor="val/acc",
    )
    config = task.configure_optimizers()
    assert config["optimizer"].param_groups[0]["lr"] == 0.01
    assert config["optimizer"].param_groups[0]["base_lr"] == 0.01
    scheduler = config["lr_scheduler"]
    assert isinstance(scheduler["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert scheduler["monitor"] == "val/acc" and scheduler["interval"] == "epoch"


def test_padding_keeps_a_real_token_equal_to_the_pad_index_and_empty_rows():
    ids, mask = _pad_with_lengths([(5, 0, 7), (), (0,)], pad_index=0)
    assert ids.tolist() == [[5, 0, 7], [0, 0, 0], [0, 0, 0]] and ids.dtype == torch.long
    assert mask.tolist() == [[True, True, True], [False, False, False], [True, False, False]]
    ids, mask = _pad_with_lengths([()], pad_index=3)  # at least one column
    assert ids.tolist() == [[3]] and mask.tolist() == [[False]]
