"""The ON-LSTM forward loop with the input projection inside it (``fast_projected_recurrence``,
the path of ``ONLSTMEncoder(impl="fast")`` on the ``treernn`` backend, in inference and as the
autograd node ONLSTMProjectedRecurrence in training): one product per step over [x_t | h_t]
gives what the projection over all steps followed by the recurrence gives, results and
gradients, in float64 to rounding and in float32 for every instruction-set copy of the products,
with batch-first (strided) inputs, padded steps, the eval DropConnect scale, and the kernel's
batch-first outputs and distances."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from tests.fixtures.compiled import compiled_extension
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.errors import ConfigValueError
from treernn.kernels import gemm, onlstm_layers
from treernn.kernels import onlstm_projected as onlstm_kernel
from treernn.kernels.onlstm import _fast_forward, fast_recurrence, probe_steps
from treernn.kernels.onlstm_projected import fast_projected_recurrence

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
RESULTS = ("outputs", "h", "c", "forget", "input")
GRADIENTS = ("inputs", "input weight", "bias", "recurrent weight", "h0", "c0")


@pytest.fixture
def extension(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The compiled kernel; it must build wherever the tests run (a failed build is a bug)."""
    return compiled_extension("onlstm_step", monkeypatch)


def _problem(dtype: torch.dtype, masked: bool, seed: int = 3, sizes=(14, 9, 20)):
    """Batch-first inputs seen time-major (a strided view, as the encoder passes them), the two
    weights, the summed bias, a carried state and an optional step mask; sizes (B, D, H)."""
    generator = torch.Generator().manual_seed(seed)
    (batch, depth, hidden), steps, chunk = sizes, 7, 4
    num_gates = 4 * hidden + 2 * (hidden // chunk)

    def normal(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator) * scale).to(dtype)

    inputs = normal(batch, steps, depth).transpose(0, 1)  # (T, B, D), rows T * D apart
    input_weight, recurrent_weight = (
        normal(num_gates, depth, scale=0.4),
        normal(num_gates, hidden, scale=0.3),
    )
    bias = normal(num_gates)
    h0, c0 = normal(batch, hidden), normal(batch, hidden)
    step_mask = (torch.rand(steps, batch, generator=generator) < 0.7) if masked else None
    return inputs, input_weight, bias, recurrent_weight, h0, c0, step_mask, chunk


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.55])
def test_projected_path_equals_projection_then_recurrence_float64(
    masked: bool, scale: float, extension, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(torch.float64, masked)
    taken = _spy_on_inference(extension, monkeypatch)
    with torch.no_grad():
        result = fast_projected_recurrence(
            inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk, "treernn", recurrent_scale=scale
        )
        expected = fast_recurrence(
            F.linear(inputs, w_ih, bias), w_hh * scale, h0, c0, step_mask, chunk, "aten"
        )
    assert len(taken) == 1, "the projected loop did not run"
    assert result[0].transpose(0, 1).is_contiguous()  # written batch-first by the kernel
    for name, value, wanted in zip(("outputs", "h", "c", "forget", "input"), result, expected):
        torch.testing.assert_close(value, wanted, rtol=1e-12, atol=1e-12, msg=name)
    if masked:  # padded steps: zero outputs and distances
        assert not result[0][~step_mask].any() and not result[3][~step_mask].any()


def _spy_on_inference(extension: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows at each call of the kernel's one-call inference entry by whether the
    call ran bf16 products (False = 0 where a test counts the calls)."""
    taken: list[int] = []
    original = extension.infer_projected

    def spy(*args, **kwargs):
        taken.append(kwargs.get("bf16", False))
        return original(*args, **kwargs)

    monkeypatch.setattr(extension, "infer_projected", spy)
    return taken


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("own_rows", [False, True])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_one_call_inference_equals_the_loop_on_full_buffers(
    dtype, masked, own_rows, steps, extension
) -> None:
    """``infer_projected`` (biases added, weights packed, zero or given states, the states kept
    as a ring of two) gives bit for bit what the loop on caller-made full buffers gives
    (``_projected_forward``, the training node's forward), at odd and even step counts (the
    last state's slot), with and without padded steps, in both thread splits."""
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(dtype, masked)
    inputs = inputs[:steps]
    step_mask = None if step_mask is None else step_mask[:steps].contiguous()
    recurrent_bias = torch.linspace(-1, 1, bias.numel(), dtype=dtype)
    packed = onlstm_kernel._pack(extension, w_ih, w_hh, 0.55)
    for start in ((h0, c0), (None, None)):
        wanted_start = start if start[0] is not None else (torch.zeros_like(h0),) * 2
        expected = onlstm_kernel._projected_forward(
            extension, inputs, packed, bias + recurrent_bias, *wanted_start, step_mask, chunk,
            own_rows,
        )[:4]  # fmt: skip
        outputs, h, c, distances = extension.infer_projected(
            inputs, w_ih, w_hh, 0.55, bias, recurrent_bias, *start, step_mask, chunk, own_rows
        )
        assert outputs.shape == (inputs.size(1), steps, h0.size(1)) and outputs.is_contiguous()
        for name, value, wanted in zip(
            ("outputs", "h", "c", "distances"), (outputs.transpose(0, 1), h, c, distances), expected
        ):
            assert torch.equal(value, wanted), name


def test_one_call_inference_says_what_is_wrong(extension) -> None:
    """Weights of the wrong shape or dtype, and a state of the wrong shape, are one error each
    naming the expected sizes, not a read past the end of a buffer."""
    inputs, w_ih, bias, w_hh, h0, c0, _, chunk = _problem(torch.float64, False)
    with pytest.raises(RuntimeError, match=r"weights \(G, D\) = \(90, 9\)"):
        extension.infer_projected(inputs, w_ih[:, :-1], w_hh, 1.0, bias, None, h0, c0, None, chunk)
    with pytest.raises(RuntimeError, match="of the inputs' dtype"):
        extension.infer_projected(inputs, w_ih.float(), w_hh, 1.0, bias, None, h0, c0, None, chunk)
    with pytest.raises(RuntimeError, match=r"h0 must be \(B, H\) = \(14, 20\)"):
        extension.infer_projected(inputs, w_ih, w_hh, 1.0, bias, None, h0[1:], c0, None, chunk)


def _loss(result: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A loss touching every result: outputs, last state, both distances."""
    outputs, h, c, forget, input_distance = result
    weights = torch.linspace(-1, 1, outputs.size(-1), dtype=outputs.dtype)
    return (
        (outputs * weights).sum() + (h * 0.3).sum() + (c * c).sum() + (forget * 0.7).sum()
        - (input_distance**2).sum()
    )  # fmt: skip


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.55])
def test_projected_training_path_gradients_float64(masked: bool, scale: float, extension) -> None:
    """With gradients to compute, the projected loop runs as one autograd node
    (ONLSTMProjectedRecurrence): results and the gradients of the inputs, both weights, the bias
    and the carried state equal those of the projection followed by the recurrence (float64,
    to rounding), the eval scale included."""
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(torch.float64, masked)
    leaves = [inputs, w_ih, bias, w_hh, h0, c0]
    for leaf in leaves:
        leaf.requires_grad_(True)
    result = fast_projected_recurrence(
        inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk, "treernn", recurrent_scale=scale
    )
    assert type(result[0].grad_fn).__name__ == "ONLSTMProjectedRecurrenceBackward"
    expected = fast_recurrence(
        F.linear(inputs, w_ih, bias), w_hh * scale, h0, c0, step_mask, chunk, "aten"
    )
    for name, value, wanted in zip(("outputs", "h", "c", "forget", "input"), result, expected):
        torch.testing.assert_close(value, wanted, rtol=1e-12, atol=1e-12, msg=name)
    grads = torch.autograd.grad(_loss(result), leaves)
    wanted_grads = torch.autograd.grad(_loss(expected), leaves)
    names = ("inputs", "input weight", "bias", "recurrent weight", "h0", "c0")
    for name, grad, wanted in zip(names, grads, wanted_grads):
        torch.testing.assert_close(grad, wanted, rtol=1e-11, atol=1e-11, msg=name)


def test_projected_training_path_gradcheck(extension) -> None:
    """Finite differences agree with the projected node's backward (float64, padded steps)."""
    generator = torch.Generator().manual_seed(1)
    steps, batch, depth, hidden, chunk = 3, 2, 3, 4, 2
    num_gates = 4 * hidden + 2 * (hidden // chunk)

    def leaf(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_(True)

    leaves = (leaf(batch, steps, depth), leaf(num_gates, depth), leaf(num_gates),
              leaf(num_gates, hidden), leaf(batch, hidden), leaf(batch, hidden))  # fmt: skip
    step_mask = torch.tensor([[True, True], [True, False], [False, False]])

    def run(x, w_ih, bias, w_hh, h0, c0):
        return fast_projected_recurrence(
            x.transpose(0, 1), w_ih, bias, w_hh, h0, c0, step_mask, chunk, "treernn",
            recurrent_scale=0.7,
        )  # fmt: skip

    assert torch.autograd.gradcheck(run, leaves)


@pytest.mark.parametrize("isa", [1, 2, 3])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("own_rows", [False, True])
def test_projected_loop_per_instruction_set(
    isa: int, masked: bool, own_rows: bool, extension
) -> None:
    """forward_sequence_projected with each copy of the products forced (portable C++, AVX2,
    AVX-512; those this CPU lacks skipped), the threads sharing each step or each running its own
    batch rows, against the projection and the torch-ops steps: every buffer the loop fills (the
    saving ones included) to float32 rounding, with more rows than one register tile and a partial
    last panel."""
    if isa > gemm.packed_kernels().isa():
        pytest.skip("this CPU lacks that instruction set")
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(torch.float32, masked)
    steps, batch, _ = inputs.shape
    hidden = w_hh.size(1)
    gates = F.linear(inputs, w_ih, bias)
    outputs, _, _, distances, saved = _fast_forward(
        gates, w_hh, h0, c0, step_mask, chunk, True, "aten", None
    )
    hs, cs = torch.empty(2, steps + 1, batch, hidden)
    hs[0], cs[0] = h0, c0
    buffers = dict(
        cumaxes=torch.empty(steps, batch, 2, hidden // chunk),
        activations=torch.empty_like(gates),
        tanh_cells=torch.empty(steps, batch, hidden),
    )
    masked_outputs = torch.empty(steps, batch, hidden) if masked else None
    batch_first, kernel_distances = torch.empty(batch, steps, hidden), torch.empty(steps, batch, 2)
    extension.forward_sequence_projected(
        inputs, bias, extension.pack_projected(w_ih, w_hh, 1.0), hs, cs, masked_outputs,
        buffers["cumaxes"], buffers["activations"], buffers["tanh_cells"], None, step_mask, chunk,
        batch_first, kernel_distances, own_rows, isa,
    )  # fmt: skip
    for name, value in buffers.items():
        torch.testing.assert_close(value, saved[name], **TOLERANCE, msg=name)
    torch.testing.assert_close(hs, saved["hs"], **TOLERANCE)
    torch.testing.assert_close(cs, saved["cs"], **TOLERANCE)
    torch.testing.assert_close(batch_first, outputs.transpose(0, 1), **TOLERANCE)
    torch.testing.assert_close(kernel_distances, distances, **TOLERANCE)


bf16_kernels = pytest.mark.skipif(
    not gemm.treernn_available(torch.bfloat16), reason="treernn's bf16 products need AVX512-BF16"
)


@pytest.mark.parametrize("depth, hidden", [(5, 5), (37, 52), (32, 16), (6, 5)])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, pytest.param(torch.bfloat16, marks=bf16_kernels)]
)
def test_pack_projected_is_the_packed_concatenation(depth, hidden, dtype, extension) -> None:
    """[W_ih | scale * W_hh] packed in one pass: exactly the packing of the concatenated weight
    (37 outputs: two full panels, packed in 16 x 16 blocks on AVX-512 in float32, and a partial
    one padded with zeros; depths below, above and at multiples of 16); bf16: float32 weights
    packed as bf16 pairs, the same words as packing the concatenation in bf16 (a pair across
    W_ih and W_hh where D is odd, a half-empty last pair where D + H is)."""
    generator = torch.Generator().manual_seed(0)
    bf16 = dtype == torch.bfloat16
    dtype = torch.float32 if bf16 else dtype
    w_ih = torch.randn(37, depth, generator=generator, dtype=dtype)
    w_hh = torch.randn(37, hidden, generator=generator, dtype=dtype)
    expected = gemm.packed_kernels().pack(torch.cat((w_ih, w_hh * 0.25), dim=1), bf16)
    assert torch.equal(extension.pack_projected(w_ih, w_hh, 0.25, bf16), expected)
    w_ih, w_hh = w_ih[:, :5], w_hh[:, :5]
    with pytest.raises(RuntimeError, match="two contiguous CPU weights"):
        extension.pack_projected(w_ih, w_hh.t(), 1.0)


def test_encoder_inference_on_the_projected_path_matches_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A two-layer encoder in eval (DropConnect as the scale 1 - p, padded batch) on the
    projected path: the reference cell's outputs, states and distances."""
    monkeypatch.setenv(gemm.ENV_VAR, "treernn")  # the backend the projected loop runs on
    monkeypatch.setenv(onlstm_kernel.ENV_VAR, "loop")  # not the probe's choice at this shape
    torch.manual_seed(4)
    kwargs = dict(input_size=6, hidden_size=12, num_layers=2, chunk_size=3, weight_drop=0.4)
    reference = ONLSTMEncoder(impl="reference", **kwargs).eval()
    fast = ONLSTMEncoder(impl="fast", **kwargs).eval()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(5, 8, 6)
    taken = _spy_on_inference(compiled_extension("onlstm_step", monkeypatch), monkeypatch)
    mask = torch.ones(5, 8, dtype=torch.bool)
    mask[2, 3:] = False
    with torch.inference_mode():
        expected, result = reference(x, mask), fast(x, mask)
    assert len(taken) == 2  # both layers
    torch.testing.assert_close(result.hidden, expected.hidden, **TOLERANCE)
    torch.testing.assert_close(result.tree_signal.values, expected.tree_signal.values, **TOLERANCE)
    for (h, c), (h_ref, c_ref) in zip(result.state, expected.state):
        torch.testing.assert_close(h, h_ref, **TOLERANCE)
        torch.testing.assert_close(c, c_ref, **TOLERANCE)


@pytest.mark.parametrize("placement", ["loop", "rows", "separate"])
def test_eval_inference_is_one_kernel_call_per_layer(placement, extension, monkeypatch) -> None:
    """In eval without autograd, an encoder whose layers all run the projection inside the loop
    calls ``infer_projected`` once per layer and nothing of the general path; its outputs,
    states and distances are bit for bit those of the general path (eval with autograd: the
    training node's forward), from zero and from given states, with padding. A layer placed
    ``separate`` sends the call down the general path."""
    monkeypatch.setenv(gemm.ENV_VAR, "treernn")
    monkeypatch.setenv(onlstm_kernel.ENV_VAR, placement)
    torch.manual_seed(5)
    encoder = ONLSTMEncoder(6, 12, num_layers=2, chunk_size=3, weight_drop=0.3).eval()
    x = torch.randn(4, 7, 6)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 4:] = False
    state = [(torch.randn(4, 12), torch.randn(4, 12)) for _ in range(2)]
    general = []
    original = onlstm_layers.fast_projected_recurrence
    monkeypatch.setattr(
        onlstm_layers,
        "fast_projected_recurrence",
        lambda *a, **k: general.append(1) or original(*a, **k),
    )
    for given in (None, state):
        expected = encoder(x, mask, given)  # autograd on: the general path
        taken = _spy_on_inference(extension, monkeypatch)
        general.clear()
        with torch.no_grad():
            result = encoder(x, mask, given)
        in_loop = placement != "separate"
        assert (len(taken), len(general)) == ((2, 0) if in_loop else (0, 2))
        for name in ("hidden", "pooled"):
            assert torch.equal(getattr(result, name), getattr(expected, name)), name
        assert torch.equal(result.tree_signal.values, expected.tree_signal.values)
        assert torch.equal(result.extras["input_distances"], expected.extras["input_distances"])
        for (h, c), (h_ref, c_ref) in zip(result.state, expected.state):
            assert torch.equal(h, h_ref) and torch.equal(c, c_ref)


def test_the_placement_follows_the_environment_then_the_probe(extension, monkeypatch) -> None:
    """``separate`` runs the projection over all steps first (same results), ``loop`` inside the
    loop; unset, float32 asks the kept probe choice between the two; a wrong value is one error
    naming the valid ones."""
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(torch.float32, True)
    taken = _spy_on_inference(extension, monkeypatch)
    results = {}
    with torch.no_grad():
        for placement in ("separate", "loop", "rows"):
            monkeypatch.setenv(onlstm_kernel.ENV_VAR, placement)
            results[placement] = fast_projected_recurrence(
                inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk, "treernn"
            )
            assert len(taken) == {"separate": 0, "loop": 1, "rows": 2}[placement]
    for placement in ("loop", "rows"):
        for value, separate_value in zip(results[placement], results["separate"]):
            torch.testing.assert_close(value, separate_value, **TOLERANCE)
    asked = []
    monkeypatch.delenv(onlstm_kernel.ENV_VAR)
    monkeypatch.setattr(
        gemm, "kept_choice", lambda key, usable, probe: asked.append(usable) or "loop"
    )
    assert onlstm_kernel.projection_placement(14, 9, 20, 4, extension, torch.float32) == "loop"
    assert asked == [["loop", "rows", "separate"]]
    assert onlstm_kernel.projection_placement(14, 9, 20, 4, extension, torch.float64) == "loop"
    monkeypatch.setenv(onlstm_kernel.ENV_VAR, "inside")
    with pytest.raises(ConfigValueError, match="'inside' is not one of auto, loop, rows, separate"):
        onlstm_kernel.projection_placement(14, 9, 20, 4, extension, torch.float32)


def test_the_placement_probe_times_all_three_and_picks_the_fastest(extension, monkeypatch) -> None:
    timed = {}
    real_timing = gemm.time_in_turns
    placements = {"loop", "rows", "separate"}

    def fake_timing(products, flops, *args, **kwargs):
        if set(products) != placements:  # the GEMM probes inside keep their timing
            return real_timing(products, flops, *args, **kwargs)
        timed.update({name: product() for name, product in products.items()})
        return {"loop": 2.0, "rows": 1.5, "separate": 3.0}

    monkeypatch.setattr(gemm, "time_in_turns", fake_timing)
    assert onlstm_kernel._probe_placement(4, 6, 8, 2, extension) == "rows"
    for placement in ("loop", "rows"):  # all three really ran, with the same outputs
        torch.testing.assert_close(timed[placement][0], timed["separate"][0], **TOLERANCE)


@pytest.fixture(params=["AMX", "AVX512-BF16"])
def bf16_copy(request, extension):
    """The bf16 products on AMX's tiles (skipped where the CPU has none), then on AVX512-BF16's
    pairs, in both extensions that run them; the default restored after."""
    kernels = (extension, gemm.packed_kernels())
    if request.param == "AMX" and not extension.amx():
        pytest.skip("no AMX tiles on this CPU")
    before = [kernel.set_amx(request.param == "AMX") for kernel in kernels]
    yield request.param
    for kernel, allowed in zip(kernels, before):
        kernel.set_amx(allowed)


@bf16_kernels
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("placement", ["loop", "rows"])
@pytest.mark.parametrize("sizes", [(14, 9, 20), (20, 40, 36)])
def test_bf16_products_inside_the_loop_are_the_separate_paths(
    masked, placement, sizes, bf16_copy, extension, monkeypatch
) -> None:
    """bf16 products inside the loop (both products asked in bf16), on each copy of the bf16
    products: the inputs, states and weights rounded to bf16 and summed in float32, as the
    separate projection and the recurrence's bf16 products give them, to float32 rounding (the
    sums run in another order), in inference (one call) and training (results and every
    gradient); the fp32 outputs are 1e-3 away and more, so the bf16 products did run. The second
    sizes give AMX's tiles whole blocks of 32 k and a remainder in every product (D + H = 76,
    H = 36, G = 162) and a second, partial block of rows (B = 20)."""
    inputs, w_ih, bias, w_hh, h0, c0, step_mask, chunk = _problem(
        torch.float32, masked, sizes=sizes
    )
    leaves = [inputs, w_ih, bias, w_hh, h0, c0]
    bf16 = (torch.bfloat16, torch.bfloat16)

    def run(where, *dtypes):
        monkeypatch.setenv(onlstm_kernel.ENV_VAR, where)
        return fast_projected_recurrence(
            *[leaf.detach().requires_grad_(torch.is_grad_enabled()) for leaf in leaves],
            step_mask, chunk, "treernn", *dtypes, recurrent_scale=0.55,
        )  # fmt: skip

    taken = _spy_on_inference(extension, monkeypatch)
    with torch.no_grad():
        inferred, separate, fp32 = run(placement, *bf16), run("separate", *bf16), run(placement)
    assert taken == [True, False]  # one bf16 call, then the fp32 one
    for name, value, wanted in zip(RESULTS, inferred, separate):
        torch.testing.assert_close(value, wanted, rtol=1e-5, atol=2e-6, msg=name)
    assert (inferred[0] - fp32[0]).abs().max() > 1e-3  # outputs

    def trained(where):
        monkeypatch.setenv(onlstm_kernel.ENV_VAR, where)
        tracked = [leaf.detach().clone().requires_grad_(True) for leaf in leaves]
        result = fast_projected_recurrence(
            *tracked, step_mask, chunk, "treernn", *bf16, recurrent_scale=0.55
        )
        return result, torch.autograd.grad(_loss(result), tracked)

    (result, grads), (expected, wanted_grads) = trained(placement), trained("separate")
    assert type(result[0].grad_fn).__name__ == "ONLSTMProjectedRecurrenceBackward"
    for name, value, wanted in zip(RESULTS, result, expected):
        torch.testing.assert_close(value, wanted, rtol=1e-5, atol=2e-6, msg=name)
    for name, grad, wanted in zip(GRADIENTS, grads, wanted_grads):
        # At the second sizes the two paths' weight gradients (their products run on other
        # backends) are up to 4e-4 of their largest entry apart on either copy; bf16 against
        # fp32 products moves them by 3e-3 to 7e-3 of it.
        atol = 1e-4 if sizes[1:] == (9, 20) else 1e-3 * wanted.abs().max().item()
        torch.testing.assert_close(grad, wanted, rtol=1e-4, atol=atol, msg=name)


def _decide_loop_and_products(monkeypatch, loop: bool, products: bool) -> list[str]:
    """Patch the bf16 probes: ``loop`` for a loop with the projection inside (timed with runs
    and labelled so), ``products`` for everything else; returns the labels asked, in order."""
    asked: list[str] = []
    monkeypatch.setattr(gemm, "DECISIONS", {})  # this test's decisions only

    def pays(batch, in_features, out_features, device, runs=None, label=""):
        asked.append(label)
        return loop if "one loop" in label else products

    monkeypatch.setattr(gemm, "bf16_pays", pays)
    return asked


@bf16_kernels
@pytest.mark.parametrize("decided", ["bf16", "fp32"])
def test_eval_under_bf16_mixed_is_one_call_at_the_loops_precision(
    decided, extension, monkeypatch
) -> None:
    """Eval without autograd under bf16 autocast, the projection inside the loop: one
    ``infer_projected`` call per layer in the precision decided for the loop itself (the
    separate products' probes, patched to the opposite answer, are not asked), bit for bit what
    the general path gives under autocast with autograd, which decides its loop alike."""
    monkeypatch.setenv(gemm.ENV_VAR, "treernn")
    monkeypatch.setenv(onlstm_kernel.ENV_VAR, "rows")
    bf16 = decided == "bf16"
    asked = _decide_loop_and_products(monkeypatch, loop=bf16, products=not bf16)
    torch.manual_seed(6)
    encoder = ONLSTMEncoder(6, 12, num_layers=2, chunk_size=3, weight_drop=0.3).eval()
    x = torch.randn(4, 7, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = encoder(x)  # autograd on: the general path
        taken = _spy_on_inference(extension, monkeypatch)
        with torch.no_grad():
            result = encoder(x)
    assert taken == [bf16, bf16]
    assert asked and all("one loop" in label for label in asked)
    assert {"training", "inference"} == {label.rsplit(" ", 1)[1] for label in asked}
    decisions = {key: value for key, value in gemm.DECISIONS.items() if key[0] == "ON-LSTM"}
    loop_shapes = {shape for _, _, shape in decisions}
    assert loop_shapes == {"(4 x 18) @ (18 x 56)", "(4 x 24) @ (24 x 56)"}  # (B x D+H) @ (D+H x G)
    assert set(decisions.values()) == {"bfloat16" if bf16 else "float32"}
    assert torch.equal(result.hidden, expected.hidden)
    assert torch.equal(result.tree_signal.values, expected.tree_signal.values)
    for (h, c), (h_ref, c_ref) in zip(result.state, expected.state):
        assert torch.equal(h, h_ref) and torch.equal(c, c_ref)


@bf16_kernels
def test_separate_layers_decide_their_two_products_apart(extension, monkeypatch) -> None:
    """The projection over all steps (placement ``separate``): the projection and the recurrent
    steps are decided by their own probes; one bf16 and one fp32 runs the general path (no
    one-call inference) with the projection in bf16 and the steps in fp32."""
    monkeypatch.setenv(gemm.ENV_VAR, "treernn")
    monkeypatch.setenv(onlstm_kernel.ENV_VAR, "separate")
    asked: list[str] = []
    monkeypatch.setattr(gemm, "DECISIONS", {})

    def pays(batch, in_features, out_features, device, runs=None, label=""):
        asked.append(label)
        return runs is None  # the projection bf16, the steps' loop (timed with runs) fp32

    monkeypatch.setattr(gemm, "bf16_pays", pays)
    encoder = ONLSTMEncoder(6, 12, num_layers=1, chunk_size=3).eval()
    taken = _spy_on_inference(extension, monkeypatch)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        encoder(torch.randn(4, 7, 6))
    assert taken == []
    assert not any("one loop" in label for label in asked)
    products = {product: dtype for (_, product, _), dtype in gemm.DECISIONS.items()}
    assert products == {"input projection": "bfloat16", "recurrent steps, inference": "float32"}


@bf16_kernels
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("placement", ["loop", "rows"])
def test_the_loops_precision_probe_times_the_loop_in_both_precisions(
    training, placement, extension
) -> None:
    """loop_precision_runs: the loop with the projection inside it at ``placement``, fp32 and
    bf16, inference (one call) or training (forward and backward: the gradients of the inputs and
    both weights, three products' FLOPs); the two give close results that differ (the bf16
    products ran); under autocast it runs as without it; it draws nothing from the run's random
    streams."""
    batch, depth, hidden, chunk = 3, 5, 8, 4
    runs = onlstm_kernel.loop_precision_runs(
        batch, depth, hidden, chunk, extension, placement, training
    )
    state = torch.get_rng_state()
    loops, flops = runs()
    gates = 4 * hidden + 2 * (hidden // chunk)
    steps = probe_steps(batch, hidden, gates)
    assert steps == 32  # a step of 864 FLOPs: the full probe, far under the cut for large shapes
    passes = 3 if training else 1
    assert flops == passes * 2.0 * steps * batch * (depth + hidden) * gates
    assert sorted(loops) == ["bfloat16", "float32"]
    fp32, bf16 = loops["float32"](), loops["bfloat16"]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        again = loops["float32"]()
    assert torch.equal(state, torch.get_rng_state())
    for value, wanted, repeated in zip(bf16, fp32, again):
        assert value.dtype == wanted.dtype == torch.float32
        assert torch.equal(repeated, wanted)
    assert not torch.equal(bf16[0], fp32[0])
    torch.testing.assert_close(bf16[0], fp32[0], rtol=5e-2, atol=5e-2)
    if training:  # the gradients of the inputs, W_ih and W_hh
        assert [tuple(g.shape) for g in fp32] == [
            (steps, batch, depth),
            (gates, depth),
            (gates, hidden),
        ]


@bf16_kernels
def test_the_loops_precision_probe_times_16_steps_at_the_papers_size(extension) -> None:
    """At the paper's middle layer, (20 x 2300) @ (2300 x 4830), the loop's precision probe times
    16 steps (`onlstm.PRECISION_PROBE_STEPS`), not the placement probe's 4: over 4 steps the
    loop's once-a-call bf16 set-up made bf16 look 0.69x fp32 on an AMD Zen 4, where it trains at
    1.5x over a BPTT segment."""
    batch, depth, hidden, chunk = 20, 1150, 1150, 10
    gates = 4 * hidden + 2 * (hidden // chunk)
    assert probe_steps(batch, hidden, gates) == 4
    runs = onlstm_kernel.loop_precision_runs(batch, depth, hidden, chunk, extension, "loop", True)
    _, flops = runs()
    assert flops == 3 * 2.0 * 16 * batch * (depth + hidden) * gates


def test_the_projection_leaves_the_loop_only_where_that_is_10_percent_faster() -> None:
    """_placement_choice: the faster in-loop placement unless over all steps first is at least
    1 / 0.9 times as fast (a tie in fp32 is no tie under bf16-mixed, where the loop is one bf16
    decision and ran the paper's inference 1.92x fp32 against 1.47x out of it on an AMD Zen 4)."""
    choose = onlstm_kernel._placement_choice
    assert choose({"loop": 1.0, "rows": 1.05, "separate": 0.95}) == "loop"
    assert choose({"loop": 1.1, "rows": 1.0, "separate": 0.91}) == "rows"
    assert choose({"loop": 1.0, "rows": 1.05, "separate": 0.89}) == "separate"
    assert choose({"separate": 1.0}) == "separate"  # a probe cut short before the loops
