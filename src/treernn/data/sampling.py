"""Training batches that a resumed run gets again, exactly.

Each epoch's order is a function of the run's seed and the epoch number alone (never of torch's
global generator, whose state at the start of an epoch a checkpoint taken later does not hold).
Lightning tells the samplers the epoch (``set_epoch``) before it iterates them, also when it
resumes, and a DataModule that mixes in `ResumableTrainBatches` saves in every checkpoint
how many batches of the current epoch were trained; the resumed run skips those and gets the rest
of the very batches the uninterrupted run would have had.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, Sampler


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A generator for one epoch of a run: its own stream for every (seed, epoch)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + epoch) % (2**63 - 1))


class EpochShuffle(Sampler[int]):
    """A random permutation of ``range(size)`` per epoch, from (seed, epoch). ``seed=None``: the
    run's seed (``torch.initial_seed()``, set by ``seed_everything``)."""

    def __init__(self, size: int, seed: int | None = None) -> None:
        self.size = size
        self._seed = seed
        self.epoch = 0

    @property
    def seed(self) -> int:
        return torch.initial_seed() if self._seed is None else self._seed

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        yield from torch.randperm(
            self.size, generator=epoch_generator(self.seed, self.epoch)
        ).tolist()


class LengthBucketBatchSampler(BatchSampler):
    """Batches of similar length: draw ``pool_batches`` batches' worth of indices from ``sampler``,
    sort them by length, cut into batches, and yield the batches in random order (from the
    sampler's seed and epoch). Without ``lengths`` the batches are plain consecutive chunks.

    Takes ``sampler`` as its first argument so Lightning can swap in a DistributedSampler.
    ``resume_at(epoch, batches_done)`` skips the first batches of that epoch once.
    """

    def __init__(
        self,
        sampler: Sampler[int] | Sequence[int],
        batch_size: int,
        drop_last: bool = False,
        lengths: Sequence[int] = (),
        pool_batches: int = 50,
        shuffle_batches: bool = True,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.lengths = list(lengths)
        self.pool_batches = pool_batches
        self.shuffle_batches = shuffle_batches
        self._resume: tuple[int, int] | None = None
        #: batches of the epoch being iterated
        self.epoch_batches = 0

    @property
    def epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def resume_at(self, epoch: int, batches_done: int) -> None:
        self._resume = (epoch, batches_done)

    def epoch_plan(self) -> list[list[int]]:
        """All batches of the current epoch, in order."""
        indices = list(iter(self.sampler))
        pool_size = self.batch_size * self.pool_batches if self.lengths else len(indices) or 1
        batches: list[list[int]] = []
        for start in range(0, len(indices), pool_size):
            pool = indices[start : start + pool_size]
            if self.lengths:
                pool = sorted(pool, key=self.lengths.__getitem__)
            for offset in range(0, len(pool), self.batch_size):
                batch = pool[offset : offset + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        if self.shuffle_batches:
            seed = int(getattr(self.sampler, "seed", torch.initial_seed()))
            order = torch.randperm(len(batches), generator=epoch_generator(seed + 1, self.epoch))
            batches = [batches[i] for i in order.tolist()]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.epoch_plan()
        self.epoch_batches = len(batches)
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1]
        self._resume = None
        yield from batches[skip:]


class ResumableTrainBatches:
    """Mixin for a LightningDataModule whose ``train_dataloader`` uses a
    `LengthBucketBatchSampler` registered with `_resumable`: checkpoints hold the
    epoch and the batches of it already trained, and a resumed run continues from there."""

    _train_batches: LengthBucketBatchSampler | None = None
    _resume_state: dict[str, int] | None = None

    def _resumable(self, batch_sampler: LengthBucketBatchSampler) -> LengthBucketBatchSampler:
        if self._resume_state:
            batch_sampler.resume_at(self._resume_state["epoch"], self._resume_state["batches_done"])
            self._resume_state = None
        self._train_batches = batch_sampler
        return batch_sampler

    def state_dict(self) -> dict[str, Any]:
        trainer = getattr(self, "trainer", None)
        if self._train_batches is None or trainer is None:
            return {}
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"epoch": self._train_batches.epoch, "batches_done": int(done)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_state = dict(state_dict) or None
