"""Results across runs: the papers' numbers (`treernn.reporting.paper`, data only) and the
comparison tables of ``python -m treernn report table`` (`treernn.reporting.table`)."""
