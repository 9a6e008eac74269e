"""A bounded cache of open file descriptors (the WAL's segment files, offset indexes' appends).

Each engine owns one (``Store.files``), which every WAL and offset index of its data dir opens files through, so
two engines in one process never share or evict each other's descriptors; a WAL opened on its own (tests, tools)
makes its own. Invariant: the cache itself holds at most ``capacity`` descriptors, whatever the number of WALs
using it; an idle WAL holds none. A descriptor is an :class:`OpenFile`, closed when the last reference to it goes (CPython's reference
counting): the cache drops its reference when it evicts the least recently used entry, and an entry still in use
elsewhere (an append in progress, a ``FileRegion`` being sent with ``sendfile``) keeps its descriptor open until that
use ends. So the process holds at most ``capacity`` descriptors plus the ones in use, and a file evicted while
being sent is never closed under the sender.

The default capacity is half the soft ``RLIMIT_NOFILE`` limit (the other half is for sockets and everything else),
read when the cache is created; :meth:`FileCache.resize` changes it. Opening a file when the process is out of
descriptors (EMFILE/ENFILE) empties the cache once and retries.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

__all__ = ["FileCache", "OpenFile", "default_capacity"]

_MAX_DEFAULT = 1 << 16  # when the soft limit is unlimited or huge


class OpenFile:
    """One open descriptor, closed when nothing refers to it any more."""

    __slots__ = ("fd",)

    def __init__(self, path: Path, flags: int = os.O_RDONLY) -> None:
        self.fd = os.open(path, flags, 0o644)

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:  # os.close bound early: module globals are gone at interpreter exit
        if hasattr(self, "fd"):  # not when os.open raised
            try:
                _close(self.fd)
            except OSError:  # nothing can be done about it here; the data was flushed (or not) by fsync
                pass


def default_capacity() -> int:
    """Half the soft limit on open descriptors (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft > 2 * _MAX_DEFAULT:
        return _MAX_DEFAULT
    return max(16, soft // 2)


class FileCache:
    """Least-recently-used open files keyed by (path, open flags); thread-safe."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = default_capacity() if capacity is None else capacity
        self._files: OrderedDict[tuple[Path, int], OpenFile] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._files)

    def get(self, path: Path, flags: int = os.O_RDONLY) -> OpenFile:
        """The open file for ``path`` with ``flags``, opened (and the least recently used evicted) when missing."""
        key = (path, flags)
        file = self._files.get(key)  # the hit needs no lock: each dict operation is atomic
        if file is not None:
            try:
                self._files.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: the caller's reference keeps it open
                pass
            return file
        with self._lock:
            file = self._files.get(key)
            if file is not None:
                return file
            try:
                file = OpenFile(path, flags)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._files:
                    raise
                self._files.clear()  # closes every descriptor not in use elsewhere
                file = OpenFile(path, flags)
            self._files[key] = file
            while len(self._files) > self.capacity:
                self._files.popitem(last=False)
            return file

    def discard(self, path: Path, *flags: int) -> None:
        """Forget ``path`` opened with each of ``flags`` (its descriptor closes once no one uses it)."""
        with self._lock:
            for f in flags:
                self._files.pop((path, f), None)

    def resize(self, capacity: int) -> None:
        """Hold at most ``capacity`` descriptors from now on."""
        with self._lock:
            self.capacity = capacity
            while len(self._files) > capacity:
                self._files.popitem(last=False)
