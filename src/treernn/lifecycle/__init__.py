"""A run's lifecycle, from the composed config to ``trainer.fit`` and how the run ended.

What an invocation does is decided once, before anything is built, and followed by one executor:

- :mod:`.entry`: ``main(cfg)``, the run entry behind ``train.py`` and ``treernn-train``;
- :mod:`.plan`: one immutable plan (start, resume, rerun, skip, test, refuse) from the config, the
  run records (:mod:`.records`), the locks (:mod:`.locks`) and the checkpoints (:mod:`.runs`);
- :mod:`.execute`: lock, record the attempt, build, fit and/or test, record the result (with
  :mod:`.process`, :mod:`.loggers`, :mod:`.launch`, :mod:`.resume`);
- :mod:`.outcomes`: each way a run ends as a status, an exit code, a message and a sweep value;
- :mod:`.signals`: every signal handler of a run and of a sweep;
- :mod:`.sweeps`: a multirun's layout, start and end, and sweeps extended and archived.

Naming (:mod:`.resolvers`) and the rank and process identity (:mod:`.identity`) are read before
Hydra composes. ``CONTRIBUTING.md`` shows the flow as pseudo-code.
"""
