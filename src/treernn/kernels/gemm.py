"""Which library runs the recurrences' many small matrix products, chosen once per shape.

A recurrence multiplies the same weight by a small (B, K) block once per step, T times per call.
On x86 CPUs torch ships two packed-weight GEMMs for that pattern, and which one is faster depends
on the CPU (and on the shape): MKL's (``torch.ops.mkl._mkl_linear``) and oneDNN's
(``torch.ops.mkldnn._linear_pointwise`` on a weight reordered by
``torch.ops.mkldnn._reorder_linear_weight``; oneDNN is also what ``nn.LSTM`` runs on CPU). This
package adds its own (``treernn``: the register-tiled AVX-512 / AVX512-BF16 / AVX2 micro-kernels
of ``csrc/packed_gemm.h``, and its AMX tile kernel for bf16 where the CPU has AMX), which the
ON-LSTM recurrence also calls from C++ for a whole sequence at a time, with no call back into
Python per step. `PackedLinear` packs a weight once
for one backend and then computes ``x @ weight.T`` (optionally plus an added tensor) per step.

Backends (the ``gemm_backend`` option of the encoders, or the environment variable
``TREERNN_GEMM_BACKEND``, which is read when the option is ``"auto"``):

* ``"auto"`` (default): on CPU in float32, the fastest of ``mkl``, ``onednn``, ``treernn`` and
  ``aten`` at the shape (batch, in_features, out_features), measured by a short probe (a few
  hundred products, within a time budget) the first time the shape is seen on this machine,
  logged (``treernn.kernels.gemm``) and kept in ``$TREERNN_CACHE_DIR/gemm_backends.json``
  (default ``~/.cache/treernn``) by CPU model, shape, dtype, threads and torch version, and in
  the record of the run that asked (`treernn.kernels.choices`). Keeping the choice makes it
  once per machine, not once per run, and recording it with the run makes a resumed run (or a
  sweep's later job) use what it used before: the same seed gives the same numbers, however
  busy the machine was when a probe ran. Delete the file to probe again;
* ``"mkl"``, ``"onednn"``, ``"treernn"``: forced, where the build and dtype allow it
  (``treernn`` also runs float64, with its portable C++ copy: the tests run the ON-LSTM sequence
  loops against the float64 reference that way);
* ``"aten"``: plain ``torch.addmm`` (no packing).

Weight gradients (``grad.T @ inputs`` over all rows of a call, `weight_gradient`) are
probed the same way between oneDNN (on a tiled transposed copy of ``grad``) and aten's ``mm``; on
CPUs where MKL does not use AVX-512 (AMD), oneDNN's is about 1.5x faster there.

Precision (`product_dtype`): under ``torch.autocast`` with bf16 (Lightning's
``precision="bf16-mixed"``) a recurrence runs a product in bf16 (fp32 accumulation, fp32 result)
only where a probe on this machine finds the bf16 product, casts included, at least 10% faster
than the fp32 one at that product's shape; otherwise in fp32, said in one log line per model.
The choice is kept in the same file as the backends. Whether bf16 pays is a property of the
machine, not of its ISA flags: on an AMD Zen 4 (AVX512-BF16) oneDNN's bf16 products run at about
twice the fp32 rate, on an Intel Xeon with the same flags and no AMX at about half of it, and
without bf16 instructions (AVX2) 50-100x slower.

Everything that the packed GEMMs cannot do runs on ``aten``: CUDA and other devices, float64
(so the float64 equivalence tests always compare exact aten products, unless a backend is
forced), and bf16 where neither oneDNN nor ``treernn`` has a bf16 kernel for this CPU (oneDNN
needs AVX512BW/VL/DQ or AVX-NE-CONVERT, ``treernn`` AVX512-BF16). The backends agree to float32
rounding (they sum the K products in different orders), so the choice changes results
at the 1e-6 level only; a run that needs bitwise repeatability across machines forces one backend.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from treernn import cpu_load
from treernn.errors import ConfigValueError
from treernn.kernels import choices
from treernn.kernels.gemm_backends import (  # noqa: F401 (part of this module's interface)
    PackedWeight,
    mkl_available,
    onednn_available,
    packed_kernels,
    treernn_available,
    weight_gradient_on,
)

log = logging.getLogger(__name__)

GemmBackend = Literal["auto", "mkl", "onednn", "treernn", "aten"]
BACKENDS: tuple[str, ...] = ("auto", "mkl", "onednn", "treernn", "aten")
ENV_VAR = "TREERNN_GEMM_BACKEND"
CPU = torch.device("cpu")

#: (batch, in_features, out_features, dtype, threads) -> chosen backend, per process; the keys
#: of weight-gradient and precision choices start with "weight gradient" and "precision"
_CHOICES: dict[tuple, str] = {}
# a process that attaches to a run takes the run's recorded choices over its own
choices.on_attach(lambda: _CHOICES.clear())
#: (model, product, shape) -> the dtype name its products ran in under bf16-mixed, per process
DECISIONS: dict[tuple[str, str, str], str] = {}
#: models whose fp32 products under bf16-mixed have been logged
_SAID_FP32: set[str] = set()
#: bf16 products are used where they are at least this much faster than fp32 ones
BF16_MARGIN = 0.9


def check_backend(name: str) -> str:
    """``name`` if it is a backend name; a one-line error naming the option otherwise."""
    if name not in BACKENDS:
        raise ConfigValueError(f"gemm_backend={name!r} is not one of {', '.join(BACKENDS)}.")
    return name


def requested_backend(requested: str) -> str:
    """``requested`` checked, with ``"auto"`` replaced by ``TREERNN_GEMM_BACKEND`` when set."""
    requested = check_backend(requested)
    if requested == "auto":
        requested = check_backend(os.environ.get(ENV_VAR, "auto") or "auto")
    return requested


def candidates(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The backends that can run products of this device and dtype (``aten`` always can)."""
    if device.type != "cpu":
        return ["aten"]
    names = []
    if dtype == torch.float32 and mkl_available():
        names.append("mkl")
    if onednn_available(dtype):
        names.append("onednn")
    if treernn_available(dtype):
        names.append("treernn")
    return names + ["aten"]


def resolve(
    requested: str,
    batch: int,
    in_features: int,
    out_features: int,
    device: torch.device,
    dtype: torch.dtype,
) -> str:
    """The backend that runs (batch, in_features) x (in_features, out_features) products.

    ``requested`` is a `BACKENDS` name; ``"auto"`` defers to ``TREERNN_GEMM_BACKEND`` when
    it is set, else to a probe (cached per shape). A forced backend that cannot run this device
    and dtype falls back to ``aten``.
    """
    requested = requested_backend(requested)
    usable = candidates(device, dtype)
    if requested != "auto":
        return requested if requested in usable else "aten"
    if dtype == torch.float64:  # exact aten products for the float64 tests
        return "aten"
    if len(usable) == 1 or batch <= 0:
        return usable[0]
    key = (batch, in_features, out_features, dtype, torch.get_num_threads())
    return kept_choice(key, usable, lambda: _probe(usable, batch, in_features, out_features, dtype))


def kept_choice(
    key: tuple,
    usable: list[str],
    probe: Callable[[], str],
    device: torch.device = CPU,
    default: str | None = None,
) -> str:
    """The choice for ``key`` on ``device``, one of ``usable``: this process's, else the one the
    run recorded (a resumed run, a sweep's job), else the machine's, else ``probe()``'s within
    the run's probing budget, else ``default`` (the last of ``usable`` unless given: aten,
    fp32, the projection over all steps), see `treernn.kernels.choices`. The choice's name
    lists ``usable`` too: a backend added later (or one that now builds) is probed, not passed
    over."""
    process_key = (*key, device.type, *usable)
    if process_key in _CHOICES:  # the common case, at every forward call: nothing else to build
        return _CHOICES[process_key]
    fallback = default if default in usable else usable[-1]
    name = _machine_key(*key, device.type)
    _CHOICES[process_key] = choices.choose(
        name, usable, probe, fallback, PROBES_REVISION, machine_busy
    )
    return _CHOICES[process_key]


def remembered(key: tuple, decide: Callable[[], str]) -> str:
    """``decide()``, remembered for this process beside the probed choices (it is derived from
    them and from the environment, which ``key`` must name): whatever resets the choices (tests
    do) forgets it too. For decisions taken at every forward call."""
    if key not in _CHOICES:
        _CHOICES[key] = decide()
    return _CHOICES[key]


def machine_busy(since: cpu_load.CpuSample | None) -> str | None:
    """Why a probe just taken may not speak for this machine, or None: since ``since`` (taken as
    the probe started) other processes kept so many CPUs busy that fewer than this process's
    threads were free (less half a CPU); where that cannot be measured, a 1-minute load average
    above the CPU count plus one half. The choice is kept all the same, noted as taken under
    load, and probed again by the first process that needs it on an idle machine
    (`treernn.kernels.choices`)."""
    cpus = os.cpu_count() or 1
    others = since.others_cpus() if since is not None else None
    if others is not None:
        threads = min(torch.get_num_threads(), cpus)
        if cpu_load.crowded(others, threads, cpus):
            return (
                f"other processes kept {others:.1f} of {cpus} CPUs busy during the probe, "
                f"which ran {threads} threads"
            )
        return None
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    if load > cpus + 0.5:
        return f"load average {load:.1f} on {cpus} CPUs during the probe"
    return None


def _choices_file() -> Path:
    return choices.machine_file()


@functools.cache
def _cpu_model() -> str:
    try:
        return cpu_name(Path("/proc/cpuinfo").read_text())
    except OSError:
        return platform.processor() or platform.machine()


def cpu_name(cpuinfo: str) -> str:
    """The CPU's model name, family, model number and a digest of its ISA flags, from the text of
    ``/proc/cpuinfo``: virtual machines often show one model name (``AMD EPYC``) for different
    CPUs (a Zen 3 and a Zen 4), whose fastest backends and precisions differ."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = hashlib.sha256(" ".join(sorted(fields.get("flags", "").split())).encode())
    return (
        f"{fields.get('model name', platform.machine())} (family {fields.get('cpu family', '?')} "
        f"model {fields.get('model', '?')}, flags {flags.hexdigest()[:8]})"
    )


#: the probes' revision, part of every kept choice's key: a choice kept by a probe since found
#: wrong is probed again, not reused (2: probes ran under the caller's autocast, see
#: `time_in_turns`; 3: Ordered Memory's loop was probed with full rows only, see
#: ``kernels.ordered_memory.precision_runs``; 4: the ``treernn`` backend's bf16 products run on
#: AMX's tiles where the CPU has them, 3-6x faster than before there; 5: the level-batched tree
#: encoders' bf16 products run on rounded rows, `rounded_rows_linear`; 6: the ``treernn``
#: backend's float32 products run four panels at a time, ``tile_quad`` in csrc/packed_gemm.h;
#: 7: its AVX2 tiles keep their accumulators in registers, 1.3-2.7x faster on an AMD Zen 3; 8: they
#: prefetch the weight and run a step's deep products in blocks of k, 1.3-1.4x there; 9: ON-LSTM's
#: precision probes time at least 16 steps, `onlstm.PRECISION_PROBE_STEPS`, and the projection
#: leaves the loop only where that is 10% faster, `onlstm_projected.SEPARATE_MARGIN`)
PROBES_REVISION = 9


def _machine_key(batch, in_features, out_features, dtype, threads, device_type="cpu") -> str:
    """The name of a choice: the machine, the shape, the threads and torch's version (the
    machine's cache adds `PROBES_REVISION`, a run's record does not: a run resumed under
    a newer revision of the probes keeps what it chose)."""
    machine = _cpu_model() if device_type == "cpu" else _accelerator_model(device_type)
    return (
        f"{machine} | {batch}x{in_features}x{out_features} {_dtype_name(dtype)} | "
        f"{threads} threads | torch {torch.__version__}"
    )


def _accelerator_model(device_type: str) -> str:
    if device_type == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    return device_type


def _probe(usable: list[str], batch: int, in_features: int, out_features: int, dtype) -> str:
    """Time each backend at this shape and return the fastest; log the figures."""
    generator = torch.Generator().manual_seed(0)
    # bf16 products are run from fp32 operands to an fp32 result, as the recurrences run them
    operands = torch.float32 if dtype == torch.bfloat16 else dtype
    weight = torch.randn(out_features, in_features, generator=generator).to(operands)
    x = torch.randn(batch, in_features, generator=generator).to(operands)
    added = torch.randn(batch, out_features, generator=generator).to(operands)
    out = torch.empty_like(added)  # as the recurrences call it: into a preallocated buffer
    linears = {name: PackedLinear(weight, batch, name, dtype) for name in usable}
    products = {
        name: functools.partial(linear.addmm, added, x, out=out) for name, linear in linears.items()
    }
    flops = 2.0 * batch * in_features * out_features
    seconds = time_in_turns(products, flops)
    choice = min(seconds, key=seconds.get)
    log.info(
        "GEMM backend for %s %s, %d threads: %s (GFLOP/s: %s)",
        _shape_text(batch, in_features, out_features),
        _dtype_name(dtype),
        torch.get_num_threads(),
        choice,
        _rates(seconds, flops),
    )
    return choice


def random_state_kept(device: torch.device) -> contextlib.AbstractContextManager:
    """Restores, on leaving, the random streams that dropout on ``device`` draws from (the
    CPU's, and the current or given GPU's): a precision probe draws nothing from the run's."""
    accelerators = []
    if device.type == "cuda":
        accelerators.append(torch.cuda.current_device() if device.index is None else device.index)
    return torch.random.fork_rng(devices=accelerators)


def time_in_turns(
    products: dict[str, Callable[[], object]],
    flops: float,
    device: torch.device = CPU,
    give_up: float | None = None,
) -> dict[str, float]:
    """Seconds per call of each product: rounds taken in turn, best round kept (so that load from
    other processes hits them alike), after one warm-up call each (first-call set-up, caches).
    With ``give_up``, a product whose warm-up call takes over ``give_up`` times the first's is
    timed by that call alone (a bf16 product 50-100x slower than fp32 is not worth more rounds).

    Within a probe (`treernn.kernels.choices.probe_deadline`) the timing ends by the
    probe's deadline: fewer calls a round, fewer rounds, and where even the first calls run past
    it the products not yet called are left out and the probe is cut short (the run then takes
    the kernel's default, see there). On a busy 2-core machine the probes of the paper-size
    ON-LSTM ran for minutes each, longer than the smoke run they were probing for.

    The products run with autocast off: a probe is often first asked inside a bf16-mixed forward,
    where autocast would run an fp32 candidate that goes through torch (aten's ``mm``) in bf16.
    On an Intel Xeon with AMX that made aten the "fastest fp32 backend" at many shapes and
    fp32 "as fast as bf16" (498 against 496 GFLOP/s at (1024 x 400) @ (400 x 4830), where
    fp32 runs at 250-260 and bf16 at 420-835), so the probes kept fp32 products that bf16 beat
    3-5 times. A run that wants bf16 asks for it (a bf16 dtype, or autocast inside the run)."""
    # about 2 ms a round at 20 GFLOP/s, at least 2 products
    calls = max(2, min(50, int(4e7 / flops)))
    deadline = choices.probe_deadline()
    first: dict[str, float] = {}
    with torch.no_grad(), torch.autocast(device.type, enabled=False):
        for name, product in products.items():
            if first and deadline is not None and time.perf_counter() > deadline:
                choices.cut_short()
                break
            start = time.perf_counter()
            product()  # set-up
            _synchronize(device)
            if deadline is not None and time.perf_counter() > deadline:
                first[name] = time.perf_counter() - start  # set-up included: an upper bound
                choices.cut_short()
                break
            start = time.perf_counter()
            product()
            _synchronize(device)
            first[name] = time.perf_counter() - start
        fastest_first = min(first.values())
        timed = {
            name: products[name]
            for name in first
            if give_up is None or first[name] <= give_up * fastest_first
        }
        best = dict(first)
        for _ in range(ROUNDS):
            if deadline is not None:  # as many calls as the time left allows, at least one
                left = deadline - time.perf_counter()
                round_seconds = max(sum(best[name] for name in timed), 1e-9)
                calls = min(calls, int(left / round_seconds))
                if calls < 1:
                    break
            for name, product in timed.items():
                start = time.perf_counter()
                for _ in range(calls):
                    product()
                _synchronize(device)
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


#: rounds of calls `time_in_turns` takes at most
ROUNDS = 7


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _shape_text(batch: int, in_features: int, out_features: int) -> str:
    return f"({batch} x {in_features}) @ ({in_features} x {out_features})"


def _dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).replace("torch.", "")


def _rates(seconds: dict[str, float], flops: float) -> str:
    return ", ".join(f"{name} {flops / value / 1e9:.0f}" for name, value in seconds.items())


class PackedLinear(PackedWeight):
    """`treernn.kernels.gemm_backends.PackedWeight` on the backend `resolve` picks
    for this shape (``backend="auto"``: probed once per shape and machine)."""

    def __init__(
        self, weight: Tensor, batch: int, backend: str = "auto", dtype: torch.dtype | None = None
    ) -> None:
        out_features, in_features = weight.shape
        chosen = resolve(
            backend, batch, in_features, out_features, weight.device, dtype or weight.dtype
        )
        super().__init__(weight, batch, chosen, dtype)


# ----------------------------------------------------------------------------- mixed precision
def bf16_requested(device: torch.device) -> bool:
    """Whether ``torch.autocast`` asks for bf16 on ``device`` here (Lightning's bf16-mixed)."""
    return (
        torch.is_autocast_enabled(device.type)
        and torch.get_autocast_dtype(device.type) == torch.bfloat16
    )


def bf16_kernels(device: torch.device) -> bool:
    """Whether bf16 products run on bf16 kernels on ``device``: any accelerator, or a CPU where
    oneDNN has them. Elsewhere (AVX2-only CPUs such as an AMD Zen 3) torch runs them on its
    reference loop, 50-100x slower than fp32, so the precision probes leave out their bf16 run
    there (and decide fp32) rather than time it."""
    return device.type != "cpu" or onednn_available(torch.bfloat16)


#: under bf16 autocast on the CPU, products whose row count changes from call to call are run
#: on rows rounded up to a multiple of this (`rounded_rows_linear`)
ROW_MULTIPLE = 16


def autocast_row_multiple(device: torch.device) -> int:
    """`ROW_MULTIPLE` where ``torch.autocast`` runs products in bf16 on the CPU here (they
    go to oneDNN, which builds a kernel per new shape), else 1."""
    return ROW_MULTIPLE if device.type == "cpu" and bf16_requested(device) else 1


def rounding(rows: int, device: torch.device) -> int:
    """What `rounded_rows_linear` rounds ``rows`` up to a multiple of: 1 where
    `autocast_row_multiple` is 1; else `ROW_MULTIPLE`, or for more rows 1/8 of
    `rows_bucket`'s power of two (at most 8 shapes an octave; at most 1/8 of the rows
    added)."""
    multiple = autocast_row_multiple(device)
    if multiple == 1:
        return 1
    return max(multiple, rows_bucket(rows) // 8)


def rounded_rows_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``; under bf16 autocast on the CPU computed on the rows of ``x``
    (all dimensions but the last, flattened) padded with zero rows to a multiple of
    `rounding`'s, the extra rows dropped (their gradients are zero).

    oneDNN, which runs autocast's bf16 products on the CPU, JIT-compiles a kernel for every new
    product shape (about 1-3 ms on an Intel Xeon with AMX) and keeps the last 1,024. A tree
    level's nodes, or a batch's words, change the row count from call to call: 60 updates of the
    LdTreeLSTM preset on UD English-EWT built 1,828 kernels in 5.8 s, against 2.6 s of running
    them. Rounded, the forward product, its input gradient and its weight gradient come in a
    few shapes that come back. Elsewhere (fp32, GPUs: no per-shape build) this is ``F.linear``.
    """
    rows = x.numel() // max(1, x.size(-1))
    extra = -rows % rounding(rows, x.device)
    if extra == 0:
        return F.linear(x, weight, bias)
    flat = F.pad(x.reshape(rows, x.size(-1)), (0, 0, 0, extra))
    return F.linear(flat, weight, bias)[:rows].view(*x.shape[:-1], weight.size(0))


def decided_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, model: str, product: str
) -> Tensor:
    """``F.linear(x, weight, bias)`` for a model's own output layers (a language model's
    decoder, a classifier's layers), under bf16-mixed in bf16 only where bf16 pays here.

    Plain ``nn.Linear`` follows autocast whatever the machine: on a CPU without bf16 GEMM
    kernels (an AMD Zen 3, AVX2 only) torch then runs the product on a reference loop, and the
    PTB language model's tied decoder made a bf16-mixed training step 6x slower than fp32 at the
    paper size and 30x at the small one. Here `product_dtype` times this product (at
    `rows_bucket` rows, forward and, with autograd on, backward) under bf16 autocast
    against fp32, once per shape and machine, and where bf16 is not at least 10% faster the
    product runs as with precision=32 (autocast off; the first such decision of ``model`` is
    logged). Where it pays, the rows are rounded as `rounded_rows_linear` rounds them."""
    if not bf16_requested(x.device):
        return F.linear(x, weight, bias)
    rows = x.numel() // max(1, x.size(-1))
    bucket = rows_bucket(rows)
    training = torch.is_grad_enabled() and weight.requires_grad
    label = f"{product}, {'training' if training else 'inference'}"
    runs = functools.partial(_linear_runs, bucket, weight, bias, training)
    shape = (bucket, weight.size(1), weight.size(0))
    if product_dtype(*shape, x.device, model, label, runs) is not None:
        return rounded_rows_linear(x, weight, bias)
    with torch.autocast(x.device.type, enabled=False):
        return F.linear(x.float(), weight, bias)


def _linear_runs(
    rows: int, weight: Tensor, bias: Tensor | None, training: bool
) -> tuple[dict[str, Callable[[], object]], float]:
    """The runs `decided_linear` times: the product on ``rows`` random rows in fp32 and
    under bf16 autocast (none on a CPU without oneDNN's bf16 kernels), with the gradients of the
    input and the weight when ``training`` (returned, not accumulated)."""
    device = weight.device
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, weight.size(1), generator=generator).to(device)
    w = weight.detach().float().requires_grad_(training)
    b = None if bias is None else bias.detach().float()
    x.requires_grad_(training)

    def run(bf16: bool) -> None:
        with torch.set_grad_enabled(training), torch.autocast(device.type, torch.bfloat16, bf16):
            out = rounded_rows_linear(x, w, b)
            if training:
                torch.autograd.grad(out.float().sum(), (x, w))

    runs: dict[str, Callable[[], object]] = {"float32": functools.partial(run, False)}
    if bf16_kernels(device):
        runs["bfloat16"] = functools.partial(run, True)
    return runs, 2.0 * rows * weight.size(0) * weight.size(1) * (3 if training else 1)


def product_dtype(
    batch: int,
    in_features: int,
    out_features: int,
    device: torch.device,
    model: str,
    product: str = "products",
    runs: Callable[[], tuple[dict[str, Callable[[], object]], float]] | None = None,
) -> torch.dtype | None:
    """The dtype a recurrence runs its (batch, in_features) x (in_features, out_features)
    products in: bf16 under bf16 autocast where `bf16_pays` at this shape (with ``runs``:
    timing what ``runs()`` returns, see there), None (fp32, the inputs' dtype) otherwise: without
    autocast, under fp16 autocast (``16-mixed``: the recurrences keep fp32, as fp16 products of a
    long recurrence can overflow), and where bf16 is not faster here. The decision is recorded in
    `DECISIONS` under (``model``, ``product``, shape); the first fp32 one of each ``model``
    under bf16-mixed is logged, naming the product, with the probe's figures. Gates, states, tree
    signals and accumulations stay fp32 either way."""
    if not bf16_requested(device):
        return None
    label = "" if runs is None else f" {model} {product}"
    pays = bf16_pays(batch, in_features, out_features, device, runs, label)
    shape = _shape_text(batch, in_features, out_features)
    DECISIONS[model, product, shape] = "bfloat16" if pays else "float32"
    if pays:
        return torch.bfloat16
    if model not in _SAID_FP32:
        _SAID_FP32.add(model)
        key = _precision_key(batch, in_features, out_features, label)
        log.warning(
            "%s under bf16-mixed: %s fp32, as with precision=32: bf16 is not at least "
            "%d%% faster than fp32 on this machine at %s (%s); each of its products is decided "
            "at its own shape (the step timer lists them)",
            model,
            "its products stay" if product == "products" else f"its product {product!r} stays",
            round(100 * (1 - BF16_MARGIN)),
            shape,
            _PROBED.get(key, "the choice recorded with the run or kept for this machine"),
        )
    return None


def keeps_autocast(
    rows: int,
    in_features: int,
    out_features: int,
    device: torch.device,
    model: str,
    product: str,
    probe: Callable[[], tuple[Callable[[], object], float]],
) -> bool:
    """Whether a model whose products follow autocast (plain torch modules: ``nn.LSTM``, a tree
    encoder's cells) keeps the bf16 autocast in force for a computation whose products are
    about (rows, in_features) x (in_features, out_features): True where no bf16 autocast is in
    force (nothing to decide) or where bf16 pays here; False where the caller should run it in
    fp32 (autocast off, fp32 inputs), as with precision=32.

    ``probe()``, called only when no choice is recorded or kept for this shape, returns the
    computation to time (``run()``, forward and, in training, backward) and the FLOPs of its
    products: it is timed in fp32 and under bf16 autocast, ``probe()`` and each run with the
    caller's random streams restored after them, and bf16 is kept where it is at least 10%
    faster (no bf16 run on a CPU without bf16 kernels: fp32). What the computation's products
    alone would not tell, its time does: oneDNN's bf16 LSTM primitive, a tree level's changing
    row counts. Recorded like `product_dtype`'s decisions."""
    if not bf16_requested(device):
        return True

    def runs() -> tuple[dict[str, Callable[[], object]], float]:
        with random_state_kept(device):  # a probe may build a module: its initial draws
            run, flops = probe()

        def timed(bf16: bool) -> None:
            with (
                random_state_kept(device),
                torch.autocast(device.type, torch.bfloat16, enabled=bf16),
            ):
                run()

        loops = {"float32": functools.partial(timed, False)}
        if bf16_kernels(device):
            loops["bfloat16"] = functools.partial(timed, True)
        return loops, flops

    dtype = product_dtype(rows, in_features, out_features, device, model, product, runs)
    return dtype is not None


def bf16_pays(
    batch: int,
    in_features: int,
    out_features: int,
    device: torch.device,
    runs: Callable[[], tuple[dict[str, Callable[[], object]], float]] | None = None,
    label: str = "",
) -> bool:
    """Whether a (batch, in_features) x (in_features, out_features) product with fp32 operands
    runs at least 1 / `BF16_MARGIN` times as fast in bf16 (operands cast to bf16, result in
    fp32, as the recurrences run it) as in fp32, each on its fastest backend here; or, given
    ``runs`` (returning {"float32": run, "bfloat16": run} and the FLOPs of one run; no
    "bfloat16" where it cannot run here), whether the bf16 run is that much faster: a model's
    own loop, e.g. a recurrence of some steps, where its products alone would not tell (oneDNN's
    bf16 LSTM, a loop that packs its weight). Probed once per shape and ``label`` and kept like
    the backends (`resolve`). False on devices other than CPU and CUDA."""
    if device.type not in ("cpu", "cuda"):
        return False
    key = _precision_key(batch, in_features, out_features, label)
    choice = kept_choice(
        key,
        ["bfloat16", "float32"],
        lambda: _probe_precision(batch, in_features, out_features, device, runs, label),
        device,
    )
    return choice == "bfloat16"


#: precision keys -> the probe's figures, for the log line of a model that keeps fp32
_PROBED: dict[tuple, str] = {}


def _precision_key(batch: int, in_features: int, out_features: int, label: str = "") -> tuple:
    return (batch, in_features, out_features, f"bf16-mixed{label}", torch.get_num_threads())


def _probe_precision(
    batch: int, in_features: int, out_features: int, device, runs=None, label: str = ""
) -> str:
    """Time fp32 against bf16 (casts included) and return the dtype name to use."""
    if runs is None:
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(out_features, in_features, generator=generator).to(device)
        x = torch.randn(batch, in_features, generator=generator).to(device)
        linears = {
            "float32": PackedLinear(weight, batch),
            "bfloat16": PackedLinear(weight, batch, dtype=torch.bfloat16),
        }
        products = {name: functools.partial(linear.mm, x) for name, linear in linears.items()}
        flops = 2.0 * batch * in_features * out_features
    else:
        products, flops = runs()
    seconds = time_in_turns(products, flops, device, give_up=3.0)
    bf16 = seconds.get("bfloat16", float("inf"))
    choice = "bfloat16" if bf16 < BF16_MARGIN * seconds["float32"] else "float32"
    if "bfloat16" in seconds:
        figures = f"GFLOP/s: {_rates(seconds, flops)}"
    elif "bfloat16" in products:  # the run's default then, kept for no machine
        figures = "the probe ran out of time before its bf16 run"
    else:
        figures = "no bf16 kernel"
    _PROBED[_precision_key(batch, in_features, out_features, label)] = figures
    log.info(
        "GEMM precision for %s%s under bf16-mixed, %d threads: %s (%s)",
        _shape_text(batch, in_features, out_features),
        label and f" ({label.strip()})",
        torch.get_num_threads(),
        choice,
        figures,
    )
    return choice


# ----------------------------------------------------------------------------- weight gradients
def weight_gradient(
    grad: Tensor, inputs: Tensor, backend: str = "auto", dtype: torch.dtype | None = None
) -> Tensor:
    """``grad.T @ inputs``: the (N, K) weight gradient of a linear map from its (R, N) output
    gradients and (R, K) inputs, summed over all R rows at once, on the backend probed for this
    product (`resolve_weight_gradient`); with ``dtype`` (bf16 under bf16-mixed) the
    product runs in it and the result comes back in ``grad``'s dtype."""
    rows, out_features = grad.shape
    in_features = inputs.size(1)
    run_dtype = dtype or grad.dtype
    chosen = resolve_weight_gradient(
        backend, rows, out_features, in_features, grad.device, run_dtype
    )
    result = weight_gradient_on(chosen, grad.to(run_dtype), inputs.to(run_dtype))
    return result.to(grad.dtype)


def resolve_weight_gradient(
    requested: str,
    rows: int,
    out_features: int,
    in_features: int,
    device: torch.device,
    dtype: torch.dtype,
) -> str:
    """The backend of `weight_gradient` (``onednn`` or ``aten``): as `resolve`,
    probed at `rows_bucket` rows; ``mkl`` and ``treernn`` have no such product, and where
    they are asked for the choice is probed as for ``auto``."""
    requested = requested_backend(requested)
    if requested in ("mkl", "treernn"):
        requested = "auto"
    usable = [name for name in candidates(device, dtype) if name in ("onednn", "aten")]
    if requested != "auto":
        return requested if requested in usable else "aten"
    if len(usable) == 1 or rows <= 0 or dtype == torch.float64:
        return "aten"
    bucket = rows_bucket(rows)
    key = (
        out_features,
        bucket,
        in_features,
        f"weight gradient {_dtype_name(dtype)}",
        torch.get_num_threads(),
    )
    return kept_choice(
        key,
        usable,
        lambda: _probe_weight_gradient(usable, bucket, out_features, in_features, dtype),
    )


def _probe_weight_gradient(
    usable: list[str], rows: int, out_features: int, in_features: int, dtype
) -> str:
    generator = torch.Generator().manual_seed(0)
    grad = torch.randn(rows, out_features, generator=generator).to(dtype)
    inputs = torch.randn(rows, in_features, generator=generator).to(dtype)
    products = {name: functools.partial(weight_gradient_on, name, grad, inputs) for name in usable}
    flops = 2.0 * rows * out_features * in_features
    seconds = time_in_turns(products, flops)
    choice = min(seconds, key=seconds.get)
    log.info(
        "GEMM backend for the weight gradient (%d x %d).T @ (%d x %d) %s, %d threads: %s "
        "(GFLOP/s: %s)",
        rows,
        out_features,
        rows,
        in_features,
        _dtype_name(dtype),
        torch.get_num_threads(),
        choice,
        _rates(seconds, flops),
    )
    return choice


# ----------------------------------------------------------------------------- large products
def rows_bucket(rows: int) -> int:
    """The row count a large product is probed at: the power of two at or below ``rows`` (the
    rows of an input projection, T * B, change with the sequence length of each batch; one probe
    per octave keeps that to a few probes per machine)."""
    return 1 << max(0, rows.bit_length() - 1)


def linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    backend: str = "auto",
    dtype: torch.dtype | None = None,
) -> Tensor:
    """``F.linear(x, weight, bias)`` for one large product over all rows of ``x`` (e.g. the input
    projection of every step of a sequence at once), forward and input gradient on the backend
    chosen for the shape (`resolve`, probed at `rows_bucket` rows; the weight packed
    once per call), the weight gradient by `weight_gradient`. With ``dtype`` (bf16 under
    bf16-mixed) the three products run in it, with fp32 results and the bias added in fp32. Where
    the backend is aten and no dtype is asked for (float64, CUDA, a probe that finds aten
    fastest) this is ``F.linear`` itself."""
    in_features, out_features = weight.size(1), weight.size(0)
    rows = x.numel() // max(1, in_features)
    run_dtype = dtype or x.dtype
    chosen = resolve(backend, rows_bucket(rows), in_features, out_features, x.device, run_dtype)
    if chosen == "aten" and run_dtype == x.dtype:
        return F.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias, backend, dtype)


def input_gradient(
    grad: Tensor, weight: Tensor, backend: str = "auto", dtype: torch.dtype | None = None
) -> Tensor:
    """``grad @ weight``: the (R, K) input gradient of a linear map with weight (N, K) from its
    (R, N) output gradients, one product on the backend chosen for that shape (probed at
    `rows_bucket` rows; in ``dtype`` when given, the result in ``grad``'s dtype)."""
    rows, out_features = grad.shape
    chosen = resolve(
        backend, rows_bucket(rows), out_features, weight.size(1), grad.device, dtype or grad.dtype
    )
    return PackedLinear(weight.t(), rows, chosen, dtype).mm(grad)


class _Linear(torch.autograd.Function):
    """`linear` off aten or in another dtype: the backward's input gradient on the backend
    chosen for its own shape (rows x out_features) @ (out_features x in_features)."""

    @staticmethod
    def forward(ctx, x, weight, bias, backend, dtype):  # type: ignore[override]
        in_features, out_features = weight.size(1), weight.size(0)
        flat = x.reshape(-1, in_features)
        rows = flat.size(0)
        run_dtype = dtype or x.dtype
        chosen = resolve(backend, rows_bucket(rows), in_features, out_features, x.device, run_dtype)
        out = PackedLinear(weight, rows, chosen, dtype).mm(flat, bias)
        ctx.save_for_backward(flat, weight)
        ctx.backend, ctx.dtype, ctx.shape, ctx.has_bias = backend, dtype, x.shape, bias is not None
        return out.view(*x.shape[:-1], out_features)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        flat, weight = ctx.saved_tensors
        grad = grad.reshape(-1, weight.size(0))
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = input_gradient(grad, weight, ctx.backend, ctx.dtype).view(ctx.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = weight_gradient(grad, flat, ctx.backend, ctx.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias, None, None
