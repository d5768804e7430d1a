"""Tokens per second of Ordered Memory next to an LSTM of the same size, in the ListOps setting.

ListOps setting (Ordered Memory paper, REFERENCE.md): batch 128, 50 tokens, embedding and hidden
128, 21 slots, dropouts 0.1 (cell) / 0.3 (memory) / 0.1 (input) / 0.2 (output), a 10-way classifier
on the pooled output, Adam. Training time covers forward, backward and the optimizer step; inference
covers a ``torch.no_grad`` forward in eval mode. Both models see the same random batches; each
figure is the fastest of ``--repeats`` steps after a warm-up step.

    python scripts/benchmark_ordered_memory.py --threads 2

Numbers from a shared machine vary with the load of other processes (printed); with more runnable
processes than cores, ``--threads 1`` is much faster than 2 (OpenMP threads wait for each other).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

from treernn.encoders.lstm import LSTMEncoder
from treernn.encoders.ordered_memory import OrderedMemoryEncoder


class Classifier(nn.Module):
    def __init__(self, encoder: nn.Module, vocab_size: int, embedding_size: int, classes: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.encoder = encoder
        self.head = nn.Linear(encoder.output_size, classes)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embedding(tokens), mask).pooled)  # (B, classes)


def tokens_per_second(
    model: Classifier, batch: int, length: int, repeats: int, train: bool
) -> float:
    tokens = torch.randint(0, 18, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.bool)
    labels = torch.randint(0, 10, (batch,))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.999), eps=1e-9)
    model.train(train)

    def step() -> None:
        if train:
            loss = nn.functional.cross_entropy(model(tokens, mask), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        else:
            with torch.no_grad():
                model(tokens, mask)

    step()  # warm-up
    best = float("inf")  # the fastest step is the least disturbed by other processes
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return batch * length / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--slots", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    size = args.hidden
    ordered_memory = OrderedMemoryEncoder(
        size, size, dropout=0.1, memory_slots=args.slots, memory_dropout=0.3,
        input_dropout=0.1, output_dropout=0.2,
    )  # fmt: skip
    models = {
        "ordered_memory": Classifier(ordered_memory, 20, size, 10),
        "lstm": Classifier(LSTMEncoder(size, size), 20, size, 10),
    }
    print(
        f"batch {args.batch_size}, {args.length} tokens, hidden {size}, {args.slots} slots, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs visible, load average "
        f"{os.getloadavg()[0]:.1f} (other processes compete for the cores when it exceeds them)"
    )
    results = {}
    for name, model in models.items():
        train = tokens_per_second(model, args.batch_size, args.length, args.repeats, train=True)
        infer = tokens_per_second(model, args.batch_size, args.length, args.repeats, train=False)
        results[name] = (train, infer)
        print(f"{name:15s} training {train:10.0f} tokens/s   inference {infer:10.0f} tokens/s")
    (om_train, om_infer), (lstm_train, lstm_infer) = results["ordered_memory"], results["lstm"]
    print(
        f"ratio LSTM / Ordered Memory: training {lstm_train / om_train:.1f}x, "
        f"inference {lstm_infer / om_infer:.1f}x; Ordered Memory training vs the authors' "
        f"1.8k tokens/s: {om_train / 1800:.1f}x"
    )


if __name__ == "__main__":
    main()
