"""Durable file operations: the one place storage/ writes, syncs, truncates and replaces files.

Invariant: each function does all it says or raises :class:`OSError`. A short
``write`` is raised as ENOSPC (on a regular file the kernel writes short only
when the file system is full), so a caller never mistakes part of its bytes for
all of them; callers roll back to their last complete record on any error.

Every durable write of ``storage/`` goes through this module and calls the
operating system only as ``os.<name>`` on this module's ``os`` attribute, so a
test can replace that one attribute (``tests/storage/faults.py``) and inject
ENOSPC, EIO, short writes or failing fsyncs at any chosen write of an append,
commit, catalog or producer-state update.

Every :func:`fsync` and :func:`fdatasync` (failed ones too, and those of the
functions built on them) is timed into the :class:`SyncLatency` its caller
passes: the engine's (``Store.syncs``), which every component of its data dir
was opened with, so two engines in one process count their own. They are plain
bucket counts per call that the gateway's metrics collector exports (storage/
knows nothing of Prometheus), on the real clock: a duration of the disk is real
time whatever clock the engine runs on.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
from pathlib import Path

from walgate.storage.clock import SYSTEM_CLOCK

__all__ = ["write_all", "pwrite_all", "fsync", "fdatasync", "truncate", "append_file", "replace_file", "fsync_dir",
           "rename", "unlink", "StagedFile", "LatencyRecorder", "SyncLatency"]


class LatencyRecorder:
    """Durations in ms counted per bucket: ``counts[i]`` are those <= ``bounds[i]`` (and above ``bounds[i - 1]``),
    the last count those above every bound. Thread-safe: syncs run on the storage thread and the WAL sync thread."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, ms: float) -> None:
        i = bisect.bisect_left(self.bounds, ms)
        with self._lock:
            self._counts[i] += 1
            self._sum += ms

    def snapshot(self) -> tuple[list[int], float]:
        """(count per bucket, sum of the durations in ms)."""
        with self._lock:
            return list(self._counts), self._sum


SYNC_BOUNDS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0)


class SyncLatency:
    """How long each fsync / fdatasync of one engine's data dir took: ``calls`` maps the call (``fsync``,
    ``fdatasync``) to its :class:`LatencyRecorder`."""

    def __init__(self) -> None:
        self.calls: dict[str, LatencyRecorder] = {"fsync": LatencyRecorder(SYNC_BOUNDS_MS),
                                                  "fdatasync": LatencyRecorder(SYNC_BOUNDS_MS)}


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the descriptor's position (or the end, for O_APPEND); ENOSPC when short."""
    view = memoryview(data)
    written = os.write(fd, view)
    if written != len(view):
        raise OSError(errno.ENOSPC, f"short write: {written} of {len(view)} bytes", None)


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``; ENOSPC when short."""
    written = os.pwrite(fd, data, offset)
    if written != len(data):
        raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes", None)


def fsync(fd: int, *, syncs: SyncLatency) -> None:
    """Flush the file's data and metadata to the disk (timed into ``syncs``)."""
    start = SYSTEM_CLOCK.monotonic()
    try:
        os.fsync(fd)
    finally:
        syncs.calls["fsync"].observe((SYSTEM_CLOCK.monotonic() - start) * 1000)


def fdatasync(fd: int, *, syncs: SyncLatency) -> None:
    """Flush the file's data (and the metadata needed to read it back) to the disk (timed into ``syncs``)."""
    start = SYSTEM_CLOCK.monotonic()
    try:
        os.fdatasync(fd)
    finally:
        syncs.calls["fdatasync"].observe((SYSTEM_CLOCK.monotonic() - start) * 1000)


def truncate(fd: int, size: int) -> None:
    """Cut the file back to ``size`` bytes (the rollback of a failed append)."""
    os.ftruncate(fd, size)


def append_file(path: Path, data: bytes, *, syncs: SyncLatency, sync: bool = True) -> None:
    """Append ``data`` to ``path`` (created if missing) with one write, fsynced unless ``sync`` is False.

    On any error the file is cut back to its size before the call (best effort: when even that fails, the
    torn tail is what the reader's per-record checksum or framing drops on the next open)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            write_all(fd, data)
            if sync:
                fsync(fd, syncs=syncs)
        except OSError:
            try:
                truncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, *, syncs: SyncLatency, mtime: float | None = None) -> None:
    """Replace ``path`` by ``data`` atomically: write a temporary file, fsync it, rename it over ``path``, fsync the
    directory. After a crash or an error ``path`` holds either its old bytes or all of the new ones. With ``mtime``,
    the new file's modification time is set to it before the rename (a cleaned segment keeps its retention age)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if mtime is not None:
            os.utime(fd, (mtime, mtime))
        fsync(fd, syncs=syncs)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    _replace(tmp, path)
    fsync_dir(path.parent, syncs=syncs)


class StagedFile:
    """A file written piece by piece under a temporary name (``<path>.tmp``), then put in place atomically, as
    :func:`replace_file` writes one at once: :meth:`write` appends and fdatasyncs, or with ``sync=False`` leaves
    that to :meth:`sync`, which may run on another thread so that the writer's thread does not wait for the disk.
    The commit, in parts so that none of its fsyncs need run on the writer's thread: :meth:`seal` (the modification
    time; the next :meth:`sync` is an fsync of the whole file), :meth:`sync`, :meth:`rename` (over ``path``), then
    :func:`fsync_dir` of the directory. :meth:`discard` closes and deletes it. Until the rename ``path`` is
    untouched; a crash leaves the ``.tmp``."""

    def __init__(self, path: Path, *, syncs: SyncLatency) -> None:
        self.path = path
        self.syncs = syncs
        self.tmp = path.with_name(path.name + ".tmp")
        self.size = 0
        self.renamed = False  # True once the commit's rename is done (a failure after it leaves the file in place)
        self.unsynced = False  # bytes written since the last fdatasync
        self._failed = False  # an fdatasync failed: the file's bytes may be lost whatever a later sync says
        self._whole = False  # sealed: the next sync is an fsync (its modification time too)
        self._fd: int | None = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def write(self, data: bytes, sync: bool = True) -> None:
        assert self._fd is not None
        self._check()
        write_all(self._fd, data)
        if sync:
            self.sync()
        self.unsynced = not sync
        self.size += len(data)

    def sync(self) -> None:
        """fdatasync what was written. Safe on another thread while no other call is made on this file. Once one
        failed, every later write and the commit raise (the kernel may have dropped the bytes and report a later
        sync as done): the file can only be discarded."""
        assert self._fd is not None
        try:
            (fsync if self._whole else fdatasync)(self._fd, syncs=self.syncs)
        except OSError:
            self._failed = True
            raise
        self.unsynced = False

    @property
    def failed(self) -> bool:
        """Whether a sync of it failed (it can only be discarded)."""
        return self._failed

    def _check(self) -> None:
        if self._failed:
            raise OSError(errno.EIO, f"{self.tmp}: an fdatasync of it failed")

    def seal(self, mtime: float | None = None) -> None:
        """Written whole: set its modification time (when given); the next :meth:`sync` is an fsync, which makes
        the file durable whole before :meth:`rename`. On an error the file is discarded."""
        assert self._fd is not None
        try:
            self._check()
            if mtime is not None:
                os.utime(self._fd, (mtime, mtime))
        except OSError:
            self.discard()
            raise
        self._whole = self.unsynced = True

    def rename(self) -> None:
        """Rename it over ``path`` once sealed and synced (fsynced here when not yet); the directory's fsync is the
        caller's. On an error before the rename the file is discarded and ``path`` untouched."""
        fd = self._fd
        assert fd is not None
        try:
            self._check()
            if self.unsynced or not self._whole:
                self._whole = True
                self.sync()
        except OSError:
            self.discard()
            raise
        self._fd = None
        os.close(fd)
        _replace(self.tmp, self.path)
        self.renamed = True

    def discard(self) -> None:
        """Close and delete the temporary file (best effort: a leftover is deleted at the next open)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def _replace(tmp: Path, path: Path) -> None:
    """Rename the temporary file ``tmp`` over ``path``; when that fails, ``tmp`` is deleted (best effort: a leftover
    is deleted at the next open) and the error raised."""
    try:
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def rename(src: Path, dst: Path) -> None:
    """Rename ``src`` over ``dst`` atomically (the caller fsyncs the directory, :func:`fsync_dir`)."""
    os.replace(src, dst)


def unlink(path: Path, *, missing_ok: bool = False) -> None:
    """Delete ``path`` (the caller fsyncs the directory, :func:`fsync_dir`)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def fsync_dir(path: Path, *, syncs: SyncLatency) -> None:
    """fsync a directory, so the names created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd, syncs=syncs)
    finally:
        os.close(fd)
