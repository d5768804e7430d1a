"""Training throughput of an encoder per length bucket: tokens the model reads per second of a
forward and backward pass (``python -m treernn report throughput``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl


def encoder_throughput(
    task: pl.LightningModule,
    examples: Sequence[Any],
    pad_index: int,
    bucket_names: Sequence[str],
    max_examples: int = 256,
    batch_size: int = 64,
) -> dict[str, dict[str, float]]:
    """Per bucket: tokens read per second (CPU time and wall time) of forward + backward passes
    in training mode over up to ``max_examples`` first-group examples of that bucket."""
    import time

    import torch.nn.functional as F

    from treernn.data.classification import Collator

    collate = Collator(pad_index)
    by_bucket: dict[int, list[Any]] = {}
    for example in examples:
        if example.group == 0:
            by_bucket.setdefault(example.bucket, []).append(example)
    task.train()
    results: dict[str, dict[str, float]] = {}
    for bucket, members in sorted(by_bucket.items()):
        members = members[:max_examples]
        batches = [collate(members[i : i + batch_size]) for i in range(0, len(members), batch_size)]
        F.cross_entropy(task(batches[0]), batches[0].labels).backward()  # warm-up
        task.zero_grad(set_to_none=True)
        # the tokens the encoder reads (its own view of the batch), counted outside the timing
        tokens = sum(int(task.encoder_inputs(batch).mask.sum()) for batch in batches)
        cpu, wall = time.process_time(), time.perf_counter()
        for batch in batches:
            F.cross_entropy(task(batch), batch.labels).backward()
            task.zero_grad(set_to_none=True)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        results[bucket_names[bucket]] = {
            "examples": len(members),
            "tokens": tokens,
            "tokens_per_cpu_s": tokens / max(cpu, 1e-9),
            "tokens_per_s": tokens / max(wall, 1e-9),
        }
    return results
