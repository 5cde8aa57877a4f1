"""glibc's malloc setting for the two long-running commands, ``elmo embed`` and ``elmo train``.

Both repeat the same allocations many times: a training step allocates the same tensors as the step before, and
every LSTM step of inference allocates its gate products again (2 MB for the original model at batch 32: 32 x 16,384
float32, made by oneDNN, which takes no output buffer). By default glibc serves blocks over its mmap threshold by mmap
and hands them back when freed, and trims freed heap above 128 KB; the next use takes the memory back one page fault
per 4 KB. ``keep_freed_memory`` serves blocks under 32 MB from the heap, with no trimming below 1 GiB free, so freed
memory stays in place for the next use:

* training: about 4,000 faults a tiny step before, under 100 after; 3-7 % of the step's time;
* embedding: 480 sentences with the original model at batch 32 took 2.3 million faults and 30 % longer with the mmap
  threshold pinned at 128 KB, 0.1 million with this setting; the process's peak memory on a long file is higher by
  a fixed amount (tiny model: about 90 MB) and stays flat as the file grows (benchmarks/embed_memory.py; figures in
  BENCHMARKS.md).

The process's resident memory stays near its peak, reached in its first steps or batches. The setting is global to
the process, so only a command-line process makes it, never an import or a library call.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # mallopt parameter numbers in glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest: blocks under it come from the heap
TRIM_THRESHOLD_BYTES = 1 << 30  # free heap kept before any is handed back


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


def keep_freed_memory() -> bool:
    """Keep freed memory for the next training step or LSTM step (no page faults to take it back). The mmap threshold
    is set first: a trim threshold alone also ends glibc's dynamic mmap threshold, sending every block over 128 KB
    to mmap (34,000 faults a step at the tiny preset)."""
    return _mallopt((M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
                    (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
