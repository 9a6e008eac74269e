"""Which node coordinates a group, in cluster mode (docs/cluster.md, "Group coordinators";
:mod:`walgate.cluster.coordinators` for N and the placement).

At start, before the engine opens, :func:`cluster_partitions` reads the cluster's N (the first node makes it from
its ``offsets.topic.num.partitions``): a new data dir is made with it, and a data dir made with another N stops the
start (its groups are in other partitions than the cluster's). The placement is read (or, when no node decided it
yet, decided over the live nodes and written with a compare on the key's version, so that it is decided once) the
first time a node needs it, then kept: it never changes while each partition has one copy.

FindCoordinator answers the node of the group's partition (COORDINATOR_NOT_AVAILABLE while that node is not
registered, or the placement cannot be read); every group API of a group whose partition is another node's answers
NOT_COORDINATOR (:func:`refusal`), as Kafka's group coordinator answers for a ``__consumer_offsets`` partition its
broker does not lead, and the client looks its coordinator up again. On a single node there is no
:class:`GroupCoordinators` and every group is the node's.

In a replicated cluster (``replication.enable``) a group's coordinator partition is a partition of the internal
topic ``__consumer_offsets`` and its node the partition's leader (:attr:`GroupCoordinators.replicated`,
:mod:`.coordinator_replicas`): the placement of groups is the leaders' now, and a group of a partition this node
leads but has not loaded yet answers COORDINATOR_LOAD_IN_PROGRESS. Transactional ids are placed the same way, in
both kinds of cluster: an id's partition is ``abs(hashCode(id)) % N`` too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from walgate.cluster.coordinators import CoordinatorPlacement, decode_partitions, encode_partitions
from walgate.cluster.etcd import tx
from walgate.cluster.model import ControlPlaneError, ControlPlaneUnavailable
from walgate.cluster.placement import NoLiveNode
from walgate.gateway.cluster_member import ClusterMember, ClusterStartError
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.wire.errors import ErrorCode

__all__ = ["GroupCoordinators", "ReplicatedCoordinators", "cluster_partitions", "refusal"]

log = logging.getLogger("walgate.cluster")


async def cluster_partitions(member: ClusterMember, wanted: int) -> int:
    """The cluster's N: ``wanted`` when this node is the first to ask, else the one the first node made. Raises
    :class:`ClusterStartError` (etcd did not answer, or the key is not walgate's)."""
    key = member.keys.coordinator_partitions
    try:
        await member.session.txn([tx.Version(key) == 0], [tx.Put(key, encode_partitions(wanted))])
        kv = await member.session.get(key)
        if kv is None:
            raise ControlPlaneUnavailable(f"etcd ({member.session.describe()}) lost the key {key.decode()} it just wrote")
        return decode_partitions(bytes(kv.value))
    except ControlPlaneError as e:
        raise ClusterStartError(f"cannot read the cluster's coordinator partitions: {e}") from None


class ReplicatedCoordinators(Protocol):
    """A replicated cluster's group coordinators (:class:`~.coordinator_replicas.CoordinatorReplicas`)."""

    async def placement(self) -> CoordinatorPlacement:
        """Each coordinator partition's leader now (-1: none); raises :class:`ControlPlaneError` while unknown."""

    def loading(self, group_id: str) -> bool:
        """Whether ``group_id``'s partition, which this node is named leader of, is not loaded here yet."""

    def share_log(self, p: int) -> ReplicatedShareStateLog | None:
        """Partition ``p``'s share-partition states while it is loaded here (used on the coordinator lane)."""


class GroupCoordinators:
    """This node's view of where the ``partitions`` coordinator partitions of its cluster are; ``known`` once read;
    ``replicated`` in a replicated cluster (the module docstring)."""

    def __init__(self, member: ClusterMember, partitions: int) -> None:
        self.member = member
        self.partitions = partitions
        self.known: CoordinatorPlacement | None = None
        self.replicated: ReplicatedCoordinators | None = None
        self._lock = asyncio.Lock()  # one read or decision at a time

    async def placement(self) -> CoordinatorPlacement:
        """The node of each coordinator partition (of groups and transactional ids alike). Raises
        :class:`ControlPlaneError` when it cannot be known now."""
        if self.replicated is not None:
            return await self.replicated.placement()
        return await self._placed()

    async def _placed(self) -> CoordinatorPlacement:
        """The placement of one-copy coordinator partitions: as known, else read from etcd, else decided now over
        the live nodes. Raises :class:`ControlPlaneError` when etcd does not answer or no node is live."""
        if self.known is None:
            async with self._lock:
                if self.known is None:
                    self.known = await self._read_or_decide()
        return self.known

    async def load(self) -> None:
        """Read the placement if it was decided (at start: Metadata then lists the coordinators' nodes from the
        first request on); etcd not answering is logged, the placement is then read when first needed."""
        try:
            kv = await self.member.session.get(self.member.keys.coordinator_placement)
            if kv is not None:
                self.known = CoordinatorPlacement.decode(bytes(kv.value), self.partitions)
        except ControlPlaneError as e:
            log.warning("the group coordinators' placement not read yet: %s", e)

    async def _read_or_decide(self) -> CoordinatorPlacement:
        session, key = self.member.session, self.member.keys.coordinator_placement
        kv = await session.get(key)
        if kv is None:
            view = await self.member.refresh()
            try:
                decided = CoordinatorPlacement.decide(self.partitions, {n.node_id: n.rack for n in view.nodes})
            except NoLiveNode as e:
                raise ControlPlaneUnavailable(f"the group coordinator partitions cannot be placed: {e}") from None
            placed, _ = await session.txn([tx.Version(key) == 0], [tx.Put(key, decided.encode())])
            kv = await session.get(key)
            if kv is None:
                raise ControlPlaneUnavailable(f"etcd ({session.describe()}) lost the key {key.decode()} it just wrote")
            if placed:
                log.info("cluster %s: the %d group coordinator partitions placed on nodes %s",
                         self.member.keys.cluster_id, self.partitions, ",".join(map(str, decided.nodes)))
        return CoordinatorPlacement.decode(bytes(kv.value), self.partitions)

    async def owner(self, key: str) -> int:
        """The node coordinating group or transactional id ``key``; -1 when none does now (raises as
        :meth:`placement`)."""
        return (await self.placement()).owner(key)


async def refusal(coordinators: GroupCoordinators | None, key: str, transactional: bool = False) -> int:
    """What a group API of group ``key`` (``transactional``: a transaction API of transactional id ``key``) answers
    before the coordinator is asked: ``ErrorCode.none`` (0) when this node coordinates it (always on a single node,
    ``coordinators`` None), NOT_COORDINATOR when another node does, COORDINATOR_NOT_AVAILABLE when the placement
    cannot be read now or no node coordinates it (all send the client to FindCoordinator), COORDINATOR_LOAD_IN_PROGRESS
    while this node loads its replicated partition (the client retries)."""
    if coordinators is None:
        return ErrorCode.none
    try:
        owner = await coordinators.owner(key)
    except ControlPlaneError as e:
        log.warning("the coordinator of %s %r is not known: %s", "transactional id" if transactional else "group",
                    key, e)
        return ErrorCode.coordinator_not_available
    if owner != coordinators.member.node_id:
        return ErrorCode.coordinator_not_available if owner < 0 else ErrorCode.not_coordinator
    replicated = coordinators.replicated
    if replicated is not None and replicated.loading(key):
        return ErrorCode.coordinator_load_in_progress
    return ErrorCode.none
