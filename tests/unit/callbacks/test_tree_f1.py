"""The tree-F1 callback with WSJ gold trees (the ON-LSTM parse F1): per-layer logging, sharding
and summing over 2 gloo processes."""

from __future__ import annotations

import os
import socket
import warnings
from functools import partial
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from treernn.callbacks.tree_f1 import TreeF1Callback
from treernn.data.vocab import Vocabulary
from treernn.encoders.lstm import LSTMEncoder
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.metrics import BracketF1
from treernn.parsing.induce import induce_distances, sentence_signals, trees_from_distances
from treernn.parsing.metrics import score_trees
from treernn.parsing.trees import balanced, right_branching
from treernn.parsing.wsj import GoldSentence
from treernn.tasks.language_model import LanguageModelTask

WORDS = [f"w{i}" for i in range(20)]


def gold_sentences() -> list[GoldSentence]:
    lengths = [5, 3, 8, 1, 6, 4, 7]
    return [
        GoldSentence(
            words=tuple(WORDS[(3 * index + k) % 20] for k in range(n)),
            tree=balanced(n) if index % 2 else right_branching(n),
            labelled_spans=(),
            source=f"hand:{index}",
            section=0,
        )
        for index, n in enumerate(lengths)
    ]


class FakeModule:
    """What the callback reads from a LanguageModelTask (its vocabulary and
    ``sentence_tree_signals``), and a recording ``log``."""

    def __init__(self, distances: bool = True) -> None:
        torch.manual_seed(0)
        self.vocab = Vocabulary(["<eos>", *WORDS])
        self.embedding = nn.Embedding(len(self.vocab), 6)
        self.encoder = (
            ONLSTMEncoder(input_size=6, hidden_size=8, num_layers=2, chunk_size=2)
            if distances
            else LSTMEncoder(input_size=6, hidden_size=8, num_layers=2)
        )
        self.device = torch.device("cpu")
        self.logged: dict[str, float] = {}

    def sentence_tree_signals(self, sentences, batch_size: int = 64):
        eos = self.vocab.eos_index
        return sentence_signals(self.embedding, self.encoder, sentences, eos, batch_size)

    def log(self, name: str, value, sync_dist: bool = False) -> None:
        self.logged[name] = float(value)


def fake_trainer(
    epoch: int = 0, rank: int = 0, world: int = 1, limit_val_batches: int | float = 1.0
) -> SimpleNamespace:
    return SimpleNamespace(
        limit_val_batches=limit_val_batches,
        limit_test_batches=1.0,
        sanity_checking=False,
        current_epoch=epoch,
        global_rank=rank,
        world_size=world,
        is_global_zero=rank == 0,
        loggers=[],
    )


def callback_with(sentences: list[GoldSentence], **kwargs) -> TreeF1Callback:
    callback = TreeF1Callback(gold="wsj", treebank="sample", **kwargs)
    callback._sentences, callback._split_name = sentences, "hand"
    return callback


def expected_f1(module: FakeModule, sentences: list[GoldSentence]) -> dict[str, float]:
    ids = [module.vocab.encode(s.words) for s in sentences]
    trees = trees_from_distances(
        induce_distances(module.embedding, module.encoder, ids, module.vocab.eos_index)
    )
    gold = [s.tree for s in sentences]
    expected = {}
    for layer, layer_trees in enumerate(trees, start=1):
        scores = score_trees(layer_trees, gold)
        expected[f"val/parse_f1/layer{layer}"] = 100 * scores.corpus_f1  # logged in percent
        expected[f"val/parse_f1_sentence/layer{layer}"] = 100 * scores.sentence_f1
    return expected


def test_logs_corpus_and_sentence_f1_per_layer():
    module, sentences = FakeModule(), gold_sentences()
    callback_with(sentences, batch_size=3).on_validation_epoch_end(fake_trainer(), module)
    expected = expected_f1(module, sentences)
    assert set(module.logged) == set(expected) and len(expected) == 4
    for key, value in expected.items():
        assert module.logged[key] == pytest.approx(value, rel=1e-6)


def test_a_run_that_evaluates_n_batches_scores_n_batches_of_sentences():
    """trainer=smoke (limit_val_batches=2) once scored all 3,914 sample sentences."""
    module, sentences = FakeModule(), gold_sentences()
    callback = callback_with(sentences, batch_size=3)
    callback.on_validation_epoch_end(fake_trainer(limit_val_batches=1), module)
    assert module.logged == pytest.approx(expected_f1(module, sentences[:3]), rel=1e-6)
    assert callback._sentence_limit(fake_trainer(limit_val_batches=2), "val") == 6
    assert callback._sentence_limit(fake_trainer(limit_val_batches=0.5), "val") is None
    capped = callback_with(sentences, batch_size=3, max_sentences=4)
    assert capped._sentence_limit(fake_trainer(limit_val_batches=2), "val") == 4


def test_every_n_epochs_and_skipping_without_distances():
    module = FakeModule()
    callback = callback_with(gold_sentences(), every_n_epochs=2)
    callback.on_validation_epoch_end(fake_trainer(epoch=0), module)
    assert module.logged == {}
    callback.on_validation_epoch_end(fake_trainer(epoch=1), module)
    assert "val/parse_f1/layer2" in module.logged

    module = FakeModule(distances=False)
    callback = callback_with(gold_sentences())
    with pytest.warns(UserWarning, match="TreeF1Callback is skipped .* LSTMEncoder returned no"):
        callback.on_validation_epoch_end(fake_trainer(), module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only one warning
        callback.on_validation_epoch_end(fake_trainer(epoch=1), module)
    assert module.logged == {}

    # an encoder that declares a tree signal and returns none is a bug in it: the run stops,
    # where a warning let it finish with exit status 0 and no parse F1
    module.encoder.tree_signal_kind = "distances"
    with pytest.raises(RuntimeError, match="LSTMEncoder declares tree_signal_kind='distances' but"):
        callback_with(gold_sentences()).on_validation_epoch_end(fake_trainer(), module)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(rank: int, port: int, results) -> None:
    # the two ranks share the cores, as Lightning's DDP shares them on the CPU: with one OpenMP
    # thread per core each (torch's default outside pytest-xdist, whose workers set 1), the
    # threads of one rank wait for cores the other holds; on 2 cores busy with another job's
    # processes the test ran past 5 minutes without -n, its ranks' part in 15 s with this
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # the metric alone: rank 0 holds (2 matched, 3, 3, sentence F1 0.5), rank 1 (1, 2, 2, 0.0)
        metric = BracketF1()
        metric.update(*((2, 3, 3, 0.5) if rank == 0 else (1, 2, 2, 0.0)))
        values = metric.compute()
        # the callback: each rank parses its shard of the same sentences
        module = FakeModule()
        callback_with(gold_sentences()).on_validation_epoch_end(fake_trainer(0, rank, 2), module)
        results[rank] = (float(values["corpus_f1"]), float(values["sentence_f1"]), module.logged)
    finally:
        dist.destroy_process_group()


def test_two_processes_sum_counts_before_f1():
    results = mp.Manager().dict()
    mp.spawn(_ddp_worker, args=(_free_port(), results), nprocs=2, join=True)
    for rank in (0, 1):
        corpus, sentence, logged = results[rank]
        # summed counts (3 matched, 5 predicted, 5 gold) -> 0.6, not the mean of 2/3 and 1/2
        assert corpus == pytest.approx(0.6)
        assert sentence == pytest.approx(0.25)
        expected = expected_f1(FakeModule(), gold_sentences())
        for key, value in expected.items():
            assert logged[key] == pytest.approx(value, rel=1e-6)


class WandbLogger:
    """Stands in for lightning's WandbLogger (the callback looks at the class name)."""

    def __init__(self) -> None:
        self.tables: list[dict] = []

    def log_table(self, key: str, columns: list[str], data: list[list]) -> None:
        self.tables.append({"key": key, "columns": columns, "data": data})


def test_wandb_table_of_induced_and_gold_trees():
    module, logger = FakeModule(), WandbLogger()
    trainer = fake_trainer(epoch=3)
    trainer.loggers = [logger]
    callback_with(gold_sentences(), num_examples=2).on_validation_epoch_end(trainer, module)
    (table,) = logger.tables
    assert table["key"] == "val/parse_trees"
    assert table["columns"] == ["epoch", "sentence", "layer", "induced", "gold"]
    assert [row[:3] for row in table["data"]] == [
        [3, "hand:0", 1],
        [3, "hand:0", 2],
        [3, "hand:1", 1],
        [3, "hand:1", 2],
    ]
    # sentence 1 has 3 words and a balanced gold tree: (w3 (w4 w5))
    assert table["data"][2][4] == "(w3 (w4 w5))"
    assert sorted(table["data"][2][3].replace("(", "").replace(")", "").split()) == [
        "w3",
        "w4",
        "w5",
    ]


def test_a_language_model_reads_sentences_for_the_callback():
    vocab = Vocabulary(["<eos>", *WORDS])
    encoder = partial(ONLSTMEncoder, hidden_size=8, num_layers=2, chunk_size=2)
    task = LanguageModelTask(encoder, vocab_size=len(vocab), vocab=vocab, embedding_size=6)
    ids = [vocab.encode(s.words) for s in gold_sentences()]
    task.train()
    signals = task.sentence_tree_signals(ids, batch_size=3)
    assert task.training and task.encoder.training  # eval mode for the call only
    expected = induce_distances(task.embedding, task.encoder, ids, vocab.eos_index)
    for signal, distances in zip(signals, expected, strict=True):
        torch.testing.assert_close(signal.values[:, 0, 1:-1], distances)
