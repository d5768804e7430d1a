"""Lightning callbacks (NT-ASGD, parse F1, ...)."""
