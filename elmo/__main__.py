"""``python -m elmo``: the command line, as the ``elmo`` script runs it."""

from elmo.launch import run

run()
