"""PTB DataModule on the real files: counts, vocabulary, batching, resumable streams, DDP rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from treernn.data.download import DatasetNotFoundError
from treernn.data.ptb import BPTTStream, PTBDataModule, batchify


@pytest.fixture(scope="module")
def ptb(data_dir):
    datamodule = PTBDataModule(str(data_dir), download=False)
    datamodule.setup()
    return datamodule


def test_token_counts_and_vocabulary_match_the_paper_setting(ptb):
    assert {k: v.numel() for k, v in ptb.ids.items()} == {
        "train": 929_589,
        "valid": 73_760,
        "test": 82_430,
    }
    assert len(ptb.vocab) == 10_000
    # built in file order: the first line of train starts the vocabulary, <eos> ends it
    assert ptb.vocab.itos[:3] == ["aer", "banknote", "berlitz"]
    assert ptb.vocab.itos[ptb.ids["train"][24].item()] == "<eos>"


def test_batchify_rows_are_contiguous_stretches():
    rows = batchify(torch.arange(23), 4)
    assert rows.tolist() == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
        [10, 11, 12, 13, 14],
        [15, 16, 17, 18, 19],
    ]


def test_stream_targets_are_inputs_shifted_and_resume_mid_epoch():
    data = batchify(torch.arange(2000), 4)
    stream = BPTTStream(data, bptt=20, variable=True, seed=1)
    batches = list(stream)
    flat = torch.cat([x for x, _ in batches], dim=1)
    assert torch.equal(flat, data[:, :-1])
    assert all(torch.equal(x[:, 1:], y[:, :-1]) for x, y in batches)

    fresh = BPTTStream(data, bptt=20, variable=True, seed=1)
    iterator = iter(fresh)
    for _ in range(3):
        next(iterator)
    state = fresh.state_dict()
    assert state == {"epoch": 0, "batches_done": 3}
    resumed = BPTTStream(data, bptt=20, variable=True, seed=1)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(batches) - 3
    assert all(torch.equal(a[0], b[0]) for a, b in zip(rest, batches[3:]))
    # the next epoch draws new lengths
    assert [x.size(1) for x, _ in resumed] != [x.size(1) for x, _ in batches]


def test_ddp_processes_take_disjoint_row_blocks(ptb):
    full = ptb._rows("valid", 10)
    halves = []
    for rank in range(2):
        ptb.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        halves.append(ptb._rows("valid", 10))
    ptb.trainer = None
    assert torch.equal(torch.cat(halves), full)
    ptb.trainer = SimpleNamespace(world_size=3, global_rank=0)
    with pytest.raises(ValueError, match="not divisible"):
        ptb._rows("valid", 10)
    ptb.trainer = None


def test_validation_batches_cover_the_split_with_fixed_length(ptb):
    loader = ptb.val_dataloader()
    expected = loader.epoch_length()  # what the progress bar shows as the total
    lengths = [x.size(1) for x, _ in loader]
    assert set(lengths[:-1]) == {70} and len(lengths) == expected


def test_missing_data_names_files_url_and_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    datamodule = PTBDataModule(str(tmp_path), download=False)
    with pytest.raises(DatasetNotFoundError) as error:
        datamodule.prepare_data()
    message = str(error.value)
    for name in (
        "ptb.train.txt",
        "ptb.valid.txt",
        "ptb.test.txt",
        "https://",
        str(tmp_path / "ptb"),
    ):
        assert name in message


def test_bad_sizes_fail_before_training():
    with pytest.raises(ValueError, match="batch_size=0"):
        PTBDataModule(batch_size=0)


def test_epoch_length_follows_the_variable_schedule_and_a_resume(ptb):
    loader = ptb.train_dataloader()
    for _ in range(2):  # two epochs with different variable-BPTT schedules
        expected = loader.epoch_length()
        assert sum(1 for _ in loader) == expected
    stream = loader.stream
    stream.load_state_dict({"epoch": 2, "batches_done": 3})
    assert loader.epoch_length() == len(stream.lengths(2)) - 3
