"""Whole-weight operations (treernn.kernels.weight_ops): Philox4x32-10 against the published
known-answer vectors, DropConnect's mask (the same on the compiled and the torch-ops path, the
right keep rate, independent neighbours, the same mask in the backward pass, repeatable under a
seed, independent of the thread count) and the tiled transpose."""

from __future__ import annotations

import platform
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.fixtures.compiled import compiled_extension
from treernn.kernels import cpp_ext, weight_ops
from treernn.kernels.weight_ops import dropconnect, keep_mask, philox, transposed

# Philox4x32-10 known answers, (counter, key) -> output, from the Random123 distribution's
# kat_vectors (Salmon et al., SC 2011).
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The compiled weight_ops kernel; it must build where the tests run (never a skip)."""
    return compiled_extension("weight_ops", monkeypatch)


@pytest.mark.parametrize(("counter", "key", "expected"), KNOWN_ANSWERS)
def test_compiled_philox_matches_the_known_answers(kernel, counter, key, expected) -> None:
    assert tuple(kernel.philox_block(list(counter), list(key))) == expected


def test_torch_philox_matches_the_known_answers() -> None:
    """The torch-ops generator takes counters whose two high words are zero: the first vector."""
    counter, key, expected = KNOWN_ANSWERS[0]
    words = philox(torch.tensor([0]), key[0] | key[1] << 32)
    assert tuple(words[0].tolist()) == expected


@pytest.mark.parametrize("counter", [0, 123_456_789, 2**32 - 5, 2**33 - 60, 2**40 + 3])
def test_simd_words_are_the_scalar_words(kernel, counter) -> None:
    """The AVX2 and AVX-512 generators (counters side by side in the lanes, the words transposed
    back into element order) give the scalar loop's words, also for blocks whose counters carry
    into the high word inside a register; each counter's words are philox_block's."""
    key = [0xA4093822, 0x299F31D0]
    scalar = kernel.block_words(counter, key, "scalar")
    assert len(scalar) == 4 * 64
    for i in (0, 1, 4, 63):
        block = kernel.philox_block([(counter + i) & 0xFFFFFFFF, (counter + i) >> 32, 0, 0], key)
        assert scalar[4 * i : 4 * i + 4] == list(block)
    ran = 0
    for isa in ("avx2", "avx512"):
        try:
            words = kernel.block_words(counter, key, isa)
        except RuntimeError as error:  # this CPU lacks it: the message says so
            assert "does not run on this CPU" in str(error)
            continue
        assert words == scalar, isa
        ran += 1
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if platform.machine() == "x86_64" else set()
    expected = {"avx2", "fma"} <= flags, {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
    assert ran >= sum(expected)  # what the CPU has runs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1,), (7, 13), (4, 1001), (3, 2, 5)])
def test_kernel_and_torch_ops_draw_the_same_mask(kernel, dtype, shape) -> None:
    x = torch.randn(shape, dtype=dtype)
    for seed in (0, 12345, -(2**62) + 17):
        keep = keep_mask(shape, 0.55, seed)
        torch.testing.assert_close(
            kernel.masked_scale(x, 0.55, 2.0, seed), x * keep * 2.0, rtol=0, atol=0
        )


def test_keep_rate_and_independent_neighbours() -> None:
    """P(keep) = 0.55 within 5 standard deviations over 2^20 draws, and pairs of neighbours (the
    next word of a block, the same word of the next block) both kept at 0.55^2."""
    size, q = 1 << 20, 0.55
    keep = keep_mask((size,), q, seed=2026).double()
    sd = (q * (1 - q) / size) ** 0.5
    assert abs(keep.mean().item() - q) < 5 * sd
    for gap in (1, 4):
        both = (keep[:-gap] * keep[gap:]).mean().item()
        assert abs(both - q * q) < 5 * (q * q * (1 - q * q) / size) ** 0.5
    # different seeds: the masks agree where two independent draws would (q^2 + (1-q)^2)
    other = keep_mask((size,), q, seed=2027).double()
    agree = (keep == other).double().mean().item()
    assert abs(agree - (q * q + (1 - q) ** 2)) < 0.005


@pytest.mark.parametrize("path", ["kernel", "torch"])
@pytest.mark.parametrize("rescale", [False, True])
def test_dropconnect_applies_one_mask_forward_and_backward(
    path: str, rescale: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "torch":
        monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
    else:
        monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
    p = 0.4
    weight = torch.randn(30, 17, requires_grad=True)
    upstream = torch.randn(30, 17)
    torch.manual_seed(5)
    dropped = dropconnect(weight, p, rescale)
    (dropped * upstream).sum().backward()
    scale = 1 / (1 - p) if rescale else 1.0
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(dropped[kept], weight.detach()[kept] * scale)
    torch.testing.assert_close(weight.grad, upstream * kept * scale)
    # the same seed draws the same mask again, on either path
    torch.manual_seed(5)
    torch.testing.assert_close(dropconnect(weight, p, rescale), dropped)
    assert not torch.equal(dropconnect(weight, p, rescale), dropped)  # a fresh mask per call


def test_dropconnect_of_zero_is_the_weight_itself() -> None:
    weight = torch.randn(3, 3)
    assert dropconnect(weight, 0.0, rescale=True) is weight


def test_mask_does_not_depend_on_the_thread_count(kernel) -> None:
    x = torch.randn(513, 300)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel.masked_scale(x, 0.3, 1.0, 99)
        torch.set_num_threads(2)
        two = kernel.masked_scale(x, 0.3, 1.0, 99)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (64, 64), (67, 131), (130, 3), (3, 200)])
def test_transposed_is_the_contiguous_transpose(kernel, dtype, shape) -> None:
    matrix = torch.randn(shape, dtype=dtype)
    out = transposed(matrix)
    assert out.is_contiguous() and torch.equal(out, matrix.t())
    strided = torch.randn(shape[1], shape[0], dtype=dtype).t()  # a transposed view
    assert torch.equal(transposed(strided), strided.t())


def test_weight_ops_runs_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
    assert weight_ops.kernel_for(torch.ones(1)) is None
    matrix = torch.randn(5, 4)
    assert torch.equal(transposed(matrix), matrix.t())
