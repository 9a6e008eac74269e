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
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["write_all", "pwrite_all", "fsync", "fdatasync", "truncate", "append_file", "replace_file", "fsync_dir"]


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


def fsync(fd: int) -> None:
    """Flush the file's data and metadata to the disk."""
    os.fsync(fd)


def fdatasync(fd: int) -> None:
    """Flush the file's data (and the metadata needed to read it back) to the disk."""
    os.fdatasync(fd)


def truncate(fd: int, size: int) -> None:
    """Cut the file back to ``size`` bytes (the rollback of a failed append)."""
    os.ftruncate(fd, size)


def append_file(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Append ``data`` to ``path`` (created if missing) with one write, fsynced unless ``sync`` is False.

    On any error the file is cut back to its size before the call (best effort: when even that fails, the
    torn tail is what the reader's per-record checksum or framing drops on the next open)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            write_all(fd, data)
            if sync:
                fsync(fd)
        except OSError:
            try:
                truncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically: write a temporary file, fsync it, rename it over ``path``, fsync the
    directory. After a crash or an error ``path`` holds either its old bytes or all of the new ones."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        fsync(fd)
    except OSError:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """fsync a directory, so the names created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)
