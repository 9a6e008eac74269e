"""Fault injection for storage's file operations (walgate/storage/fileio.py).

``Faults`` replaces ``walgate.storage.fileio.os`` by a proxy that forwards every call to the real ``os`` module
except the operations told to fail::

    faults = Faults()
    with faults.active():
        faults.fail("write", at=2, error=errno.ENOSPC)      # the 2nd write from now raises ENOSPC
        faults.fail("write", at=1, short=True)              # ... or writes half its bytes, once
        faults.fail("fsync", at=1, error=errno.EIO, times=3)  # the next three fsyncs raise EIO

``faults.calls`` counts every operation seen, so a test can first run a scenario clean to learn how many writes it
makes, then fail each one in turn. Operations: write, pwrite, fsync, fdatasync, ftruncate, replace, open.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from walgate.storage import fileio

__all__ = ["Faults", "FAULT_KINDS"]

FAULT_KINDS = ("enospc", "eio", "short")
"""The write faults a sweep injects: ENOSPC, EIO and a short write (half the bytes, as a nearly full disk does)."""


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
        if name not in ("write", "pwrite", "fsync", "fdatasync", "ftruncate", "replace", "open"):
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
