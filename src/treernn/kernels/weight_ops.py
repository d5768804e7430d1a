"""Operations on a whole recurrent weight, once per call: DropConnect and a transposed copy.

DropConnect (Wan et al., 2013; the ``weight_drop`` of AWD-LSTM and ON-LSTM) multiplies the
recurrent weight by a fresh Bernoulli(1 - p) keep mask at every forward call. `dropconnect`
draws that mask from the counter-based generator Philox4x32-10 (Salmon et al., SC 2011; the
generator torch uses for dropout on CUDA), keyed by a seed taken from torch's default generator, so
``torch.manual_seed`` and Lightning's ``seed_everything`` make runs repeatable: element ``e`` of
the flattened weight is kept when word ``e % 4`` of the block for counter ``e // 4`` is below
(1 - p) 2^32. A draw depends only on (seed, e), so

* on CPU in float32 and float64 the compiled kernel ``csrc/weight_ops.cpp`` draws and applies the
  mask in one parallel pass (a 4830 x 1150 weight: about 8 ms on 2 cores, against about 35 ms
  for ``torch.rand_like`` and the multiply), and its backward pass regenerates the mask from the
  seed instead of keeping it;
* everywhere else (CUDA, other dtypes, no compiler, ``TREERNN_CPP_EXT=0``) `philox` in torch
  ops draws the same mask, so both paths give the same numbers (on a CPU it is the slow one: about
  220 ms for that weight, which only machines without a C++ compiler pay).

`transposed` is ``weight.t().contiguous()`` in cache-sized tiles, for the backward passes
that pack the transposed recurrent weight once per call.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from treernn.kernels.cpp_ext import load_extension


def kernel_for(tensor: Tensor) -> ModuleType | None:
    """The compiled ``weight_ops`` module where it runs ``tensor`` (CPU, float32 or float64);
    None elsewhere."""
    if tensor.device.type != "cpu" or tensor.dtype not in (torch.float32, torch.float64):
        return None
    return load_extension("weight_ops")


def dropconnect(weight: Tensor, p: float, rescale: bool) -> Tensor:
    """``weight`` times a fresh Bernoulli(1 - p) keep mask, divided by 1 - p when ``rescale``
    (``F.dropout``'s convention, AWD-LSTM's weight drop) and not otherwise (ON-LSTM's DropConnect,
    whose evaluation multiplies by 1 - p instead). Differentiable in ``weight``."""
    if p <= 0.0:
        return weight
    scale = 1.0 / (1.0 - p) if rescale else 1.0
    keep_probability = 1.0 - p
    seed = int(torch.empty((), dtype=torch.int64).random_().item())  # the default generator
    kernel = kernel_for(weight)
    if kernel is None:
        keep = keep_mask(weight.shape, keep_probability, seed, weight.device)
        return weight * keep * scale if rescale else weight * keep
    return _MaskedScale.apply(weight, keep_probability, scale, seed, kernel)


_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_INCREMENTS = (0x9E3779B9, 0xBB67AE85)
_LOW32 = 0xFFFFFFFF


def philox(counter: Tensor, seed: int) -> Tensor:
    """Philox4x32-10 in torch ops: the four 32-bit words (as int64, (..., 4)) of the blocks for
    the 64-bit counters ``counter`` (int64, as the low two words of each block's counter; the high
    two are zero) under the 64-bit key ``seed``. int64 products wrap modulo 2^64, which keeps the
    low 64 bits of each 32 x 32-bit product exact."""
    key0, key1 = seed & _LOW32, (seed >> 32) & _LOW32
    c0, c1 = counter & _LOW32, (counter >> 32) & _LOW32
    c2 = c3 = torch.zeros_like(counter)
    for _ in range(10):
        p0, p1 = c0 * _MULTIPLIERS[0], c2 * _MULTIPLIERS[1]
        c0, c1, c2, c3 = (
            ((p1 >> 32) & _LOW32) ^ c1 ^ key0,
            p1 & _LOW32,
            ((p0 >> 32) & _LOW32) ^ c3 ^ key1,
            p0 & _LOW32,
        )
        key0 = (key0 + _KEY_INCREMENTS[0]) & _LOW32
        key1 = (key1 + _KEY_INCREMENTS[1]) & _LOW32
    return torch.stack((c0, c1, c2, c3), dim=-1)


def keep_mask(
    shape: torch.Size | tuple[int, ...], keep_probability: float, seed: int, device=None
) -> Tensor:
    """The bool keep mask `dropconnect` draws for a tensor of ``shape`` from ``seed``."""
    size = int(torch.Size(shape).numel())
    counters = torch.arange((size + 3) // 4, dtype=torch.int64, device=device)
    words = philox(counters, seed).view(-1)[:size]
    return (words < int(keep_probability * 2.0**32)).view(shape)


class _MaskedScale(torch.autograd.Function):
    """weight * keep * scale with the keep mask drawn from ``seed`` by the compiled kernel; the
    backward pass applies the same mask (regenerated from the seed) to the gradient."""

    @staticmethod
    def forward(ctx, weight, keep_probability, scale, seed, kernel):  # type: ignore[override]
        ctx.arguments = (keep_probability, scale, seed)
        ctx.kernel = kernel
        return kernel.masked_scale(weight, keep_probability, scale, seed)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        return ctx.kernel.masked_scale(grad, *ctx.arguments), None, None, None, None


def transposed(matrix: Tensor) -> Tensor:
    """``matrix.t().contiguous()``: the compiled tiled copy on CPU in float32 and float64, torch's
    copy elsewhere."""
    kernel = kernel_for(matrix) if matrix.dim() == 2 else None
    if kernel is None:
        return matrix.t().contiguous()
    return kernel.transpose(matrix)
