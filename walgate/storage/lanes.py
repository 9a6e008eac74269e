"""How storage-lane code reaches state the coordinator lane owns (issue 23).

The coordinator log (committed offsets, group records) and the group coordinator belong to the coordinator lane.
Storage-lane code that must read or write them (SHOW CONSUMERS / SUBSCRIPTIONS, DROP CONSUMER GROUP, a dropped
topic's offsets) runs that part through :meth:`CoordinatorLane.run`, which waits for it: the storage lane may wait for
the coordinator lane, never the reverse. An engine opened alone (tools, tests) has no second lane: :data:`INLINE`
runs the function at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["CoordinatorLane", "INLINE"]

T = TypeVar("T")


class CoordinatorLane(Protocol):
    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the coordinator lane (at once when called there), its writes durable before the calling
        storage-lane call answers."""
        ...

    @property
    def separate(self) -> bool:
        """Whether the coordinator lane is a thread of its own (then only the storage lane publishes topics)."""
        ...


class _Inline:
    separate = False

    def run(self, fn: Callable[[], T]) -> T:
        return fn()


INLINE: CoordinatorLane = _Inline()
"""No second lane: everything runs on the caller's thread."""
