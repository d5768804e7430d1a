"""Results across runs: the papers' numbers (:mod:`~treernn.reporting.paper`, data only) and the
comparison tables of ``python -m treernn report table`` (:mod:`~treernn.reporting.table`)."""
