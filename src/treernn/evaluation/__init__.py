"""Evaluations of trained models that both the commands (``python -m treernn syneval|msr|rerank``)
and the test-time callbacks run: targeted syntactic evaluation (:mod:`.syneval`), tree scoring
(:mod:`.tree_scoring`), sentence completion (:mod:`.completion`), k-best reranking
(:mod:`.reranking`) and their stand-ins built from UD English-EWT (:mod:`.ewt_standins`)."""
