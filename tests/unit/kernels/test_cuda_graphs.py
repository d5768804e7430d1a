"""CUDA graphs over ON-LSTM's torch-ops step loops (``treernn.kernels.cuda_graphs``).

On the CPU the graph is replaced by a stand-in that re-runs the captured function on its static
tensors at each replay, as a graph replays its kernels on their fixed addresses: what these tests
check is the plumbing around the graph (the call's tensors copied in, the results copied out, the
returned tensors the caller's own, one capture per shape), which is where a graphed loop can
silently compute on stale data. With a GPU, the last test runs the real graphs against the eager
loop (it ran on an NVIDIA H200; CI has no GPU).
"""

from __future__ import annotations

import pytest
import torch

from treernn.kernels import cuda_graphs
from treernn.kernels import onlstm as onlstm_kernel
from treernn.kernels.onlstm import ONLSTMRecurrence


class _Replay:
    """Stands in for torch.cuda.CUDAGraph: replay() re-runs the captured function on the same
    static tensors and writes its results into the tensors the capture returned."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.returned: tuple[torch.Tensor, ...] = ()
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        for static, value in zip(self.returned, self.fn()):
            static.copy_(value)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> list[_Replay]:
    captured: list[_Replay] = []

    def capture(fn, device):
        graph = _Replay(fn)
        graph.returned = fn()
        captured.append(graph)
        return graph, graph.returned

    cuda_graphs.clear()
    monkeypatch.setattr(cuda_graphs, "capture", capture)
    monkeypatch.setattr(cuda_graphs, "enabled", lambda like: True)
    monkeypatch.setattr(cuda_graphs, "device_memory", lambda tensors: 1 << 50)
    monkeypatch.setenv("TREERNN_CPP_EXT", "0")  # the torch-ops loops, as on a GPU
    yield captured
    cuda_graphs.clear()


def _recurrence(seed: int, masked: bool, batch=3, steps=5, hidden=8, chunk=2):
    generator = torch.Generator().manual_seed(seed)
    gates = onlstm_kernel.gate_count(hidden, chunk)
    input_gates = torch.randn(steps, batch, gates, generator=generator, dtype=torch.float64)
    weight = torch.randn(gates, hidden, generator=generator, dtype=torch.float64) / hidden**0.5
    h0 = torch.randn(batch, hidden, generator=generator, dtype=torch.float64)
    c0 = torch.randn(batch, hidden, generator=generator, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.ones(steps, batch, dtype=torch.bool)
        mask[steps - 2 :, 0] = False
    tensors = [t.requires_grad_(True) for t in (input_gates, weight, h0, c0)]
    return tensors, mask, chunk


def _forward_backward(tensors, mask, chunk):
    outputs = ONLSTMRecurrence.apply(*tensors, mask, chunk, "aten", None)
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype).view_as(o)).sum()
               for o in outputs)  # fmt: skip
    grads = torch.autograd.grad(loss, tensors)
    return [o.detach() for o in outputs], list(grads)


@pytest.mark.parametrize("masked", [False, True])
def test_graphed_loops_give_the_eager_results_call_after_call(stand_in, masked) -> None:
    """Three calls of one shape on different data (the first runs eagerly, the second captures
    forward and backward loops, the third replays them) give exactly what the eager loops give,
    and the second call's results are not overwritten by the third's replay."""
    results = []
    for seed in range(3):
        results.append(_forward_backward(*_recurrence(seed, masked)))
    assert len(stand_in) == 2  # the forward and the backward loop, captured once each
    assert [graph.replays for graph in stand_in] == [2, 2]  # after its capture, and the third
    kept = [[t.clone() for t in outputs + grads] for outputs, grads in results]

    cuda_graphs.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cuda_graphs, "enabled", lambda like: False)
        for seed in range(3):
            outputs, grads = _forward_backward(*_recurrence(seed, masked))
            for got, want in zip(results[seed][0] + results[seed][1], outputs + grads):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
    for (outputs, grads), copy in zip(results, kept):
        for tensor, before in zip(outputs + grads, copy):
            assert torch.equal(tensor, before)


def test_each_shape_gets_its_own_graph(stand_in) -> None:
    """A second sequence length is a second pair of graphs; going back to the first replays it."""
    for steps in (5, 5, 7, 7, 5):
        tensors, mask, chunk = _recurrence(0, False, steps=steps)
        _forward_backward(tensors, mask, chunk)
    assert len(stand_in) == 4
    assert sorted(graph.replays for graph in stand_in) == [1, 1, 2, 2]


def test_least_recently_used_graphs_go_beyond_the_memory_share(stand_in, monkeypatch) -> None:
    """With room for about two forward graphs' tensors, a third length evicts the graph used
    least recently; that length then runs eagerly once and is captured again."""
    with torch.no_grad():
        for _ in range(2):
            onlstm_kernel.fast_recurrence(*_recurrence(0, False, steps=5)[0], None, 2)
    (five,) = cuda_graphs._GRAPHS.values()  # 6 and 7 steps: 1.13 and 1.27 times its bytes
    share = 2.5 * five.nbytes
    monkeypatch.setattr(
        cuda_graphs, "device_memory", lambda tensors: share / cuda_graphs.MEMORY_FRACTION
    )
    with torch.no_grad():
        for steps in (6, 6, 5, 7, 7):
            tensors, mask, chunk = _recurrence(0, False, steps=steps)
            onlstm_kernel.fast_recurrence(*tensors, mask, chunk)
        kept = [key[2][0][0][0] for key in cuda_graphs._GRAPHS]  # input_gates' T of each graph
        assert len(stand_in) == 3 and kept == [5, 7]  # 6 went out, not 5 (used after it)
        for steps in (6, 6):
            tensors, mask, chunk = _recurrence(0, False, steps=steps)
            onlstm_kernel.fast_recurrence(*tensors, mask, chunk)
        assert len(stand_in) == 4  # 6 seen again, then captured again


def test_inference_loop_is_graphed_too(stand_in) -> None:
    """Without gradients (evaluation) the forward loop alone is graphed, same numbers."""
    tensors, mask, chunk = _recurrence(1, True)
    with torch.no_grad():
        for _ in range(3):
            got = onlstm_kernel.fast_recurrence(*tensors, mask, chunk)
    assert len(stand_in) == 1 and stand_in[0].replays == 2
    cuda_graphs.clear()
    with pytest.MonkeyPatch.context() as patch, torch.no_grad():
        patch.setattr(cuda_graphs, "enabled", lambda like: False)
        want = onlstm_kernel.fast_recurrence(*tensors, mask, chunk)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_graphs_are_off_on_the_cpu_and_by_the_environment(monkeypatch) -> None:
    assert not cuda_graphs.enabled(torch.zeros(1))
    if torch.cuda.is_available():
        monkeypatch.setenv(cuda_graphs.ENV_VAR, "0")
        assert not cuda_graphs.enabled(torch.zeros(1, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("masked", [False, True])
def test_real_cuda_graphs_match_the_eager_loops(monkeypatch, masked) -> None:
    """On a GPU: ON-LSTM's encoder trained through real graphs (paper-like widths, dropout and
    DropConnect drawn outside the graph) gives the eager loops' outputs and gradients."""
    from treernn.encoders.onlstm import ONLSTMEncoder

    def run(graphs: bool):
        monkeypatch.setenv(cuda_graphs.ENV_VAR, "1" if graphs else "0")
        cuda_graphs.clear()
        torch.manual_seed(0)
        encoder = ONLSTMEncoder(64, 96, num_layers=2, chunk_size=8, dropout=0.2,
                                weight_drop=0.3).cuda()  # fmt: skip
        results = []
        for seed in range(4):
            torch.manual_seed(seed)
            x = torch.randn(6, 11, 64, device="cuda", requires_grad=True)
            mask = None
            if masked:
                mask = torch.ones(6, 11, dtype=torch.bool, device="cuda")
                mask[0, 7:] = False
            out = encoder(x, mask)
            loss = out.hidden.pow(2).sum() + out.tree_signal.values.sum()
            grads = torch.autograd.grad(loss, [x, *encoder.parameters()])
            results.append([out.hidden.detach(), *grads])
        return results

    for got, want in zip(run(True), run(False)):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
