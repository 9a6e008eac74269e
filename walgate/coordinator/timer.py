"""A keyed timer that fires only when polled: Kafka's ``CoordinatorTimer`` without a clock.

``schedule(key, deadline_ms, operation)`` replaces any timer with the same key
(Kafka keys its timers the same way: ``"join-<group>"``,
``"heartbeat-<group>-<member>"``, ...); ``cancel(key)`` drops it. Nothing runs
by itself: :meth:`KeyedTimer.expired` hands back, in deadline order, the
operations whose deadline is at or before the ``now_ms`` it is given, and the
owner runs them. :meth:`KeyedTimer.next_deadline` tells the owner when polling
is next useful, which is how the gateway's event loop arms its one real timer.

A heap ordered by (deadline, scheduling sequence) holds the timers; replaced
and cancelled entries stay in it and are skipped when they surface, and the
heap is rebuilt when such stale entries outnumber live ones, so a member that
heartbeats every few seconds costs O(log n) per heartbeat and bounded memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["KeyedTimer"]

T = TypeVar("T")


class KeyedTimer(Generic[T]):
    """Timers keyed by a hashable; an operation is any callable ``(now_ms) -> T``."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int, Callable[[int], T]]] = {}
        self._seq = 0

    def schedule(self, key: Hashable, deadline_ms: int, operation: Callable[[int], T]) -> None:
        """Run *operation* once *deadline_ms* is reached, replacing the timer *key* if any."""
        self._seq += 1
        self._live[key] = (deadline_ms, self._seq, operation)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(d, s, k) for k, (d, s, _) in self._live.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        """Drop the timer *key* (nothing happens if there is none)."""
        self._live.pop(key, None)

    def _is_live(self, entry: tuple[int, int, Hashable]) -> bool:
        live = self._live.get(entry[2])
        return live is not None and live[1] == entry[1]

    def next_deadline(self) -> int | None:
        """The earliest deadline of all scheduled timers, or None when there are none."""
        heap = self._heap
        while heap and not self._is_live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expired(self, now_ms: int) -> Iterator[Callable[[int], T]]:
        """Yield, earliest first, the operations of timers due at *now_ms*, unscheduling each.

        Lazy: an operation may schedule or cancel timers before the next one is
        looked at, and a cancelled timer is then not yielded. Timers scheduled
        while iterating are left for the next poll, even if already due, so an
        operation that keeps rescheduling itself with a zero delay cannot spin.
        """
        limit = self._seq
        deferred: list[tuple[int, int, Hashable]] = []
        try:
            while self._heap and self._heap[0][0] <= now_ms:
                entry = heapq.heappop(self._heap)
                if not self._is_live(entry):
                    continue
                if entry[1] > limit:
                    deferred.append(entry)
                    continue
                yield self._live.pop(entry[2])[2]
        finally:
            for entry in deferred:
                heapq.heappush(self._heap, entry)
