"""``python -m elmo``: the command line, as the ``elmo`` script runs it."""

import sys

from elmo.cli import main

sys.exit(main())
