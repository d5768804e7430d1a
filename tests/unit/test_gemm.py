"""The GEMM backend of the recurrences (treernn.encoders.gemm): every backend computes the same
products, the choice is probed once per shape and logged, can be forced, and falls back to aten
where a packed GEMM cannot run (float64, other devices)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from treernn.encoders import gemm
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.errors import ConfigValueError

CPU = torch.device("cpu")
PACKED = [name for name in ("mkl", "onednn") if name in gemm.candidates(CPU, torch.float32)]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gemm.ENV_VAR, raising=False)


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn"])
def test_products_equal_plain_matmul(backend: str) -> None:
    if backend != "aten" and backend not in PACKED:
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    weight, x, added = torch.randn(7, 5), torch.randn(3, 5), torch.randn(3, 7)
    linear = gemm.PackedLinear(weight, batch=3, backend=backend)
    assert linear.backend == backend
    tolerance = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(linear.mm(x), x @ weight.t(), **tolerance)
    torch.testing.assert_close(linear.addmm(added, x), added + x @ weight.t(), **tolerance)
    out = torch.empty(3, 7)
    assert linear.addmm(added, x, out=out) is out
    torch.testing.assert_close(out, added + x @ weight.t(), **tolerance)
    # a transposed (non-contiguous) weight, as the backward pass packs weight.T
    linear_t = gemm.PackedLinear(weight.t(), batch=3, backend=backend)
    torch.testing.assert_close(linear_t.mm(added), added @ weight, **tolerance)


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn"])
def test_large_linear_equals_f_linear_with_gradients(backend: str) -> None:
    """``gemm.linear`` (the ON-LSTM input projection: one product over all steps) on each backend:
    the output and the gradients of input, weight and bias equal ``F.linear``'s to float32
    rounding; a (T, B, K) input whose rows are not contiguous (the layers' transposed inputs)."""
    if backend != "aten" and backend not in PACKED:
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    torch.manual_seed(0)
    x = torch.randn(6, 9, 33).transpose(0, 1).requires_grad_()  # (T=9, B=6, K=33), strided
    weight = torch.randn(40, 33, requires_grad=True)
    bias = torch.randn(40, requires_grad=True)
    expected = torch.nn.functional.linear(x, weight, bias)
    grad = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (x, weight, bias), grad)
    out = gemm.linear(x, weight, bias, backend)
    assert out.shape == (9, 6, 40)
    tolerance = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, expected, **tolerance)
    for got, want in zip(torch.autograd.grad(out, (x, weight, bias), grad), expected_grads):
        torch.testing.assert_close(got, want, **tolerance)
    # float64 is F.linear itself, whichever backend is asked for
    x64, weight64 = x.detach().double(), weight.detach().double()
    assert torch.equal(gemm.linear(x64, weight64, None, backend), x64 @ weight64.t())


def test_rows_bucket_is_the_power_of_two_below() -> None:
    assert [gemm.rows_bucket(n) for n in (1, 2, 3, 1400, 2048, 2800)] == [1, 2, 2, 1024, 2048, 2048]


@pytest.mark.parametrize("backend", ["auto", "mkl", "onednn", "aten"])
def test_float64_and_other_devices_run_on_aten(backend: str) -> None:
    assert gemm.resolve(backend, 3, 5, 7, CPU, torch.float64) == "aten"
    assert gemm.resolve(backend, 3, 5, 7, torch.device("meta"), torch.float32) == "aten"
    assert gemm.candidates(torch.device("cuda"), torch.float32) == ["aten"]
    weight, x = torch.randn(7, 5, dtype=torch.double), torch.randn(3, 5, dtype=torch.double)
    assert torch.equal(gemm.PackedLinear(weight, 3, backend).mm(x), x @ weight.t())


def test_auto_probes_once_per_shape_and_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    gemm._CHOICES.clear()
    with caplog.at_level(logging.INFO, logger="treernn.encoders.gemm"):
        first = gemm.resolve("auto", 4, 6, 9, CPU, torch.float32)
        second = gemm.resolve("auto", 4, 6, 9, CPU, torch.float32)
    assert first == second and first in gemm.candidates(CPU, torch.float32)
    probes = [r for r in caplog.records if "GEMM backend" in r.getMessage()]
    assert len(probes) == (1 if PACKED else 0)
    if PACKED:
        assert f": {first} (GFLOP/s:" in probes[0].getMessage()


def test_forcing_by_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gemm.ENV_VAR, "aten")
    assert gemm.resolve("auto", 3, 5, 7, CPU, torch.float32) == "aten"  # the variable wins
    for name in PACKED:  # over "auto" only: an explicit option wins over the variable
        assert gemm.resolve(name, 3, 5, 7, CPU, torch.float32) == name
    monkeypatch.setenv(gemm.ENV_VAR, "cublas")
    with pytest.raises(ConfigValueError, match="gemm_backend='cublas'"):
        gemm.resolve("auto", 3, 5, 7, CPU, torch.float32)
    with pytest.raises(ConfigValueError, match="gemm_backend='fastest'"):
        ONLSTMEncoder(4, 6, num_layers=1, chunk_size=3, gemm_backend="fastest")


@pytest.mark.parametrize("backend", ["auto", "mkl", "onednn", "aten"])
def test_onlstm_float64_fast_equals_reference_per_backend(backend: str) -> None:
    """float64, padded, DropConnect and locked dropout, carried state: the fast path with each
    backend forced (all run on aten in float64) equals the readable cell to 1e-10, gradients too."""
    torch.manual_seed(0)
    kwargs = dict(num_layers=2, chunk_size=3, dropout=0.2, weight_drop=0.3, output_size=3)
    reference = ONLSTMEncoder(4, 6, impl="reference", **kwargs).double()
    fast = ONLSTMEncoder(4, 6, impl="fast", gemm_backend=backend, **kwargs).double()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(3, 7, 4, dtype=torch.double, requires_grad=True)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2, 2:] = False
    state = [(torch.randn(3, h, dtype=torch.double),) * 2 for h in (6, 3)]
    results = []
    for encoder in (reference, fast):
        torch.manual_seed(1)
        out = encoder(x, mask, state)
        loss = (out.hidden * torch.linspace(-1, 1, 3, dtype=torch.double)).sum()
        loss = loss + out.tree_signal.values.sum() - out.extras["input_distances"].pow(2).sum()
        loss = loss + sum((h * 0.3).sum() + (c * c).sum() for h, c in out.state)
        grads = torch.autograd.grad(loss, [x, *encoder.parameters()])
        results.append((out.hidden, out.tree_signal.values, out.state[-1][1], *grads))
    for ref_value, fast_value in zip(*results):
        torch.testing.assert_close(fast_value, ref_value, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(not PACKED, reason="no packed GEMM backend in this torch build")
def test_auto_choice_is_kept_per_machine(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A later process reads the choice instead of probing again (same seed, same products)."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    gemm._CHOICES.clear()
    first = gemm.resolve("auto", 3, 5, 7, CPU, torch.float32)
    stored = json.loads((tmp_path / "gemm_backends.json").read_text())
    (key,) = stored
    assert "3x5x7 float32" in key and stored[key] == first
    # a new process (empty in-memory cache) with another backend written down: it is used as is
    other = next(name for name in gemm.candidates(CPU, torch.float32) if name != first)
    (tmp_path / "gemm_backends.json").write_text(json.dumps({key: other}))
    gemm._CHOICES.clear()
    monkeypatch.setattr(gemm, "_probe", lambda *args: pytest.fail("probed again"))
    assert gemm.resolve("auto", 3, 5, 7, CPU, torch.float32) == other
