"""The disk's limits, measured in the same run beside the rows that compare with them.

Each is the median of :data:`TRIES` (a shared disk: single measurements here spread from 0.4 to 2.7 GB/s for
eight writers with fdatasync, and from 400 to 6,400 fsyncs/s, with what else the machine writes at the time). The
socket's limit (a loopback sendfile pump) is :func:`bench.servers.loopback_mb_s`.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

FILES = 4  # a 4-vgroup database, a 4-partition topic: four WAL files
TRIES = 3


def raw_writes(root: Path, chunk: int, writes: int, *, fsync: bool, writers: int = 1,
               files: int = FILES) -> tuple[int, float]:
    """(bytes, seconds) for ``writes`` appends of ``chunk`` bytes round-robin over ``files`` files under ``root``,
    each followed by ``fdatasync`` when ``fsync``; ``writers`` threads share the appends (os.write and fdatasync
    release the GIL), so ``writers`` > 1 is that many concurrent writers, each waiting for its own fdatasync."""
    root.mkdir(parents=True, exist_ok=True)
    fds = [os.open(root / f"raw{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for i in range(files)]
    buf = os.urandom(chunk)

    def writer(first: int) -> None:
        for k in range(first, writes, writers):
            fd = fds[k % files]
            os.write(fd, buf)
            if fsync:
                os.fdatasync(fd)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    for fd in fds:
        os.close(fd)
    return chunk * writes, seconds


def write_mb_s(root: Path, chunk: int, writes: int, *, fsync: bool, writers: int = 1) -> float:
    """The median MB/s of :data:`TRIES` :func:`raw_writes`."""
    return statistics.median(n / s for n, s in (raw_writes(root, chunk, writes, fsync=fsync, writers=writers)
                                                for _ in range(TRIES))) / 1e6


def fsyncs_per_second(root: Path, count: int = 2000) -> float:
    """Appends of 64 bytes to one file, each fdatasynced, per second (the median of :data:`TRIES`): the bound of
    one synchronous committer."""
    return statistics.median(count / raw_writes(root, 64, count, fsync=True, files=1)[1] for _ in range(TRIES))
