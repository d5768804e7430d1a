"""Old entry point: ``python -m treernn.msr ...`` is now ``python -m treernn msr ...``
(:mod:`treernn.commands.msr`)."""

import sys

from treernn.commands import main

if __name__ == "__main__":
    print("note: python -m treernn.msr is now python -m treernn msr", file=sys.stderr)
    sys.exit(main(["msr", *sys.argv[1:]]))
