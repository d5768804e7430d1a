"""Every claim of the three papers (and Hu et al. 2020's SyntaxGym comparison) on one scoreboard,
``python -m treernn report claims``: the claims as data (`catalogue`), each claim's plan fixed
before its runs (`plans`), the statistics of a verdict (`statistics`), the sweeps read
(`sweeps`), the rule (`rule`) and the Markdown report (`render`)."""
