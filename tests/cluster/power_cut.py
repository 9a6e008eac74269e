"""Lost unsynced writes: a real ``walgate serve`` process "power-cut", losing every byte it wrote and did not
fsync, as a machine that loses power does.

How it is built, and why this way. Every durable write of ``walgate/storage/`` goes through
``walgate.storage.fileio``, which calls the operating system only as ``os.<name>`` on its ``os`` attribute (the seam
``tests/storage/faults.py`` injects ENOSPC/EIO through). :func:`install` replaces that attribute, inside the server
process itself, by :class:`Recorder`, which forwards every call to the real ``os`` and remembers, per file (by inode,
so that a sync through another descriptor, as the WAL's sync thread makes, counts), what each ``write``, ``pwrite``
and ``ftruncate`` since the file's last successful ``fsync``/``fdatasync`` changed: the bytes it overwrote and the
size before it. A sync that returns drops the records of every change made before it started (a change made while
it ran may or may not be on the disk, so it stays undoable). The power cut (:func:`cut`, on SIGUSR1) takes the
recorder's lock, so no change and no bookkeeping is half done, writes back every record in reverse (the files are
then exactly as their last syncs left them) and SIGKILLs the process while still holding the lock: nothing runs
after it. The restarted process reads what a disk that lost power would hold.

The alternatives: ``dm-flakey``/``dm-log-writes`` need device-mapper targets and a block device (root, a kernel
that has them: this machine's may not); an ``LD_PRELOAD`` library would see every write of every file, but needs a
C build and would have to track Python's descriptors from below; a tmpfs or overlay has no fsync to honour at all.
The fileio seam sees exactly the writes storage makes and the syncs it relies on, in about a hundred lines of
Python, and the server runs unmodified otherwise.

How a test uses it: the server's environment from :func:`environment` (``PYTHONPATH`` holding
``power_cut_site/``, whose ``sitecustomize`` calls :func:`install` when ``WGT_POWER_CUT`` is set, and unsets it so
the server's own child processes, SQL workers, run without it), then :func:`power_cut` (SIGUSR1, wait for the
SIGKILL). The server logs ``power-cut recorder installed`` at start, and at the cut one line saying how many files
and bytes it took back, and which files.

What it does not model: names. A creation, rename or deletion whose directory was not fsynced may also be undone by a
real power cut; the recorder keeps every name as it is (storage fsyncs the directory after each rename and deletion
it makes, ``fileio.fsync_dir``, and that is not checked here). And a real cut may keep some unsynced pages and lose
others; the recorder loses all of them: the worst case for acknowledged writes, while torn and holed files are what
the truncation and flipped-byte sweeps of every file kind cover.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Recorder", "install", "cut", "environment", "power_cut", "SIGNAL", "ENV"]

SIGNAL = signal.SIGUSR1
ENV = "WGT_POWER_CUT"
_SITE = Path(__file__).parent / "power_cut_site"


@dataclass
class _Change:
    seq: int  # the recorder's counter when it was made
    offset: int
    before: bytes  # what the file held at offset..offset+len(before) before it (short at the file's end)
    size: int  # the file's size before it


@dataclass
class _File:
    """A file with changes not yet synced: ``fd`` is the recorder's own read-write descriptor of it."""

    fd: int
    changes: list[_Change] = field(default_factory=list)


class Recorder:
    """A proxy for ``fileio.os`` that remembers every unsynced change and can undo them all.

    Invariant: a file (inode) absent from ``files`` holds, now, only bytes a successful sync made durable (what it
    held when the recorder first saw it counts as durable: a process starts on what its disk holds); one present
    returns to that state when its changes are written back newest first (:meth:`undo_all`). Every change and every
    update of ``files`` is made under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[tuple[int, int], _File] = {}
        self._seq = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _record(self, fd: int, offset: int, length: int) -> None:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        entry = self.files.get(key)
        if entry is None:  # its own descriptor: fd may be write-only, closed or renamed before the cut
            entry = self.files[key] = _File(os.open(f"/proc/self/fd/{fd}", os.O_RDWR))
        self._seq += 1
        entry.changes.append(_Change(self._seq, offset, os.pread(entry.fd, length, offset), st.st_size))

    def write(self, fd: int, data: Any) -> int:
        with self.lock:
            appending = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            offset = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            self._record(fd, offset, len(data))
            return os.write(fd, data)

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        with self.lock:
            self._record(fd, offset, len(data))
            return os.pwrite(fd, data, offset)

    def ftruncate(self, fd: int, length: int) -> None:
        with self.lock:
            self._record(fd, length, max(0, os.fstat(fd).st_size - length))
            os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        self._sync(fd, os.fsync)

    def fdatasync(self, fd: int) -> None:
        self._sync(fd, os.fdatasync)

    def _sync(self, fd: int, call: Callable[[int], None]) -> None:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self.lock:
            started = self._seq
        call(fd)  # not under the lock: other files' writes go on meanwhile, as they do on a disk
        with self.lock:
            entry = self.files.get(key)
            if entry is not None:
                entry.changes = [c for c in entry.changes if c.seq > started]
                if not entry.changes:
                    os.close(entry.fd)
                    del self.files[key]

    def undo_all(self) -> tuple[int, int]:
        """Write every file back to what its last sync made durable (the caller holds ``lock``); returns (files,
        bytes written after their last sync that were taken back)."""
        dropped = 0
        for entry in self.files.values():
            for change in reversed(entry.changes):
                dropped += max(0, os.fstat(entry.fd).st_size - change.size)
                view = memoryview(change.before)
                while view:
                    view = view[os.pwrite(entry.fd, view, change.offset + len(change.before) - len(view)):]
                os.ftruncate(entry.fd, change.size)
        return len(self.files), dropped


_recorder: Recorder | None = None


def install() -> None:
    """Make this process's storage writes undoable and SIGUSR1 its power cut (from ``sitecustomize``, before any
    thread starts: the signal is blocked in every thread and taken by a thread of its own)."""
    global _recorder
    from walgate.storage import fileio

    _recorder = Recorder()
    fileio.os = _recorder  # type: ignore[assignment]
    signal.pthread_sigmask(signal.SIG_BLOCK, {SIGNAL})  # inherited by every thread started from now on
    threading.Thread(target=_wait_for_cut, name="power-cut", daemon=True).start()
    print(f"power-cut recorder installed (pid {os.getpid()}; {SIGNAL.name} cuts the power)", file=sys.stderr,
          flush=True)


def _wait_for_cut() -> None:
    signal.sigwait({SIGNAL})
    cut()


def cut() -> None:
    """Lose every unsynced change and die by SIGKILL, holding the recorder's lock (nothing is written after)."""
    assert _recorder is not None, "install() first"
    _recorder.lock.acquire()
    names = sorted(os.readlink(f"/proc/self/fd/{entry.fd}") for entry in _recorder.files.values())
    files, dropped = _recorder.undo_all()
    os.write(2, f"power cut: {files} files taken back to their last sync, {dropped} unsynced bytes lost:"
                f" {', '.join(names)}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def environment(base: dict[str, str]) -> dict[str, str]:
    """``base`` with the recorder installed into the Python process started with it."""
    path = os.pathsep.join(p for p in (str(_SITE), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, ENV: "1"}


def power_cut(proc: subprocess.Popen[bytes]) -> None:
    """Cut the power of ``proc`` (started with :func:`environment`) and wait for it to die (bounded)."""
    os.kill(proc.pid, SIGNAL)
    code = proc.wait(30)
    if code != -signal.SIGKILL:
        raise AssertionError(f"the power-cut process {proc.pid} exited with {code}, not by the cut's SIGKILL")
