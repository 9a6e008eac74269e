"""Who leads a partition, as Kafka's answers name it: the brokers Metadata lists beside the node asked, the
``CurrentLeader`` / ``NodeEndpoints`` (KIP-951) that Produce (v10+) and Fetch (v12+ / v16+) carry with
NOT_LEADER_OR_FOLLOWER, so that a client goes to the leader without a Metadata round trip, and the one leadership
check of the reads (:class:`Reads`: Fetch, ListOffsets and OffsetForLeaderEpoch call it alike, and ShareFetch and
ShareAcknowledge through :mod:`.share_leaders`; a consumer's Fetch v11+ is served by a follower too, KIP-392).

A partition of one copy is led by the node it is placed on (docs/cluster.md, "Placement"), at leader epoch 0; a
replicated one (issue 25) by the leader its partition state names, and served by that node only once its replica
manager leads it in that state's leader epoch (:func:`leads_here`).

Only nodes registered now are named, each with the endpoint it advertises on the listener the client came through;
a partition whose node is not (or has no such listener) is named with leader -1 and epoch -1: the client asks
Metadata, which answers LEADER_NOT_AVAILABLE until the node is back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.replication.leader import LeaderView
from walgate.replication.partition import NO_LEADER, PartitionState, check_leader_epoch, leads
from walgate.storage.errors import NotHere
from walgate.storage.partitions import LEADER_EPOCH
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode

__all__ = ["Endpoints", "ReadCheck", "Reads", "other_nodes", "current_leader", "node_endpoints", "serving_view",
           "leads_here", "named_state", "taking_over"]

T = TypeVar("T")
Endpoints = Mapping[int, tuple[str, int]]


def other_nodes(broker: Broker, listener: str) -> Endpoints:
    """The nodes other than this one registered now (cluster mode; none on a single node), each with the endpoint
    it advertises on ``listener``; a node without one is left out (a client of that listener cannot reach it).
    Read-only (:meth:`ClusterMember.others <walgate.gateway.cluster_member.ClusterMember.others>`)."""
    return {} if broker.cluster is None else broker.cluster.others(listener)


def current_leader(node: int, others: Endpoints, epoch: int = LEADER_EPOCH) -> tuple[int, int]:
    """KIP-951's ``CurrentLeader`` (leader id, leader epoch) of a partition led by ``node``, another node, in leader
    epoch ``epoch``."""
    return (node, epoch) if node in others else (-1, -1)


def serving_view(led: LedVnodes | None, db_id: str, vgroup: int) -> LeaderView | None:
    """The view this node leads the replicated vgroup under, while it may serve as its leader: one its replica manager
    made (under this process's broker epoch, KIP-903) and did not depose since, while the node holds its
    registration's lease (:meth:`LedVnodes.lease_held`: cut off from etcd past its TTL, it may have been replaced in
    an epoch it cannot read, and answers as a follower, not from a log the new leader may have passed); else None.
    Any lane: reads of what the manager last set."""
    view = None if led is None else led.leader_view(db_id, vgroup)
    return view if view is not None and not view.deposed and led is not None and led.lease_held() else None


def leads_here(led: LedVnodes, node_id: int, db_id: str, vgroup: int, state: PartitionState) -> bool:
    """Whether node ``node_id`` serves the replicated vgroup as its leader now: ``state``, the newest partition state
    it read, names it leader and it serves the vgroup (:func:`serving_view`) in that very leader epoch. False on a
    node that is starting (no state read or applied yet: its WAL's visible version may be its whole log, past the
    high watermark), that was named leader under its previous broker epoch, whose manager has not applied the newest
    state yet, or without its lease. Any lane."""
    view = serving_view(led, db_id, vgroup) if state.leader == node_id else None
    return view is not None and view.leader_epoch == state.leader_epoch


def named_state(led: LedVnodes | None, node_id: int, db_id: str, vgroup: int) -> PartitionState | None:
    """The partition state of a replicated vgroup as Metadata names it: None while none was read (or on a node with
    no replica manager); the state read when it names another node leader, or this node while it serves the vgroup
    (:func:`leads_here`) or is about to (its replica manager not done applying its election yet: the state names
    it under the broker epoch it is registered with, and it holds its lease; as Kafka's metadata cache names the
    new leader before its replica manager applied the change, a read meanwhile is answered NOT_LEADER_OR_FOLLOWER
    and retried); one naming this node leader otherwise (under its previous broker epoch, KIP-903, or without its
    lease) with no leader (Metadata: LEADER_NOT_AVAILABLE, the client asks again). Any lane."""
    if led is None:
        return None
    state = led.state_of(db_id, vgroup)
    if state is None or state.leader != node_id or leads_here(led, node_id, db_id, vgroup, state) or \
            _taking_over(led, node_id, state):
        return state
    return dataclasses.replace(state, leader=NO_LEADER)


def taking_over(led: LedVnodes | None, node_id: int, db_id: str, vgroup: int) -> bool:
    """Whether node ``node_id`` is about to lead the replicated vgroup: the newest partition state it read names it
    leader under the broker epoch it is registered with (KIP-903), it holds its lease, and its replica manager has not
    begun serving that leader epoch yet (:func:`leads_here` is false: it is applying the election, which takes it
    tens to hundreds of milliseconds). Metadata names it leader meanwhile (:func:`named_state`). Any lane."""
    state = None if led is None else led.state_of(db_id, vgroup)
    if led is None or state is None or state.leader != node_id or leads_here(led, node_id, db_id, vgroup, state):
        return False
    return _taking_over(led, node_id, state)


def _taking_over(led: LedVnodes, node_id: int, state: PartitionState) -> bool:
    """:func:`taking_over` once ``state`` is known to name node ``node_id`` and it does not serve it yet."""
    epoch = led.registered_epoch(node_id)
    return epoch is not None and led.lease_held() and leads(state, node_id, epoch)


class ReadCheck(NamedTuple):
    """A client's read of one partition as leadership answers it: ``error`` (NONE: this node serves it), the
    partition's leader epoch as this node knows it (-1: unknown), and the other node to name as its leader with
    NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (KIP-951's ``CurrentLeader``; None: none known, or this node)."""

    error: ErrorCode
    epoch: int
    leader: int | None = None


_ONE_COPY = ReadCheck(ErrorCode.none, LEADER_EPOCH)
_NOT_READ = ReadCheck(ErrorCode.not_leader_or_follower, -1)


class Reads:
    """The leadership of the partitions one request reads (Fetch: one round), for Fetch, ListOffsets and
    OffsetForLeaderEpoch alike (:meth:`serve`): taken over one topics snapshot and the replica manager of the moment.

    * a partition of one copy is led by the node it is placed on (a request reaching another node is answered by the
      read's :class:`~walgate.storage.errors.NotHere`), at :data:`LEADER_EPOCH`; with no replicated database in the
      snapshot (a single node, a one-copy cluster) that is all that is looked at;
    * a replicated one (issue 25) only on its leader (:func:`leads_here`), at its partition state's leader epoch:
      NOT_LEADER_OR_FOLLOWER elsewhere, naming the state's leader (-1 epoch and no leader while no state was read:
      a node that is starting never serves the tail past its high watermark);
    * with ``follower_reads`` (a consumer's Fetch v11+, KIP-392: Kafka's ``fetchOnlyLeader`` is false for a
      consumer that sends client metadata) also on a follower, while its replica manager follows the partition in
      that state's leader epoch (:meth:`LedVnodes.followed_epoch`): its visible version is the high watermark its
      leader's answers carried, so it serves up to its own high watermark (and last stable offset);
    * a current leader epoch named (>= 0) is checked first (KIP-320, Kafka's ``localLogWithEpoch``): an older one
      FENCED_LEADER_EPOCH (naming the state's leader, as Kafka's Fetch does since KIP-951), a newer one
      UNKNOWN_LEADER_EPOCH.

    Any lane; a Fetch round's partitions are read on their vnodes' lanes."""

    __slots__ = ("_broker", "_topics", "_led", "_node_id", "_follower_reads")

    def __init__(self, broker: Broker, topics: TopicsSnapshot | None = None, *, follower_reads: bool = False) -> None:
        """``topics``: the snapshot to check against (None: the broker's, taken at the first check, where a failure
        is a partition's error); ``follower_reads``: a follower serves the reads too (the class docstring)."""
        self._broker = broker
        self._topics = topics
        self._led = broker.led
        self._node_id = broker.node_id
        self._follower_reads = follower_reads

    def _vgroup(self, topic: str, partition: int) -> tuple[str, int] | None:
        topics = self._topics
        if topics is None:
            topics = self._topics = self._broker.topics()
        return topics.replicated_vgroup(topic, partition) if topics.any_replicated else None

    def leader_view(self, topic: str, partition: int) -> LeaderView | None:
        """The view of ``topic``'s replicated partition ``partition`` while this node leads it and was not deposed
        (None otherwise, and for a partition of one copy). On the partition's vnode's lane, the view's owner."""
        vgroup = self._vgroup(topic, partition)
        view = None if vgroup is None or self._led is None else self._led.leader_view(*vgroup)
        return None if view is None or view.deposed else view

    def check(self, topic: str, partition: int, requested_epoch: int) -> ReadCheck:
        """Whether this node serves a read of ``topic``'s partition ``partition`` naming ``requested_epoch`` (-1:
        none); see the class docstring."""
        vgroup = self._vgroup(topic, partition)
        if vgroup is None:
            if requested_epoch < 0 or requested_epoch == LEADER_EPOCH:
                return _ONE_COPY
            return ReadCheck(check_leader_epoch(LEADER_EPOCH, requested_epoch) or ErrorCode.none, LEADER_EPOCH)
        led = self._led
        state = None if led is None else led.state_of(*vgroup)
        if led is None or state is None:
            return _NOT_READ
        epoch = state.leader_epoch
        named = None if state.leader in (NO_LEADER, self._node_id) else state.leader
        fenced = None if requested_epoch < 0 else check_leader_epoch(epoch, requested_epoch)
        if fenced is not None:
            return ReadCheck(fenced, epoch, named)  # KIP-951 names the leader with FENCED_LEADER_EPOCH too
        if leads_here(led, self._node_id, *vgroup, state) or (
                self._follower_reads and led.followed_epoch(*vgroup) == epoch):
            return ReadCheck(ErrorCode.none, epoch)
        return ReadCheck(ErrorCode.not_leader_or_follower, epoch, named)

    def serve(self, topic: str, partition: int, requested_epoch: int,
              read: Callable[[], T]) -> tuple[ReadCheck, T | None]:
        """``read()`` of ``topic``'s partition ``partition`` when this node serves it (:meth:`check`), with the check;
        else the check and None. An exception is the partition's error (:func:`~.handlers.common.error_of`; a
        :class:`~walgate.storage.errors.NotHere` names the node the partition is placed on): its siblings are
        answered."""
        check = _NOT_READ
        try:
            check = self.check(topic, partition, requested_epoch)
            return (check, read()) if check.error == ErrorCode.none else (check, None)
        except Exception as exc:  # noqa: BLE001 - mapped per partition, siblings unaffected
            from walgate.gateway.kafka.handlers.common import error_of  # (that package imports this module)
            leader = exc.node if isinstance(exc, NotHere) else None
            return check._replace(error=error_of(exc), leader=leader), None


def node_endpoints(nodes: Iterable[int], others: Endpoints) -> list[Any]:
    """The ``NodeEndpoints`` (Metadata: ``brokers``) entries of those of ``nodes`` in ``others``, by id."""
    return [{"node_id": n, "host": others[n][0], "port": others[n][1], "rack": None}
            for n in sorted(set(nodes) & others.keys())]
