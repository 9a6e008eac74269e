"""Fetch (key 1) v4–v17: record batches read through the partition interface, long-poll with push wake-up.

* The handler checks and translates; the batches are what
  :meth:`walgate.storage.partitions.Partitions.read` gives: one record batch
  per WAL entry that contributes records; a fetch at an offset inside a batch
  returns that whole batch (the client skips the records before its offset),
  as Kafka does. Kafka-native topics serve their stored batches as they are
  (no re-encoding, no cache); TDengine topics render rows into batches, kept
  in the engine's batch cache. Stored batches of
  :data:`~walgate.storage.partitions.SENDFILE_MIN_BYTES` or more are file
  regions, sent by ``sendfile`` (:mod:`walgate.gateway.kafka.frame_writer`),
  never read into memory.
* OFFSET_OUT_OF_RANGE below the log start or above the log end; nothing (yet) from an offset between the high
  watermark and the log end (a replicated partition's leader just elected, Kafka's answer).
* Leadership (:class:`~walgate.gateway.kafka.leaders.Reads`, one snapshot per round): a partition placed on another
  node, or a replicated one this node does not lead now (another's, or none yet while this node starts: it never
  serves past the high watermark), answers NOT_LEADER_OR_FOLLOWER with KIP-951's ``current_leader`` where known; a
  current leader epoch named is checked first (KIP-320: FENCED_LEADER_EPOCH, with the ``current_leader`` too,
  UNKNOWN_LEADER_EPOCH).
* Fetch from follower (KIP-392): a consumer's Fetch v11+ (client metadata, Kafka's ``fetchOnlyLeader`` false) is
  served by a follower of a replicated partition too, up to its own high watermark and last stable offset, with the
  same leader epoch checks (:class:`~walgate.gateway.kafka.leaders.Reads`, ``follower_reads``); past its log end it
  answers OFFSET_OUT_OF_RANGE and between its high watermark and log end nothing, as Kafka's ``LocalLog.read``
  (the client clears its preferred replica on OFFSET_OUT_OF_RANGE and goes back to the leader). The leader, with
  ``replica.selector.class`` the rack-aware selector and a ``rack_id`` given, answers ``preferred_read_replica``
  (:func:`~walgate.replication.read_replica.preferred_read_replica`) and no records, at once, as Kafka's
  ``readFromLog`` skips the read; a follower's fetch (replica id >= 0) is never given one.
* Transactions (KIP-98): every answer carries the partition's last stable offset
  (:meth:`~walgate.storage.partitions.Partitions.offsets`). With ``isolation_level`` 1 (read_committed) only
  batches below it are served, with ``aborted_transactions``: the (producer id, first offset) of each aborted
  transaction overlapping the offsets served (Kafka's ``collectAbortedTxns``; none when nothing is served), from
  which the client drops aborted records; it skips the control batches (markers) itself. read_uncommitted answers
  ``aborted_transactions`` null, as Kafka does. A read_committed long-poll waiting at the last stable offset is woken
  by the marker that moves it (a marker is an append; under group commit, the wake-up when it is durable).
* Lost data: an entry whose WAL bytes were lost (quarantined corruption, a
  checksum failure: :class:`~walgate.storage.wal.CorruptEntry`) is a gap in
  the partition's offsets, as records removed by compaction are. It is served
  as :func:`~walgate.storage.partitions.lost_batch`, a control batch whose one record sits at the last of
  the lost offsets: every client skips control batches (they are Kafka's
  transaction markers) and moves its position past the gap, even when no
  record follows it. A partition whose read fails otherwise answers the
  error of :mod:`.common`'s table; its siblings are served. A request whose
  topics cannot be resolved at all answers that error at the top level.
* Sizes (KIP-74): ``max_bytes`` bounds the response and
  ``partition_max_bytes`` each partition, except that the first batch of the
  first partition with data is always returned whole, so a big batch cannot
  stall a consumer.
* Long-poll: while fewer than ``min_bytes`` are ready, wait up to
  ``max_wait_ms`` for an append to any requested partition (the broker's
  push event), then read again.
* Fetch sessions (KIP-227): walgate answers session id 0 ("no session"), so
  clients keep sending full fetches; a request naming a session id walgate
  never gave gets FETCH_SESSION_ID_NOT_FOUND.
* Topic ids from v13: unknown ids get UNKNOWN_TOPIC_ID.
* ACLs (as Kafka's ``handleFetchRequest``): a partition of a topic the principal may not Read answers
  TOPIC_AUTHORIZATION_FAILED (before its existence is looked at); a follower's fetch (replica id >= 0) needs
  ClusterAction on the cluster instead, which only another node of the cluster has (authenticated with the node
  token: :mod:`walgate.gateway.kafka.node_auth`), else every partition answers TOPIC_AUTHORIZATION_FAILED, with or
  without an authorizer.
* Client quotas (:mod:`walgate.gateway.quotas`): ``max_bytes`` is at most what the ``consumer_byte_rate`` allows
  over its window; an answer that would take the client over its quota is sent empty with ``throttle_time_ms``
  instead, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.leaders import Endpoints, Reads, current_leader, node_endpoints, other_nodes
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.quotas import FETCH as FETCH_RATE
from walgate.gateway.replicas import monotonic_ms
from walgate.replication.read_replica import NO_PREFERENCE, preferred_read_replica
from walgate.storage.engine import Engine
from walgate.storage.lanes import TopicLookup, VnodeKey, partition_keys
from walgate.storage.partitions import LEADER_EPOCH, PartitionOffsets, PartitionRead, Partitions
from walgate.storage.wal import FileRegion
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponseAbortedTransaction,
    FetchResponsePartitionData,
)

API_KEY, MIN_VERSION, MAX_VERSION = 1, 4, 17
READ_COMMITTED = 1


@dataclass
class _Want:
    topic: str | None  # None: unknown topic id
    topic_key: str | uuid.UUID | None  # name (<= v12) or id (v13+, None: the zero id), echoed in the response
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int


@dataclass
class _Got:
    error: int = ErrorCode.none
    start: int = -1
    end: int = -1
    batches: list[bytes | FileRegion] | None = None
    stable: int = -1  # the last stable offset
    aborted: list[FetchResponseAbortedTransaction] | None = None  # read_committed: the aborted transactions served
    leader: int | None = None  # NOT_LEADER_OR_FOLLOWER: the node leading the partition (KIP-951's CurrentLeader)
    epoch: int = LEADER_EPOCH  # its leader epoch
    preferred: int = NO_PREFERENCE  # the replica the client is told to read from (KIP-392), nothing read here

    @property
    def size(self) -> int:
        return sum(map(len, self.batches or ()))


def _got(read: PartitionRead | _Preferred) -> _Got:
    """A partition's answer from what the partition interface read, or from the replica preferred instead."""
    if isinstance(read, _Preferred):
        o = read.offsets
        return _Got(ErrorCode.none, o.log_start, o.high_watermark, [], o.last_stable, [] if read.committed else None,
                    preferred=read.node)
    o = read.offsets
    if read.out_of_range:
        return _Got(ErrorCode.offset_out_of_range, o.log_start, o.high_watermark, [], o.last_stable)
    aborted: list[FetchResponseAbortedTransaction] | None = None if read.aborted is None else [
        {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in read.aborted]
    return _Got(ErrorCode.none, o.log_start, o.high_watermark, read.batches, o.last_stable, aborted)


class _Preferred(NamedTuple):
    """A partition not read: its leader prefers replica ``node`` for this client (KIP-392); the offsets answered."""

    node: int
    offsets: PartitionOffsets
    committed: bool


@dataclass(frozen=True)
class _Selection:
    """What the leader's replica selector is given for one request (KIP-392): the selector, the client's rack, each
    node's ``broker.rack`` and the nodes with an endpoint on the client's listener."""

    selector: str
    client_rack: str
    racks: Mapping[int, str | None]
    reachable: Collection[int]

    def of(self, partitions: Partitions, reads: Reads, topic: str, partition: int, offset: int) -> int:
        """The replica preferred for a fetch of ``topic``'s partition ``partition`` from ``offset``: NO_PREFERENCE
        unless this node leads it (on its vnode's lane)."""
        view = reads.leader_view(topic, partition)
        if view is None:
            return NO_PREFERENCE
        return preferred_read_replica(self.selector, self.client_rack, view,
                                      partitions.end_holding(topic, partition, offset), self.racks, self.reachable,
                                      monotonic_ms())


def _selection(broker: Broker, ctx: RequestContext, request: FetchRequest, version: int,
               replica: int) -> _Selection | None:
    """The replica selection of a consumer's Fetch v11+ naming a rack, on a node with a selector (KIP-392); else
    None: every partition this node serves is read here."""
    if broker.replica_selector is None or version < 11 or replica >= 0 or not request.rack_id:
        return None
    cluster = broker.cluster
    racks = {} if cluster is None else {n.node_id: n.rack for n in cluster.view.nodes}
    return _Selection(broker.replica_selector, request.rack_id, racks, other_nodes(broker, ctx.listener.name).keys())


def _read_all(partitions: Partitions, wants: list[_Want], max_bytes: int, readable: Callable[[str], bool] | None,
              committed: bool, reads: Reads, selection: _Selection | None) -> list[_Got]:
    """Each wanted partition read, in turn, within ``max_bytes``, where ``reads`` says this node serves it
    (:meth:`~walgate.gateway.kafka.leaders.Reads.serve`: NOT_LEADER_OR_FOLLOWER names the leader, KIP-951), unless
    ``selection`` prefers another replica for it (KIP-392: then its offsets only)."""

    def read(w: _Want, limit: int, first: bool) -> PartitionRead | _Preferred:
        assert w.topic is not None
        node = NO_PREFERENCE if selection is None else selection.of(partitions, reads, w.topic, w.partition, w.offset)
        if node != NO_PREFERENCE:
            return _Preferred(node, partitions.offsets(w.topic, w.partition), committed)
        return partitions.read(w.topic, w.partition, w.offset, limit, must_one=first, read_committed=committed)

    left = max_bytes
    got: list[_Got] = []
    first = True
    for w in wants:
        if w.topic is None:
            got.append(_Got(ErrorCode.unknown_topic_id))
            continue
        if readable is not None and not readable(w.topic):
            got.append(_Got(ErrorCode.topic_authorization_failed))
            continue
        check, answer = reads.serve(w.topic, w.partition, w.leader_epoch,
                                    functools.partial(read, w, min(w.max_bytes, left), first))
        if answer is None:
            got.append(_Got(check.error, leader=check.leader, epoch=check.epoch))
            continue
        g = _got(answer)
        if g.batches:
            first = False
            left -= g.size
        got.append(g)
    return got


def _wants(engine: Engine, request: FetchRequest, version: int) -> list[_Want]:
    wants = []
    for t in request.topics:
        key: str | uuid.UUID | None = t.topic_id if version >= 13 else t.topic
        name = t.topic if version < 13 else None if t.topic_id is None else engine.topic_name(t.topic_id)
        for p in t.partitions:
            wants.append(
                _Want(name, key, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
            )
    return wants


def _keys(request: FetchRequest, version: int, wants: list[_Want] | None,
          topics: TopicLookup) -> frozenset[VnodeKey] | None:
    """The vnodes a round reads: its partitions' (:func:`~walgate.storage.lanes.partition_keys`), named as the first
    round resolves them (topic ids from v13) or as it resolved them."""
    if wants is not None:
        return partition_keys(topics, [(w.topic, w.partition) for w in wants if w.topic is not None])
    named = [(t.topic if version < 13 else None if t.topic_id is None else topics.topic_name(t.topic_id), t.partitions)
             for t in request.topics]
    return partition_keys(topics, [(name, p.partition) for name, parts in named if name is not None for p in parts])


def _resolve_and_read(
    engine: Engine, broker: Broker, request: FetchRequest, version: int, wants: list[_Want] | None, max_bytes: int,
    readable: Callable[[str], bool] | None, consumer: bool, selection: _Selection | None,
) -> tuple[list[_Want], list[_Got]]:
    """Resolve the requested partitions (first round only) and read them: one storage-thread hop per round, one
    leadership snapshot (:class:`~walgate.gateway.kafka.leaders.Reads`) per round; ``consumer``: a consumer's fetch
    v11+, which a follower serves too (KIP-392)."""
    wants = _wants(engine, request, version) if wants is None else wants
    return wants, _read_all(engine.partitions, wants, max_bytes, readable, request.isolation_level == READ_COMMITTED,
                            Reads(broker, follower_reads=consumer), selection)


async def handle(broker: Broker, ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    version = ctx.api_version
    if request.session_id != 0:
        return {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": []}
    deadline = time.monotonic() + max(request.max_wait.total_seconds(), 0.0)
    max_bytes = request.max_bytes
    readable = checker(broker, ctx, Operation.READ, ResourceType.TOPIC)
    replica = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica >= 0:  # a replica's fetch: only a cluster node (kafka/node_auth.py) makes one, reading every topic
        readable = None if from_cluster_node(broker, ctx) else (lambda _: False)
    if FETCH_RATE in broker.quotas.keys:  # client quotas: an answer the quota can take (Kafka's maxQuotaWindowBytes)
        max_bytes = min(max_bytes, broker.quotas.fetch_window_bytes(ctx.principal, ctx.client_id) or max_bytes)
    consumer = version >= 11 and replica < 0  # client metadata sent: Kafka's fetchOnlyLeader is false (KIP-392)
    selection = _selection(broker, ctx, request, version, replica)
    wants: list[_Want] | None = None
    got: list[_Got] = []
    keys: list[tuple[str, int]] = []
    event: asyncio.Event | None = None
    try:
        while True:
            try:
                resolved, got = await broker.call_on(functools.partial(_keys, request, version, wants),
                                                     _resolve_and_read, broker, request, version, wants, max_bytes,
                                                     readable, consumer, selection)
            except Exception as exc:  # noqa: BLE001 - the topics could not be resolved: answered, not raised
                return {"throttle_time": 0, "error_code": error_of(exc), "session_id": 0, "responses": []}
            wants = resolved
            keys = [(w.topic, w.partition) for w in wants if w.topic is not None]
            ready = sum(g.size for g in got)
            remaining = deadline - time.monotonic()
            # an error, or a replica preferred, is answered at once (as Kafka's fetchMessages does)
            at_once = any(g.error != ErrorCode.none or g.preferred != NO_PREFERENCE for g in got)
            if ready >= max(request.min_bytes, 1) or at_once or remaining <= 0 or not keys:
                break
            if event is None or event.is_set():
                # watch, then read once more before waiting: an append between the read and the watch is not missed
                if event is not None:
                    broker.unwatch(keys, event)
                event = broker.watch(keys)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await event.wait()
    finally:
        if event is not None:
            broker.unwatch(keys, event)
    if FETCH_RATE in broker.quotas.keys:  # client quotas: over the quota, an empty answer (walgate.gateway.quotas)
        throttle = broker.quotas.fetch(ctx.principal, ctx.client_id, sum(g.size for g in got))
        if throttle:
            return {"throttle_time": throttle, "error_code": ErrorCode.none, "session_id": 0, "responses": []}
    leaders = [g.leader for g in got if g.leader is not None]
    others = other_nodes(broker, ctx.listener.name) if leaders else {}  # the membership is read only when needed
    answer: FetchResponse = {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0,
                             "responses": _responses(resolved, got, version, others)}
    if leaders:  # KIP-951: where the partitions this node does not lead are
        answer["node_endpoints"] = node_endpoints(leaders, others)
    return answer


def _responses(wants: list[_Want], got: list[_Got], version: int, others: Endpoints) -> list[FetchableTopicResponse]:
    grouped: dict[Any, list[FetchResponsePartitionData]] = {}
    for w, g in zip(wants, got):
        part: FetchResponsePartitionData = {
            "partition_index": w.partition,
            "error_code": g.error,
            "high_watermark": g.end,
            "last_stable_offset": g.stable,
            "log_start_offset": g.start,
            "aborted_transactions": g.aborted,
            "preferred_read_replica": g.preferred,
            "records": g.batches or b"",  # a list of batches is written back to back, uncopied
        }
        if g.leader is not None:
            leader, epoch = current_leader(g.leader, others, g.epoch)
            part["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        grouped.setdefault(w.topic_key, []).append(part)
    if version < 13:
        return [{"topic": key, "topic_id": None, "partitions": parts} for key, parts in grouped.items()]
    return [{"topic_id": key, "partitions": parts} for key, parts in grouped.items()]
