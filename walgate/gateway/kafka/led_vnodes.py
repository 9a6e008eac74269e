"""The vnodes this node leads with followers (what a follower's WalFetch is answered from) or follows.

The replica manager (:class:`walgate.gateway.replicas.ReplicaManager`, step 5 of docs/plans/replication-wiring.md)
keeps one :class:`~walgate.replication.leader.LeaderView` per led vnode, made from the vnode's partition state, and
implements this protocol; ``walgate serve`` sets it as :attr:`Broker.led <walgate.gateway.kafka.broker.Broker.led>`
in cluster mode. On a single node it is None: every WalFetch partition is answered NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from walgate.replication.leader import LeaderView
from walgate.replication.partition import PartitionState
from walgate.storage.led_appends import LedAppend
from walgate.wire.errors import ErrorCode

__all__ = ["LedVnodes", "until_changed"]


class LedVnodes(Protocol):
    def leader_view(self, db_id: str, vgroup: int) -> LeaderView | None:
        """The view of vgroup ``vgroup`` of the database of id ``db_id`` while this node leads it, else None. Called
        on the vnode's lane (the view's owner), where the fetch is recorded in it; read on any lane to tell whether
        this node leads it now (:func:`~walgate.gateway.kafka.leaders.leads_here`: its leader epoch, whether it was
        deposed)."""

    def lease_held(self) -> bool:
        """Whether this node holds its registration's lease now. Leadership lives in etcd: a node that lost its lease
        (cut off from etcd past its TTL, or deregistered by a controlled shutdown) leads nothing, whatever the last
        state it read says (another node may lead the vgroup in a newer epoch it cannot read). Any lane."""

    def registered_epoch(self, node_id: int) -> int | None:
        """The broker epoch node ``node_id`` is registered under now (KIP-903), None when it is not registered.
        Called on the vnode's lane too: a read of what the event loop last learned."""

    def state_of(self, db_id: str, vgroup: int) -> PartitionState | None:
        """The partition state of vgroup ``vgroup`` of the database of id ``db_id`` as this node last read it from
        etcd (None: none read), whichever replica this node is: Metadata and the leader epoch checks answer from it.
        Called on any lane: a read of what the event loop last learned."""

    def followed_epoch(self, db_id: str, vgroup: int) -> int | None:
        """The leader epoch in which this node follows vgroup ``vgroup`` of the database of id ``db_id`` now (its
        fetcher copies the leader's WAL and its visible version is the high watermark the leader's answers carry),
        None when it does not follow it or its copy is restoring from its leader's snapshot (docs/plans/
        vnode-snapshot.md: its tables are ahead of its WAL). Any lane: a read of what the event loop last set
        (KIP-392: a follower serves consumers' fetches only while it follows)."""

    def fetched(self, db_id: str, vgroup: int) -> None:
        """A follower's fetch of the vnode was recorded in its view and the view's high watermark updated (on the
        vnode's lane): readers and acks=all writes the high watermark now passes are told."""

    async def writes_acknowledged(self, appended: list[LedAppend], timeout_s: float) -> ErrorCode:
        """The answer of an acks=all write that ``appended`` to vnodes this node leads (each: the vnode, the leader
        epoch it was appended in, its last WAL version), durable here: once the high watermark of each one's epoch
        passes it, NONE, else the first error: NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER when this
        node stops leading it first or does not lead it in that epoch when the wait begins, REQUEST_TIMED_OUT after
        ``timeout_s`` (:class:`~walgate.gateway.purgatory.Purgatory`). On the event loop."""

    def watch(self, vnodes: list[tuple[str, int]]) -> asyncio.Event:
        """An event set once any of ``vnodes`` (database id, vgroup) changed here: a partition state of it read or
        applied, this node's leadership of it begun or ended, a follower's fetch recorded in its view. Registered
        before its waiter looks (a change between the look and the wait still sets it), then :meth:`unwatch`-ed. On
        the event loop."""

    def unwatch(self, vnodes: list[tuple[str, int]], event: asyncio.Event) -> None:
        """Forget ``event`` (:meth:`watch`). On the event loop."""


async def until_changed(led: LedVnodes, vnodes: list[tuple[str, int]], done: Callable[[], Awaitable[bool]],
                        timeout_s: float, recheck_s: float) -> bool:
    """Whether ``done()`` became true within ``timeout_s``: looked at now, then again each time one of ``vnodes``
    changed (:meth:`LedVnodes.watch`), and every ``recheck_s`` for what is not told (a node's registration or lease
    lapsing). Waiters woken by one change look again in the order they began to wait. On the event loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        event = led.watch(vnodes)
        try:
            if await done():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, recheck_s)):
                    await event.wait()
        finally:
            led.unwatch(vnodes, event)
