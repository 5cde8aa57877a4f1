"""The ``elmo`` process's entry point: the command line, with Ctrl-C answered from the first moment.

Loading the command line takes about a second (mostly torch's import). A Ctrl-C then ended in a traceback from
inside that import, or aborted the process from inside torch's C++ code ("terminate called after throwing an
instance of 'pybind11::error_already_set'"). While it loads, a Ctrl-C now ends the process at once with the line
and the exit code (130) of one that comes later; nothing has been read or written by then.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 130  # 128 + SIGINT, as elmo.cli.graceful_stop.EXIT_CODES


def run() -> None:
    """Install the Ctrl-C answer, load the command line, hand Ctrl-C back to it, and run the command."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:  # a shell that started elmo ignoring Ctrl-C keeps it so
        signal.signal(signal.SIGINT, _stop_while_loading)
    # the one function-local import of an elmo module (docs/architecture.md, rule 3): it must come after the above
    from elmo.cli import run_and_exit
    signal.signal(signal.SIGINT, previous)
    run_and_exit()


def _stop_while_loading(signum: int, frame: object) -> None:
    """Ctrl-C before the command line is ready: no exception (raised inside torch's import, it can abort the
    process), just the line and the code."""
    command = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else ""
    os.write(2, f"elmo {command}: interrupted\n".replace(" :", ":").encode())
    os._exit(INTERRUPTED)
