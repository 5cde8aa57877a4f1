"""``python -m elmo.cli``: the command line, as ``python -m elmo`` runs it."""

from elmo.cli import run_and_exit

run_and_exit()
