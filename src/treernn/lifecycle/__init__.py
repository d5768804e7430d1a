"""A run's lifecycle, from the composed config to ``trainer.fit`` and how the run ended.

What an invocation does is decided once, before anything is built, and followed by one executor:

- `.entry`: ``main(cfg)``, the run entry behind ``train.py`` and ``treernn-train``;
- `.plan`: one immutable plan (start, resume, rerun, skip, test, refuse) from the config, the
  run records (`.records`), the locks (`.locks`) and the checkpoints (`.runs`);
- `.execute`: lock, record the attempt, build, fit and/or test, record the result (with
  `.process`, `.loggers`, `.launch`, `.resume`);
- `.outcomes`: each way a run ends as a status, an exit code, a message and a sweep value;
- `.signals`: every signal handler of a run and of a sweep;
- `.sweeps`: a multirun's layout, start and end, and sweeps extended and archived.

Naming (`.resolvers`) and the rank and process identity (`.identity`) are read before
Hydra composes. ``CONTRIBUTING.md`` shows the flow as pseudo-code.
"""
