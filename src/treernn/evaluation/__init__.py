"""Evaluations of trained models that both the commands (``python -m treernn syneval|msr|rerank``)
and the test-time callbacks run: targeted syntactic evaluation (`.syneval`), tree scoring
(`.tree_scoring`), sentence completion (`.completion`), k-best reranking
(`.reranking`) and their stand-ins built from UD English-EWT (`.ewt_standins`)."""
