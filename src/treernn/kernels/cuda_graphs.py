"""CUDA graphs for the step loops that run as torch ops on a GPU.

Off the CPU, ON-LSTM's recurrence runs step by step in torch ops (``kernels/onlstm.py``): at the
paper's size a training update launches about 8,000 small kernels, and the GPU waits on their
launches (an H200 was busy 51 ms of a 150-160 ms update). A CUDA graph records a loop's kernels
once and replays them in one launch: on an H200 the paper-size stack, with the paper's dropouts,
trained at 45,900 tokens/s through these graphs against 10,100 eagerly (4.5x), and the small
one at 201,000 against 48,900 (``docs/recurrence_speed.md`` as of 8148193).

`run` runs a loop function through a graph kept per key (the loop's name and the shapes,
dtypes and options of its call). Each graph owns static copies of the call's tensors: a call
copies its tensors in, replays, and copies the loop's results back out into the caller's own
tensors (and clones what the loop returns), so nothing a caller holds is ever overwritten by a
later replay, whichever graph, layer or call it comes from. The copies cost microseconds against
the milliseconds of launches they save. A key is captured the second time it is seen (a shape
seen once, such as a short last batch, runs eagerly). The graphs' static tensors are kept under
`MEMORY_FRACTION` of the device's memory (``TREERNN_CUDA_GRAPHS_MEMORY``; AWD-LSTM's random
sequence lengths make 50-100 keys at the paper's size, about 100 MB each), least recently used
out first; all graphs share one memory pool per device.

``TREERNN_CUDA_GRAPHS=0`` turns graphs off (every loop eager, as on the CPU).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

ENV_VAR = "TREERNN_CUDA_GRAPHS"
#: the share of the device's memory the graphs' static tensors may hold together
MEMORY_FRACTION = float(os.environ.get("TREERNN_CUDA_GRAPHS_MEMORY", "0.1"))
#: eager warm-up runs before a capture (cuBLAS handles and workspaces are made outside it)
WARMUP_RUNS = 2


def enabled(like: Tensor) -> bool:
    """Whether loops on ``like``'s device run through graphs: a CUDA tensor, ``TREERNN_CUDA_GRAPHS``
    not off, and no graph being captured around the call already."""
    if like.device.type != "cuda":
        return False
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not torch.cuda.is_current_stream_capturing()


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph, or a stand-in (tests)
    tensors: list[Tensor | None]  # static copies of the call's tensors
    returned: tuple[Tensor, ...]  # static tensors the loop returned
    nbytes: int  # of both


#: key -> captured graph, least recently used first
_GRAPHS: OrderedDict[tuple, _Graph] = OrderedDict()
#: keys seen once and not captured yet
_SEEN: set[tuple] = set()
_POOLS: dict[int, Any] = {}


def _signature(tensors: Sequence[Tensor | None]) -> tuple:
    return tuple(
        None if t is None else (tuple(t.shape), t.dtype, t.device, t.is_contiguous())
        for t in tensors
    )


def run(
    name: str,
    loop: Callable[..., tuple[Tensor, ...] | Tensor | None],
    tensors: Sequence[Tensor | None],
    written: Sequence[int],
    options: tuple = (),
) -> tuple[Tensor, ...]:
    """``loop(*tensors)`` through a CUDA graph; returns what it returns, as a tuple of tensors.

    ``loop`` must be a function of its tensor arguments (and of ``options``, which the key
    holds): it reads them, may write into those at ``written``, and may return tensors; it must
    not synchronise with the host. After the replay the caller's tensors at ``written`` hold
    what the loop wrote, and the returned tensors are the caller's own (clones)."""
    key = (name, options, _signature(tensors))
    entry = _GRAPHS.get(key)
    if entry is None:
        if key not in _SEEN:
            _SEEN.add(key)
            return _as_tuple(loop(*tensors))
        _SEEN.discard(key)
        entry = _capture(loop, tensors)
        _GRAPHS[key] = entry
        budget = MEMORY_FRACTION * device_memory(entry.tensors)
        while len(_GRAPHS) > 1 and sum(graph.nbytes for graph in _GRAPHS.values()) > budget:
            _GRAPHS.popitem(last=False)
    else:
        _GRAPHS.move_to_end(key)
    for static, tensor in zip(entry.tensors, tensors):
        if static is not None:
            static.copy_(tensor)
    entry.graph.replay()
    for index in written:
        tensors[index].copy_(entry.tensors[index])  # type: ignore[union-attr]
    return tuple(tensor.clone() for tensor in entry.returned)


def _as_tuple(returned: tuple[Tensor, ...] | Tensor | None) -> tuple[Tensor, ...]:
    if returned is None:
        return ()
    return (returned,) if isinstance(returned, Tensor) else tuple(returned)


def _capture(loop: Callable, tensors: Sequence[Tensor | None]) -> _Graph:
    static = [None if t is None else t.detach().clone() for t in tensors]
    device = next(t.device for t in tensors if t is not None)
    graph, returned = capture(lambda: _as_tuple(loop(*static)), device)
    nbytes = sum(t.numel() * t.element_size() for t in (*static, *returned) if t is not None)
    return _Graph(graph, static, returned, nbytes)


def device_memory(tensors: Sequence[Tensor | None]) -> int:
    """Total memory of the device the tensors are on (bytes). Replaced in the CPU tests."""
    device = next(t.device for t in tensors if t is not None)
    return torch.cuda.get_device_properties(device).total_memory


def capture(fn: Callable[[], tuple[Tensor, ...]], device: torch.device) -> tuple[Any, tuple]:
    """A CUDA graph of ``fn()`` on ``device`` (after eager warm-up runs on a side stream, as
    capture needs) and the static tensors it returned. Replaced by a stand-in in the CPU tests."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_RUNS):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _POOLS:
        _POOLS[index] = torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    # thread_local: a loader's pin-memory thread may call CUDA while this thread captures
    with torch.cuda.graph(graph, pool=_POOLS[index], capture_error_mode="thread_local"):
        returned = fn()
    return graph, returned


def clear() -> None:
    """Forget every graph and their memory pools (a pool whose graphs are all gone cannot take
    a new capture: the caching allocator asserts)."""
    _GRAPHS.clear()
    _SEEN.clear()
    _POOLS.clear()
