"""Optimised kernels of the encoders, kept apart from the readable models in ``encoders/``.

Each kernel takes tensors and parameters and returns tensors; it imports nothing from the model
file it speeds up (the model imports it). ``onlstm``, ``ordered_memory`` and ``td_treelstm`` are
the fast recurrences of the encoders of the same names, tested equal to their references; ``gemm``
picks the library of the per-step matrix products, and ``cpp_ext`` builds the C++ sources in
``csrc/`` on first use.
"""
