"""WAL file descriptors (issue 13, item 8): they come from one bounded cache, the engine's, shared by its WALs (issue
23: one per engine, no longer process-wide), so thousands of partitions run under a low ``ulimit -n``, and an idle WAL
holds none."""

from __future__ import annotations

import os
import subprocess
import sys

from test_wal_damage import scratch  # noqa: F401 (the fixture: a directory on tmpfs when there is one)

from walgate.storage.filecache import FileCache
from walgate.storage.wal import KIND_KAFKA, Wal, WalOptions

# runs in a child process: its descriptor limit is lowered before walgate is imported
_SCRIPT = r"""
import os, resource, sys
from pathlib import Path

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from walgate.storage.filecache import FileCache
from walgate.storage.wal import KIND_DATA, Wal, WalOptions

files = FileCache()  # what an engine makes, sized by the limit in force

root, n = Path(sys.argv[1]), int(sys.argv[2])
fds = lambda: len(os.listdir("/proc/self/fd"))
base = fds()
peak = 0
wals = []
for i in range(n):
    wal = Wal.open(root / str(i), WalOptions(segment_bytes=200), files=files)
    wal.append([(KIND_DATA, 1, i, b"first %d" % i)])
    wals.append(wal)
    peak = max(peak, fds())
for i, wal in enumerate(wals):
    assert wal.append([(KIND_DATA, 1, i, b"second %d" % i * 20)]) == 1
    assert [e.body for e in wal.read_from(0)] == [b"first %d" % i, b"second %d" % i * 20]
    peak = max(peak, fds())
for wal in wals:
    wal.close()
reopened = [Wal.open(root / str(i), WalOptions(segment_bytes=200), files=files) for i in range(n)]  # the data dir starts
for i, wal in enumerate(reopened):
    assert wal.read(1).body == b"second %d" % i * 20 and wal.region(0, KIND_DATA).read() == b"first %d" % i
    peak = max(peak, fds())
print(base, peak, files.capacity)
files.resize(0)
print(fds())
"""


def test_thousands_of_wals_under_a_low_descriptor_limit(scratch):  # noqa: F811 (the fixture)
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(scratch), "2000"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    base, peak, capacity = map(int, done.stdout.split()[:3])
    idle = int(done.stdout.split()[3])
    assert capacity == 128  # half the soft limit
    assert peak <= base + capacity + 2, (base, peak)
    assert idle == base  # with the cache emptied, 2,000 open WALs hold no descriptor


def test_an_evicted_file_stays_open_while_a_region_uses_it(tmp_path):
    cache = FileCache(capacity=2)
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode() * 10)
    a = cache.get(tmp_path / "a")
    cache.get(tmp_path / "b")
    cache.get(tmp_path / "c")  # evicts a
    assert len(cache) == 2 and os.pread(a.fd, 3, 0) == b"aaa"  # still open: we hold it
    fd = a.fd
    del a
    try:
        os.fstat(fd)
        raise AssertionError("the evicted descriptor is still open")
    except OSError:
        pass


def test_a_region_survives_the_eviction_of_its_segment(tmp_path):
    files = FileCache(capacity=1)
    wal = Wal.open(tmp_path / "a", WalOptions(), files=files)
    wal.append([(KIND_KAFKA, 1, 0, b"batch" * 100)])
    region = wal.region(0, KIND_KAFKA)
    other = Wal.open(tmp_path / "b", WalOptions(), files=files)
    other.append([(KIND_KAFKA, 1, 0, b"other")])
    assert other.read(0).body == b"other"  # the cache now holds b's files only
    assert region.read() == b"batch" * 100
    wal.close()
    other.close()
