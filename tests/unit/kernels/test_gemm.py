"""The GEMM backend of the recurrences (treernn.kernels.gemm): every backend computes the same
products, the choice is probed once per shape and logged, can be forced, and falls back to aten
where a packed GEMM cannot run (float64, other devices)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from treernn import cpu_load
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.errors import ConfigValueError
from treernn.kernels import gemm

CPU = torch.device("cpu")
PACKED = [
    name for name in ("mkl", "onednn", "treernn") if name in gemm.candidates(CPU, torch.float32)
]


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gemm.ENV_VAR, raising=False)


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn", "treernn"])
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


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn", "treernn"])
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
    # float64 is F.linear itself, whichever library backend is asked for (treernn runs it)
    x64, weight64 = x.detach().double(), weight.detach().double()
    if backend == "treernn":
        torch.testing.assert_close(
            gemm.linear(x64, weight64, None, backend), x64 @ weight64.t(), rtol=1e-12, atol=1e-12
        )
    else:
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
    with caplog.at_level(logging.INFO, logger="treernn.kernels.gemm"):
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


@pytest.mark.parametrize("backend", ["auto", "mkl", "onednn", "treernn", "aten"])
def test_onlstm_float64_fast_equals_reference_per_backend(backend: str) -> None:
    """float64, padded, DropConnect and locked dropout, carried state: the fast path with each
    backend forced (all but treernn run on aten in float64; treernn runs its portable C++
    products and the whole-sequence loops) equals the readable cell to 1e-10, gradients too."""
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
    monkeypatch.setattr(gemm, "machine_busy", lambda since: None)
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


# ----------------------------------------------------------------------------- precision
@pytest.fixture()
def fresh_choices(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """An empty cache file and empty in-process choices, decisions and log memory."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    for name in ("_CHOICES", "DECISIONS", "_PROBED"):
        monkeypatch.setattr(gemm, name, {})
    monkeypatch.setattr(gemm, "_SAID_FP32", set())
    monkeypatch.setattr(gemm, "machine_busy", lambda since: None)  # the test machine's load aside
    return tmp_path / "gemm_backends.json"


def _injected_timings(monkeypatch: pytest.MonkeyPatch, seconds: dict[str, float]) -> list:
    """Make the precision probe see ``seconds`` per product instead of timing anything."""
    calls = []

    def timings(products, flops, device=None, give_up=None):
        if set(products) == set(seconds):  # the backend probes see every backend alike
            calls.append(sorted(products))
        return {name: seconds.get(name, 1.0) for name in products}

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    return calls


@pytest.mark.parametrize(
    ("bf16_seconds", "expected"),
    [(0.5, torch.bfloat16), (0.89, torch.bfloat16), (0.95, None), (1.0, None), (60.0, None)],
)
def test_bf16_only_where_the_probe_finds_it_at_least_10_percent_faster(
    bf16_seconds: float, expected, fresh_choices, monkeypatch, caplog
) -> None:
    """Injected probe results, no timing: bf16 products where they take under 0.9x the fp32
    time (casts included), fp32 otherwise (within noise of fp32, or much slower), kept in the
    file and recorded per model and product."""
    calls = _injected_timings(monkeypatch, {"float32": 1.0, "bfloat16": bf16_seconds})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chosen = gemm.product_dtype(20, 1150, 4830, CPU, "ON-LSTM", "recurrent steps")
    assert chosen == expected
    assert calls == [["bfloat16", "float32"]]
    stored = json.loads(fresh_choices.read_text())
    (key,) = [key for key in stored if "bf16-mixed" in key]
    assert "20x1150x4830 bf16-mixed" in key and "family" in key
    name = "bfloat16" if expected else "float32"
    assert stored[key] == name
    shape = "(20 x 1150) @ (1150 x 4830)"
    assert {("ON-LSTM", "recurrent steps", shape): name} == gemm.DECISIONS


def test_one_log_line_per_model_that_keeps_fp32(fresh_choices, monkeypatch, caplog) -> None:
    """Slow bf16: one warning per model, naming it, the product, the shape and the probe's
    figures; a model whose products pay says nothing."""
    _injected_timings(monkeypatch, {"float32": 1.0, "bfloat16": 1.85})
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger=gemm.__name__), bf16:
        for _ in range(3):
            assert gemm.product_dtype(8, 16, 64, CPU, "ON-LSTM", "steps") is None
            assert gemm.product_dtype(16, 16, 64, CPU, "ON-LSTM", "projection") is None
        assert gemm.product_dtype(8, 16, 64, CPU, "Ordered Memory") is None
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    # the product it is about: a model's other products may run in bf16
    assert messages[0].startswith("ON-LSTM under bf16-mixed: its product 'steps' stays fp32")
    assert "(8 x 16) @ (16 x 64)" in messages[0]
    assert "GFLOP/s" in messages[0] and "each of its products is decided" in messages[0]
    assert messages[1].startswith("Ordered Memory under bf16-mixed")


def test_no_bf16_without_bf16_autocast(fresh_choices, monkeypatch) -> None:
    """No autocast, or fp16 autocast (16-mixed): fp32 products, and no probe runs."""
    monkeypatch.setattr(gemm, "bf16_pays", lambda *args: pytest.fail("probed"))
    assert gemm.product_dtype(8, 16, 64, CPU, "ON-LSTM") is None
    with torch.autocast("cpu", dtype=torch.float16):
        assert gemm.product_dtype(8, 16, 64, CPU, "ON-LSTM") is None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert gemm.product_dtype(8, 16, 64, CPU, "ON-LSTM") is None
    assert gemm.DECISIONS == {}


def test_the_precision_choice_is_kept_per_machine(fresh_choices, monkeypatch) -> None:
    """A later process (empty in-process choices) reads the kept choice instead of probing; a
    file written on another CPU (another key) is not used."""
    _injected_timings(monkeypatch, {"float32": 1.0, "bfloat16": 0.5})
    assert gemm.bf16_pays(20, 400, 1640, CPU)
    monkeypatch.setattr(gemm, "_CHOICES", {})
    monkeypatch.setattr(gemm, "_probe_precision", lambda *args: pytest.fail("probed again"))
    assert gemm.bf16_pays(20, 400, 1640, CPU)
    stored = json.loads(fresh_choices.read_text())
    monkeypatch.setattr(gemm, "_CHOICES", {})
    elsewhere = {key.replace("family", "another family"): value for key, value in stored.items()}
    fresh_choices.write_text(json.dumps(elsewhere))
    monkeypatch.setattr(gemm, "_probe_precision", lambda *args: "float32")
    assert not gemm.bf16_pays(20, 400, 1640, CPU)


def test_the_probe_measures_bf16_with_its_casts(fresh_choices, monkeypatch) -> None:
    """The products timed are the recurrences' own: fp32 operands in, fp32 out, the bf16 one
    through PackedLinear's casts (checked by calling what the probe would time)."""
    timed = {}

    def timings(products, flops, device=None, give_up=None):
        timed.update({name: product() for name, product in products.items()})
        return {"float32": 1.0, "bfloat16": 2.0}

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    assert not gemm.bf16_pays(3, 5, 7, CPU)
    assert timed["float32"].dtype == timed["bfloat16"].dtype == torch.float32
    torch.testing.assert_close(timed["bfloat16"], timed["float32"], rtol=2e-2, atol=5e-2)
    assert not torch.equal(timed["bfloat16"], timed["float32"])


def test_other_devices_never_run_bf16_products() -> None:
    assert not gemm.bf16_pays(3, 5, 7, torch.device("meta"))


def test_cpu_name_tells_cpus_with_one_model_name_apart() -> None:
    """Two virtual CPUs both called "AMD EPYC" (a Zen 3 and a Zen 4) get different keys."""
    zen3 = "model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: avx2 fma\n"
    zen4 = zen3.replace("model\t\t: 1", "model\t\t: 17").replace("fma", "fma avx512_bf16")
    names = {gemm.cpu_name(text) for text in (zen3, zen4, zen4.replace("17", "1"))}
    assert len(names) == 3 and all(name.startswith("AMD EPYC (family 25 model") for name in names)
    # the flags' order does not matter
    assert gemm.cpu_name(zen4) == gemm.cpu_name(zen4.replace("avx2 fma", "fma avx2"))


# ----------------------------------------------------------------------------- weight gradients
@pytest.mark.parametrize("backend", ["aten", "onednn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_gradient_is_grad_transposed_times_inputs(backend: str, dtype) -> None:
    if backend != "aten" and backend not in PACKED:
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    torch.manual_seed(0)
    grad, inputs = torch.randn(37, 11, dtype=dtype), torch.randn(37, 5, dtype=dtype)
    expected = grad.double().t() @ inputs.double()
    result = gemm.weight_gradient(grad, inputs, backend)
    assert result.shape == (11, 5) and result.dtype == dtype and result.is_contiguous()
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(result.double(), expected, rtol=tolerance, atol=tolerance)
    # bf16 products: within bf16 rounding, fp32 out
    low = gemm.weight_gradient(grad.float(), inputs.float(), backend, torch.bfloat16)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low.double(), expected, rtol=3e-2, atol=5e-2)


def test_weight_gradient_backend_is_probed_once_per_shape(fresh_choices, monkeypatch) -> None:
    usable = [name for name in gemm.candidates(CPU, torch.float32) if name != "mkl"]
    if len(usable) == 1:
        pytest.skip("only aten here")
    calls = []
    monkeypatch.setattr(
        gemm, "_probe_weight_gradient", lambda *args: calls.append(args) or "onednn"
    )
    for rows in (1100, 1400, 2000):  # one octave of rows: one probe
        assert gemm.resolve_weight_gradient("auto", rows, 48, 12, CPU, torch.float32) == "onednn"
    assert len(calls) == 1 and calls[0][1:4] == (1024, 48, 12)
    # mkl and treernn have no weight-gradient product: chosen as for auto
    assert gemm.resolve_weight_gradient("mkl", 1400, 48, 12, CPU, torch.float32) == "onednn"
    assert gemm.resolve_weight_gradient("aten", 1400, 48, 12, CPU, torch.float32) == "aten"
    assert gemm.resolve_weight_gradient("auto", 14, 48, 12, CPU, torch.float64) == "aten"


@pytest.mark.parametrize("backend", ["auto", "aten"])
def test_large_linear_in_bf16_stays_close_with_gradients(backend: str) -> None:
    """gemm.linear with dtype=bf16 (the input projection under bf16-mixed where bf16 pays):
    fp32 results and gradients within bf16 rounding of F.linear's, and not equal to them."""
    torch.manual_seed(0)
    x = torch.randn(6, 9, 33).transpose(0, 1).requires_grad_()
    weight = torch.randn(40, 33, requires_grad=True)
    bias = torch.randn(40, requires_grad=True)
    expected = torch.nn.functional.linear(x, weight, bias)
    grad = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (x, weight, bias), grad)
    out = gemm.linear(x, weight, bias, backend, torch.bfloat16)
    assert out.dtype == torch.float32 and not torch.equal(out, expected)
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=1e-1)
    for got, want in zip(torch.autograd.grad(out, (x, weight, bias), grad), expected_grads):
        assert got.dtype == torch.float32
        assert (got - want).norm() / want.norm() < 1e-2


# ----------------------------------------------------------------------------- treernn kernels
ISAS = {"portable C++": 1, "AVX2 + FMA": 2, "AVX-512": 3}


def _kernels_with(isa: str):
    """The packed_gemm extension, the test skipped where this CPU lacks ``isa``."""
    kernels = gemm.packed_kernels()
    if kernels is None:
        pytest.fail("the packed_gemm extension did not build")
    if ISAS[isa] > kernels.isa():
        pytest.skip(f"this CPU has no {isa}")
    return kernels


@pytest.mark.parametrize("isa", list(ISAS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_copy_of_the_treernn_products_equals_matmul(isa: str, dtype) -> None:
    """Each instruction-set copy of the micro-kernels (forced; those this CPU lacks skipped) at
    shapes with partial tiles and a partial last panel: added + x @ W^T, written in place or
    into ``out``, from a contiguous or a transposed weight (the backward pass packs W.T). The
    AVX-512 copy runs four panels at a time while four are left (1-6 rows a tile), then two:
    the last six shapes take 1-3 such tiles of every row count, with 0-3 panels left over."""
    kernels = _kernels_with(isa)
    generator = torch.Generator().manual_seed(0)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    shapes = [(1, 1, 1), (3, 5, 7), (13, 17, 33), (20, 40, 97), (37, 8, 64)]
    shapes += [(1, 5, 64), (2, 11, 130), (3, 6, 80), (4, 7, 70), (6, 9, 64), (17, 20, 200)]
    for rows, depth, outputs in shapes:
        weight = torch.randn(outputs, depth, generator=generator, dtype=dtype)
        x = torch.randn(rows, depth, generator=generator, dtype=dtype)
        added = torch.randn(rows, outputs, generator=generator, dtype=dtype)
        expected = added + x @ weight.t()
        for matrix in (weight, weight.t().contiguous().t()):
            packed = kernels.pack(matrix, False)
            result = kernels.linear(x, packed, outputs, added, None, ISAS[isa])
            torch.testing.assert_close(result, expected, rtol=tolerance, atol=tolerance)
        out = added.clone()
        kernels.linear(x, packed, outputs, out, out, ISAS[isa])  # in place
        torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
        torch.testing.assert_close(
            kernels.linear(x, packed, outputs, None, None, ISAS[isa]),
            x @ weight.t(),
            rtol=tolerance,
            atol=tolerance,
        )


def _panel_layout(weight: torch.Tensor) -> torch.Tensor:
    """The packed layout worked out in torch: panel p, k, lane i holds W[16 p + i, k], the
    last panel's missing outputs zero."""
    outputs, depth = weight.shape
    padded = torch.zeros(-(-outputs // 16) * 16, depth, dtype=weight.dtype)
    padded[:outputs] = weight
    return padded.view(-1, 16, depth).transpose(1, 2).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_packing_writes_the_panel_layout(dtype: torch.dtype) -> None:
    """``pack`` and ``pack_projected`` put W[16 p + i, k] at panel p, row k, lane i, to the bit,
    from a contiguous weight (full float32 panels are transposed in registers, 8 x 8 blocks on
    AVX2, 16 x 16 on AVX-512, the last depth % 8 or % 16 columns one by one) and from a
    transposed one (read along its outputs). Depths below one block, at and between blocks;
    37 and 48 outputs (a partial last panel, full panels only)."""
    from treernn.kernels.onlstm import fused_kernel

    kernels = _kernels_with("portable C++")
    step_kernel = fused_kernel(torch.ones(1, dtype=dtype))
    generator = torch.Generator().manual_seed(2)
    for outputs in (37, 48):
        for depth in (3, 8, 13, 16, 29, 64):
            weight = torch.randn(outputs, depth, generator=generator, dtype=dtype)
            for matrix in (weight, weight.t().contiguous().t()):
                assert torch.equal(kernels.pack(matrix, False), _panel_layout(weight))
            recurrent = torch.randn(outputs, depth + 3, generator=generator, dtype=dtype)
            both = torch.cat((weight, recurrent * 0.5), dim=1)
            projected = step_kernel.pack_projected(weight, recurrent, 0.5)
            assert torch.equal(projected, _panel_layout(both))


@pytest.mark.parametrize("isa", list(ISAS))
def test_deep_step_products_give_the_bits_of_one_pass(isa: str) -> None:
    """A step's product with a deep weight (more than 512 k, at most 64 rows) runs in blocks of
    128 k on the AVX2 copy, its sums carried between blocks in float32: the same bits as the
    same rows inside a product of 80 rows (one pass over k per tile), and close to float64's
    sums. Depth 1030 and 61 outputs: a last block of 6 k and a partial last panel."""
    kernels = _kernels_with(isa)
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(61, 1030, generator=generator)
    many = torch.randn(80, 1030, generator=generator)
    added = torch.randn(80, 61, generator=generator)
    packed = kernels.pack(weight, False)
    whole = kernels.linear(many, packed, 61, added, None, ISAS[isa])
    for rows in (1, 5, 20, 64):
        step = kernels.linear(
            many[:rows].contiguous(), packed, 61, added[:rows].contiguous(), None, ISAS[isa]
        )
        assert torch.equal(step, whole[:rows])
        exact = added[:rows].double() + many[:rows].double() @ weight.double().t()
        torch.testing.assert_close(step.double(), exact, rtol=0, atol=1e-3)


@pytest.mark.parametrize("copy", ["AMX", "AVX512-BF16"])
def test_treernn_bf16_products_are_float32_sums_of_bf16_operands(copy: str) -> None:
    """Both copies of the bf16 products (AMX's tiles, where the CPU has them, and AVX512-BF16's
    pairs): the products of the operands rounded to bf16, summed in float32. The shapes give AMX
    partial row blocks (1-15 rows, 17-31, beyond 32), depths below, at and beyond its 32-wide
    blocks with a remainder (and an odd K: a padded pair), an odd number of panels and a partial
    last one, with and without the added term."""
    kernels = gemm.packed_kernels()
    if kernels is None or not kernels.bf16_pairs():
        pytest.skip("no AVX512-BF16 on this CPU")
    if copy == "AMX" and not kernels.amx():
        pytest.skip("no AMX tiles on this CPU")
    shapes = [(1, 1, 1), (3, 5, 7), (20, 41, 97), (16, 64, 48), (37, 97, 40), (70, 200, 33)]
    generator = torch.Generator().manual_seed(1)
    before = kernels.set_amx(copy == "AMX")
    try:
        for rows, depth, outputs in shapes:
            weight = torch.randn(outputs, depth, generator=generator)
            x = torch.randn(rows, depth, generator=generator)
            added = torch.randn(rows, outputs, generator=generator)
            rounded = x.bfloat16().double() @ weight.bfloat16().double().t()
            result = kernels.linear(x, kernels.pack(weight, True), outputs, added)
            assert result.dtype == torch.float32
            expected = added.double() + rounded
            torch.testing.assert_close(result.double(), expected, rtol=1e-5, atol=1e-5)
            linear = gemm.PackedLinear(weight, rows, "treernn", torch.bfloat16)
            torch.testing.assert_close(linear.mm(x).double(), rounded, rtol=1e-5, atol=1e-5)
            unrounded = x.double() @ weight.double().t()  # bf16 ran: far from the exact products
            assert (result.double() - added.double() - unrounded).abs().max() > 1e-4
    finally:
        kernels.set_amx(before)


def test_a_probe_under_load_is_kept_and_noted(fresh_choices, monkeypatch) -> None:
    """More runnable processes than CPUs during a probe: the choice is kept all the same (a
    process that probed again could choose otherwise, and a resumed run would not end where it
    would have ended uninterrupted), noted as taken under load; the next process reads it."""
    monkeypatch.setattr(gemm, "machine_busy", lambda since: "load average 5.3 on 2 CPUs")
    _injected_timings(monkeypatch, {"float32": 1.0, "bfloat16": 0.5})
    assert gemm.bf16_pays(20, 400, 1640, CPU)
    stored = json.loads(fresh_choices.read_text())
    (name,) = [name for name in stored if "bf16-mixed" in name]
    assert stored[name] == "bfloat16"
    assert stored["taken under load"][name] == "load average 5.3 on 2 CPUs"
    monkeypatch.setattr(gemm, "_CHOICES", {})
    monkeypatch.setattr(gemm, "_probe_precision", lambda *args: pytest.fail("probed again"))
    assert gemm.bf16_pays(20, 400, 1640, CPU)


def test_machine_busy_reads_the_load_average_where_cpu_time_is_unknown(monkeypatch) -> None:
    monkeypatch.setattr(gemm.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(gemm.os, "getloadavg", lambda: (2.4, 1.0, 1.0))
    assert gemm.machine_busy(None) is None
    monkeypatch.setattr(gemm.os, "getloadavg", lambda: (2.6, 1.0, 1.0))
    assert gemm.machine_busy(None) == "load average 2.6 on 2 CPUs during the probe"


def test_machine_busy_counts_the_cpus_other_processes_kept_busy(monkeypatch) -> None:
    """2 CPUs, a probe of 2 threads: over 2 s the machine used 3.4 CPU-seconds and the probe's
    process 2.0, so the others kept 0.7 CPUs busy, leaving 1.3 < 2 - 0.5 free: busy. With the
    others at 0.4 CPUs (2.8 - 2.0 over 2 s), 1.6 are free: not busy. The load average (2.0 in
    both, as two one-thread jobs or the probe alone would give) is not read."""
    monkeypatch.setattr(gemm.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(gemm.torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(gemm.os, "getloadavg", lambda: pytest.fail("the load average was read"))
    start = cpu_load.CpuSample(machine=100.0, own=10.0, wall=50.0)
    for used, expected in (
        (3.4, "other processes kept 0.7 of 2 CPUs busy during the probe, which ran 2 threads"),
        (2.8, None),
    ):
        now = cpu_load.CpuSample(machine=100.0 + used, own=12.0, wall=52.0)
        monkeypatch.setattr(cpu_load, "cpu_sample", lambda now=now: now)
        assert gemm.machine_busy(start) == expected


def test_a_model_can_have_its_own_loop_timed(fresh_choices, monkeypatch) -> None:
    """With ``runs``, the probe times the model's own fp32 and bf16 runs (here counting calls),
    under its own key; a model without a bf16 run here keeps fp32 without timing one."""
    calls = []
    runs = {"float32": lambda: calls.append("fp32"), "bfloat16": lambda: calls.append("bf16")}

    def timings(products, flops, device=None, give_up=None):
        assert flops == 123.0
        for product in products.values():
            product()
        return {name: {"float32": 1.0, "bfloat16": 0.5}[name] for name in products}

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chosen = gemm.product_dtype(4, 5, 6, CPU, "Model", "loop", lambda: (runs, 123.0))
        assert chosen == torch.bfloat16 and calls == ["fp32", "bf16"]
        only_fp32 = {"float32": runs["float32"]}
        assert gemm.product_dtype(4, 5, 7, CPU, "Model", "loop", lambda: (only_fp32, 123.0)) is None
    stored = json.loads(fresh_choices.read_text())
    assert sorted(stored.values()) == ["bfloat16", "float32"]
    assert all("bf16-mixed Model loop" in key for key in stored)
    assert gemm._PROBED[gemm._precision_key(4, 5, 7, " Model loop")] == "no bf16 kernel"


def test_a_precision_probe_out_of_time_says_so(fresh_choices, monkeypatch) -> None:
    """A probe whose time ran out before its bf16 run (`time_in_turns` leaves it out) keeps fp32
    for the run and says why: not "no bf16 kernel", which the log line once said of it."""

    def timings(products, flops, device=None, give_up=None):
        return {"float32": 1.0}

    monkeypatch.setattr(gemm, "time_in_turns", timings)
    runs = {"float32": lambda: None, "bfloat16": lambda: None}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gemm.product_dtype(4, 5, 8, CPU, "Model", "loop", lambda: (runs, 1.0)) is None
    said = gemm._PROBED[gemm._precision_key(4, 5, 8, " Model loop")]
    assert said == "the probe ran out of time before its bf16 run"


def test_products_are_timed_with_autocast_off() -> None:
    """A probe asked inside a bf16-mixed forward times an fp32 candidate in fp32: under autocast
    aten's mm ran in bf16, and on an Intel Xeon with AMX that kept aten as the fastest fp32
    backend and fp32 products that bf16 beat 3-5 times. A run that asks for bf16 gets it."""
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    seen = {"float32": set(), "bfloat16": set()}
    products = {
        "float32": lambda: seen["float32"].add(torch.mm(a, b).dtype),
        "bfloat16": lambda: seen["bfloat16"].add(torch.mm(a.bfloat16(), b.bfloat16()).dtype),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gemm.time_in_turns(products, 1e9)
        assert torch.mm(a, b).dtype == torch.bfloat16  # autocast is on around the probe
    assert seen == {"float32": {torch.float32}, "bfloat16": {torch.bfloat16}}


# ----------------------------------------------------------------------------- rounded rows
def test_rows_are_rounded_under_bf16_autocast_on_the_cpu_only():
    """16 rows at a time up to 255, then 1/8 of the octave (32 from 256, 256 from 2,048); 1 (no
    rounding) in fp32 and under fp16 autocast, whose products do not go to oneDNN's bf16."""
    cpu = torch.device("cpu")
    rows = (1, 37, 255, 256, 300, 3000)
    assert [gemm.rounding(r, cpu) for r in rows] == [1] * 6
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert [gemm.rounding(r, cpu) for r in rows] == [16, 16, 16, 32, 32, 256]
    with torch.autocast("cpu", dtype=torch.float16):
        assert gemm.rounding(37, cpu) == 1


def test_rounded_rows_linear_runs_padded_rows_and_gives_f_linear_numbers(monkeypatch):
    """Under bf16 autocast the product runs on 35 rows padded to 48 and gives what F.linear gives
    on the 35 (forward and the three gradients); in fp32 it is F.linear on the rows as they are."""
    linear, shapes = torch.nn.functional.linear, []

    def recording(x, weight, bias=None):
        shapes.append(tuple(x.shape))
        return linear(x, weight, bias)

    torch.manual_seed(0)
    x, weight, bias = torch.randn(5, 7, 6), torch.randn(4, 6), torch.randn(4)
    for bf16, expected_shape in ((False, (5, 7, 6)), (True, (48, 6))):
        runs = []
        for rounded in (False, True):
            inputs = [t.clone().requires_grad_(True) for t in (x, weight, bias)]
            shapes.clear()
            monkeypatch.setattr(torch.nn.functional, "linear", recording if rounded else linear)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = gemm.rounded_rows_linear(*inputs) if rounded else linear(*inputs)
            out.float().square().sum().backward()
            runs.append((out, [t.grad for t in inputs]))
            if rounded:
                assert shapes == [expected_shape]
        (plain, plain_grads), (padded, padded_grads) = runs
        assert padded.shape == plain.shape == (5, 7, 4) and padded.dtype == plain.dtype
        torch.testing.assert_close(padded, plain, atol=0, rtol=0)
        for got, want in zip(padded_grads, plain_grads, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
