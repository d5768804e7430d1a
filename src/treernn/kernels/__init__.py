"""Optimised kernels of the encoders, kept apart from the readable models in ``encoders/``.

Each kernel takes tensors and parameters and returns tensors; it imports nothing from the model
file it speeds up (the model imports it). ``onlstm``, ``ordered_memory`` and ``td_treelstm`` are
the fast recurrences of the encoders of the same names, tested equal to their references; ``gemm``
picks the library of the per-step matrix products, ``choices`` records those picks with the run,
``context`` is what the rest of treernn sees of the picks, and ``cpp_ext`` builds the C++ sources
in ``csrc/`` on first use.

This package is the kernels' one door: code outside it imports ``treernn.kernels`` and the names
below, never a submodule (``tests/unit/test_import_graph.py`` checks it), and only the encoders,
the lifecycle's one hook (``lifecycle/kernel_context.py``: the run's kernel context) and the
model package (``models/``: loading and exports) import it at all. The kernels' own tests and
benchmarks reach inside.

The names, by who needs them (each documented where it is defined):

- `context`: the kernel context, the per-machine choices as part of a run (recorded with it,
  reused on resume, by a sweep's other jobs and by ``mode=test``), of a loaded model and of an
  export, and what each product ran in (for the step timer);
- `decided_linear`: a task head's product (an encoder's ``head_linear``), under bf16-mixed in
  bf16 only where it pays here;
- `keeps_autocast`: whether a model whose products follow autocast (``nn.LSTM``, the
  Transformer, the tree encoders' cells) keeps bf16-mixed's autocast for a computation, timed on
  that computation;
- the encoders' options and weights: `GemmBackend` and `check_backend` (the ``gemm_backend``
  option), `dropconnect` (DropConnect of a whole weight with one Philox mask);
- the recurrences, each deciding how its products run itself: ON-LSTM's `onlstm_layer` and
  `onlstm_inference` over `ONLSTMLayerWeights`, Ordered Memory's `ordered_memory_recurrence`
  and the top-down Tree-LSTMs' `td_treelstm_recurrence`.
"""

from __future__ import annotations

from treernn.kernels.context import context
from treernn.kernels.gemm import GemmBackend, check_backend, decided_linear, keeps_autocast
from treernn.kernels.onlstm_layers import ONLSTMLayerWeights, onlstm_inference, onlstm_layer
from treernn.kernels.ordered_memory import ordered_memory_recurrence
from treernn.kernels.td_treelstm import td_treelstm_recurrence
from treernn.kernels.weight_ops import dropconnect

__all__ = [
    "GemmBackend",
    "ONLSTMLayerWeights",
    "check_backend",
    "context",
    "decided_linear",
    "dropconnect",
    "keeps_autocast",
    "onlstm_inference",
    "onlstm_layer",
    "ordered_memory_recurrence",
    "td_treelstm_recurrence",
]
