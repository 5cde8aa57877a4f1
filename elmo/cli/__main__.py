"""``python -m elmo.cli``: the command line, as ``python -m elmo`` runs it."""

import sys

from elmo.cli import main

sys.exit(main())
