"""A run's lifecycle: what an invocation does is decided once (:mod:`.plan`), before anything is
built, and followed by one executor (:mod:`.execute`)."""
