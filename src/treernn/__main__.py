"""``python -m treernn <command> ...``; ``python -m treernn --help`` lists the commands."""

import sys

from treernn.commands import main

sys.exit(main())
