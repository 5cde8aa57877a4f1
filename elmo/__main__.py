"""``python -m elmo``: the command line, as the ``elmo`` script runs it."""

from elmo.cli import run_and_exit

run_and_exit()
