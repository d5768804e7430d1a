"""Tokens per second of Ordered Memory next to an LSTM of the same size, in the ListOps setting.

ListOps setting (Ordered Memory paper, REFERENCE.md): batch 128, 50 tokens, embedding and hidden
128, 21 slots, dropouts 0.1 (cell) / 0.3 (memory) / 0.1 (input) / 0.2 (output), a 10-way classifier
on the pooled output, Adam. Training time covers forward, backward and the optimizer step; inference
covers a ``torch.no_grad`` forward in eval mode. All models see the same random batches; each
figure is the median of ``--repeats`` timed steps (default 5) after a warm-up step, printed with
the spread (slowest to fastest step). The rows are timed in turns
(one step of each row per round), so that a change in the machine's load hits every row alike and
the ratios printed at the end compare steps taken at the same time.

Rows: Ordered Memory's reference path (``impl="reference"``: the readable Algorithm 1 of
``treernn.encoders.ordered_memory``, every slot at every step, plain autograd, fp32), its fused
path (``treernn.kernels.ordered_memory``: windowed slots, hand-written backward of the slot
chain) in fp32 and in bf16-mixed (the model run under
``torch.autocast("cpu", dtype=torch.bfloat16)``, as Lightning's ``precision=bf16-mixed`` does; the
fused path runs its products in bf16 only where a probe finds bf16 faster on this machine, and
says so), and an LSTM of the same size in fp32 and bf16-mixed. Then the ratios: bf16-mixed vs
fp32, fused vs reference, each Ordered Memory row vs the authors' 1.8k training tokens/s, and
LSTM / Ordered Memory, and which products ran in which precision.

    python scripts/benchmark_ordered_memory.py --threads 2
    python scripts/benchmark_ordered_memory.py --threads 1 --quick   # 3 rounds, 25 tokens

Numbers from a shared machine vary with the load of other processes (printed); with more runnable
processes than cores, ``--threads 1`` is much faster than 2 (OpenMP threads wait for each other).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from functools import partial
from pathlib import Path

import torch
from torch import nn

from treernn.encoders.lstm import LSTMEncoder
from treernn.encoders.ordered_memory import OrderedMemoryEncoder
from treernn.kernels import gemm

AUTHORS_TRAINING_TOKENS_PER_SECOND = 1800.0


class Classifier(nn.Module):
    def __init__(self, encoder: nn.Module, vocab_size: int, embedding_size: int, classes: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.encoder = encoder
        self.head = nn.Linear(encoder.output_size, classes)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embedding(tokens), mask).pooled)  # (B, classes)


def timed_step(model: Classifier, batch: int, length: int, train: bool, bf16: bool):
    """One step of ``model`` on a fixed random batch (a closure), run once as a warm-up."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 18, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.bool)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.999), eps=1e-9)

    def precision():
        if bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step() -> None:
        model.train(train)  # the row's model serves both its training and its inference steps
        if train:
            with precision():
                logits = model(tokens, mask)
            loss = nn.functional.cross_entropy(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        else:
            with torch.no_grad(), precision():
                model(tokens, mask)

    step()  # warm-up
    return step


def cpu_description() -> str:
    """CPU model, the ISA flags that matter for fp32 / bf16 products, oneDNN bf16 support."""
    model, flags = "unknown CPU", set()
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    present = " ".join(f for f in wanted if f in flags) or "none"
    if Path("/proc/cpuinfo").exists():
        model = gemm.cpu_name(Path("/proc/cpuinfo").read_text())
    return (
        f"CPU {model}; flags {present}; torch CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}; oneDNN bf16 "
        f"{'yes' if gemm.onednn_available(torch.bfloat16) else 'no'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--slots", type=int, default=21)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="three timed rounds and 25 tokens (a smoke run)"
    )
    parser.add_argument(
        "--backends",
        default="auto",
        help="comma list of GEMM backends for the fused fp32 rows (auto, mkl, onednn, aten)",
    )
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.length = 3, min(args.length, 25)
    torch.set_num_threads(args.threads)
    size = args.hidden

    def ordered_memory(fast: bool, backend: str = "auto") -> Classifier:
        torch.manual_seed(0)  # the same weights for every Ordered Memory row
        encoder = OrderedMemoryEncoder(
            size, size, dropout=0.1, memory_slots=args.slots, memory_dropout=0.3,
            input_dropout=0.1, output_dropout=0.2, impl="fast" if fast else "reference",
            gemm_backend=backend,
        )  # fmt: skip
        return Classifier(encoder, 20, size, 10)

    def lstm() -> Classifier:
        torch.manual_seed(0)
        return Classifier(LSTMEncoder(size, size), 20, size, 10)

    rows = {  # name: (model factory, bf16-mixed)
        "OM reference fp32": (lambda: ordered_memory(False), False),
        "OM fused fp32": (lambda: ordered_memory(True), False),
    }
    for backend in args.backends.split(","):
        if backend != "auto":
            rows[f"OM fused fp32 {backend}"] = (partial(ordered_memory, True, backend), False)
    rows |= {
        "OM fused bf16-mixed": (lambda: ordered_memory(True), True),
        "LSTM fp32": (lstm, False),
        "LSTM bf16-mixed": (lstm, True),
    }
    print(cpu_description())
    print(
        f"batch {args.batch_size}, {args.length} tokens, hidden {size}, {args.slots} slots, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs visible, load average "
        f"{os.getloadavg()[0]:.1f} (other processes compete for the cores when it exceeds them)"
    )
    steps = {}  # (row, training?) -> step
    for name, (factory, bf16) in rows.items():
        model = factory()
        for train in (True, False):
            steps[name, train] = timed_step(model, args.batch_size, args.length, train, bf16)
    seconds = {key: [] for key in steps}
    for _ in range(args.repeats):
        for key, step in steps.items():
            start = time.perf_counter()
            step()
            seconds[key].append(time.perf_counter() - start)
    tokens = args.batch_size * args.length
    results = {}
    print(f"tokens/s, median of {args.repeats} timed steps (slowest-fastest)")
    for name in rows:
        figures = []
        for mode in (True, False):
            rates = [tokens / value for value in seconds[name, mode]]
            figures.append((statistics.median(rates), min(rates), max(rates)))
        results[name] = tuple(figure[0] for figure in figures)
        (train, slow_train, fast_train), (infer, slow_infer, fast_infer) = figures
        print(
            f"{name:20s} training {train:8.0f} ({slow_train:.0f}-{fast_train:.0f})   "
            f"inference {infer:8.0f} ({slow_infer:.0f}-{fast_infer:.0f})"
        )
    print(f"load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for low, full in (("OM fused bf16-mixed", "OM fused fp32"), ("LSTM bf16-mixed", "LSTM fp32")):
        print(
            f"{low} vs {full}: training {results[low][0] / results[full][0]:.2f}x, "
            f"inference {results[low][1] / results[full][1]:.2f}x"
        )
    reference = results["OM reference fp32"]
    for name in [n for n in results if n.startswith("OM fused")]:
        train, infer = results[name]
        print(
            f"{name} vs reference: training {train / reference[0]:.2f}x, "
            f"inference {infer / reference[1]:.2f}x"
        )
    for name in ("OM reference fp32", "OM fused fp32", "OM fused bf16-mixed"):
        print(
            f"{name} training vs the authors' 1.8k tokens/s: "
            f"{results[name][0] / AUTHORS_TRAINING_TOKENS_PER_SECOND:.2f}x"
        )
    for lstm_name, om_name in (
        ("LSTM fp32", "OM fused fp32"), ("LSTM bf16-mixed", "OM fused bf16-mixed"),
    ):  # fmt: skip
        (lstm_train, lstm_infer), (om_train, om_infer) = results[lstm_name], results[om_name]
        print(
            f"ratio {lstm_name} / {om_name}: training {lstm_train / om_train:.1f}x, "
            f"inference {lstm_infer / om_infer:.1f}x"
        )

    print("Under bf16-mixed, which products ran in bf16 (the probe of gemm.product_dtype):")
    for (model, product, shape), dtype in sorted(gemm.DECISIONS.items()):
        print(f"  {model:16s} {product:22s} {shape:32s} {dtype}")


if __name__ == "__main__":
    main()
