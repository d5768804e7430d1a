"""Optimised kernels of the encoders, kept apart from the readable models in ``encoders/``.

Each kernel takes tensors and parameters and returns tensors; it imports nothing from the model
file it speeds up (the model imports it). ``onlstm``, ``ordered_memory`` and ``td_treelstm`` are
the fast recurrences of the encoders of the same names, tested equal to their references; ``gemm``
picks the library of the per-step matrix products, ``choices`` records those picks with the run,
and ``cpp_ext`` builds the C++ sources in ``csrc/`` on first use.

This package is the kernels' one door: code outside it imports ``treernn.kernels`` and the names
below, never a submodule (``tests/unit/test_import_graph.py`` checks it), and only the encoders,
the lifecycle's one hook (``lifecycle/kernel_context.py``: the run's kernel context) and the
model package (``models/``: loading and exports) import it at all. The kernels' own tests and
benchmarks reach inside.

The names, by who needs them (each documented where it is defined):

- a run's choices (the kernel context: recorded with the run, reused on resume, by a sweep's other
  jobs and by ``mode=test``): `attach` (a run), `attach_loaded` (a model loaded outside a run),
  `use_context` (a loaded model's own context again before it computes, where another model was
  loaded since), `check_run_record` (the planner, before a resume or a test records anything);
- exports, which carry a run's choices: `RUN_RECORD` (where a run keeps them), `read_record`,
  `RECORD_FORMAT` (the version an export's ``kernel_choices.json`` is written with);
- output layers and reports: `decided_linear` (a task head's product, under bf16-mixed in bf16
  only where it pays here), `product_precisions` (what each product ran in, for the step timer);
- the encoders' products: `GemmBackend`, `check_backend` (the ``gemm_backend`` option),
  `bf16_requested`, `bf16_kernels`, `product_dtype`, `autocast_row_multiple` (the precision and
  row rounding of products under bf16-mixed), `random_state_kept` (a precision probe draws
  nothing from the run's random streams) and `dropconnect` (DropConnect of a whole weight with
  one Philox mask);
- the recurrences: ON-LSTM's `onlstm_layer` and `onlstm_inference` over `ONLSTMLayerWeights`
  (which decide the layer's projection placement and its products' precision themselves);
  Ordered Memory's `ordered_memory_recurrence` (which decides its products' precision itself);
  the top-down Tree-LSTMs' `batched_forward`, `lstm_cell` and `LayerStates`.
"""

from __future__ import annotations

from treernn.kernels import gemm
from treernn.kernels.choices import (
    RECORD_FORMAT,
    RUN_RECORD,
    attach,
    attach_loaded,
    check_run_record,
    read_record,
    use_context,
)
from treernn.kernels.gemm import (
    GemmBackend,
    autocast_row_multiple,
    bf16_kernels,
    bf16_requested,
    check_backend,
    decided_linear,
    product_dtype,
    random_state_kept,
)
from treernn.kernels.onlstm_layers import ONLSTMLayerWeights, onlstm_inference, onlstm_layer
from treernn.kernels.ordered_memory import ordered_memory_recurrence
from treernn.kernels.td_treelstm import LayerStates, batched_forward, lstm_cell
from treernn.kernels.weight_ops import dropconnect


def product_precisions() -> list[list[str]]:
    """Each product's precision as this process's probes chose it under bf16-mixed, sorted:
    ``[model, product, shape, "bfloat16" | "float32"]`` (`gemm.product_dtype` records them)."""
    return [[*key, dtype] for key, dtype in sorted(gemm.DECISIONS.items())]


__all__ = [
    "RECORD_FORMAT",
    "RUN_RECORD",
    "GemmBackend",
    "LayerStates",
    "ONLSTMLayerWeights",
    "attach",
    "attach_loaded",
    "autocast_row_multiple",
    "batched_forward",
    "bf16_kernels",
    "bf16_requested",
    "check_backend",
    "check_run_record",
    "decided_linear",
    "dropconnect",
    "lstm_cell",
    "onlstm_inference",
    "onlstm_layer",
    "ordered_memory_recurrence",
    "product_dtype",
    "product_precisions",
    "random_state_kept",
    "read_record",
    "use_context",
]
