"""The fast ON-LSTM recurrence (``impl="fast"``, a hand-written autograd function) against the
step-by-step reference: outputs, states, distances and every gradient agree to 1e-5 in float32
with the same DropConnect and locked-dropout masks."""

from __future__ import annotations

import pytest
import torch

from treernn.encoders import gemm
from treernn.encoders.onlstm import ONLSTMEncoder
from treernn.encoders.onlstm_fast import ONLSTMRecurrence, fast_recurrence

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


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
    weights = torch.linspace(-1, 1, out.hidden.size(-1))
    loss = (out.hidden * weights).sum() + (out.pooled**2).sum()
    loss = loss + (out.tree_signal.values * 0.7).sum() - (out.extras["input_distances"] ** 2).sum()
    for h, c in out.state:
        loss = loss + (h * 0.3).sum() + (c * c).sum()
    leaves = [x] + [t for pair in state for t in pair] + list(encoder.parameters())
    grads = torch.autograd.grad(loss, leaves)
    return out, grads


def _assert_same(out_a, out_b) -> None:
    torch.testing.assert_close(out_b.hidden, out_a.hidden, **TOLERANCE)
    torch.testing.assert_close(out_b.pooled, out_a.pooled, **TOLERANCE)
    torch.testing.assert_close(out_b.tree_signal.values, out_a.tree_signal.values, **TOLERANCE)
    torch.testing.assert_close(
        out_b.extras["input_distances"], out_a.extras["input_distances"], **TOLERANCE
    )
    for layer_a, layer_b in zip(out_a.layer_outputs, out_b.layer_outputs):
        torch.testing.assert_close(layer_b, layer_a, **TOLERANCE)
    for (h_a, c_a), (h_b, c_b) in zip(out_a.state, out_b.state):
        torch.testing.assert_close(h_b, h_a, **TOLERANCE)
        torch.testing.assert_close(c_b, c_a, **TOLERANCE)


CASES = [
    # (seed, weight_drop, dropout, train, padded)
    (0, 0.0, 0.0, True, False),
    (1, 0.45, 0.3, True, False),
    (2, 0.45, 0.3, False, False),
    (3, 0.0, 0.0, False, True),
    (4, 0.3, 0.2, True, True),
    (5, 0.5, 0.0, False, True),
]


@pytest.mark.parametrize(("seed", "weight_drop", "dropout", "train", "padded"), CASES)
def test_fast_matches_reference(seed, weight_drop, dropout, train, padded) -> None:
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (4,), generator=generator).tolist()
    chunk, input_size, batch, steps = sizes[0] + 1, sizes[1] * 3, sizes[2] + 1, sizes[3] * 3 + 2
    hidden, output = chunk * (sizes[1] + 2), chunk * sizes[2]
    num_layers = 1 + seed % 3
    reference, fast = _pair(
        seed,
        input_size=input_size,
        hidden_size=hidden,
        num_layers=num_layers,
        chunk_size=chunk,
        dropout=dropout,
        weight_drop=weight_drop,
        output_size=output,
    )
    reference.train(train)
    fast.train(train)
    x = torch.randn(batch, steps, input_size, generator=generator, requires_grad=True)
    mask = None
    if padded:
        lengths = torch.randint(1, steps + 1, (batch,), generator=generator)
        lengths[0] = steps
        mask = torch.arange(steps)[None, :] < lengths[:, None]
    sizes_per_layer = [layer.hidden_size for layer in reference.layers]
    # A carried (non-zero) initial state that needs gradients.
    state = [
        (
            (torch.randn(batch, size, generator=generator) * 0.5).requires_grad_(),
            (torch.randn(batch, size, generator=generator) * 0.5).requires_grad_(),
        )
        for size in sizes_per_layer
    ]
    out_ref, grads_ref = _run(reference, x, mask, state, seed=100 + seed)
    out_fast, grads_fast = _run(fast, x, mask, state, seed=100 + seed)
    _assert_same(out_ref, out_fast)
    names = ["x"] + [f"state{i}" for i in range(2 * num_layers)]
    names += [name for name, _ in reference.named_parameters()]
    assert len(grads_ref) == len(names)
    for name, grad_ref, grad_fast in zip(names, grads_ref, grads_fast):
        torch.testing.assert_close(
            grad_fast, grad_ref, **TOLERANCE, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("backend", ["aten", "mkl", "onednn"])
def test_fast_matches_reference_per_gemm_backend(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each per-step GEMM backend forced in turn (float32; MKL and oneDNN where this build has
    them): the same outputs, states, distances and gradients as the reference to 1e-5."""
    if backend not in gemm.candidates(torch.device("cpu"), torch.float32):
        pytest.skip(f"this torch build cannot run the {backend} packed GEMM")
    monkeypatch.setenv(gemm.ENV_VAR, backend)
    assert gemm.resolve("auto", 3, 5, 7, torch.device("cpu"), torch.float32) == backend
    test_fast_matches_reference(*CASES[4])


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


def test_gradcheck_double() -> None:
    """Finite differences agree with the hand-written backward (float64, padded, with state)."""
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


def test_fast_path_under_bf16_autocast_runs_in_fp32() -> None:
    """bf16-mixed: the fast recurrence (no bf16 path yet) runs in fp32, forward and backward, and
    gives the fp32 results."""
    torch.manual_seed(0)
    encoder = ONLSTMEncoder(input_size=5, hidden_size=12, num_layers=2, chunk_size=4)
    x = torch.randn(3, 6, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = encoder(x)
    assert out.hidden.dtype == torch.float32
    out.hidden.sum().backward()
    torch.testing.assert_close(out.hidden, encoder(x).hidden, rtol=0, atol=0)
