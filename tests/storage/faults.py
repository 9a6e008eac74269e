"""Fault injection for storage's file operations (walgate/storage/fileio.py).

``Faults`` replaces ``walgate.storage.fileio.os`` by a proxy that forwards every call to the real ``os`` module
except the operations told to fail::

    faults = Faults()
    with faults.active():
        faults.fail("write", at=2, error=errno.ENOSPC)      # the 2nd write from now raises ENOSPC
        faults.fail("write", at=1, short=True)              # ... or writes half its bytes, once
        faults.fail("fsync", at=1, error=errno.EIO, times=3)  # the next three fsyncs raise EIO

``faults.calls`` counts every operation seen, so a test can first run a scenario clean to learn how many writes it
makes, then fail each one in turn. Operations: write, pwrite, fsync, fdatasync, ftruncate, replace, unlink, open.

The damage the durable-file tests share: :data:`WRITE_FAULTS` (each write fault a refused-write test meets),
:func:`refused` (one change meeting one of them), :func:`truncations` (a file cut at every byte),
:func:`torn_last_line` and :func:`flipped_in_line` (one line damaged, in a few places in turn).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from walgate.storage import fileio
from walgate.storage.errors import StorageUnavailable

__all__ = ["Faults", "FAULT_KINDS", "WRITE_FAULTS", "flipped_in_line", "refused", "torn_last_line", "truncations"]

FAULT_KINDS = ("enospc", "eio", "short")
"""The write faults a sweep injects: ENOSPC, EIO and a short write (half the bytes, as a nearly full disk does)."""

WRITE_FAULTS = [("write", k) for k in FAULT_KINDS] + [("fsync", "enospc"), ("fsync", "eio")]
"""``(op, kind)`` for :meth:`Faults.fail_kind`: every way the disk can refuse an appending write."""


@dataclass
class _Plan:
    op: str
    at: int  # the at-th call of op counted from when the plan was made
    error: int | None
    short: bool
    times: int
    seen: int = 0


class _FaultyOs:
    def __init__(self, faults: Faults) -> None:
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in ("write", "pwrite", "fsync", "fdatasync", "ftruncate", "replace", "unlink", "open"):
            return real
        faults = self._faults

        def call(*args: Any, **kwargs: Any) -> Any:
            faults.calls[name] += 1
            plan = faults._due(name)
            if plan is not None:
                if plan.short and name in ("write", "pwrite"):
                    data = bytes(args[1])
                    return real(args[0], data[: len(data) // 2], *args[2:])
                raise OSError(plan.error or errno.EIO, f"injected {errno.errorcode.get(plan.error or errno.EIO)} in {name}")
            return real(*args, **kwargs)

        return call


class Faults:
    """Injects failures into storage's file operations while :meth:`active`."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.injected = 0
        self._plans: list[_Plan] = []

    def fail(self, op: str, *, at: int = 1, error: int | None = errno.ENOSPC, short: bool = False,
             times: int = 1) -> None:
        """Make the ``at``-th next call of ``op`` (and the ``times - 1`` after it) fail."""
        self._plans.append(_Plan(op, at, None if short else error, short, times))

    def fail_kind(self, op: str, kind: str, *, at: int = 1, times: int = 1) -> None:
        """:meth:`fail` with one of :data:`FAULT_KINDS`."""
        if kind == "short":
            self.fail(op, at=at, short=True, times=times)
        else:
            self.fail(op, at=at, error=errno.ENOSPC if kind == "enospc" else errno.EIO, times=times)

    def clear(self) -> None:
        """Forget every pending failure (the disk has space again)."""
        self._plans.clear()

    def _due(self, op: str) -> _Plan | None:
        for plan in self._plans:
            if plan.op != op:
                continue
            plan.seen += 1
            if plan.seen >= plan.at:
                plan.times -= 1
                if plan.times <= 0:
                    self._plans.remove(plan)
                self.injected += 1
                return plan
        return None

    @contextlib.contextmanager
    def active(self) -> Iterator[Faults]:
        saved = fileio.os
        fileio.os = _FaultyOs(self)  # type: ignore[assignment]
        try:
            yield self
        finally:
            fileio.os = saved


def refused(faults: Faults, op: str, kind: str, change: Callable[[], object]) -> None:
    """Run *change* while the next *op* fails as *kind* (:meth:`Faults.fail_kind`): it must raise
    :class:`StorageUnavailable`; every pending failure is forgotten after."""
    faults.fail_kind(op, kind)
    with pytest.raises(StorageUnavailable):
        change()
    faults.clear()


def truncations(path: Path) -> Iterator[bytes]:
    """Write *path* back cut at every byte, from empty to whole, in turn; yields what it holds each time."""
    data = path.read_bytes()
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        yield data[:cut]


def torn_last_line(path: Path) -> Iterator[bytes]:
    """Write *path* back with its last line torn (one byte, half of it, all but its first byte cut off, in turn);
    yields what the file holds without that line each time (what opening it must cut it back to)."""
    data = path.read_bytes()
    whole = data[: data.rindex(b"\n", 0, len(data) - 1) + 1]
    last = len(data) - len(whole)
    for cut in (1, last // 2, last - 1):
        path.write_bytes(data[:-cut])
        yield whole


def flipped_in_line(path: Path, index: int) -> Iterator[bytes]:
    """Write *path* back with one bit flipped in its *index*-th line (0: the first), at its sixth byte, its middle
    and its last byte in turn, the file restored after each; yields that line (as it was)."""
    data = path.read_bytes()
    line = data.split(b"\n")[index]
    start = data.index(line)
    for pos in (5, len(line) // 2, len(line) - 1):
        flipped = bytearray(data)
        flipped[start + pos] ^= 0x10
        path.write_bytes(bytes(flipped))
        yield line
        path.write_bytes(data)
