"""The vnodes this node leads with followers: what a follower's WalFetch is answered from.

Step 5 of docs/plans/replication-wiring.md (the replica manager, ``gateway/replicas.py``) keeps one
:class:`~walgate.replication.leader.LeaderView` per led vnode, made from the vnode's partition state, and implements
this protocol; until then no node leads a replicated vnode (no replicas exist before step 2) and
:attr:`Broker.led <walgate.gateway.kafka.broker.Broker.led>` is None: every WalFetch partition is answered
NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Protocol

from walgate.replication.leader import LeaderView

__all__ = ["LedVnodes"]


class LedVnodes(Protocol):
    def leader_view(self, db_id: str, vgroup: int) -> LeaderView | None:
        """The view of vgroup ``vgroup`` of the database of id ``db_id`` while this node leads it, else None. Called
        on the vnode's lane (the view's owner), where the fetch is recorded in it."""

    def registered_epoch(self, node_id: int) -> int | None:
        """The broker epoch node ``node_id`` is registered under now (KIP-903), None when it is not registered.
        Called on the vnode's lane too: a read of what the event loop last learned."""
