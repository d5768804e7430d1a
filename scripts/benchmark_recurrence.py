"""Benchmark the recurrent encoders against ``torch.nn.LSTM`` at the same sizes.

In one run, times training steps (forward + backward) and inference of

* ``nn.LSTM``: one ``torch.nn.LSTM`` per layer, same sizes, no regularisation (the target);
* ``LSTMEncoder``: ``treernn.encoders.lstm`` (nn.LSTM + AWD weight drop);
* ``ON-LSTM fast``: ``ONLSTMEncoder(impl="fast")``, the default;
* ``ON-LSTM ref``: ``ONLSTMEncoder(impl="reference")``, the readable step-by-step cell;

(``ON-LSTM fast:mkl``, ``:onednn``, ``:aten`` force the per-step GEMM backend of
``treernn.kernels.gemm``; plain ``ON-LSTM fast`` lets it probe; ``ON-LSTM fast/torch-ops`` runs
the fast recurrence without its compiled per-step kernel, as ``TREERNN_CPP_EXT=0`` does, and
``ON-LSTM fast/separate-projection`` with its input projection as one product over all steps
before the recurrence instead of inside its step loop (``TREERNN_ONLSTM_PROJECTION=separate``),
e.g. ``--models "nn.LSTM,ON-LSTM fast,ON-LSTM fast/separate-projection"`` for before and after
in one run) for
the recurrent stack alone and
for a full language-model step (10k embedding, the stack, a tied
decoder, 10k softmax and cross-entropy), at the paper size (400-1150-1150-400, chunk 10, batch 20,
BPTT 70) and a small size (one layer of 256, chunk 8, batch 32, BPTT 35). Prints tokens per second
(median over steps after warm-up; models take turns step by step so that load from other
processes hits them alike), the spread, the ratio to nn.LSTM from the same run, peak memory of one
step, the achieved GFLOP/s and its fraction of the machine's GEMM roofline, and a table of how the
cost grows with sequence length, batch and hidden size.

Every model runs in fp32 and under bf16-mixed (``torch.autocast`` with bf16, as Lightning's
``precision=bf16-mixed`` runs it), side by side: the table gives each row's ratio to nn.LSTM in
fp32 and, for bf16-mixed rows, to the same model's fp32 row; at the end the run lists which of
our models' products ran in bf16 and which stayed fp32 on this machine (the probe of
``treernn.kernels.gemm.product_dtype``), and what autocast did to the plain torch modules.

First it prints the machine: CPU model, family and model number, the ISA flags that matter (avx2,
avx512f, avx512_bf16, amx), torch's CPU capability, threads and load, and the GEMM roofline:
GFLOP/s of each backend (MKL's packed GEMM, oneDNN's packed linear, this package's ``treernn``
micro-kernels, plain aten ``addmm``) at each model's per-step shapes (B, K) x (K, N), in fp32 and
in bf16 where the CPU has bf16 kernels, the best round of several taken in turn. "of roofline" =
the model's achieved GFLOP/s (its matrix-product FLOPs per token, counted below, times tokens/s)
over the best fp32 backend's rate at its recurrent shape (B, H) x (H, gates): an upper bound a
step-by-step fp32 recurrence cannot pass. Each timed figure is the median of the timed steps
(5 with --quick, 7 otherwise), with the spread (slowest to fastest step) beside it.

    python scripts/benchmark_recurrence.py            # full run
    python scripts/benchmark_recurrence.py --quick    # about two minutes on 2 CPU cores
    python scripts/benchmark_recurrence.py --device cuda
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from treernn.encoders.onlstm import ONLSTMEncoder  # noqa: E402
from treernn.kernels import cpp_ext, gemm, onlstm_projected  # noqa: E402

try:
    from treernn.encoders.lstm import LSTMEncoder  # noqa: E402
except ImportError:  # pragma: no cover - the benchmark still runs the others
    LSTMEncoder = None

VOCAB_SIZE = 10_000
MODELS = ("nn.LSTM", "LSTMEncoder", "ON-LSTM fast", "ON-LSTM ref")


@dataclass(frozen=True)
class Size:
    name: str
    input_size: int  # = embedding size in the LM (tied decoder: = output_size)
    hidden_size: int
    num_layers: int
    output_size: int
    chunk_size: int
    batch: int
    bptt: int


PAPER = Size("paper", 400, 1150, 3, 400, 10, 20, 70)
SMALL = Size("small", 256, 256, 1, 256, 8, 32, 35)
SIZES = {size.name: size for size in (PAPER, SMALL)}


class NNLSTMStack(nn.Module):
    """One torch.nn.LSTM per layer, batch-first, returning the last layer's outputs."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        sizes = [size.input_size] + [size.hidden_size] * (size.num_layers - 1) + [size.output_size]
        self.layers = nn.ModuleList(
            nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(size.num_layers)
        )

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x, _ = layer(x)
        return x


@contextlib.contextmanager
def cpp_extensions_off():
    """``TREERNN_CPP_EXT=0`` for the duration (the encoders read it at each call)."""
    before = os.environ.get(cpp_ext.ENV_VAR)
    os.environ[cpp_ext.ENV_VAR] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[cpp_ext.ENV_VAR]
        else:
            os.environ[cpp_ext.ENV_VAR] = before


@contextlib.contextmanager
def separate_input_projection():
    """``TREERNN_ONLSTM_PROJECTION=separate`` for the duration: ON-LSTM's input projection as one
    product over all steps before the recurrence (the path before the projection moved inside
    the step loop, and the path of the other backends)."""
    before = os.environ.get(onlstm_projected.ENV_VAR)
    os.environ[onlstm_projected.ENV_VAR] = "separate"
    try:
        yield
    finally:
        if before is None:
            del os.environ[onlstm_projected.ENV_VAR]
        else:
            os.environ[onlstm_projected.ENV_VAR] = before


class EncoderStack(nn.Module):
    """Wraps a treernn encoder so that it returns the (B, T, H) hidden states; ``torch_ops``
    runs it without the compiled kernels, ``separate_projection`` with the input projection over
    all steps before the recurrence instead of inside its loop."""

    def __init__(
        self, encoder: nn.Module, torch_ops: bool = False, separate_projection: bool = False
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.torch_ops = torch_ops
        self.separate_projection = separate_projection

    def forward(self, x: Tensor) -> Tensor:
        with contextlib.ExitStack() as stack:
            if self.torch_ops:
                stack.enter_context(cpp_extensions_off())
            if self.separate_projection:
                stack.enter_context(separate_input_projection())
            return self.encoder(x).hidden


def build_stack(model: str, size: Size, dropout: float, weight_drop: float) -> nn.Module:
    common = dict(
        input_size=size.input_size,
        hidden_size=size.hidden_size,
        num_layers=size.num_layers,
        dropout=dropout,
        weight_drop=weight_drop,
        output_size=size.output_size,
    )
    if model == "nn.LSTM":
        return NNLSTMStack(size)
    if model == "LSTMEncoder":
        return EncoderStack(LSTMEncoder(**common))
    name, _, backend = model.partition(":")
    name, _, variant = name.partition("/")
    impl = "fast" if name == "ON-LSTM fast" else "reference"
    encoder = ONLSTMEncoder(
        chunk_size=size.chunk_size, impl=impl, gemm_backend=backend or "auto", **common
    )
    return EncoderStack(
        encoder,
        torch_ops=variant == "torch-ops",
        separate_projection=variant == "separate-projection",
    )


def layer_sizes(size: Size) -> list[tuple[int, int]]:
    """(input, hidden) of each layer."""
    sizes = [size.input_size] + [size.hidden_size] * (size.num_layers - 1) + [size.output_size]
    return list(zip(sizes[:-1], sizes[1:]))


def num_gates(model: str, hidden: int, chunk_size: int) -> int:
    return (
        4 * hidden
        if "LSTM" in model and "ON-LSTM" not in model
        else 4 * hidden + 2 * (hidden // chunk_size)
    )


def flops_per_token(model: str, size: Size, part: str, mode: str) -> float:
    """Matrix-product FLOPs per token: 2 (I + H) G per layer forward (input and recurrent
    products), 3x that for a training step (forward, input gradient, weight gradient); the LM
    adds its tied decoder (2 E V, 3x in training). Elementwise work is not counted."""
    total = sum(2.0 * (i + h) * num_gates(model, h, size.chunk_size) for i, h in layer_sizes(size))
    if part == "lm":
        total += 2.0 * size.output_size * VOCAB_SIZE
    return total * (3 if mode == "train" else 1)


def recurrent_shape(model: str, size: Size) -> tuple[int, int, int]:
    """The widest per-step product (B, H) x (H, G) of the model at this size."""
    hidden = size.hidden_size
    return size.batch, hidden, num_gates(model, hidden, size.chunk_size)


class LanguageModel(nn.Module):
    """Embedding -> stack -> tied decoder -> 10k softmax cross-entropy."""

    def __init__(self, stack: nn.Module, size: Size) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB_SIZE, size.input_size)
        self.stack = stack
        self.decoder = nn.Linear(size.output_size, VOCAB_SIZE)
        self.decoder.weight = self.embedding.weight

    def forward(self, tokens: Tensor, targets: Tensor) -> Tensor:
        # contiguous, as our encoders return it: torch's matmul multiplies a transposed bf16 view
        # (nn.LSTM's output under autocast) with bmm in inference mode, 3x slower here
        hidden = self.stack(self.embedding(tokens)).contiguous()  # (B, T, E)
        # (B, T, V); under bf16-mixed in bf16 where the probe finds it faster, as treernn's LM
        decoder = self.decoder
        logits = gemm.decided_linear(hidden, decoder.weight, decoder.bias, "LM", "decoder")
        return F.cross_entropy(logits.view(-1, VOCAB_SIZE).float(), targets.reshape(-1))


def make_step(
    model: nn.Module,
    part: str,
    mode: str,
    size: Size,
    device: torch.device,
    precision: str = "fp32",
) -> Callable[[], None]:
    """A closure running one training step (forward + backward) or one inference forward, the
    forward under bf16 autocast for ``precision="bf16-mixed"`` (as Lightning runs it)."""
    batch, steps = size.batch, size.bptt
    autocast = precision == "bf16-mixed"
    model.train(mode == "train")
    if part == "stack":
        x = torch.randn(batch, steps, size.input_size, device=device)

        def forward() -> Tensor:
            return model(x).float().pow(2).mean()
    else:
        tokens = torch.randint(VOCAB_SIZE, (batch, steps + 1), device=device)

        def forward() -> Tensor:
            return model(tokens[:, :-1], tokens[:, 1:])

    def loss_fn() -> Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            return forward()

    if mode == "train":

        def step() -> None:
            model.zero_grad(set_to_none=True)
            loss_fn().backward()
    else:

        def step() -> None:
            with torch.inference_mode():
                loss_fn()

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_round_robin(
    steps: dict[str, Callable[[], None]], warmup: int, repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per step for each closure; closures take turns so load hits them alike."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def peak_memory_bytes(step: Callable[[], None], device: torch.device) -> int:
    """Peak memory allocated during one step, above what was allocated before it."""
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import profile

    with profile(profile_memory=True) as prof:
        step()
    events = prof.profiler.kineto_results.events()
    changes = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in changes:
        current += nbytes
        peak = max(peak, current)
    return peak


def cpu_description() -> str:
    """CPU model, the ISA flags that matter here, torch's CPU capability."""
    model, flags = "unknown CPU", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_ne_convert")
    present = [flag for flag in wanted if flag in flags]
    present += sorted(flag for flag in flags if flag.startswith("amx"))
    absent = [flag for flag in ("avx512f", "avx512_bf16", "amx_bf16") if flag not in flags]
    kernels = gemm.packed_kernels()
    isa = {1: "portable C++", 2: "AVX2 + FMA", 3: "AVX-512"}.get(kernels.isa()) if kernels else None
    treernn = (
        "not built"
        if kernels is None
        else isa
        + (" and AVX512-BF16" if kernels.bf16_pairs() else "")
        + (" (bf16 products on AMX tiles)" if kernels.amx() else "")
    )
    return (
        f"CPU {gemm.cpu_name(cpuinfo.read_text()) if cpuinfo.exists() else model}, "
        f"{os.cpu_count()} CPUs visible; flags: {' '.join(present) or 'none'}"
        f" (absent: {' '.join(absent) or 'none'}); torch CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}; oneDNN bf16 "
        f"{'yes' if gemm.onednn_available(torch.bfloat16) else 'no'}; treernn kernels {treernn}"
    )


def load_description() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def gemm_rates(
    shape: tuple[int, int, int], device: torch.device, rounds: int, dtype=torch.float32
) -> dict[str, float]:
    """GFLOP/s of each backend for (B, K) x (K, N) products with a packed (N, K) weight, the
    products in ``dtype`` (bf16: fp32 operands cast as the recurrences do, fp32 results)."""
    batch, inner, outer = shape
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(outer, inner, generator=generator).to(device)
    x = torch.randn(batch, inner, generator=generator).to(device)
    names = gemm.candidates(device, dtype)
    if dtype == torch.bfloat16 and len(names) > 1:  # aten's bf16 product is oneDNN's again
        names = [name for name in names if name != "aten"]
    linears = {name: gemm.PackedLinear(weight, batch, name, dtype) for name in names}
    flops = 2.0 * batch * inner * outer
    calls = max(2, min(100, int(2e8 / flops)))
    best = dict.fromkeys(linears, float("inf"))
    with torch.no_grad():
        for linear in linears.values():
            linear.mm(x)
        for _ in range(rounds):
            for name, linear in linears.items():
                synchronize(device)
                start = time.perf_counter()
                for _ in range(calls):
                    linear.mm(x)
                synchronize(device)
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return {name: flops / seconds / 1e9 for name, seconds in best.items()}


def roofline(args: argparse.Namespace, sizes: list[Size], device: torch.device) -> dict:
    """Print and return {(B, K, N): {backend: GFLOP/s}} at every model's per-step shapes."""
    shapes: dict[tuple[int, int, int], str] = {}
    for size in sizes:
        for model in ("nn.LSTM", "ON-LSTM fast"):
            batch, hidden, gates = recurrent_shape(model, size)
            shapes.setdefault((batch, hidden, gates), f"{size.name} {model} h @ W_hh")
            if model == "ON-LSTM fast":
                shapes.setdefault((batch, gates, hidden), f"{size.name} ON-LSTM backward")
                first = num_gates(model, size.hidden_size, size.chunk_size)
                shapes.setdefault(
                    (batch * size.bptt, size.input_size, first), f"{size.name} input projection"
                )
    print("\nGEMM roofline (GFLOP/s, best of rounds taken in turn; (B x K) @ (K x N))")
    names = gemm.candidates(device, torch.float32)
    # aten's bf16 on a CPU is the 50-100x slower fallback; on a GPU it is the tensor cores'
    low = [
        name
        for name in gemm.candidates(device, torch.bfloat16)
        if name != "aten" or device.type != "cpu"
    ]
    heads = names + [f"{name}-bf16" for name in low]
    print(f"{'shape':32s} {'B':>5} {'K':>5} {'N':>5} " + " ".join(f"{n:>12s}" for n in heads))
    table = {}
    rounds = 3 if args.quick else 7
    for shape, label in shapes.items():
        table[shape] = gemm_rates(shape, device, rounds)
        rates = [table[shape][n] for n in names]
        if low:
            rates += list(gemm_rates(shape, device, rounds, torch.bfloat16).values())
        figures = " ".join(f"{rate:12.1f}" for rate in rates)
        print(f"{label:32s} {shape[0]:5d} {shape[1]:5d} {shape[2]:5d} {figures}", flush=True)
    if not low and device.type == "cpu":
        print("(no bf16 GEMM kernels on this CPU: bf16 products would run 50-100x slower)")
    print(load_description())
    return table


def benchmark_size(
    args: argparse.Namespace, size: Size, device: torch.device, rooflines: dict
) -> list[dict]:
    rows = []
    available = [m for m in args.models.split(",") if m != "LSTMEncoder" or LSTMEncoder is not None]
    precisions = args.precisions.split(",")
    for part in args.parts.split(","):
        # --quick times the slow reference cell on the recurrent stack only.
        models = [m for m in available if not (args.quick and part == "lm" and m == "ON-LSTM ref")]
        for mode in args.modes.split(","):
            steps = {}
            for precision in precisions:
                for name in models:
                    if precision != "fp32" and not bf16_runs(name, device):
                        continue
                    torch.manual_seed(0)
                    stack = build_stack(name, size, args.dropout, args.weight_drop)
                    model = stack if part == "stack" else LanguageModel(stack, size)
                    step = make_step(model.to(device), part, mode, size, device, precision)
                    steps[name, precision] = step
            times = time_round_robin(steps, args.warmup, args.repeats, device)
            tokens = size.batch * size.bptt
            rates = {key: [tokens / t for t in values] for key, values in times.items()}
            medians = {key: statistics.median(values) for key, values in rates.items()}
            baseline = medians[models[0], "fp32"]
            for (name, precision), rate in medians.items():
                skip_memory = args.no_memory or (args.quick and mode == "infer")
                memory = None if skip_memory else peak_memory_bytes(steps[name, precision], device)
                gflops = rate * flops_per_token(name, size, part, mode) / 1e9
                peak = max(rooflines.get(recurrent_shape(name, size), {}).values(), default=0.0)
                own = medians.get((name, "fp32"))
                rows.append(
                    dict(size=size.name, part=part, mode=mode, model=name, precision=precision,
                         tokens_per_s=rate, low=min(rates[name, precision]),
                         high=max(rates[name, precision]), ratio=rate / baseline,
                         over_fp32=None if precision == "fp32" or own is None else rate / own,
                         memory=memory, gflops=gflops,
                         fraction=gflops / peak if peak and precision == "fp32" else None)
                )  # fmt: skip
                print(format_row(rows[-1]), flush=True)
    return rows


def bf16_runs(model: str, device: torch.device) -> bool:
    """Whether ``model`` can run under bf16 autocast here: nn.LSTM needs oneDNN's bf16 LSTM
    primitive on CPU (our encoders fall back to fp32 by themselves)."""
    return model != "nn.LSTM" or gemm.bf16_kernels(device)


def format_row(row: dict) -> str:
    memory = "-" if row["memory"] is None else f"{row['memory'] / 2**20:9.1f}"
    fraction = "-" if row["fraction"] is None else f"{row['fraction']:.2f}"
    over = "-" if row["over_fp32"] is None else f"{row['over_fp32']:.2f}"
    spread = f"{row['low']:.0f}-{row['high']:.0f}"
    return (
        f"{row['size']:6s} {row['part']:6s} {row['mode']:6s} {row['model']:30s} "
        f"{row['precision']:10s} {row['tokens_per_s']:10.0f} {spread:>17s} {row['ratio']:6.2f} "
        f"{over:>6s} {memory:>9s} {row['gflops']:8.1f} {fraction:>7s}"
    )


def header() -> str:
    return (
        f"{'size':6s} {'part':6s} {'mode':6s} {'model':30s} {'precision':10s} {'tokens/s':>10s} "
        f"{'spread':>17s} {'ratio':>6s} {'/fp32':>6s} {'peak MiB':>9s} {'GFLOP/s':>8s} "
        f"{'of roof':>7s}"
    )


def precision_summary(args: argparse.Namespace, device: torch.device) -> None:
    """Where ON-LSTM's input projection ran in fp32, and which products ran in which precision
    under bf16-mixed, in this run."""
    if onlstm_projected.DECISIONS:
        print(
            "\nON-LSTM's input projection in fp32 on the treernn backend (probed per layer shape):"
        )
        for (batch, depth, hidden), placement in sorted(onlstm_projected.DECISIONS.items()):
            where = onlstm_projected.WHERE[placement]
            print(f"  batch {batch:4d}, {depth:5d} -> {hidden:5d}: {where}")
    if "bf16-mixed" not in args.precisions.split(","):
        return
    print("\nUnder bf16-mixed, our models' products (bf16 where the probe found bf16 at least 10%")
    print("faster than fp32 at the product's shape on this machine, fp32 otherwise):")
    for (model, product, shape), dtype in sorted(gemm.DECISIONS.items()):
        print(f"  {model:16s} {product:40s} {shape:32s} {dtype}")
    print("  (gates, states, distances and every elementwise step stay fp32 in every case)")
    if onlstm_projected.DECISIONS:
        print(
            "ON-LSTM layers whose projection runs inside the step loop (above) keep it there "
            "under bf16-mixed\n(with treernn's bf16 kernels: AMX or AVX512-BF16), their loop's "
            "precision decided once per mode\n(shape (B x D+H) @ (D+H x G)); other layers "
            "decide their two products apart."
        )
    lstm = (
        "oneDNN's bf16 LSTM primitive"
        if gemm.bf16_kernels(device)
        else "not run: this CPU has no bf16 LSTM primitive (autocast would fail)"
    )
    print(f"Plain torch modules follow autocast: nn.LSTM {lstm}; the LM's embedding stays fp32,")
    print("the cross-entropy fp32; its tied decoder's precision is decided as treernn's LM")
    print("decides it (gemm.decided_linear: bf16 where at least 10% faster here; 'LM decoder').")


def scaling_table(args: argparse.Namespace, device: torch.device) -> None:
    """Training step cost of one 400 -> H layer (chunk 10) as T, B and H change one at a time."""
    base = dict(batch=20, bptt=70, hidden=1150)
    grid = [("bptt", v) for v in (35, 70, 140)]
    grid += [("batch", v) for v in (10, 40)] + [("hidden", v) for v in (400, 800)]
    if args.quick:
        grid = [("bptt", 35), ("batch", 10), ("hidden", 400)]
    print("\nScaling, training step of one 400 -> H layer (chunk 10); ms per step, tokens/s")
    print(f"{'B':>4} {'T':>4} {'H':>5} {'nn.LSTM ms':>11} {'ON-LSTM ms':>11} {'ON tok/s':>9} ratio")
    for key, value in grid:
        setting = {**base, key: value}
        size = Size("scale", 400, setting["hidden"], 1, setting["hidden"], 10,
                    setting["batch"], setting["bptt"])  # fmt: skip
        steps = {}
        for name in ("nn.LSTM", "ON-LSTM fast"):
            torch.manual_seed(0)
            model = build_stack(name, size, 0.0, args.weight_drop).to(device)
            steps[name] = make_step(model, "stack", "train", size, device)
        times = time_round_robin(steps, 1, max(2, args.repeats // 2), device)
        lstm, onlstm = (statistics.median(times[n]) for n in ("nn.LSTM", "ON-LSTM fast"))
        print(
            f"{size.batch:4d} {size.bptt:4d} {size.hidden_size:5d} {lstm * 1e3:11.1f} "
            f"{onlstm * 1e3:11.1f} {size.batch * size.bptt / onlstm:9.0f} {lstm / onlstm:5.2f}",
            flush=True,
        )


#: the ON-LSTM variants a model name may end in after "/" (ON-LSTM fast only)
VARIANTS = ("torch-ops", "separate-projection")
CHOICES = dict(
    sizes=tuple(SIZES),
    parts=("stack", "lm"),
    modes=("train", "infer"),
    precisions=("fp32", "bf16-mixed"),
)


def model_problem(model: str) -> str | None:
    """Why ``model`` is not a model this benchmark runs, or None: one of `MODELS`, where
    ``ON-LSTM fast`` may add ``/variant`` and ``:backend``."""
    name, _, backend = model.partition(":")
    name, _, variant = name.partition("/")
    if name not in MODELS:
        return f"unknown model {model!r}; the models are {', '.join(MODELS)}"
    if (variant or backend) and name != "ON-LSTM fast":
        return f"{model!r}: only 'ON-LSTM fast' takes a /variant or a :backend"
    if variant and variant not in VARIANTS:
        return f"{model!r}: unknown variant {variant!r}; the variants are {', '.join(VARIANTS)}"
    if backend and backend not in gemm.BACKENDS:
        known = ", ".join(gemm.BACKENDS)
        return f"{model!r}: unknown GEMM backend {backend!r}; the backends are {known}"
    return None


def invalid_choice(args: argparse.Namespace) -> str | None:
    """What is wrong with the comma lists of ``args`` (a message naming the valid values), or
    None when every value is known."""
    for option, valid in CHOICES.items():
        for value in getattr(args, option).split(","):
            if value not in valid:
                return f"--{option}: unknown {value!r}; choose from {', '.join(valid)}"
    for model in args.models.split(","):
        problem = model_problem(model)
        if problem:
            return f"--models: {problem}"
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer steps, reference cell on the stack only, no inference memory, small scaling",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps per model")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per model")
    parser.add_argument("--sizes", default="paper,small", help="comma list of paper,small")
    parser.add_argument("--parts", default="stack,lm", help="comma list of stack,lm")
    parser.add_argument("--modes", default="train,infer", help="comma list of train,infer")
    parser.add_argument(
        "--models", default=",".join(MODELS), help="comma list; the first is the ratio's baseline"
    )
    parser.add_argument(
        "--precisions", default="fp32,bf16-mixed", help="comma list of fp32,bf16-mixed"
    )
    parser.add_argument("--dropout", type=float, default=0.3, help="between-layer dropout (ours)")
    parser.add_argument(
        "--weight-drop", type=float, default=0.45, help="DropConnect on recurrent weights (ours)"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    parser.add_argument("--no-scaling", action="store_true", help="skip the scaling table")
    args = parser.parse_args(argv)
    problem = invalid_choice(args)
    if problem:
        parser.error(problem)
    args.warmup = args.warmup if args.warmup is not None else 1 if args.quick else 2
    args.repeats = args.repeats if args.repeats is not None else 5 if args.quick else 7
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available; use --device cpu.")

    started = time.perf_counter()
    print(cpu_description() if device.type == "cpu" else torch.cuda.get_device_name(device))
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"{load_description()}, warm-up {args.warmup}, timed steps {args.repeats}"
    )
    chosen = [SIZES[name] for name in args.sizes.split(",")]
    rooflines = roofline(args, chosen, device)
    if LSTMEncoder is None:
        print("treernn.encoders.lstm.LSTMEncoder not importable: skipped")
    print(
        f"training uses dropout {args.dropout} and weight drop {args.weight_drop} in our encoders; "
        "nn.LSTM has none; peak MiB = memory allocated during one step."
    )
    print(
        "ratio = median tokens/s over the first model's in fp32 in this run; /fp32 = a bf16-mixed "
        "row over the same model's fp32 row;\nspread = slowest to fastest timed step (tokens/s)."
    )
    print(header())
    for size in chosen:
        benchmark_size(args, size, device, rooflines)
    precision_summary(args, device)
    if not args.no_scaling:
        scaling_table(args, device)
    print(f"\ndone in {time.perf_counter() - started:.0f} s, {load_description()}")


if __name__ == "__main__":
    main()
