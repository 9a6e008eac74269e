"""The controller election and the fence on every controller write.

A registered node is a candidate: ``controller/<lease id>`` put on its registration's lease. The candidate with the
smallest ``create_revision`` is the controller, and that revision is its controller epoch
(:func:`walgate.cluster.model.leader_key`). A candidate waits on a watch of the candidate just before it.

Every controller write is an etcd transaction whose first compare is ``create_revision(own candidate key) ==
epoch`` (:meth:`ControllerElection.fenced_txn`). When the controller's lease expires (the process died, was paused
or cut off for longer than its TTL) etcd deletes the key, so a controller that comes back still believing it leads
has each write refused (:class:`NotController`) — the fence never relies on the process noticing in time, nor on
an etcd lock's mutual exclusion.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneUnavailable, Keys, NotController, leader_key
from walgate.cluster.registry import NodeRegistration

__all__ = ["ControllerElection"]

log = logging.getLogger("walgate.cluster")


class ControllerElection:
    """One node's part in the election. ``epoch`` is the controller epoch while this node is the controller (as far
    as it knows: :meth:`fenced_txn` is what makes sure), None otherwise."""

    def __init__(self, session: EtcdSession, keys: Keys, registration: NodeRegistration) -> None:
        self.session = session
        self.keys = keys
        self.registration = registration
        self.epoch: int | None = None
        self.key: bytes | None = None
        self._changed = asyncio.Event()
        self.catalog_appends = asyncio.Lock()
        """Held by each of this node's writers of ``catalog/seq`` (the DDL's :class:`~walgate.cluster.records.RecordLog`
        from its read of the sequence number to its transaction, the controller's ``place_vgroup`` records around their
        transaction), so that neither changes the number between the other's read and compare: a DDL's append is never
        refused by the controller's own placement write (the controller's, written from an older read, is refused and
        made again at its next pass)."""

    def _set(self, epoch: int | None) -> None:
        if epoch != self.epoch:
            log.info("node %d: %s", self.registration.info.node_id,
                     f"controller, epoch {epoch}" if epoch is not None else "not the controller")
        self.epoch = epoch
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_elected(self) -> int:
        """The controller epoch, once this node is the controller."""
        while self.epoch is None:
            await self._changed.wait()
        return self.epoch

    async def campaign(self) -> int:
        """Stand as a candidate on the current registration and return the controller epoch once elected. Raises
        :class:`NotController` when the registration was lost meanwhile."""
        lease_id = self.registration.lease_id
        if lease_id is None:
            raise NotController(f"node {self.registration.info.node_id} is not registered")
        key = self.keys.candidate(lease_id)
        value = b"%d %d" % (self.registration.info.node_id, self.registration.epoch or 0)
        ok, responses = await self.session.txn([tx.Create(key) == 0], [tx.Put(key, value, lease=lease_id)],
                                               [tx.Get(key)])
        mine = int(responses[0].response_put.header.revision) if ok else responses[0][0][1].create_revision
        self.key = key
        while True:
            revision, kvs = await self.session.get_prefix(self.keys.candidates)
            candidates = [(kv.key, kv.create_revision) for kv in kvs]
            if (key, mine) not in candidates:
                raise NotController(f"node {self.registration.info.node_id}: its candidacy expired with its lease")
            leader = leader_key(candidates)
            if leader == (key, mine):
                self._set(mine)
                return mine
            before = max((c for c in candidates if c[1] < mine), key=lambda c: c[1])
            await self._wait_deleted(before[0], revision + 1)

    async def _wait_deleted(self, key: bytes, start_revision: int) -> None:
        """Wait until ``key`` is deleted at or after ``start_revision``, or one lease TTL passed (the caller looks
        again either way)."""
        watch = await self.session.watch_prefix(key, start_revision)
        try:
            iterator = watch.__aiter__()
            async with asyncio.timeout(self.registration.ttl):
                while True:
                    event = await self.session.next_event(iterator)
                    if event.kind == "DELETE" and event.kv.key == key:
                        return
        except (TimeoutError, ControlPlaneUnavailable):
            return
        finally:
            await self.session.cancel_watch(watch)

    async def run(self) -> None:
        """Campaign on every registration this node gets, until cancelled: the controller from election until its
        registration is lost."""
        while True:
            await self.registration.wait_registered()
            lease_id = self.registration.lease_id
            try:
                await self.campaign()
            except NotController:
                continue
            except ControlPlaneUnavailable as e:
                log.warning("node %d: campaign interrupted: %s", self.registration.info.node_id, e)
                await asyncio.sleep(self.registration.ttl / 3)
                continue
            await self.registration.wait_lost(lease_id)
            self._set(None)

    async def fenced_txn(self, compare: list[Any], success: list[Any]) -> tuple[bool, list[Any]]:
        """A controller write: ``success`` runs only if this node's controller epoch is still the elected one and
        every ``compare`` holds. Returns (whether it ran, its responses); raises :class:`NotController` (nothing
        written) when the epoch is not the elected one, and this node steps down."""
        epoch, key = self.epoch, self.key
        if epoch is None or key is None:
            raise NotController(f"node {self.registration.info.node_id} is not the controller")
        ok, responses = await self.session.txn([tx.Create(key) == epoch, *compare], success, [tx.Get(key)])
        if ok:
            return True, responses
        still = responses[0]
        if not still or still[0][1].create_revision != epoch:
            if self.epoch == epoch:
                self._set(None)
            raise NotController(f"node {self.registration.info.node_id}: controller epoch {epoch} is no longer the"
                                f" elected one (its lease expired): the write was refused")
        return False, responses
