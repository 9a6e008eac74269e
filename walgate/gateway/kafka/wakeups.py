"""Push wake-ups of long polls: the engine's records listener, hopping from the storage thread to the loop.

The engine calls :meth:`FetchWakeups.records_appended` whenever an append gives a topic-partition new records, and
:meth:`FetchWakeups.vnode_appended` after every append to a vnode's WAL (whatever it holds: a vnode with no topic,
or only meta entries, too), on the thread of the storage-lane call that made it; when a Fetch (topic-partitions) or
a follower's WalFetch (vnodes) waits on it, that hops to the event loop and sets every :class:`asyncio.Event`
registered for it. A waiter registers (:meth:`FetchWakeups.watch`, :meth:`FetchWakeups.watch_vnodes`) *before* it
reads, so an append between its read and its wait still wakes it.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

__all__ = ["FetchWakeups", "Waiters"]

K = TypeVar("K")


class Waiters(Generic[K]):
    """Events waiting for keys ``K``, set on ``loop`` in the order they were registered (waiters woken together
    resume in the order they began to wait)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[K, dict[asyncio.Event, None]] = {}

    def appended(self, key: K) -> None:
        """Any thread: only reads the waiters dict and hands the wake-up to the event loop."""
        if key in self._waiters:
            self._loop.call_soon_threadsafe(self._wake, key)

    def __contains__(self, key: K) -> bool:
        return key in self._waiters

    def _wake(self, key: K) -> None:
        for event in self._waiters.pop(key, ()):
            event.set()

    def watch(self, keys: list[K]) -> asyncio.Event:
        event = asyncio.Event()
        for key in keys:
            self._waiters.setdefault(key, {})[event] = None
        return event

    def unwatch(self, keys: list[K], event: asyncio.Event) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.pop(event, None)
                if not waiters:
                    del self._waiters[key]


class FetchWakeups:
    """Implements :class:`walgate.storage.observers.RecordsListener` for the long polls waiting on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._partitions: Waiters[tuple[str, int]] = Waiters(loop)
        self._vnodes: Waiters[tuple[str, int]] = Waiters(loop)

    def records_appended(self, topic: str, partition: int) -> None:
        """Called after an append, on the thread of the storage-lane call that made it (the storage thread or a vnode
        thread): only reads the waiters dict and hands the wake-up to the event loop."""
        self._partitions.appended((topic, partition))

    def vnode_appended(self, db: str, index: int) -> None:
        """Called after an append to vnode ``index`` of database ``db``, on the thread of the call holding it."""
        self._vnodes.appended((db, index))

    def waiting(self, topic: str, partition: int) -> bool:
        """Whether a long poll waits on the topic-partition now (on the loop)."""
        return (topic, partition) in self._partitions

    def waiting_on_vnode(self, db: str, index: int) -> bool:
        """Whether a follower's long poll waits on the vnode now (on the loop)."""
        return (db, index) in self._vnodes

    def watch(self, keys: list[tuple[str, int]]) -> asyncio.Event:
        """An event set as soon as any of the topic-partitions ``keys`` gets new records (on the loop)."""
        return self._partitions.watch(keys)

    def unwatch(self, keys: list[tuple[str, int]], event: asyncio.Event) -> None:
        self._partitions.unwatch(keys, event)

    def watch_vnodes(self, keys: list[tuple[str, int]]) -> asyncio.Event:
        """An event set as soon as any of the vnodes ``keys`` ((database, index)) gets new WAL entries (on the loop)."""
        return self._vnodes.watch(keys)

    def unwatch_vnodes(self, keys: list[tuple[str, int]], event: asyncio.Event) -> None:
        self._vnodes.unwatch(keys, event)
