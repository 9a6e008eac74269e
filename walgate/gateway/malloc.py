"""glibc malloc thresholds for a server that moves megabyte buffers.

glibc serves an allocation above 128 KiB (a threshold it raises as such blocks are freed) with ``mmap``, and gives
the top of the heap back to the kernel once more than 128 KiB of it is free. A Kafka Produce request or Fetch
response of ~1 MiB is copied through a few such buffers, so each one was mapped or grown, zeroed by page faults,
and unmapped or trimmed again: with 1 KiB records, system time was more than half of walgate's CPU. Fixed
thresholds keep buffers up to :data:`MMAP_THRESHOLD` in the heap and up to :data:`TRIM_THRESHOLD` of free heap
for reuse. A process started with glibc's own ``MALLOC_*_THRESHOLD_`` variables keeps them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 32 << 20
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune() -> bool:
    """Set both thresholds; False where there is no glibc ``mallopt`` or the environment already sets them."""
    if any(name in os.environ for name in _ENV):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
