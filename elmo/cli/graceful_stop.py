"""Ctrl-C and SIGTERM: every command meets SIGTERM as it meets Ctrl-C (``sigterm_as_interrupt``: what it finished is
kept, e.g. ``elmo embed``'s parts, and it exits 143), and ``elmo train`` stops after the step under way, with a
checkpoint, instead of losing the steps since the last one.

A scheduler (SLURM, Kubernetes, ``docker stop``) sends SIGTERM some seconds before it kills; a user presses Ctrl-C.
Either one asks the trainer to stop at its next step boundary (``Trainer.request_stop``), where the run ends as at
its step limit: a checkpoint is written, and the command exits 130 (SIGINT) or 143 (SIGTERM). A second Ctrl-C more
than ``REPEAT_SECONDS`` after the first stops at once (the last checkpoint stays, as after a kill); torchrun passes a
terminal's Ctrl-C on to its workers, which then see it twice within a moment, so a quick repeat is the same request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

REPEAT_SECONDS = 2.0  # a second Ctrl-C within this time of the first is the same request (torchrun's copy of it)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as a shell reports a process it stopped


class Stoppable(Protocol):
    stop_requested: str | None

    def request_stop(self, reason: str) -> None: ...


class Terminated(KeyboardInterrupt):
    """SIGTERM, met as Ctrl-C is: the command stops where it is, keeping what it finished (``elmo embed``'s parts),
    and exits 143."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM raises ``Terminated`` instead of ending the process on the
    spot, so that a command's own cleanup and its "--resume continues" line run as after Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_after_step_on_signals(trainer: Stoppable, announce: bool = True) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM ask ``trainer`` to stop after its current step (main thread only).
    ``announce``: say so on stderr (the main process of a run does)."""
    first = [0.0]

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if trainer.stop_requested is not None:  # asked again (Ctrl-C, or torchrun passing on a second one as SIGTERM)
            if time.monotonic() - first[0] > REPEAT_SECONDS:  # stop now: the last checkpoint stays
                raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt  # "terminated", 143 / 130
            return
        first[0] = time.monotonic()
        trainer.request_stop(name)
        if announce:  # os.write: a handler may run in the middle of another write to sys.stderr
            os.write(2, f"\n{name}: stopping after this step, with a checkpoint (Ctrl-C again to stop at "
                        f"once)\n".encode())

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def wait_passing_signals(command: list[str], stop_file: Path) -> int:
    """Run ``command`` (torchrun over this command line, in a session of its own) to its end; its exit code, or
    130 / 143 after a stop asked for by Ctrl-C or SIGTERM. The request reaches the workers as ``stop_file`` (the run
    folder's ``.stop``, read by its main process at every step), not as a signal: torchrun answers a signal by
    ending its workers and printing its own traceback. A second Ctrl-C or SIGTERM stops the workers at once."""
    process = subprocess.Popen(command, start_new_session=True)  # the terminal's Ctrl-C reaches this process only
    asked: list = []  # the first request's signal name and time
    forced: list[str] = []  # a second request's signal name: the workers were stopped at once

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if asked and time.monotonic() - asked[1] > REPEAT_SECONDS:
            forced.append(name)
            os.killpg(process.pid, signal.SIGTERM)  # asked again: stop now (the last checkpoint stays)
        elif not asked:
            asked.extend([name, time.monotonic()])
            if stop_file.parent.is_dir():
                stop_file.write_text(name + "\n", encoding="utf-8")
            else:  # no run folder yet: nothing trained, nothing to keep
                os.killpg(process.pid, signal.SIGTERM)
            os.write(2, f"\n{name}: stopping after this step, with a checkpoint (Ctrl-C again to stop at once)\n"
                        .encode())

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if asked:
            stop_file.unlink(missing_ok=True)  # ours, if the run ended before reading it
    if forced:
        return EXIT_CODES[forced[0]]
    return EXIT_CODES[asked[0]] if asked and code == 0 else code
