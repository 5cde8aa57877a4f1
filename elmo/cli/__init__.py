"""``elmo``: the command line, a thin layer over the library.

Exit codes: 0 success; 1 a runtime error (a bad input file, a missing model ...); 2 a usage error (argparse's own,
or options that do not go together); 130 interrupted. The library's own errors (:class:`elmo.errors.ElmoError`) and
file-system errors (a missing file, no permission, a full disk) end in one line on stderr,
``elmo <command>: error: <message>``; anything else is a bug in elmo and keeps its traceback (``--debug`` shows the
traceback for every error). ``-`` names standard input, or standard output, where the format allows it.

Each command group registers its own commands (``add_commands``): :mod:`elmo.cli.embed` (embed, show, convert,
info), :mod:`elmo.cli.train` (vocab, train, perplexity, baselines, score, substitutes, export,
dump-token-embeddings), :mod:`elmo.cli.context` (similar, plot), :mod:`elmo.cli.tasks` (task) and
:mod:`elmo.cli.probes` (probe), :mod:`elmo.cli.cache` (cache); :mod:`elmo.cli.common`, :mod:`elmo.cli.stdio` and :mod:`elmo.cli.messages` hold
what they share.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import warnings
from typing import NoReturn

from elmo import __version__
from elmo.cli import cache, context, embed, probes, tasks, train
from elmo.cli.common import STDIO, CommandLineError, add_global_flags, check_usage
from elmo.cli.graceful_stop import EXIT_CODES, Terminated, sigterm_as_interrupt
from elmo.cli.messages import configure_logging, one_line, show_warning, users_to_fix
from elmo.cli.outputs import check_outputs
from elmo.cli.stdio import Stdio
from elmo.devices import check_device
from elmo.io.atomic import FolderInUseError
from elmo.limits import is_digits

__all__ = ["STDIO", "CommandLineError", "build_parser", "configure_logging", "main"]


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line, as every other error (argparse prints its whole usage block
    above it): what is wrong and where the usage is. Every command's parser is one (``add_subparsers`` makes its
    children of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``elmo`` argument parser: every command, its arguments and their help."""
    parser = OneLineParser(prog="elmo", description="ELMo contextual word vectors in PyTorch.",
                                     epilog="exit codes: 0 done, 1 error (one line; --debug for the traceback), "
                                            "2 usage error, 130 interrupted")
    parser.add_argument("--version", action="version", version=f"elmo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (embed, train, context, tasks, probes, cache):  # the order of `elmo --help`
        group.add_commands(sub)
    add_global_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``elmo`` command line; returns the exit code (0 done, 1 error, 2 usage error, 130 interrupted).

    A bug (any error that is not ours or the file system's) is raised, so Python prints its traceback and exits 1.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version (0) or a usage error (2, already printed): a code, as for others
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    configure_logging(quiet=getattr(args, "quiet", False), debug=args.debug)
    args.stdio = Stdio()
    try:
        return _run(args, args.leaf_parser.prog)
    finally:
        args.stdio.close()


def run_and_exit() -> None:
    """The ``elmo`` process: ``main()``, then exit with its code.

    Before exiting, every object left is moved out of the garbage collector's reach (``gc.freeze``): the collection
    Python runs at exit would otherwise walk all of torch's objects, about half a second of every command for nothing
    (every file was written and closed by then; standard streams are flushed at exit all the same)."""
    code = main()
    gc.freeze()
    sys.exit(code)


def _run(args: argparse.Namespace, command: str) -> int:
    """Check the options and run the command; what went wrong becomes an exit code and at most one line."""
    try:
        with warnings.catch_warnings(), sigterm_as_interrupt():
            warnings.showwarning = show_warning
            check_usage(args, command, args.leaf_parser)
            check_outputs(args, command)
            if getattr(args, "cuda_device", None) is not None:  # allennlp elmo's --cuda-device N
                args.device = "cpu" if args.cuda_device < 0 else f"cuda:{args.cuda_device}"
            check_device(getattr(args, "device", None), "--device")
            args.func(args)
    except BrokenPipeError:  # `elmo show ... | head`: the reader left; nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit has somewhere to go
        return 0
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (Terminated)
        terminated = isinstance(err, Terminated)
        _say_error(f"{command}: {'terminated' if terminated else 'interrupted'}", failure=False)  # torchrun: one
        return EXIT_CODES["SIGTERM" if terminated else "SIGINT"]
    except (CommandLineError, FolderInUseError) as err:  # a wrong command line: an output folder it cannot use too
        if args.debug:
            raise
        _say_error(f"{command}: error: {args.stdio.display(one_line(err))}")
        return 2
    except Exception as err:
        if args.debug or not users_to_fix(err):
            raise  # a bug in elmo (or --debug): the whole traceback
        _say_error(f"{command}: error: {args.stdio.display(one_line(err))}")
        return 1
    return 0


FIRST_PROCESS_GRACE_S = 2.0  # under torchrun, how long another process's error waits for the first's line


def _say_error(line: str, failure: bool = True) -> None:
    """An error's one line on stderr; under torchrun, from the first process: every process meets the same
    arguments and files, and N copies of the line would read as N problems (the exit code is each process's own).
    Another process that fails (``failure``) waits a moment first: when the first process fails alike, torchrun
    stops this one and the first's line is the only one (otherwise the first, stopped by torchrun, would say only
    "terminated"); when it does not, this process's line follows, naming it."""
    rank, world = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE")
    consistent = is_digits(rank) and world is not None and is_digits(world) and int(rank) < int(world)
    if rank == "0" or not consistent:  # not torchrun's environment (a stray RANK=3): no first process would say it
        print(line, file=sys.stderr)
    elif failure:
        time.sleep(FIRST_PROCESS_GRACE_S)  # torchrun's SIGTERM ends this process here if the first one failed
        print(f"{line} (process {rank})", file=sys.stderr)
