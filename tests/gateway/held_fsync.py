"""A hook on ``walgate.storage.fileio.os`` (the one attribute storage's file operations go through, as the fault tests
use it) that holds one fsync on an Event: the ordering tests' way to show that a request completes while a given
fsync is held, without timing anything."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from walgate.storage import fileio

HOLD_S = 60.0  # the hook lets the fsync go by itself after this (a node that never goes on still stops)


class HeldFsync:
    """``os`` for fileio, except that once :attr:`armed`, the first fsync of a file or directory whose path matches
    ``pattern`` waits until :attr:`release`; :attr:`thread` is the name of the thread it held."""

    def __init__(self, pattern: re.Pattern[str], *, armed: bool = True) -> None:
        self.pattern = pattern
        self.armed = armed
        self.reached = threading.Event()
        self.release = threading.Event()
        self.thread = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        if self.armed and not self.reached.is_set() and self.pattern.search(os.readlink(f"/proc/self/fd/{fd}")):
            self.thread = threading.current_thread().name
            self.reached.set()
            self.release.wait(HOLD_S)
        os.fsync(fd)


@contextmanager
def holding(monkeypatch: pytest.MonkeyPatch, pattern: re.Pattern[str], *, armed: bool = True) -> Iterator[HeldFsync]:
    """A :class:`HeldFsync` in place of fileio's ``os`` while the block runs; released at its end."""
    hook = HeldFsync(pattern, armed=armed)
    monkeypatch.setattr(fileio, "os", hook)
    try:
        yield hook
    finally:
        hook.release.set()
