"""glibc's malloc settings for the two long-running commands, each the opposite of the other's needs.

* ``elmo embed`` (``fix_mmap_threshold``): glibc raises its mmap threshold dynamically (up to 32 MB) each time a
  large block is freed, after which every batch's ever-different tensor sizes are carved from the heap and fragment
  it, and a long run's resident memory creeps up. A fixed threshold sends large tensors to mmap, returned to the
  system when freed (measured by benchmarks/embed_memory.py; figures in BENCHMARKS.md).
* ``elmo train`` (``keep_freed_memory``): every step allocates the same tensors again. By default glibc hands a
  step's freed megabytes back to the system at the end of the step, and the next step takes them back one page
  fault per 4 KB: about 4,000 faults a step at the tiny preset, 3-7 % of its time (Intel Xeon with AMX, 2 cores).
  Blocks under 32 MB from the heap, and no trimming of it below 1 GiB free, leave the freed memory in place for the
  next step: under 100 faults a step. The process's resident memory then stays at its peak, which a training run
  reaches at its first step anyway.

The settings are global to the process, so only a command-line process makes them, never an import or a library
call.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # mallopt parameter numbers in glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024
DEFAULT_TRIM_THRESHOLD_BYTES = 128 * 1024  # glibc's own
TRAINING_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest: blocks under it come from the heap
TRAINING_TRIM_THRESHOLD_BYTES = 1 << 30  # free heap kept before any is handed back


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc's ``mallopt`` for each (parameter, value); False where the C library is not glibc or refused one."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return all(bool(libc.mallopt(parameter, value)) for parameter, value in settings)
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold (no dynamic growth) and its default trim threshold: flat memory over a long
    embedding run."""
    return _mallopt((M_MMAP_THRESHOLD, threshold), (M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD_BYTES))


def keep_freed_memory() -> bool:
    """Keep a training step's freed memory for the next step (no page faults to take it back). The mmap threshold
    is set first: a trim threshold alone also ends glibc's dynamic mmap threshold, sending every block over 128 KB
    to mmap (34,000 faults a step at the tiny preset)."""
    return _mallopt((M_MMAP_THRESHOLD, TRAINING_MMAP_THRESHOLD_BYTES),
                    (M_TRIM_THRESHOLD, TRAINING_TRIM_THRESHOLD_BYTES))
