"""Push wake-ups of long-poll Fetches: the engine's records listener, hopping from the storage thread to the loop.

The engine calls :meth:`FetchWakeups.records_appended` on the storage thread whenever an append gives a
topic-partition new records; when a Fetch waits on it, that hops to the event loop and sets every
:class:`asyncio.Event` registered for the partition. A Fetch registers (:meth:`FetchWakeups.watch`) *before* it
reads, so a record appended between its read and its wait still wakes it.
"""

from __future__ import annotations

import asyncio

__all__ = ["FetchWakeups"]


class FetchWakeups:
    """Implements :class:`walgate.storage.observers.RecordsListener` for the Fetches waiting on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[tuple[str, int], set[asyncio.Event]] = {}

    def records_appended(self, topic: str, partition: int) -> None:
        """Called after an append, on the thread of the storage-lane call that made it (the storage thread or a vnode
        thread): only reads the waiters dict and hands the wake-up to the event loop."""
        if (topic, partition) in self._waiters:
            self._loop.call_soon_threadsafe(self._wake, topic, partition)

    def _wake(self, topic: str, partition: int) -> None:
        for event in self._waiters.pop((topic, partition), ()):
            event.set()

    def watch(self, keys: list[tuple[str, int]]) -> asyncio.Event:
        """An event set as soon as any of ``keys`` gets new records (on the loop)."""
        event = asyncio.Event()
        for key in keys:
            self._waiters.setdefault(key, set()).add(event)
        return event

    def unwatch(self, keys: list[tuple[str, int]], event: asyncio.Event) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]
