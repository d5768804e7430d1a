"""Old entry point: ``python -m treernn.rerank rerank|make-candidates ...`` is now
``python -m treernn rerank score|make-candidates ...`` (:mod:`treernn.commands.rerank`)."""

import sys

from treernn.commands import main

if __name__ == "__main__":
    old = sys.argv[1] if len(sys.argv) > 1 else "rerank"
    action = "score" if old == "rerank" else old
    print(f"note: this is now python -m treernn rerank {action}", file=sys.stderr)
    sys.exit(main(["rerank", action, *sys.argv[2:]]))
