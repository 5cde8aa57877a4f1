"""torchrun for ``elmo train --nproc N``, run in the launching process's child: torchrun's own log lines and its
traceback kept out of the way of the workers' one-line messages. Imported only there, so that no other command loads
torchrun's machinery."""

from __future__ import annotations

import logging
import tempfile

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args as torchrun_args
from torch.distributed.run import run as torchrun


def torchrun_quietly(argv: list[str]) -> int:
    """torchrun over ``argv`` (its own options, then the command); its exit code, that of the first worker to fail.
    The workers say what went wrong in one line each; torchrun's log lines and its ChildFailedError traceback after
    them would bury that line under 40 of its own, and a second Ctrl-C would end in its traceback too."""
    for name in ["torch.distributed", *logging.root.manager.loggerDict]:
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    # torchrun's log folder (empty: nothing is redirected into it) in a temporary folder removed after; by default
    # it makes one in the system's temporary folder and leaves it there, one more after every run
    with tempfile.TemporaryDirectory(prefix="elmo-torchrun-") as logs:
        try:
            torchrun(torchrun_args(["--log-dir", logs, *argv]))
        except ChildFailedError as err:
            code = err.get_first_failure()[1].exitcode
            return 128 - code if code < 0 else code or 1  # a worker ended by a signal: 128 + its number, as a shell
        except SignalException as err:  # stopped at once (a second Ctrl-C): the last checkpoint stays
            return 128 + int(err.sigval)
    return 0
