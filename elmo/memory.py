"""Keeping a long embedding run's memory flat: glibc's allocator otherwise lets it creep up.

glibc raises its mmap threshold dynamically (up to 32 MB) each time a large block is freed, after which every
batch's ever-different tensor sizes are carved from the heap and fragment it, and a long run's resident memory
creeps up. A fixed threshold sends large tensors to mmap, returned to the system when freed (measured by
benchmarks/embed_memory.py; figures in BENCHMARKS.md). The setting is global to the process and costs some page
faults, so only a command-line process should make it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold (no dynamic growth); False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False
