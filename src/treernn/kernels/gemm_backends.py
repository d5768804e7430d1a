"""The libraries a recurrence's small matrix products can run on, and one product on a named
library: whether MKL's, oneDNN's and this package's packed GEMMs (``csrc/packed_gemm.cpp``) run
here, a weight packed once for one of them (`PackedWeight`), and a weight gradient on one
of them (`weight_gradient_on`). Which library a shape gets is `treernn.kernels.gemm`'s
business (probes, the kept choices, precision).
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch
from torch import Tensor

from treernn.kernels.cpp_ext import load_extension
from treernn.kernels.weight_ops import transposed


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


def packed_kernels() -> ModuleType | None:
    """The compiled ``treernn`` backend (``csrc/packed_gemm.cpp``), or None where it cannot be
    built here (or ``TREERNN_CPP_EXT=0``)."""
    return load_extension("packed_gemm")


def treernn_available(dtype: torch.dtype) -> bool:
    """Whether the ``treernn`` backend runs products in ``dtype`` here: float32 and float64
    wherever it builds, bf16 on CPUs with AVX512-BF16 (on AMX's tiles where the CPU has them)."""
    if dtype not in (torch.float32, torch.float64, torch.bfloat16):
        return False
    kernels = packed_kernels()
    return kernels is not None and (dtype != torch.bfloat16 or kernels.bf16_pairs())


class PackedWeight:
    """``x @ weight.T`` and ``added + x @ weight.T`` for many (batch, K) blocks ``x`` and one
    weight (N, K), with the weight packed once for ``backend`` (a name; `gemm.PackedLinear`
    chooses it).

    Build one per recurrence call (DropConnect gives each call its own weight). The weight is used
    as it is (no autograd through this object: the callers' backward passes are written by hand).
    """

    def __init__(
        self, weight: Tensor, batch: int, backend: str, dtype: torch.dtype | None = None
    ) -> None:
        out_features = weight.size(0)
        # dtype: run the products in it (bf16 under bf16-mixed), results in the input's dtype
        self.product_dtype = dtype or weight.dtype
        self.backend = backend  # one of the backends that can run it (gemm.candidates)
        self.batch = batch
        self.out_features = out_features
        self.packed = None
        if self.backend == "treernn":  # bf16 panels packed from the fp32 weight; fp32 in and out
            self.casts = False
            self.weight = weight.float() if weight.dtype == torch.bfloat16 else weight
            self.packed = packed_kernels().pack(self.weight, self.product_dtype == torch.bfloat16)
            return
        self.casts = self.product_dtype != weight.dtype
        if self.casts:
            weight = weight.to(self.product_dtype)
        self.weight = weight
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
        if self.backend == "treernn":
            operand = x.to(self.weight.dtype).contiguous()
            product = packed_kernels().linear(operand, self.packed, self.out_features)
            product = product.to(x.dtype)
            return product if bias is None else product.add_(bias)
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
        if (
            self.backend == "treernn"
            and x.dtype == added.dtype == self.weight.dtype
            and (out is None or (out.is_contiguous() and out.dtype == x.dtype))
        ):
            return packed_kernels().linear(
                x.contiguous(), self.packed, self.out_features, added.contiguous(), out
            )
        return torch.add(added, self.mm(x), out=out)


def _contiguous(weight: Tensor) -> Tensor:
    """``weight.contiguous()``, by the tiled transpose where ``weight`` is a transposed view (the
    backward passes pack ``weight.t()``)."""
    if weight.is_contiguous() or weight.dim() != 2 or not weight.t().is_contiguous():
        return weight.contiguous()
    return transposed(weight.t())


def weight_gradient_on(backend: str, grad: Tensor, inputs: Tensor) -> Tensor:
    """``grad.T @ inputs`` on ``backend`` (``onednn`` or ``aten``)."""
    if backend == "onednn":
        # (N, R) @ (R, K) as oneDNN's linear of the rows of grad.T (a contiguous copy, by the
        # tiled transpose) and the weight inputs.T (a transposed view oneDNN reads as it is)
        return torch.ops.mkldnn._linear_pointwise(
            _contiguous(grad.t()), inputs.t(), None, "none", [], ""
        )
    return grad.t() @ inputs
