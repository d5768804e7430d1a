"""Old entry point: ``python -m treernn.results [trees|throughput] ...`` is now
``python -m treernn report accuracy|tree-f1|throughput ...`` (:mod:`treernn.commands.report`)."""

import sys
from collections.abc import Sequence

from treernn.commands import main as commands_main

RENAMED = {"trees": "tree-f1", "throughput": "throughput"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    report = RENAMED.get(argv[0], "accuracy") if argv else "accuracy"
    rest = argv[1:] if argv and argv[0] in RENAMED else argv
    print(f"note: this is now python -m treernn report {report}", file=sys.stderr)
    return commands_main(["report", report, *rest])


if __name__ == "__main__":
    sys.exit(main())
