"""Old entry point: ``python -m treernn.evaluate parse|trees|syneval ...`` is now
``python -m treernn parse|trees|syneval ...`` (:mod:`treernn.commands`)."""

import sys

from treernn.commands import main

if __name__ == "__main__":
    print("note: python -m treernn.evaluate is now python -m treernn <command>", file=sys.stderr)
    sys.exit(main())
