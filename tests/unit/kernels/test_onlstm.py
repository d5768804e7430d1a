"""The fast ON-LSTM recurrence (``impl="fast"``, a hand-written autograd function) against the
step-by-step reference: outputs, states, distances and every gradient agree to 1e-5 in float32
and to 1e-10 in float64 with the same DropConnect and locked-dropout masks, on both of its paths
(the compiled per-step kernel, which must build here, and the torch-ops steps); the two paths
agree with each other, and the build falls back to the torch-ops steps with one warning."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest
import torch

from tests.fixtures.compiled import compiled_extension
from tests.fixtures.precision import fp32_and_bf16_runs
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.kernels import cpp_ext, gemm
from treernn.kernels import onlstm as onlstm_kernel
from treernn.kernels.onlstm import (
    ONLSTMRecurrence,
    _fast_forward,
    fast_recurrence,
    fused_kernel,
)

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
TOLERANCE_FLOAT64 = {"rtol": 1e-10, "atol": 1e-10}
PATHS = ["fused", "torch"]


@pytest.fixture
def extension(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The compiled per-step kernel. It must build wherever the tests run (a C++ compiler and
    ninja are installed): a failed build is a bug to fix, never a skip."""
    return compiled_extension("onlstm_step", monkeypatch)


def _use_path(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the fast recurrence on the fused kernel (which must be available) or on torch ops."""
    if path == "fused":
        monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
        assert fused_kernel(torch.zeros(1)) is not None, "the onlstm_step extension did not build"
    else:
        monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
        assert fused_kernel(torch.zeros(1)) is None


def _pair(seed: int, **kwargs) -> tuple[ONLSTMEncoder, ONLSTMEncoder]:
    torch.manual_seed(seed)
    reference = ONLSTMEncoder(impl="reference", **kwargs)
    fast = ONLSTMEncoder(impl="fast", **kwargs)
    fast.load_state_dict(reference.state_dict())
    return reference, fast


def _run(encoder, x, mask, state, seed: int):
    """Forward with a fixed seed (same masks for both), a loss touching every output, gradients."""
    torch.manual_seed(seed)
    out = encoder(x, mask, state)
    weights = torch.linspace(-1, 1, out.hidden.size(-1), dtype=out.hidden.dtype)
    loss = (out.hidden * weights).sum() + (out.pooled**2).sum()
    loss = loss + (out.tree_signal.values * 0.7).sum() - (out.extras["input_distances"] ** 2).sum()
    for h, c in out.state:
        loss = loss + (h * 0.3).sum() + (c * c).sum()
    leaves = [x] + [t for pair in state for t in pair] + list(encoder.parameters())
    grads = torch.autograd.grad(loss, leaves)
    return out, grads


def _assert_same(out_a, out_b, tolerance: dict = TOLERANCE) -> None:
    torch.testing.assert_close(out_b.hidden, out_a.hidden, **tolerance)
    torch.testing.assert_close(out_b.pooled, out_a.pooled, **tolerance)
    torch.testing.assert_close(out_b.tree_signal.values, out_a.tree_signal.values, **tolerance)
    torch.testing.assert_close(
        out_b.extras["input_distances"], out_a.extras["input_distances"], **tolerance
    )
    for layer_a, layer_b in zip(out_a.layer_outputs, out_b.layer_outputs):
        torch.testing.assert_close(layer_b, layer_a, **tolerance)
    for (h_a, c_a), (h_b, c_b) in zip(out_a.state, out_b.state):
        torch.testing.assert_close(h_b, h_a, **tolerance)
        torch.testing.assert_close(c_b, c_a, **tolerance)


CASES = [
    # (seed, weight_drop, dropout, train, padded)
    (0, 0.0, 0.0, True, False),
    (1, 0.45, 0.3, True, False),
    (2, 0.45, 0.3, False, False),
    (3, 0.0, 0.0, False, True),
    (4, 0.3, 0.2, True, True),
    (5, 0.5, 0.0, False, True),
]


def _setup(seed, weight_drop, dropout, train, padded, dtype=torch.float32, pair=_pair):
    """Encoders (a pair built by ``pair``), input, mask and a carried state needing gradients."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (4,), generator=generator).tolist()
    chunk, input_size, batch, steps = sizes[0] + 1, sizes[1] * 3, sizes[2] + 1, sizes[3] * 3 + 2
    hidden, output = chunk * (sizes[1] + 2), chunk * sizes[2]
    num_layers = 1 + seed % 3
    encoders = pair(
        seed,
        input_size=input_size,
        hidden_size=hidden,
        num_layers=num_layers,
        chunk_size=chunk,
        dropout=dropout,
        weight_drop=weight_drop,
        output_size=output,
    )
    for encoder in encoders:
        encoder.train(train)
        encoder.to(dtype)
    x = torch.randn(batch, steps, input_size, generator=generator, dtype=torch.float64)
    x = x.to(dtype).requires_grad_()
    mask = None
    if padded:
        lengths = torch.randint(1, steps + 1, (batch,), generator=generator)
        lengths[0] = steps
        mask = torch.arange(steps)[None, :] < lengths[:, None]
    # A carried (non-zero) initial state that needs gradients.
    state = [
        tuple(
            (torch.randn(batch, layer.hidden_size, generator=generator, dtype=torch.float64) * 0.5)
            .to(dtype)
            .requires_grad_()
            for _ in range(2)
        )
        for layer in encoders[0].layers
    ]
    return encoders, x, mask, state


def _check_against_reference(case, dtype, tolerance) -> None:
    seed = case[0]
    (reference, fast), x, mask, state = _setup(*case, dtype=dtype)
    out_ref, grads_ref = _run(reference, x, mask, state, seed=100 + seed)
    out_fast, grads_fast = _run(fast, x, mask, state, seed=100 + seed)
    _assert_same(out_ref, out_fast, tolerance)
    names = ["x"] + [f"state{i}" for i in range(2 * len(state))]
    names += [name for name, _ in reference.named_parameters()]
    assert len(grads_ref) == len(names)
    for name, grad_ref, grad_fast in zip(names, grads_ref, grads_fast):
        torch.testing.assert_close(
            grad_fast, grad_ref, **tolerance, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("seed", "weight_drop", "dropout", "train", "padded"), CASES)
def test_fast_matches_reference(
    seed, weight_drop, dropout, train, padded, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_path(path, monkeypatch)
    _check_against_reference((seed, weight_drop, dropout, train, padded), torch.float32, TOLERANCE)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("seed", "weight_drop", "dropout", "train", "padded"), CASES)
def test_fast_matches_reference_float64(
    seed, weight_drop, dropout, train, padded, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """float64: outputs, states, both distances and every gradient to 1e-10 (padding, DropConnect,
    locked dropout, a carried state needing gradients)."""
    _use_path(path, monkeypatch)
    case = (seed, weight_drop, dropout, train, padded)
    _check_against_reference(case, torch.float64, TOLERANCE_FLOAT64)


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn", "treernn"])
def test_fast_matches_reference_per_gemm_backend(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each per-step GEMM backend forced in turn (float32; MKL and oneDNN where this build has
    them): the same outputs, states, distances and gradients as the reference to 1e-5."""
    if backend not in gemm.candidates(torch.device("cpu"), torch.float32):
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    monkeypatch.setenv(gemm.ENV_VAR, backend)
    assert gemm.resolve("auto", 3, 5, 7, torch.device("cpu"), torch.float32) == backend
    for path in PATHS:
        _use_path(path, monkeypatch)
        _check_against_reference(CASES[4], torch.float32, TOLERANCE)


def _same_encoder_twice(seed: int, **kwargs) -> tuple[ONLSTMEncoder, ONLSTMEncoder]:
    torch.manual_seed(seed)
    first, second = ONLSTMEncoder(**kwargs), ONLSTMEncoder(**kwargs)
    second.load_state_dict(first.state_dict())
    return first, second


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn", "treernn"])
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]])
def test_fused_equals_torch_ops_path(
    case, backend: str, extension: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled kernel against the torch-ops steps it replaces (float32, 1e-5), with each
    per-step GEMM backend forced: outputs, states, distances and every gradient."""
    if backend not in gemm.candidates(torch.device("cpu"), torch.float32):
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    monkeypatch.setenv(gemm.ENV_VAR, backend)
    seed = case[0]
    (fused, torch_ops), x, mask, state = _setup(*case, pair=_same_encoder_twice)
    results = {}
    for path, encoder in (("fused", fused), ("torch", torch_ops)):
        _use_path(path, monkeypatch)
        results[path] = _run(encoder, x, mask, state, seed=100 + seed)
    _assert_same(results["torch"][0], results["fused"][0])
    for grad_torch, grad_fused in zip(results["torch"][1], results["fused"][1]):
        torch.testing.assert_close(grad_fused, grad_torch, **TOLERANCE)


@pytest.mark.parametrize(
    ("dtype", "backend"),
    [(torch.float32, name) for name in ("aten", "mkl", "onednn", "treernn")]
    + [(torch.float64, "aten"), (torch.float64, "treernn")],  # treernn: the sequence loop
)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("save_for_backward", [False, True])
def test_fused_forward_writes_the_same_buffers(
    dtype, backend: str, masked: bool, save_for_backward: bool, extension: ModuleType
) -> None:
    """The kernel's forward steps fill every buffer the backward pass reads (gates after their
    nonlinearities with the master logits kept, cumsums, tanh(c), states) as the torch ops do,
    with the input projection added in the GEMM (aten) or in the kernel (packed GEMMs)."""
    if backend not in gemm.candidates(torch.device("cpu"), dtype):
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    generator = torch.Generator().manual_seed(3)
    steps, batch, hidden, chunk = 5, 4, 12, 3
    num_gates = 4 * hidden + 2 * (hidden // chunk)
    gates = torch.randn(steps, batch, num_gates, generator=generator, dtype=torch.float64)
    weight = torch.randn(num_gates, hidden, generator=generator, dtype=torch.float64) * 0.4
    h0, c0 = torch.randn(2, batch, hidden, generator=generator, dtype=torch.float64)
    step_mask = None
    if masked:
        step_mask = torch.rand(steps, batch, generator=generator) < 0.6
    arguments = [t.to(dtype) for t in (gates, weight, h0, c0)]
    arguments += [step_mask, chunk, save_for_backward, backend]
    torch_ops = _fast_forward(*arguments, None)
    fused = _fast_forward(*arguments, extension)
    tolerance = TOLERANCE if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for value_torch, value_fused in zip(torch_ops[:4], fused[:4]):
        torch.testing.assert_close(value_fused, value_torch, **tolerance)
    assert torch_ops[4].keys() == fused[4].keys()
    for name, value_torch in torch_ops[4].items():
        torch.testing.assert_close(fused[4][name], value_torch, **tolerance, msg=name)


def test_fast_across_carried_state_segments() -> None:
    """Two BPTT segments with the state carried (detached) between them, as the LM trains."""
    reference, fast = _pair(
        7, input_size=5, hidden_size=12, num_layers=2, chunk_size=4, weight_drop=0.4, dropout=0.1
    )
    x = torch.randn(3, 10, 5)
    states = {}
    for name, encoder in (("reference", reference), ("fast", fast)):
        state = None
        outputs = []
        for segment, seed in ((x[:, :6], 11), (x[:, 6:], 12)):
            torch.manual_seed(seed)
            out = encoder(segment, state=state)
            out.hidden.pow(2).sum().backward()
            state = [(h.detach(), c.detach()) for h, c in out.state]
            outputs.append(out)
        states[name] = (outputs, [p.grad.clone() for p in encoder.parameters()])
    for out_ref, out_fast in zip(states["reference"][0], states["fast"][0]):
        _assert_same(out_ref, out_fast)
    for grad_ref, grad_fast in zip(states["reference"][1], states["fast"][1]):
        torch.testing.assert_close(grad_fast, grad_ref, **TOLERANCE)


def test_inference_path_saves_nothing_and_matches() -> None:
    reference, fast = _pair(8, input_size=6, hidden_size=10, num_layers=2, chunk_size=5)
    x = torch.randn(4, 9, 6)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, 5:] = False
    with torch.no_grad():
        out_ref = reference(x, mask)
    with torch.inference_mode():
        out_fast = fast(x, mask)
    assert out_fast.hidden.grad_fn is None
    _assert_same(out_ref, out_fast)


@pytest.mark.parametrize("path", [*PATHS, "sequence"])
def test_gradcheck_double(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finite differences agree with the hand-written backward (float64, padded, with state),
    through the fused kernel, through the torch-ops steps, and through the whole-sequence C++
    loops (the treernn backend, its portable products in float64)."""
    _use_path("fused" if path == "sequence" else path, monkeypatch)
    if path == "sequence":
        monkeypatch.setenv(gemm.ENV_VAR, "treernn")
    torch.manual_seed(0)
    steps, batch, hidden, chunk = 3, 2, 4, 2
    num_gates = 4 * hidden + 2 * (hidden // chunk)
    input_gates = torch.randn(steps, batch, num_gates, dtype=torch.double, requires_grad=True)
    weight = (torch.randn(num_gates, hidden, dtype=torch.double) * 0.3).requires_grad_()
    h0 = torch.randn(batch, hidden, dtype=torch.double, requires_grad=True)
    c0 = torch.randn(batch, hidden, dtype=torch.double, requires_grad=True)
    step_mask = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=torch.bool)
    for mask in (None, step_mask):
        assert torch.autograd.gradcheck(
            lambda g, w, h, c, m=mask: ONLSTMRecurrence.apply(g, w, h, c, m, chunk),
            (input_gates, weight, h0, c0),
        )
    # the distances' gradient alone (the loss above reaches them through every output)
    assert torch.autograd.gradcheck(
        lambda g: ONLSTMRecurrence.apply(g, weight.detach(), h0, c0, step_mask, chunk)[3],
        (input_gates,),
    )


def test_fast_recurrence_all_rows_padded_keeps_state() -> None:
    hidden, chunk = 4, 2
    gates = torch.randn(2, 1, 4 * hidden + 2 * hidden // chunk)
    weight = torch.randn(gates.size(-1), hidden, requires_grad=True)
    h0, c0 = torch.randn(1, hidden), torch.randn(1, hidden)
    mask = torch.zeros(2, 1, dtype=torch.bool)
    outputs, h, c, forget_d, input_d = fast_recurrence(gates, weight, h0, c0, mask, chunk)
    torch.testing.assert_close(h, h0)
    torch.testing.assert_close(c, c0)
    assert (outputs == 0).all() and (forget_d == 0).all() and (input_d == 0).all()


def test_fast_path_under_bf16_autocast_keeps_fp32_without_bf16_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bf16-mixed on a CPU without bf16 matrix kernels: the fast recurrence keeps fp32 products,
    forward and backward, and gives the fp32 results."""
    monkeypatch.setattr(gemm, "bf16_pays", lambda *shape: False)
    torch.manual_seed(0)
    encoder = ONLSTMEncoder(input_size=5, hidden_size=12, num_layers=2, chunk_size=4)
    x = torch.randn(3, 6, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = encoder(x)
    assert out.hidden.dtype == torch.float32
    out.hidden.sum().backward()
    torch.testing.assert_close(out.hidden, encoder(x).hidden, rtol=0, atol=0)


@pytest.mark.parametrize("path", ["fused", "torch"])
def test_bf16_products_under_autocast_stay_close_to_fp32(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bf16-mixed where bf16 products are fast (forced here: this CPU computes them slowly, with
    the same arithmetic): input projection, per-step products and the recurrent weight gradient
    in bf16 with fp32 accumulation, everything else fp32. Outputs, distances and gradients within
    a few bf16 roundings of fp32 (relative error < 5e-2), and not equal to them (bf16 ran)."""
    monkeypatch.setattr(gemm, "bf16_pays", lambda *shape: True)
    _use_path(path, monkeypatch)
    torch.manual_seed(0)
    encoder = ONLSTMEncoder(
        input_size=6, hidden_size=16, num_layers=2, chunk_size=4, dropout=0.2, weight_drop=0.3
    ).train()
    x = torch.randn(3, 7, 6)
    mask = torch.arange(7)[None] < torch.tensor([[7], [5], [2]])
    runs = fp32_and_bf16_runs(
        encoder, x, mask, lambda out: out.hidden.pow(2).sum() + out.tree_signal.values.sum()
    )
    results = []
    for out, grads in runs:
        assert out.hidden.dtype == torch.float32 and out.tree_signal.values.dtype == torch.float32
        results.append((out.hidden.detach(), out.tree_signal.values.detach(), grads))
    (hidden, distances, grads), (hidden_bf16, distances_bf16, grads_bf16) = results
    assert not torch.equal(hidden, hidden_bf16)
    assert (hidden_bf16 - hidden).norm() / hidden.norm() < 5e-2
    assert (distances_bf16 - distances).norm() / distances.norm() < 5e-2
    for name, grad in grads.items():
        assert torch.isfinite(grads_bf16[name]).all()
        assert (grads_bf16[name] - grad).norm() / grad.norm() < 5e-2, name


def test_environment_variable_forces_the_torch_ops_path(
    extension: ModuleType, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``TREERNN_CPP_EXT=0``: no kernel, the torch-ops steps run (forward and backward), said
    once at INFO level."""
    monkeypatch.setattr(cpp_ext, "_SAID_OFF", set())
    calls = []
    for name in ("_torch_forward_steps", "_torch_backward_steps"):
        original = getattr(onlstm_kernel, name)
        wrapped = lambda *args, _f=original, _n=name: calls.append(_n) or _f(*args)  # noqa: E731
        monkeypatch.setattr(onlstm_kernel, name, wrapped)
    gates = torch.randn(3, 2, 4 * 4 + 2 * 2, requires_grad=True)
    weight, state = torch.randn(gates.size(-1), 4), torch.zeros(2, 4)
    fast_recurrence(gates, weight, state, state, None, 2)[0].sum().backward()
    assert calls == []  # the kernel ran
    monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
    with caplog.at_level(logging.INFO, logger=cpp_ext.__name__):
        assert fused_kernel(gates) is None
        fast_recurrence(gates, weight, state, state, None, 2)[0].sum().backward()
    assert calls == ["_torch_forward_steps", "_torch_backward_steps"]
    said = [r.getMessage() for r in caplog.records if r.name == cpp_ext.__name__]
    assert len(said) == 1 and "TREERNN_CPP_EXT=0" in said[0], said


def test_no_kernel_for_other_dtypes_and_devices(extension: ModuleType) -> None:
    assert fused_kernel(torch.zeros(1, dtype=torch.float64)) is extension
    assert fused_kernel(torch.zeros(1, dtype=torch.bfloat16)) is None
    assert fused_kernel(torch.zeros(1, device="meta")) is None


@pytest.mark.parametrize("failure", ["build", "no ninja"])
def test_failed_build_falls_back_with_one_warning(
    failure: str, tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build that cannot happen or fails: one warning naming the reason and the fallback, no
    retry in the same process, and the torch-ops path gives the results."""
    from torch.utils import cpp_extension

    monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))  # no finished build to import
    monkeypatch.setattr(cpp_ext, "_LOADED", {})
    if failure == "build":

        def failing_load(*args, **kwargs):
            raise RuntimeError("Error building extension 'treernn_onlstm_step'")

        monkeypatch.setattr(cpp_extension, "load", failing_load)
    else:
        monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    gates = torch.randn(4, 3, 4 * 6 + 2 * 3, requires_grad=True)
    weight, state = torch.randn(gates.size(-1), 6), torch.randn(3, 6)
    with caplog.at_level(logging.WARNING, logger=cpp_ext.__name__):
        results = [fast_recurrence(gates, weight, state, state, None, 2) for _ in range(2)]
        assert fused_kernel(gates) is None
    # one warning per extension the recurrence asked for (its kernel, the treernn GEMMs); only
    # treernn's: a CUDA build of torch on a machine without a GPU warns "No CUDA runtime is
    # found" as torch.utils.cpp_extension is first imported, above
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == cpp_ext.__name__
    ]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("C++ extension onlstm_step ")
    assert warnings[1].startswith("C++ extension packed_gemm ")
    for message in warnings:
        assert "torch-ops path" in message
        assert ("Error building extension" if failure == "build" else "ninja") in message
    monkeypatch.setenv(cpp_ext.ENV_VAR, "0")
    expected = fast_recurrence(gates, weight, state, state, None, 2)
    for result in results:
        for value, value_expected in zip(result, expected):
            torch.testing.assert_close(value, value_expected, rtol=0, atol=0)


def test_build_directory_is_keyed_by_source(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited source (or header beside it) builds in a new directory, under the torch version,
    in the cache dir."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    source = tmp_path / "kernel.cpp"
    source.write_text("int a;")
    first = cpp_ext.build_directory("kernel", source)
    source.write_text("int b;")
    second = cpp_ext.build_directory("kernel", source)
    (tmp_path / "shared.h").write_text("int c;")  # a header beside it is part of the key
    third = cpp_ext.build_directory("kernel", source)
    assert len({first, second, third}) == 3
    assert first.parent == second.parent == tmp_path / "cpp_ext" / torch.__version__
    assert first.name.startswith("kernel-")


def test_compile_error_is_one_warning_naming_the_error(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A source that does not compile (a real build through ninja and the compiler): None, and
    one warning quoting the compiler's error line."""
    monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpp_ext, "SOURCE_DIR", tmp_path)
    monkeypatch.setattr(cpp_ext, "_LOADED", {})
    (tmp_path / "broken.cpp").write_text("int broken( {\n")
    with caplog.at_level(logging.WARNING, logger=cpp_ext.__name__):
        assert cpp_ext.load_extension("broken") is None
        assert cpp_ext.load_extension("broken") is None
    # treernn's only (torch's CUDA builds warn of a missing CUDA runtime on first import)
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == cpp_ext.__name__
    ]
    assert len(warnings) == 1, warnings
    assert "broken.cpp" in warnings[0] and "error:" in warnings[0], warnings[0]
    assert "torch-ops path" in warnings[0]


def test_a_stamped_build_is_imported_without_cpp_extension_load(
    extension: ModuleType, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished build (stamped) in the cache is imported directly: cpp_extension.load is not
    called; a library changed since it was stamped goes through the build again."""
    import shutil

    from torch.utils import cpp_extension

    source = cpp_ext.SOURCE_DIR / "onlstm_step.cpp"
    built = cpp_ext.build_directory("onlstm_step", source)  # the extension fixture built it
    monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    copy = cpp_ext.build_directory("onlstm_step", source)
    shutil.copytree(built, copy)
    cpp_ext._stamp("onlstm_step", copy)  # as a finished build stamps it
    calls = []
    monkeypatch.setattr(cpp_extension, "load", lambda *args, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(cpp_ext, "_LOADED", {})
    module = cpp_ext.load_extension("onlstm_step")
    assert calls == [] and module is not None and hasattr(module, "forward_step")
    library = cpp_ext._library("onlstm_step", copy)
    status = library.stat()
    os.utime(library, ns=(status.st_atime_ns, status.st_mtime_ns + 1))  # rebuilt since
    monkeypatch.setattr(cpp_ext, "_LOADED", {})
    cpp_ext.load_extension("onlstm_step")
    assert len(calls) == 1 and calls[0]["build_directory"] == str(copy)


def test_a_build_leaves_the_flags_of_later_builds_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpp_extension.load appends torch's link flags to the list it is given: the flags (and so
    the build directory of the next extension) stay as they were."""
    from torch.utils import cpp_extension

    def appending_load(*args, extra_cflags, extra_ldflags, **kwargs):
        extra_cflags.append("-DCHANGED")
        extra_ldflags.extend(["-L/torch/lib", "-lc10"])
        raise RuntimeError("Error building extension")

    monkeypatch.delenv(cpp_ext.ENV_VAR, raising=False)
    monkeypatch.setattr(cpp_extension, "load", appending_load)
    monkeypatch.setattr(cpp_ext, "_LOADED", {})
    monkeypatch.setattr(cpp_ext, "_load_stamped", lambda name, directory: None)
    source = cpp_ext.SOURCE_DIR / "weight_ops.cpp"
    before = cpp_ext.build_directory("weight_ops", source)
    assert cpp_ext.load_extension("onlstm_step") is None
    assert cpp_ext.build_directory("weight_ops", source) == before


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("isa", [1, 2, 3])
@pytest.mark.parametrize("masked", [False, True])
def test_sequence_loops_per_instruction_set(isa: int, masked: bool, extension) -> None:
    """The whole-sequence C++ loops with each copy of the products forced (portable C++, AVX2,
    AVX-512; those this CPU lacks skipped): the buffers and gradients of the per-step torch-ops
    path to float32 rounding, with more rows than one register tile and a partial last panel."""
    kernels = gemm.packed_kernels()
    if isa > kernels.isa():
        pytest.skip("this CPU lacks that instruction set")
    generator = torch.Generator().manual_seed(5)
    steps, batch, hidden, chunk = 6, 14, 20, 4
    num_gates = 4 * hidden + 2 * (hidden // chunk)
    gates = torch.randn(steps, batch, num_gates, generator=generator)
    weight = torch.randn(num_gates, hidden, generator=generator) * 0.3
    h0, c0 = torch.randn(2, batch, hidden, generator=generator)
    step_mask = (torch.rand(steps, batch, generator=generator) < 0.7) if masked else None
    expected = _fast_forward(gates, weight, h0, c0, step_mask, chunk, True, "aten", None)
    outputs, h_last, c_last, distances, saved = expected
    hs, cs = torch.empty(2, steps + 1, batch, hidden)
    hs[0], cs[0] = h0, c0
    buffers = dict(
        cumaxes=torch.empty(steps, batch, 2, hidden // chunk),
        activations=torch.empty_like(gates),
        tanh_cells=torch.empty(steps, batch, hidden),
    )
    masked_outputs = torch.empty(steps, batch, hidden) if masked else None
    extension.forward_sequence(
        gates, kernels.pack(weight, False), hs, cs, masked_outputs, buffers["cumaxes"],
        buffers["activations"], buffers["tanh_cells"], None, step_mask, chunk, isa,
    )  # fmt: skip
    for name, value in buffers.items():
        torch.testing.assert_close(value, saved[name], **TOLERANCE, msg=name)
    torch.testing.assert_close(hs, saved["hs"], **TOLERANCE)
    torch.testing.assert_close(cs, saved["cs"], **TOLERANCE)
    if masked:
        torch.testing.assert_close(masked_outputs, outputs, **TOLERANCE)
    grad_outputs = torch.randn(steps, batch, hidden, generator=generator)
    distance_grads = torch.randn(steps, batch, 2, generator=generator)
    grads = {}
    for name, kernel in (("torch", None), ("sequence", extension)):
        grad_h, grad_c = torch.randn(2, batch, hidden, generator=torch.Generator().manual_seed(9))
        grad_gates = torch.empty_like(gates)
        grad_bias = torch.full((gates.size(-1),), float("nan"), dtype=gates.dtype)
        if kernel is None:
            to_hidden = gemm.PackedLinear(weight.t(), batch, "aten")
            grad_h, grad_c = onlstm_kernel._torch_backward_steps(
                saved["activations"], saved["cumaxes"], saved["tanh_cells"], saved["cs"],
                grad_outputs, distance_grads, grad_h, grad_c, grad_gates, to_hidden, step_mask,
                chunk,
            )  # fmt: skip
        else:
            sums = []
            for threads in (1, 2):  # the last run's grad_h, grad_c and grad_gates are compared
                h, c, grad_bias = grad_h.clone(), grad_c.clone(), grad_bias.clone()
                with torch_threads(threads):
                    kernel.backward_sequence(
                        kernels.pack(weight.t(), False), saved["activations"], saved["cumaxes"],
                        saved["tanh_cells"], saved["cs"], grad_outputs, distance_grads, h, c,
                        grad_gates, step_mask, chunk, grad_bias, isa,
                    )  # fmt: skip
                sums.append(grad_bias)
            grad_h, grad_c = h, c
            # the bias's gradient, summed inside the loop: every step and row of grad_gates, the
            # same bits on 1 and 2 threads
            torch.testing.assert_close(sums[1], grad_gates.sum((0, 1)), **TOLERANCE)
            assert torch.equal(sums[0], sums[1])
        grads[name] = (grad_h, grad_c, grad_gates)
    for value_torch, value_sequence in zip(grads["torch"], grads["sequence"]):
        torch.testing.assert_close(value_sequence, value_torch, **TOLERANCE)


def test_auto_picks_the_recurrence_backend_by_timing_the_loop(
    extension, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "auto" with the kernel in float32: the backend whose forward loop the probe finds fastest
    (injected timings here), kept per shape; a forced backend, float64 and the torch-ops path are
    not probed."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(gemm.ENV_VAR, raising=False)
    monkeypatch.setattr(gemm, "_CHOICES", {})
    probed = []

    def timings(loops, flops, device=None, give_up=None):
        probed.append(sorted(loops))
        return {name: 2.0 if name == "aten" else 1.0 for name in loops}  # aten slowest: skip it

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    usable = gemm.candidates(torch.device("cpu"), torch.float32)
    gates = torch.zeros(5, 3, 4 * 8 + 2 * 2)
    first = next(name for name in usable if name != "aten")
    for _ in range(2):
        chosen = onlstm_kernel.recurrence_backend("auto", gates, 8, 4, extension, None)
        assert chosen == first
    assert len(probed) == 1 and probed[0] == sorted(usable)
    assert onlstm_kernel.recurrence_backend("aten", gates, 8, 4, extension, None) == "aten"
    assert onlstm_kernel.recurrence_backend("auto", gates.double(), 8, 4, extension, None) == "auto"
    assert onlstm_kernel.recurrence_backend("auto", gates, 8, 4, None, None) == "auto"
    monkeypatch.setenv(gemm.ENV_VAR, "aten")
    assert onlstm_kernel.recurrence_backend("auto", gates, 8, 4, extension, None) == "aten"
    assert len(probed) == 1


def test_training_and_inference_probe_their_own_loops(
    extension, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training decides its backend apart from inference, by timing the autograd node's forward
    and backward (three products' FLOPs; each loop really runs): at the paper's 1150 on an AMD
    Zen 5 oneDNN's per-step products win the forward loop and lose the training step."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(gemm.ENV_VAR, raising=False)
    monkeypatch.setattr(gemm, "_CHOICES", {})
    usable = gemm.candidates(torch.device("cpu"), torch.float32)
    if "treernn" not in usable or len(usable) < 2:
        pytest.skip("one GEMM backend here: nothing to choose")
    other = next(name for name in usable if name != "treernn")
    forward_flops = 2.0 * onlstm_kernel.PROBE_STEPS * 3 * 8 * 36
    seen = []

    def timings(loops, flops, device=None, give_up=None):
        if sorted(loops) != sorted(usable):  # another probe (a weight gradient's backend)
            return {name: 1.0 for name in loops}
        for loop in loops.values():
            loop()
        seen.append(flops)
        fastest = "treernn" if flops == 3 * forward_flops else other
        return {name: 1.0 if name == fastest else 2.0 for name in loops}

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    gates = torch.zeros(5, 3, 4 * 8 + 2 * 2)
    assert onlstm_kernel.recurrence_backend("auto", gates, 8, 4, extension, None) == other
    assert onlstm_kernel.recurrence_backend("auto", gates, 8, 4, extension, None, True) == "treernn"
    assert seen == [forward_flops, 3 * forward_flops]
    assert onlstm_kernel.recurrence_backend("auto", gates, 8, 4, extension, None) == other  # kept
    assert len(seen) == 2


def test_off_the_cpu_the_precision_probe_times_the_torch_ops_recurrence(monkeypatch) -> None:
    """On a GPU (no compiled kernel) the probe times the recurrence as it will run there: the
    torch-ops loop on that device, training or inference as asked, fp32 against bf16 products
    (a product faster alone made an H100's training step slower). The loops run (here on the
    CPU), the training one forward and backward: three products' FLOPs per step."""
    calls = []

    def fake_loop(*args):
        calls.append(args)
        return (lambda: None), 1.0

    cuda = torch.device("cuda")
    monkeypatch.setattr(onlstm_kernel, "_probe_loop", fake_loop)
    for training in (True, False):
        calls.clear()
        loops, _ = onlstm_kernel.precision_runs(3, 8, 4, None, cuda, training)()
        assert sorted(loops) == ["bfloat16", "float32"]
        assert calls == [
            (3, 8, 4, None, "auto", None, training, cuda),
            (3, 8, 4, None, "auto", torch.bfloat16, training, cuda),
        ]
    monkeypatch.undo()
    monkeypatch.setenv(gemm.ENV_VAR, "aten")  # no backend probe here: the loops are what counts
    loops, flops = onlstm_kernel._own_loops(3, 8, 4, torch.device("cpu"), True)
    assert flops == 3 * 2.0 * onlstm_kernel.PROBE_STEPS * 3 * 8 * (4 * 8 + 2 * 2)
    state = torch.get_rng_state()
    for loop in loops.values():
        loop()
    assert torch.equal(state, torch.get_rng_state())  # probing draws nothing from the run's RNG


def test_the_precision_probe_times_both_recurrences(extension, monkeypatch) -> None:
    """precision_runs: the fp32 and the bf16 forward loops (each on its own backend), which run;
    None without the compiled kernel."""
    monkeypatch.setattr(onlstm_kernel, "recurrence_backend", lambda *args, **kwargs: "aten")
    assert onlstm_kernel.precision_runs(3, 8, 4, None) is None
    loops, flops = onlstm_kernel.precision_runs(3, 8, 4, extension)()
    assert sorted(loops) == ["bfloat16", "float32"]
    assert flops == 2.0 * onlstm_kernel.PROBE_STEPS * 3 * 8 * (4 * 8 + 2 * 2)
    fp32, bf16 = loops["float32"](), loops["bfloat16"]()
    assert fp32[0].dtype == bf16[0].dtype == torch.float32
    assert not torch.equal(fp32[0], bf16[0])
    torch.testing.assert_close(bf16[0], fp32[0], rtol=5e-2, atol=5e-2)


def test_the_training_precision_probe_times_forward_and_backward(extension, monkeypatch) -> None:
    """In training bf16 runs the backward pass's products too, so the probe times forward and
    backward (three products a step: 3 x the forward FLOPs), on the backend training uses; the
    bf16 loop's gradients are those of the fp32 one to bf16 rounding."""
    asked = []

    def backend(*args, **kwargs):
        asked.append(args[-1] if len(args) > 6 else kwargs.get("training", False))
        return "aten"

    monkeypatch.setattr(onlstm_kernel, "recurrence_backend", backend)
    loops, flops = onlstm_kernel.precision_runs(3, 8, 4, extension, training=True)()
    assert asked == [True, True]
    assert flops == 3 * 2.0 * onlstm_kernel.PROBE_STEPS * 3 * 8 * (4 * 8 + 2 * 2)
    calls = []
    real = onlstm_kernel.ONLSTMRecurrence.apply
    monkeypatch.setattr(
        onlstm_kernel.ONLSTMRecurrence,
        "apply",
        lambda *args: calls.append(args[-1]) or real(*args),
    )
    loops["float32"](), loops["bfloat16"]()
    assert calls == [None, torch.bfloat16]  # the autograd node, with each product dtype


def test_a_probe_runs_fewer_steps_only_where_a_step_is_large() -> None:
    """probe_steps: the full 32 steps while 32 steps stay under 5e8 FLOPs; above that as many as
    make 5e8, at least 4 (the paper's 1150 at batch 20 would run 21 GFLOP a training probe)."""
    assert onlstm_kernel.probe_steps(3, 8, 18) == onlstm_kernel.PROBE_STEPS == 32  # 864 a step
    # 2 * 20 * 400 * 1640 = 26.24 MFLOP a step: 5e8 / 26.24e6 = 19.05 -> 19 steps
    assert onlstm_kernel.probe_steps(20, 400, 1640) == 19
    # the paper's middle layer: 2 * 20 * 1150 * 4830 = 222.2 MFLOP a step -> 2, raised to 4
    assert onlstm_kernel.probe_steps(20, 1150, 4830) == onlstm_kernel.MIN_PROBE_STEPS == 4


def test_a_precision_probe_times_at_least_16_steps(extension) -> None:
    """precision_probe_steps: probe_steps, but at least 16 steps: the loop converts its weights to
    bf16 and transposes them once a call, which over probe_steps' 4 steps at the paper's middle
    layer hid what bf16 saves a step (an AMD Zen 4: bf16 0.69x fp32 over 4 steps, 1.27x over 16,
    1.52x over a BPTT segment of 70). The recurrence's precision probe times as many."""
    assert onlstm_kernel.precision_probe_steps(3, 8, 18) == 32
    assert onlstm_kernel.precision_probe_steps(20, 400, 1640) == 19
    assert onlstm_kernel.precision_probe_steps(20, 1150, 4830) == 16
    assert onlstm_kernel.PRECISION_PROBE_STEPS == 16
    batch, hidden, chunk = 20, 1150, 10  # 4830 gates
    _, flops = onlstm_kernel.precision_runs(batch, hidden, chunk, extension, training=True)()
    assert flops == 3 * 2.0 * 16 * batch * hidden * 4830


@pytest.mark.parametrize("training", [True, False])
def test_the_probe_loops_run_inside_a_bf16_autocast_forward(extension, monkeypatch, training):
    """A probe may be asked inside a bf16-mixed forward (the placement's, on a machine with no kept
    choice): its loops are timed with autocast off, as the layer runs them. With autocast on, the
    training loop's backward products came out bf16 and the compiled step refused its fp32 state
    ("state must be a CPU tensor of dtype Float"), crashing a first bf16-mixed run."""
    monkeypatch.setenv(gemm.ENV_VAR, "aten")  # no backend probe: the loop itself is under test
    loops, flops = onlstm_kernel._own_loops(3, 8, 4, torch.device("cpu"), training)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        seconds = gemm.time_in_turns(loops, flops)
    assert sorted(seconds) == sorted(loops)
