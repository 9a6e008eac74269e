"""ShareFetch (key 78) v1–v2: records of a share session's partitions, acquired for the member, with the
acknowledgements the request carries applied first (KIP-932).

* Session (:mod:`walgate.coordinator.share_coordinator`): epoch 0 opens the member's share session (the member must
  be in the group, else UNKNOWN_MEMBER_ID, on the node that coordinates it; a cluster's other nodes do not know the
  members: :mod:`walgate.gateway.kafka.share_leaders`), a later request carries the session's next epoch, -1 applies the
  acknowledgements, closes it and releases the records the member still holds (nothing is fetched). Session errors
  are answered at the top level.
* Acknowledgements first (per partition ``acknowledge_error_code``: INVALID_RECORD_STATE for records the member does
  not hold), then acquisition: up to ``max_records`` AVAILABLE records over the session's partitions, each answered
  with the whole stored or rendered batches that hold them (the batches Fetch serves:
  :meth:`~walgate.storage.partitions.Partitions.batches`) and
  their ``acquired_records`` ranges with delivery counts; the client hands out only the acquired records and
  acknowledges the offsets without one as GAP. ``acquisition_lock_timeout`` is the group's
  ``share.record.lock.duration.ms``.
* ``max_bytes`` bounds what is acquired to whole batches that fit (the answer's first batch always does, KIP-74;
  ``max_bytes`` 0 gets no records, as from Kafka).
* ``share.isolation.level=read_committed``: records are acquired below the last stable offset only, and those of
  aborted transactions are archived as they are acquired (never delivered; the client acknowledges their offsets,
  and the transaction markers', as GAP).
* ``is_renew_ack`` (v2, KIP-1222): the request renews locks (RENEW acknowledgements) and acquires nothing new; it
  is answered at once.
* Long poll: a request that acknowledged nothing and acquired nothing waits up to ``max_wait_ms`` for an append to
  one of its partitions or for a lock to end, then acquires again.
* Lanes: the session, the acknowledgements and what acquiring needs read are one coordinator-lane call (the
  acknowledgements durable before anything is read); each round then reads its partitions on the storage lane and
  acquires on the coordinator lane against what it read (:mod:`walgate.gateway.kafka.share_reads`).
* Durability: the acknowledgements are written (``share_groups.log``) before the answer; a write the disk refuses
  answers every partition KAFKA_STORAGE_ERROR, acknowledgements and acquisitions undone
  (:mod:`walgate.gateway.kafka.shares`).
* Cluster mode (:mod:`walgate.gateway.kafka.share_leaders`): a partition placed on another node, or a replicated one
  this node does not lead now (as Fetch decides), answers NOT_LEADER_OR_FOLLOWER with its ``current_leader`` and the
  leader's endpoint in ``node_endpoints`` (KIP-951), and is not acknowledged here; a replicated one is added to the
  session all the same (as Kafka's broker adds every requested partition; its client names a partition as added
  once only), and a partition of the session this node does not lead now is answered so at each round, neither read
  nor acquired, and read once this node leads it.
* ACLs (as Kafka's ``handleShareFetchRequest``): Read on the group, else GROUP_AUTHORIZATION_FAILED at the top
  level; a partition of a topic the principal may not Read answers TOPIC_AUTHORIZATION_FAILED; an unknown topic id
  UNKNOWN_TOPIC_ID.
* Client quotas (:mod:`walgate.gateway.quotas`, as Kafka's ``handleShareFetchRequest``): the record bytes of the
  answer count against the principal's / client id's ``consumer_byte_rate`` as a Fetch's do, ``max_bytes`` is at
  most what that rate allows over the quota window, and an answer that would go over it carries no records, only
  ``throttle_time_ms`` (and the acknowledgements' outcomes). Kafka leaves such an answer's records acquired until
  their lock ends; here they are released at once (their delivery count stays counted, as after a lock's end).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from walgate.coordinator.share_coordinator import AckBatch, PartitionResult, ReadWant, ShareCoordinator
from walgate.coordinator.share_partition import Ack
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.share_leaders import (
    Elsewhere,
    Leaders,
    by_leadership,
    coordinates,
    elsewhere,
    in_session,
    requested,
)
from walgate.gateway.kafka.share_reads import LogReads
from walgate.gateway.kafka.shares import ShareService, now_ms
from walgate.gateway.quotas import FETCH as FETCH_RATE
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.storage.wal import FileRegion
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ShareAcknowledgeRequestAcknowledgeTopic,
    ShareFetchableTopicResponse,
    ShareFetchRequest,
    ShareFetchRequestFetchTopic,
    ShareFetchResponse,
    ShareFetchResponsePartitionData,
)

API_KEY, MIN_VERSION, MAX_VERSION = 78, 1, 2
DEFAULT_MAX_RECORDS = 500
Topics = Sequence[ShareFetchRequestFetchTopic] | Sequence[ShareAcknowledgeRequestAcknowledgeTopic]
"""The topics of a ShareFetch or a ShareAcknowledge request (the same fields)."""


@dataclass(frozen=True)
class Refused:
    """A ShareFetch / ShareAcknowledge refused as a whole: its top-level error code and message."""

    error: int
    message: str | None = None


@dataclass
class Served:
    """One partition's answer: the coordinator's result and the batches holding its acquired records."""

    result: PartitionResult
    batches: list[bytes | FileRegion] = field(default_factory=list)


@dataclass
class Round:
    """What one round found: a top-level error, or each partition's answer; before it acquires, what it must read
    from the logs for that (``wants``, under read_committed or not)."""

    error: int = ErrorCode.none
    message: str | None = None
    lock_ms: int = 0
    served: dict[tuple[str, int], Served] = field(default_factory=dict)
    watch: list[tuple[str, int]] = field(default_factory=list)  # (topic name, partition) of the session
    deadline_ms: int | None = None  # the earliest lock of the session's partitions
    wants: list[ReadWant] = field(default_factory=list)
    unread: list[tuple[str, int]] = field(default_factory=list)  # (topic key, partition) whose state to read first
    committed: bool = False

    @property
    def answered(self) -> bool:
        return any(s.result.acquired or s.result.acked or s.result.error for s in self.served.values())


def ack_batches(topics: Topics, names: dict[str, str | None]) -> list[AckBatch]:
    """The acknowledgement batches of a ShareFetch / ShareAcknowledge request's known topics."""
    return [AckBatch(str(t.topic_id), p.partition_index, b.first_offset, b.last_offset, list(b.acknowledge_types))
            for t in topics if names.get(str(t.topic_id)) for p in t.partitions for b in p.acknowledgement_batches]


def resolve(snapshot: TopicsSnapshot, topics: Topics, readable: Callable[[str], bool] | None
            ) -> tuple[dict[str, str | None], dict[tuple[str, int], int]]:
    """Topic id -> name (None: not servable) of the request's topics, and the error of each partition that is not."""
    names: dict[str, str | None] = {}
    errors: dict[tuple[str, int], int] = {}
    for t in topics:
        key = str(t.topic_id)
        name = snapshot.topic_name(t.topic_id) if t.topic_id is not None else None
        error = ErrorCode.unknown_topic_id if name is None else (
            ErrorCode.topic_authorization_failed if readable is not None and not readable(name) else ErrorCode.none)
        names[key] = name if error == ErrorCode.none else None
        for p in t.partitions:
            if error != ErrorCode.none:
                errors[(key, p.partition_index)] = error
    return names, errors


def _here(partitions: list[tuple[str, int]], moved: Elsewhere) -> list[tuple[str, int]]:
    """Those of a session's ``partitions`` this node serves now: ``partitions`` itself when none moved (a single
    node's and a one-copy cluster's every round: no per-partition cost)."""
    return [tp for tp in partitions if tp not in moved] if moved else partitions


def _wants(coordinator: ShareCoordinator, group_id: str, member_id: str, out: Round, moved: Elsewhere) -> Round:
    """``out`` with what with_reads over the member's session partitions must read first, those this node does not
    serve now (``moved``) left out (coordinator lane)."""
    session = coordinator.sessions.get((group_id, member_id))
    if session is None:
        out.error = ErrorCode.share_session_not_found
        return out
    here = _here(session.partitions, moved)
    out.wants = coordinator.reads(group_id, here)
    out.unread = [(topic, partition) for _, topic, partition in coordinator.unread(group_id, here)]
    out.committed = coordinator.logs.settings(group_id).committed
    return out


def _acquire(topics: TopicsSnapshot, coordinator: ShareCoordinator, logs: LogReads, group_id: str, member_id: str,
             max_records: int, out: Round, moved: Elsewhere) -> Round:
    """Acquire over the member's session partitions into ``out``, against what its round read, those this node does
    not serve now (``moved``) left out (coordinator lane)."""
    session = coordinator.sessions.get((group_id, member_id))
    if session is None:
        out.error = ErrorCode.share_session_not_found
        return out
    now = now_ms()
    partitions = _here(session.partitions, moved)
    results = coordinator.acquire(group_id, member_id, partitions, max_records, now, error_of, logs.cap)
    for tp, result in results.items():
        served = out.served.setdefault(tp, Served(PartitionResult()))
        served.result.error = served.result.error or result.error
        served.result.acquired = result.acquired
        name = topics.topic_name(uuid.UUID(tp[0]))
        if name is not None:
            out.watch.append((name, tp[1]))
            served.batches = logs.batches(tp[0], tp[1], result.acquired)
            gone = logs.aborted(tp[0], tp[1])  # read under read_committed only
            if gone and result.acquired:
                served.result.acquired = coordinator.archive(group_id, member_id, tp[0], tp[1], result.acquired,
                                                             gone, now)
    out.deadline_ms = coordinator.next_deadline((group_id, t, p) for t, p in session.partitions)
    return out


async def _acquired(shares: ShareService, group_id: str, member_id: str, max_records: int, max_bytes: int,
                    out: Round, moved: Elsewhere) -> Round:
    """``out`` (a round that read nothing yet) acquired: the durable state of its share-partitions not read yet read
    first (a replicated cluster's, :meth:`ShareService.ensure_read`), its ``wants`` read on the storage lane, then
    the acquisition on the coordinator lane (:mod:`walgate.gateway.kafka.share_reads`)."""
    if out.error == ErrorCode.none and out.unread:
        await shares.ensure_read(group_id, out.unread)
        out = await shares.run(lambda _, coordinator: _wants(coordinator, group_id, member_id, out, moved))
    if out.error != ErrorCode.none or not out.wants:
        return out
    reads = await shares.read(out.wants, out.committed, max_bytes)
    return await shares.with_reads(reads, max_bytes, lambda topics, coordinator, logs: _acquire(
        topics, coordinator, logs, group_id, member_id, max_records, out, moved))


def admitted(broker: Broker, ctx: RequestContext,
             group_id: str) -> tuple[ShareService, Callable[[str], bool] | None] | Refused:
    """The share service for a ShareFetch / ShareAcknowledge of ``group_id`` and the principal's Read check on topics
    (None: everything allowed), or why it is refused as a whole: share groups off (UNSUPPORTED_VERSION) or no Read
    on the group (GROUP_AUTHORIZATION_FAILED)."""
    if broker.shares is None:
        return Refused(ErrorCode.unsupported_version, "Share groups are not enabled.")
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, group_id):
        return Refused(ErrorCode.group_authorization_failed)
    return broker.shares, checker(broker, ctx, Operation.READ, ResourceType.TOPIC)


async def handle(broker: Broker, ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    admission = admitted(broker, ctx, group_id)
    if isinstance(admission, Refused):
        return _top(admission.error, admission.message)
    shares, readable = admission
    renew_only = request.is_renew_ack  # v2 (False before): renewing locks, nothing new is acquired
    max_records = request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS
    max_bytes = request.max_bytes
    if FETCH_RATE in broker.quotas.keys:  # client quotas: an answer the quota can take (Kafka's maxQuotaWindowBytes)
        max_bytes = min(max_bytes, broker.quotas.fetch_window_bytes(ctx.principal, ctx.client_id) or max_bytes)
    deadline = time.monotonic() + max(request.max_wait.total_seconds(), 0.0)
    members_known = await coordinates(broker, group_id)
    placed: dict[tuple[str, int], tuple[int, int]] = {}  # partitions this node does not serve, their leaders

    def wants(topics: TopicsSnapshot, coordinator: ShareCoordinator, out: Round) -> Round:
        """``out`` with what its round must read, once the session's partitions this node does not serve now (a
        replicated one it does not lead; a one-copy one never moves, checked as it was added) are in ``placed``,
        each answered NOT_LEADER_OR_FOLLOWER."""
        session = coordinator.sessions.get((group_id, member_id))
        if session is not None and topics.any_replicated:
            for tp, leader in elsewhere(broker, topics, in_session(topics, session.partitions)).items():
                placed[tp] = leader
                out.served.setdefault(tp, Served(not_leader(tp, request.topics)))
        return _wants(coordinator, group_id, member_id, out, placed)

    def first(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> Round:
        out = Round(lock_ms=coordinator.logs.settings(group_id).lock_ms)
        code, message = coordinator.session(group_id, member_id, epoch, fetch=True, members_known=members_known,
                                            now_ms=now_ms())
        if code != ErrorCode.none:
            return Round(code, message)
        names, errors = resolve(topics, request.topics, readable)
        for tp, error in errors.items():
            out.served[tp] = Served(PartitionResult(error=error))
        placed.update(elsewhere(broker, topics, requested(names, request.topics)))
        for tp in placed:
            out.served[tp] = Served(not_leader(tp, request.topics))
        acks = [b for b in ack_batches(request.topics, names) if (b.topic, b.partition) not in placed]
        for tp, result in coordinator.acknowledge(group_id, member_id, acks, now_ms(), error_of).items():
            out.served[tp] = Served(result)
        if epoch == -1:
            coordinator.close(group_id, member_id)
            return out
        adds = [(key, p) for key, name, p in requested(names, request.topics)
                if (key, p) not in placed or by_leadership(topics, name, p)]
        forget = [(str(t.topic_id), p) for t in request.forgotten_topics_data for p in t.partitions]
        coordinator.update_session(group_id, member_id, adds, forget)
        for tp in adds:
            out.served.setdefault(tp, Served(PartitionResult()))
        return out if renew_only else wants(topics, coordinator, out)

    def again(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> Round:
        return wants(topics, coordinator, Round(lock_ms=coordinator.logs.settings(group_id).lock_ms))

    try:
        answer = await shares.run(first)  # the acknowledgements, durable
    except Exception as exc:  # noqa: BLE001 - a refused write: every partition answers it, nothing changed
        return _failed(request, error_of(exc), Leaders(broker, ctx.listener.name, placed))
    leaders = Leaders(broker, ctx.listener.name, placed)
    try:
        answer = await _acquired(shares, group_id, member_id, max_records, max_bytes, answer, placed)
    except Exception as exc:  # noqa: BLE001 - a refused write: nothing acquired, the acknowledgements stand
        return _failed(request, error_of(exc), leaders, answer)
    event: asyncio.Event | None = None
    keys = answer.watch
    try:
        while answer.error == ErrorCode.none and epoch != -1 and not renew_only and not answer.answered:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not keys:
                break
            if answer.deadline_ms is not None:
                remaining = min(remaining, max(answer.deadline_ms - now_ms(), 0) / 1000 + 0.01)
            if event is None:
                event = broker.watch(keys)  # then acquire once more: an append meanwhile is not missed
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()
                event.clear()
            try:
                fresh = await _acquired(shares, group_id, member_id, max_records, max_bytes, await shares.run(again),
                                        placed)
            except Exception as exc:  # noqa: BLE001 - the first round's answer (its acknowledgements) stands
                error_of(exc)  # logged when unexpected; the next fetch meets it again
                break
            for tp, served in answer.served.items():  # keep the first round's per-partition errors
                fresh.served.setdefault(tp, served)
            answer = fresh
    finally:
        if event is not None:
            broker.unwatch(keys, event)
    if answer.error != ErrorCode.none:
        return _top(answer.error, answer.message)
    throttle = 0
    if FETCH_RATE in broker.quotas.keys:  # client quotas: over the quota, no records (walgate.gateway.quotas)
        nbytes = sum(len(b) for s in answer.served.values() for b in s.batches)
        throttle = broker.quotas.fetch(ctx.principal, ctx.client_id, nbytes)
        if throttle:
            await _withhold(shares, group_id, member_id, answer)
    leaders = Leaders(broker, ctx.listener.name, placed)  # (the later rounds' too)
    return {"throttle_time": throttle, "error_code": ErrorCode.none, "error_message": None,
            "acquisition_lock_timeout": answer.lock_ms, "responses": _responses(answer.served, leaders),
            "node_endpoints": leaders.endpoints(answer.served)}


async def _withhold(shares: ShareService, group_id: str, member_id: str, answer: Round) -> None:
    """Take the records out of a throttled ``answer`` and release them for the group (the acknowledgements it
    carries stand); a release the disk refuses leaves them to their lock's end, as Kafka leaves them."""
    releases = [AckBatch(topic, partition, a.first, a.last, [Ack.RELEASE])
                for (topic, partition), s in answer.served.items() for a in s.result.acquired]
    for s in answer.served.values():
        s.batches, s.result.acquired = [], []
    if not releases:
        return
    try:
        await shares.run(lambda _, coordinator: coordinator.acknowledge(group_id, member_id, releases, now_ms(),
                                                                       error_of))
    except Exception as exc:  # noqa: BLE001 - the records come back when their locks end
        error_of(exc)


def _top(error: int, message: str | None = None) -> ShareFetchResponse:
    """A ShareFetch answer with a top-level error and no partitions."""
    return {"throttle_time": 0, "error_code": error, "error_message": message, "acquisition_lock_timeout": 0,
            "responses": [], "node_endpoints": []}


def not_leader(tp: tuple[str, int], topics: Topics) -> PartitionResult:
    """The answer of a partition placed on another node: NOT_LEADER_OR_FOLLOWER, for its acknowledgements too when
    the request carries some."""
    acks = any(p.acknowledgement_batches for t in topics if str(t.topic_id) == tp[0] for p in t.partitions
               if p.partition_index == tp[1])
    return PartitionResult(error=ErrorCode.not_leader_or_follower,
                           ack_error=ErrorCode.not_leader_or_follower if acks else ErrorCode.none, acked=acks)


def _failed(request: ShareFetchRequest, error: int, leaders: Leaders, acked: Round | None = None) -> ShareFetchResponse:
    """Every partition of ``request`` answering ``error`` (its acknowledgements too, but those ``acked`` applied:
    their outcomes)."""
    served = {(str(t.topic_id), p.partition_index): Served(PartitionResult(error=error, ack_error=error))
              for t in request.topics for p in t.partitions}
    for tp, s in (acked.served.items() if acked is not None else ()):
        if s.result.acked and tp in served:
            served[tp].result.ack_error, served[tp].result.ack_message = s.result.ack_error, s.result.ack_message
    return {**_top(ErrorCode.none), "responses": _responses(served, leaders), "node_endpoints": leaders.endpoints(served)}


def _responses(served: dict[tuple[str, int], Served], leaders: Leaders) -> list[ShareFetchableTopicResponse]:
    grouped: dict[str, list[ShareFetchResponsePartitionData]] = {}
    for (topic, partition), s in served.items():
        r, leader = s.result, leaders.of(topic, partition)
        grouped.setdefault(topic, []).append({
            "partition_index": partition, "error_code": r.error, "error_message": None,
            "acknowledge_error_code": r.ack_error, "acknowledge_error_message": r.ack_message,
            "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]},
            "records": s.batches or b"",
            "acquired_records": [{"first_offset": a.first, "last_offset": a.last, "delivery_count": a.delivery_count}
                                 for a in r.acquired],
        })
    return [{"topic_id": uuid.UUID(topic), "partitions": parts} for topic, parts in grouped.items()]
