"""Stopping a running query from another thread: its client went away, or it ran past its time limit.

Whoever runs a query makes a :class:`Cancel` and hands it over; the query checks it between steps (each WAL entry
scanned, :meth:`Cancel.check`) and, around a step it cannot check inside (DuckDB executing a statement), registers
what interrupts that step (:meth:`Cancel.interrupting`). Cancelling is thread-safe; the first reason given is the
one reported, and cancelling again runs the interrupts again (an interrupt such as DuckDB's stops only the statement
running at that moment: a caller that cancels repeatedly also stops the next one). An interrupt hook is never called
after its ``interrupting`` block has ended, so it may act on a resource the block closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from walgate.storage.errors import QueryCancelled

__all__ = ["Cancel"]


class Cancel:
    """One query's cancellation (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._hooks: list[Callable[[], None]] = []

    @property
    def reason(self) -> str | None:
        """Why the query was cancelled; None while it was not."""
        return self._reason

    def cancel(self, reason: str) -> None:
        """Stop the query (any thread): its next :meth:`check` raises, the interrupts registered now run (again, when
        it was cancelled before; the first reason stays)."""
        with self._lock:  # held while the hooks run: an interrupting block cannot end under them
            if self._reason is None:
                self._reason = reason
            for hook in self._hooks:
                hook()

    def check(self) -> None:
        """Raise :class:`QueryCancelled` if the query was cancelled."""
        if self._reason is not None:
            raise QueryCancelled(f"query cancelled: {self._reason}")

    @contextmanager
    def interrupting(self, hook: Callable[[], None]) -> Iterator[None]:
        """Within the block, cancelling calls ``hook`` (at once when already cancelled)."""
        with self._lock:
            self._hooks.append(hook)
            if self._reason is not None:
                hook()
        try:
            yield
        finally:
            with self._lock:
                self._hooks.remove(hook)
