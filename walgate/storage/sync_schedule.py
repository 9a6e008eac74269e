"""When each WAL's periodic fsync is next due (WAL_LEVEL 1's ``WAL_FSYNC_PERIOD``), so that the sync task's call
looks only at the WALs due, not at every vnode of the node.

A node of thousands of Kafka-native topics (each a database of its own, each WAL of its own period, created at
different times) has a WAL due every few milliseconds; asking every WAL at every call held the storage thread, and
the GIL, for milliseconds of Python each time (issue 23, step 7: py-spy on the stalls bench's node).

Invariant: every open WAL is in the heap once, at a time no later than the one its :meth:`Wal.sync_due
<walgate.storage.wal.Wal.sync_due>` would name. A WAL's due time moves later by itself (a sync taken, a flush), never
earlier; what can make it earlier (a shorter period: a topic's or the broker's configs) or open or close a WAL
changes the ``key`` the caller passes (the catalog's generation, the count of vnodes opened), and a changed key asks
every WAL again, as each call did before. Asked early, a WAL answers its true wait and goes back in its place.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable

from walgate.storage.wal import PendingSync, Wal

NEVER = 3600.0
"""The wait answered when no WAL has a periodic fsync (what :meth:`Wal.sync_due` answers for one without)."""


class SyncSchedule:
    """The open WALs by the time their periodic fsync is next due (a heap); pure, one owner thread."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Wal]] = []  # (due, tie-breaker, wal)
        self._key: Hashable = None
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def due(self, now: float, key: Hashable, wals: Iterable[Wal]) -> tuple[float, list[PendingSync]]:
        """(seconds until a WAL is next due, :data:`NEVER` when none is; the fsyncs due at ``now``, the WAL clock's
        monotonic seconds). ``wals`` (every open WAL) is iterated only when ``key`` differs from the last call's."""
        pending: list[PendingSync] = []
        if key != self._key:
            self._key, self._heap = key, []
            asked: Iterable[Wal] = wals
        else:
            asked = []
            while self._heap and self._heap[0][0] <= now:
                asked.append(heapq.heappop(self._heap)[2])
        for wal in asked:
            wait, sync = wal.sync_due(now)
            if sync is not None:
                pending.append(sync)
            self._seq += 1
            heapq.heappush(self._heap, (now + wait, self._seq, wal))
        return (min(NEVER, max(0.0, self._heap[0][0] - now)) if self._heap else NEVER), pending
