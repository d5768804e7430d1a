"""Which library runs the recurrences' many small matrix products, chosen once per shape.

A recurrence multiplies the same weight by a small (B, K) block once per step, T times per call.
On x86 CPUs torch ships two packed-weight GEMMs for that pattern, and which one is faster depends
on the CPU (and on the shape): MKL's (``torch.ops.mkl._mkl_linear``) and oneDNN's
(``torch.ops.mkldnn._linear_pointwise`` on a weight reordered by
``torch.ops.mkldnn._reorder_linear_weight``; oneDNN is also what ``nn.LSTM`` runs on CPU).
:class:`PackedLinear` packs a weight once for one backend and then computes ``x @ weight.T``
(optionally plus an added tensor) per step.

Backends (the ``gemm_backend`` option of the encoders, or the environment variable
``TREERNN_GEMM_BACKEND``, which is read when the option is ``"auto"``):

* ``"auto"`` (default): on CPU in float32, the fastest of ``mkl``, ``onednn`` and ``aten`` at the
  shape (batch, in_features, out_features), measured by a short probe (a few hundred products)
  the first time the shape is seen on this machine, logged (``treernn.encoders.gemm``) and kept
  in ``$TREERNN_CACHE_DIR/gemm_backends.json`` (default ``~/.cache/treernn``) by CPU model,
  shape, dtype, threads and torch version. Keeping the choice makes it once per machine, not once
  per run: two runs with the same seed on one machine stay bit-identical even when the backends
  are close and a probe under load would pick differently. Delete the file to probe again;
* ``"mkl"``, ``"onednn"``: forced, where the build and dtype allow it;
* ``"aten"``: plain ``torch.addmm`` (no packing).

Everything that the packed GEMMs cannot do runs on ``aten``: CUDA and other devices, float64
(so the float64 equivalence tests always compare exact aten products), and bf16 where oneDNN has
no bf16 kernel for this CPU (it needs AVX512BW/VL/DQ or AVX-NE-CONVERT). The three backends agree
to float32 rounding (they sum the K products in different orders), so the choice changes results
at the 1e-6 level only; a run that needs bitwise repeatability across machines forces one backend.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from treernn.encoders.weight_ops import transposed
from treernn.errors import ConfigValueError

log = logging.getLogger(__name__)

GemmBackend = Literal["auto", "mkl", "onednn", "aten"]
BACKENDS: tuple[str, ...] = ("auto", "mkl", "onednn", "aten")
ENV_VAR = "TREERNN_GEMM_BACKEND"

#: (backend, batch, in_features, out_features, dtype, threads) -> chosen backend, per process
_CHOICES: dict[tuple, str] = {}


def check_backend(name: str) -> str:
    """``name`` if it is a backend name; a one-line error naming the option otherwise."""
    if name not in BACKENDS:
        raise ConfigValueError(f"gemm_backend={name!r} is not one of {', '.join(BACKENDS)}.")
    return name


@functools.cache
def mkl_available() -> bool:
    """Whether this torch build has MKL's packed GEMM ops (x86 CPU builds with MKL do)."""
    try:
        weight, x = torch.ones(3, 2), torch.ones(1, 2)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, 1)
        return bool(torch.ops.mkl._mkl_linear(x, packed, weight, None, 1).eq(2).all())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def onednn_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether oneDNN's packed linear runs here in ``dtype`` (float32, or bfloat16 on CPUs with
    oneDNN bf16 support)."""
    if dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    try:
        weight, x = torch.ones(3, 2, dtype=dtype), torch.ones(1, 2, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
        result = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        return bool(result.eq(2).all())
    except (AttributeError, RuntimeError):
        return False


def candidates(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The backends that can run products of this device and dtype (``aten`` always can)."""
    if device.type != "cpu":
        return ["aten"]
    names = []
    if dtype == torch.float32 and mkl_available():
        names.append("mkl")
    if onednn_available(dtype):
        names.append("onednn")
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

    ``requested`` is a :data:`BACKENDS` name; ``"auto"`` defers to ``TREERNN_GEMM_BACKEND`` when
    it is set, else to a probe (cached per shape). A forced backend that cannot run this device
    and dtype falls back to ``aten``.
    """
    requested = check_backend(requested)
    if requested == "auto":
        requested = check_backend(os.environ.get(ENV_VAR, "auto") or "auto")
    usable = candidates(device, dtype)
    if requested != "auto":
        return requested if requested in usable else "aten"
    if len(usable) == 1 or batch <= 0:
        return usable[0]
    key = (batch, in_features, out_features, dtype, torch.get_num_threads())
    if key not in _CHOICES:
        stored = _stored_choices()
        name = _machine_key(*key)
        if stored.get(name) in usable:
            _CHOICES[key] = stored[name]
        else:
            _CHOICES[key] = _probe(usable, batch, in_features, out_features, dtype)
            _store_choice(name, _CHOICES[key])
    return _CHOICES[key]


def _choices_file() -> Path:
    root = os.environ.get("TREERNN_CACHE_DIR", "~/.cache/treernn")
    return Path(root).expanduser() / "gemm_backends.json"


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine_key(batch, in_features, out_features, dtype, threads) -> str:
    dtype_name = str(dtype).replace("torch.", "")
    return (
        f"{_cpu_model()} | {batch}x{in_features}x{out_features} {dtype_name} | "
        f"{threads} threads | torch {torch.__version__}"
    )


def _stored_choices() -> dict[str, str]:
    try:
        stored = json.loads(_choices_file().read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def _store_choice(name: str, backend: str) -> None:
    """Add one choice to the file (a temporary file, then a rename: never a half-written file)."""
    path = _choices_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stored = _stored_choices()
        stored[name] = backend
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
            json.dump(stored, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError as error:  # a read-only home: the choice then holds for this process only
        log.warning("could not keep the GEMM backend choice in %s: %s", path, error)


def _probe(usable: list[str], batch: int, in_features: int, out_features: int, dtype) -> str:
    """Time each backend at this shape (rounds taken in turn, best round kept, so that load from
    other processes hits them alike) and return the fastest; log the figures."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
    x = torch.randn(batch, in_features, generator=generator).to(dtype)
    added = torch.randn(batch, out_features, generator=generator).to(dtype)
    out = torch.empty_like(added)  # as the recurrences call it: into a preallocated buffer
    linears = {name: PackedLinear(weight, batch, name) for name in usable}
    flops = 2.0 * batch * in_features * out_features
    # about 2 ms a round at 20 GFLOP/s, at least 2 products
    calls = max(2, min(50, int(4e7 / flops)))
    best = dict.fromkeys(usable, float("inf"))
    with torch.no_grad():
        for linear in linears.values():
            linear.addmm(added, x, out=out)  # warm-up (first-call set-up, caches)
        for _ in range(7):
            for name, linear in linears.items():
                start = time.perf_counter()
                for _ in range(calls):
                    linear.addmm(added, x, out=out)
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
    choice = min(best, key=best.get)
    figures = ", ".join(f"{name} {flops / best[name] / 1e9:.0f}" for name in usable)
    shape = f"({batch} x {in_features}) @ ({in_features} x {out_features})"
    dtype_name = str(dtype).replace("torch.", "")
    threads = torch.get_num_threads()
    log.info(
        "GEMM backend for %s %s, %d threads: %s (GFLOP/s: %s)",
        shape,
        dtype_name,
        threads,
        choice,
        figures,
    )
    return choice


class PackedLinear:
    """``x @ weight.T`` and ``added + x @ weight.T`` for many (batch, K) blocks ``x`` and one
    weight (N, K), with the weight packed once for the chosen backend.

    Build one per recurrence call (DropConnect gives each call its own weight). The weight is used
    as it is (no autograd through this object: the callers' backward passes are written by hand).
    """

    def __init__(
        self, weight: Tensor, batch: int, backend: str = "auto", dtype: torch.dtype | None = None
    ) -> None:
        out_features, in_features = weight.shape
        # dtype: run the products in it (bf16 under bf16-mixed), results in the input's dtype
        self.casts = dtype is not None and dtype != weight.dtype
        if self.casts:
            weight = weight.to(dtype)
        self.backend = resolve(
            backend, batch, in_features, out_features, weight.device, weight.dtype
        )
        self.batch = batch
        self.weight = weight
        self.packed = None
        if self.backend == "mkl":
            self.weight = _contiguous(weight)
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, batch)
        elif self.backend == "onednn":
            self.packed = torch.ops.mkldnn._reorder_linear_weight(_contiguous(weight), batch)

    def mm(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x @ weight.T`` (``+ bias``, (N,), if given): x (B, K) -> (B, N)."""
        if self.casts:  # the product in the weight's dtype, the bias added in x's
            product = self._mm(x.to(self.weight.dtype), None).to(x.dtype)
            return product if bias is None else product + bias
        return self._mm(x, bias)

    def _mm(self, x: Tensor, bias: Tensor | None) -> Tensor:
        if self.backend == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, bias, self.batch)
        if self.backend == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")
        return x @ self.weight.t() if bias is None else torch.addmm(bias, x, self.weight.t())

    def addmm(self, added: Tensor, x: Tensor, out: Tensor | None = None) -> Tensor:
        """``added + x @ weight.T`` with x (B, K) and added (B, N), written to ``out`` if given."""
        if self.casts:
            return torch.add(added, self.mm(x), out=out)
        if self.backend == "aten":
            return torch.addmm(added, x, self.weight.t(), out=out)
        if self.backend == "onednn":
            # oneDNN adds ``added`` inside the GEMM (a fused post-op)
            result = torch.ops.mkldnn._linear_pointwise.binary(x, added, self.packed, None, "add")
            return result if out is None else out.copy_(result)
        return torch.add(added, self.mm(x), out=out)


def _contiguous(weight: Tensor) -> Tensor:
    """``weight.contiguous()``, by the tiled transpose where ``weight`` is a transposed view (the
    backward passes pack ``weight.t()``)."""
    if weight.is_contiguous() or weight.dim() != 2 or not weight.t().is_contiguous():
        return weight.contiguous()
    return transposed(weight.t())


# ----------------------------------------------------------------------------- mixed precision
def autocast_product_dtype(device: torch.device, model: str) -> torch.dtype | None:
    """The dtype a recurrence runs its matrix products in under ``torch.autocast`` with bf16
    (Lightning's ``precision="bf16-mixed"``): bf16 on GPUs and on CPUs with bf16 matrix kernels
    (oneDNN's: AVX512-BF16 or AMX); None (fp32 products) otherwise: without autocast, under fp16
    autocast (``16-mixed``: the recurrences keep fp32, as fp16 products of a long recurrence can
    overflow), and on CPUs without bf16 kernels, where torch's bf16 products are 50-100x slower
    than fp32 ones (logged once per ``model``). Gates, states and accumulations stay fp32."""
    if not torch.is_autocast_enabled(device.type):
        return None
    if torch.get_autocast_dtype(device.type) != torch.bfloat16:
        return None
    if device.type == "cpu" and not _cpu_has_fast_bf16(model):
        return None
    return torch.bfloat16


@functools.cache
def _cpu_has_fast_bf16(model: str) -> bool:
    if onednn_available(torch.bfloat16):
        return True
    log.warning(
        "%s under bf16-mixed: this CPU has no bf16 matrix kernels (oneDNN bf16 needs AVX512 or "
        "AMX), where bf16 products are 50-100x slower than fp32; the recurrence keeps fp32 "
        "products (use precision=32 to silence this)",
        model,
    )
    return False


# ----------------------------------------------------------------------------- large products
def rows_bucket(rows: int) -> int:
    """The row count a large product is probed at: the power of two at or below ``rows`` (the
    rows of an input projection, T * B, change with the sequence length of each batch; one probe
    per octave keeps that to a few probes per machine)."""
    return 1 << max(0, rows.bit_length() - 1)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, backend: str = "auto") -> Tensor:
    """``F.linear(x, weight, bias)`` for one large product over all rows of ``x`` (e.g. the input
    projection of every step of a sequence at once), forward and input gradient on the backend
    chosen for the shape (:func:`resolve`, probed at :func:`rows_bucket` rows; the weight packed
    once per call), the weight gradient on aten. Where the backend is aten (float64, CUDA, a
    probe that finds it fastest) this is ``F.linear`` itself."""
    in_features, out_features = weight.size(1), weight.size(0)
    rows = x.numel() // max(1, in_features)
    if resolve(backend, rows_bucket(rows), in_features, out_features, x.device, x.dtype) == "aten":
        return F.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias, backend)


class _Linear(torch.autograd.Function):
    """:func:`linear` off aten: the backward's input gradient on the backend chosen for its own
    shape (rows x out_features) @ (out_features x in_features)."""

    @staticmethod
    def forward(ctx, x, weight, bias, backend):  # type: ignore[override]
        in_features, out_features = weight.size(1), weight.size(0)
        flat = x.reshape(-1, in_features)
        rows = flat.size(0)
        chosen = resolve(backend, rows_bucket(rows), in_features, out_features, x.device, x.dtype)
        out = PackedLinear(weight, rows, chosen).mm(flat, bias)
        ctx.save_for_backward(flat, weight)
        ctx.backend, ctx.shape, ctx.has_bias = backend, x.shape, bias is not None
        return out.view(*x.shape[:-1], out_features)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        flat, weight = ctx.saved_tensors
        in_features, out_features = weight.size(1), weight.size(0)
        grad = grad.reshape(-1, out_features)
        rows = grad.size(0)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            chosen = resolve(
                ctx.backend, rows_bucket(rows), out_features, in_features, grad.device, grad.dtype
            )
            grad_x = PackedLinear(weight.t(), rows, chosen).mm(grad).view(ctx.shape)
        if ctx.needs_input_grad[1]:
            grad_weight = grad.t() @ flat
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias, None
