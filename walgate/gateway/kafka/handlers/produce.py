"""Produce (key 0) v3–v12: batches into Kafka-native topics, stored as produced, durable before the answer.

* The whole request runs in one storage-lane call, holding only its partitions' vnodes when they are all
  Kafka-native (:meth:`~walgate.gateway.kafka.broker.Broker.call_on`: a large write into another database does
  not delay it); the handler checks the
  request (ACLs, transactions, ``acks``) and translates, the partition
  interface (:meth:`walgate.storage.partitions.Partitions.append`, a topic's
  partitions in one call) does the rest. Each partition is answered on its
  own: its records are validated (:func:`~walgate.wire.validate_produced`:
  CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE; a request above the
  topic's segment size: RECORD_LIST_TOO_LARGE; in C, no object per record),
  then appended atomically (all its batches or none), durable per the
  database's WAL level when the answer is sent. An error in
  one partition, expected or not, is that partition's error code (the table
  of :mod:`.common`: a write the disk refused is KAFKA_STORAGE_ERROR); the
  other partitions are written and answered as usual. ``acks`` 1 and -1 (all)
  are the same on one node and for every vnode without replicas; ``acks=0`` gets no response (:class:`~.common.Unanswered`: the metrics still count the
  partitions appended), and when a partition is refused the connection is closed, as Kafka does, so that the client
  notices and refreshes its metadata. Under group commit (the gateway's) a partition is
  answered once its write is durable, one fdatasync covering many requests (see
  :mod:`walgate.gateway.group_commit`); a failed one answers KAFKA_STORAGE_ERROR.
* A Kafka-native partition whose vnode is replicated (issue 25; the replica manager, :mod:`walgate.gateway.replicas`)
  is refused before its append by a node that does not lead it (NOT_LEADER_OR_FOLLOWER) and, for ``acks=all``, while
  its ISR is below ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS); an ``acks=all`` write is answered, after it is
  durable here, once the high watermark passes it (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR then is below the
  minimum, NOT_LEADER_OR_FOLLOWER when deposed first, REQUEST_TIMED_OUT after the request's ``timeout_ms``: Kafka's
  produce purgatory, :mod:`walgate.gateway.purgatory`); ``acks=1`` after the local append, as Kafka. A node that is
  taking over a partition's lead (:func:`~walgate.gateway.kafka.leaders.taking_over`: Metadata names it, its replica
  manager has not begun the leader epoch yet) holds a request writing it until it leads (or, at the most, the
  request's ``timeout_ms``; :func:`_taken_over`) instead of answering NOT_LEADER_OR_FOLLOWER: a client's pipelined
  batches of the partition are then all answered by the leader, none refused while a later one is taken. Kafka's
  broker leads a partition as soon as its metadata names it; walgate's takeover of hundreds of milliseconds split a
  client's in-flight batches: librdkafka took a batch accepted after a refused one as acknowledging it (delivered,
  with no offset), and, when the refused batch was not in the log, the later one's OUT_OF_ORDER_SEQUENCE_NUMBER
  made it bump its producer epoch (KIP-360) and send every batch not acknowledged yet again under new sequence
  numbers: one the old leader had appended was stored twice (as the WALs and logs of a compat run of 2026-11-30
  read). For the same reason a batch of an idempotent producer refused before its append (NOT_ENOUGH_REPLICAS,
  NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR) leaves a gap on its connection: the batches of that producer and
  partition after it on the connection get the same refusal, without their append, until it comes again
  (:mod:`walgate.gateway.kafka.produce_gaps`). Rows produced with ``acks=all`` to a TDengine topic over a
  replicated database (``REPLICA n``: each vnode its rows land in led here, else NOT_LEADER_OR_FOLLOWER) are refused
  before their append while a vnode's ISR is below ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS) and answered once
  the high watermark of every vnode the topic's partitions of the request appended to passes those appends, in the
  leader epoch they were appended in (:mod:`walgate.storage.led_appends`; one vnode's error answers each of them);
  with ``acks=1`` at the append.
* Client quotas (:mod:`walgate.gateway.quotas`): the request's record bytes count against its
  ``producer_byte_rate``; over it, the answer carries ``throttle_time_ms`` (with ``acks=0``, which gets no answer,
  the server mutes the connection that long instead).
* Idempotent producers: sequence checks per (producer id, partition), a retried
  batch answers its original offset (see :mod:`walgate.storage.producers`).
* Transactional producers (KIP-98, KIP-890): a request whose batches are transactional needs a transactional
  id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere, as Kafka) and one producer id (else
  INVALID_PRODUCER_ID_MAPPING everywhere); each partition holding them is first verified by the transaction
  coordinator (``broker.transactions.verify``: is the partition in that producer's ongoing transaction?), or, from
  v12 (KIP-890 part 2, whatever the finalized ``transaction.version``, as Kafka decides it on the request version),
  added to it (``broker.transactions.add_implicitly``, one durable record for the request's partitions: the client
  sends no AddPartitionsToTxn). A failed verification is that partition's error, nothing written: INVALID_TXN_STATE
  ("not added to the transaction") and the coordinator's fencing errors as they are (a fenced epoch
  INVALID_PRODUCER_EPOCH), its retriable ones (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS) as NOT_ENOUGH_REPLICAS, which every client retries, as Kafka's ``ReplicaManager``
  translates them. A gateway without a transaction coordinator answers INVALID_TXN_STATE.
  The partition then applies the transaction rules of :mod:`walgate.storage.producers` (INVALID_TXN_STATE,
  INVALID_PRODUCER_EPOCH for a fenced epoch). A TDengine topic takes no transactional batch:
  UNSUPPORTED_FOR_MESSAGE_FORMAT (Kafka's answer for a log that cannot hold transactions).
* ``message.timestamp.type=LogAppendTime`` topics stamp each batch with the
  append time (``log_append_time`` in the answer).
* TDengine topics take rows (:mod:`walgate.storage.produced_rows`): each record is either a JSON
  object (key = the subtable, or a ``tbname`` string field; fields = columns,
  and tags for a subtable that is new) for topics over a supertable, or InfluxDB
  line protocol (ns timestamps unless the record has a ``precision`` header:
  ns, us, ms or s) whose measurement is the topic's supertable (any, for
  database topics). A partition's records are written in one write, whole
  or not at all (across every vnode they land in), or refused with
  INVALID_RECORD: records that are wrong in themselves (a key or header that
  is not UTF-8, JSON that does not parse or is not an object, a ``tbname``
  that is not a string, line protocol that does not parse, another
  measurement, a precision other than the partition's first record's) are
  listed in ``record_errors`` (``batch_index`` counts the partition's records
  from 0: the record's index in its batch when, as clients send it, the
  partition holds one batch); rows that do not fit the schema are named in
  ``error_message``. Rows land in the partition of their table (the vnode it
  hashes to), so the answer's base offset is -1. Unknown topics get
  UNKNOWN_TOPIC_OR_PARTITION.
* ACLs (as Kafka's ``handleProduceRequest``): a request with a transactional id needs Write on that
  TransactionalId, else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a partition of a topic the
  principal may not Write answers TOPIC_AUTHORIZATION_FAILED (before its existence is looked at).
  Idempotent producers are checked once, by InitProducerId, as Kafka 4 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from walgate.gateway.kafka.access import Operation, ResourceType, allowed, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import PRODUCE, TRANSACTIONS, Deferred, Unanswered, error_of
from walgate.gateway.kafka.leaders import (
    Endpoints,
    current_leader,
    node_endpoints,
    other_nodes,
    serving_view,
    taking_over,
)
from walgate.gateway.kafka.led_vnodes import LedVnodes, until_changed
from walgate.gateway.kafka.produce_gaps import ProduceGaps
from walgate.gateway.quotas import PRODUCE as PRODUCE_RATE
from walgate.storage.durability import Need
from walgate.storage.engine import Engine
from walgate.storage.errors import NotHere, StorageError, StorageUnavailable
from walgate.storage.lanes import VnodeKey, partition_keys
from walgate.storage.led_appends import LedAppend, recording
from walgate.storage.partitions import TransactionsUnsupported
from walgate.storage.produced_rows import RecordsRefused
from walgate.storage.producers import SequenceError
from walgate.wire import batch_header
from walgate.wire.errors import ErrorCode, WireError
from walgate.wire.messages import (
    ProduceRequest,
    ProduceResponse,
    ProduceResponsePartitionProduceResponse,
    ProduceResponseTopicProduceResponse,
)
from walgate.wire.record_batch import BATCH_HEADER_SIZE, TRANSACTIONAL_BIT

API_KEY, MIN_VERSION, MAX_VERSION = 0, 3, 12
PartitionAnswer = ProduceResponsePartitionProduceResponse
_IMPLICIT_ADD_SINCE = 12  # Kafka's produceRequestVersionToTransactionSupportedOperation: addPartition
_ACKS = (-1, 0, 1)
_TAKEOVER_RECHECK_S = 1.0  # besides each change of the vnodes: for this node's lease or registration lapsing
_RETRIABLE_VERIFICATION = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                                     ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                     ErrorCode.not_coordinator})


def _answer(index: int, error: int, message: str | None = None, base_offset: int = -1, log_append_time: int = -1,
            log_start: int = -1, record_errors: Sequence[tuple[int, str]] = ()) -> PartitionAnswer:
    return {"index": index, "error_code": error, "base_offset": base_offset, "log_append_time": log_append_time,
            "log_start_offset": log_start, "error_message": message,
            "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in record_errors]}


async def handle(broker: Broker, ctx: RequestContext, request: ProduceRequest
                 ) -> Deferred[ProduceResponse | Unanswered]:
    """The request's partitions checked and appended, in the order the connection's requests came; its answer
    deferred (:class:`~.common.Deferred`: :func:`_answered`)."""
    writable = checker(broker, ctx, Operation.WRITE, ResourceType.TOPIC)
    denied = ErrorCode.topic_authorization_failed
    tid = request.transactional_id
    if writable is not None and tid is not None and not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                                 tid):
        writable, denied = _nothing, ErrorCode.transactional_id_authorization_failed
    refused = await _verify_transactions(broker, ctx.api_version, request, writable)
    if refused is None:  # transactional records without a transactional id
        writable, denied, refused = _nothing, ErrorCode.transactional_id_authorization_failed, {}
    others = other_nodes(broker, ctx.listener.name)
    written = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
    await _taken_over(broker, written, request.timeout.total_seconds())
    gaps = ctx.produce_gaps
    if gaps is not None:
        refused.update(_beyond_gaps(gaps, request, refused))
    answers, needs, waits = await broker.call_on(
        lambda topics: partition_keys(topics, written), _produce, request, int(time.time() * 1000), writable, denied,
        refused, broker.node_id, others, broker.led)
    if gaps is not None:
        for t in request.topic_data:
            for p in t.partition_data:
                answer = answers[(t.name, p.index)]
                leader = answer.get("current_leader")
                gaps.refused(t.name, p.index, p.records or b"", answer["error_code"],
                             None if leader is None else (leader["leader_id"], leader["leader_epoch"]))
    return Deferred(_answered(broker, ctx, request, others, answers, needs, waits))


def _beyond_gaps(gaps: ProduceGaps, request: ProduceRequest, refused: dict[tuple[str, int], PartitionAnswer]
                 ) -> dict[tuple[str, int], PartitionAnswer]:
    """The answers of the request's partitions whose batches lie beyond a sequence gap the connection left
    (:mod:`walgate.gateway.kafka.produce_gaps`): the gap's error and the current leader it named, nothing
    appended."""
    answers = {}
    for t in request.topic_data:
        for p in t.partition_data:
            if (t.name, p.index) in refused:
                continue
            gap = gaps.beyond(t.name, p.index, p.records or b"")
            if gap is not None:
                answer = answers[(t.name, p.index)] = _answer(
                    p.index, gap.error, f"these batches follow sequence {gap.first_seq} of producer {gap.producer_id}, "
                    f"which this connection's earlier request was refused before its append "
                    f"({gap.error.name.upper()}): refused alike until that batch comes again")
                if gap.current_leader is not None:
                    answer["current_leader"] = {"leader_id": gap.current_leader[0], "leader_epoch": gap.current_leader[1]}
    return answers


async def _answered(broker: Broker, ctx: RequestContext, request: ProduceRequest, others: Endpoints,
                    answers: dict[tuple[str, int], PartitionAnswer], needs: dict[tuple[str, int], list[Need]],
                    waits: dict[tuple[str, int], list[LedAppend]]) -> ProduceResponse | Unanswered:
    """The answer of ``request``, whose appends :func:`_produce` made: once each written partition is durable and,
    for acks=all on a replicated vnode, below the high watermark (or answered with the error the wait ended on)."""
    await asyncio.gather(*(_durable(broker, answers, key, part) for key, part in needs.items() if part))
    await _replicated(broker.led, answers, waits, request.timeout.total_seconds())
    throttle = 0
    if PRODUCE_RATE in broker.quotas.keys:  # client quotas: see walgate.gateway.quotas
        size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
        throttle = broker.quotas.produce(ctx.principal, ctx.client_id, size)
    responses: list[ProduceResponseTopicProduceResponse] = [
        {"name": t.name, "topic_id": t.topic_id,
         "partition_responses": [answers[(t.name, p.index)] for p in t.partition_data]}
        for t in request.topic_data
    ]
    fields: ProduceResponse = {"throttle_time": throttle, "responses": responses}
    leaders = [p["current_leader"]["leader_id"] for t in responses for p in t["partition_responses"]
               if "current_leader" in p]
    if leaders:  # KIP-951: where the partitions this node does not lead are
        fields["node_endpoints"] = node_endpoints(leaders, others)
    if request.acks != 0:
        return fields
    return Unanswered(fields, ", ".join(
        f"{t['name']}-{p['index']}: {ErrorCode(p['error_code']).name.upper()}"
        for t in responses for p in t["partition_responses"] if p["error_code"]))


async def _taken_over(broker: Broker, written: list[tuple[str, int]], timeout_s: float) -> None:
    """Wait while this node is taking over the lead of a replicated partition of ``written``
    (:func:`~walgate.gateway.kafka.leaders.taking_over`), at most ``timeout_s``; at once when it takes over none.
    Looked at again when one of their vnodes changed (its state read or applied:
    :func:`~walgate.gateway.kafka.led_vnodes.until_changed`): requests that began waiting earlier look earlier, so a
    connection's requests still reach the partition in the order they came."""
    led = broker.led
    if led is None:
        return
    topics = broker.topics()
    vgroups = list({vgroup for topic, index in written if (vgroup := topics.vgroup_of(topic, index)) is not None})

    async def led_here() -> bool:
        return not any(taking_over(led, broker.node_id, *vgroup) for vgroup in vgroups)

    if not await led_here():  # (at once, watching nothing, when it takes over none: every Produce)
        await until_changed(led, vgroups, led_here, timeout_s, _TAKEOVER_RECHECK_S)


async def _durable(broker: Broker, answers: dict[tuple[str, int], PartitionAnswer], key: tuple[str, int],
                   needs: list[Need]) -> None:
    """Wait until a written partition is durable (group commit); its answer is KAFKA_STORAGE_ERROR if it cannot be."""
    try:
        await broker.storage.durable(needs)
    except StorageUnavailable as exc:
        answers[key] = _answer(key[1], error_of(exc, PRODUCE), str(exc))


async def _replicated(led: LedVnodes | None, answers: dict[tuple[str, int], PartitionAnswer],
                      waits: dict[tuple[str, int], list[LedAppend]], timeout_s: float) -> None:
    """acks=all writes to replicated vnodes, durable here: each answered once the high watermark of the leader epoch
    its appends were made in passes them, or with the error the wait ended on (:meth:`LedVnodes.writes_acknowledged
    <walgate.gateway.kafka.led_vnodes.LedVnodes.writes_acknowledged>`)."""
    waiting = [key for key in waits if answers[key]["error_code"] == ErrorCode.none]
    if led is None or not waiting:
        return
    codes = await asyncio.gather(*(led.writes_acknowledged(waits[key], timeout_s) for key in waiting))
    for key, code in zip(waiting, codes):
        if code != ErrorCode.none:
            answers[key] = _answer(key[1], code)


def _replication(engine: Engine, led: LedVnodes | None, topic: str, index: int, acks: int
                 ) -> tuple[VnodeKey, int, ErrorCode | None] | None:
    """For a Kafka-native partition whose vnode is replicated (its WAL's high watermark is the replica manager's,
    :attr:`Wal.replication <walgate.storage.wal.Wal.replication>`): (the vnode, the leader epoch this node leads it
    in, the error refusing the write before its append, or None): NOT_LEADER_OR_FOLLOWER when this node does not
    serve it as leader now (:func:`~walgate.gateway.kafka.leaders.serving_view`), and for acks=all NOT_ENOUGH_REPLICAS while its ISR is below ``min.insync.replicas``
    (:meth:`LeaderView.check_produce
    <walgate.replication.leader.LeaderView.check_produce>`). None for any other partition: written as on a single
    node (a partition not here, or not known, is answered by the append: one past the database's vgroups is never
    looked up here, its placement has no entry for it). Raises nothing but a bug: the lookups below refuse with
    :class:`StorageError` only."""
    topics = engine.store.topics()
    found = topics.topic(topic)
    if found is None or not topics.is_native(topic):
        return None
    try:
        db = engine.database(found.db)
        if not 0 <= index < db.vgroups:
            return None
        wal = engine.store.local_vnode(found.db, index).wal
    except StorageError:
        return None
    if wal.replication is None:
        return None
    view = serving_view(led, db.id, index)
    if view is None:
        return (found.db, index), -1, ErrorCode.not_leader_or_follower
    return (found.db, index), view.leader_epoch, view.check_produce() if acks == -1 else None


def _nothing(_: str) -> bool:
    return False


def _transactional(records: bytes) -> tuple[int, int] | None:
    """(producer id, epoch) of the first transactional batch among *records* (None: none). Only headers are read;
    bytes that do not hold whole batches are left to validation."""
    pos, view = 0, memoryview(records)
    while len(view) - pos >= BATCH_HEADER_SIZE:
        info = batch_header(view, pos)
        if info.attributes & TRANSACTIONAL_BIT:
            return info.producer_id, info.producer_epoch
        pos += 12 + max(info.length, 0)
    return None


async def _verify_transactions(broker: Broker, api_version: int, request: ProduceRequest,
                               writable: Callable[[str], bool] | None
                               ) -> dict[tuple[str, int], PartitionAnswer] | None:
    """The answers of the partitions whose transactional batches the coordinator does not verify (see the module
    docstring); None when the request holds transactional batches but no transactional id."""
    txn: dict[tuple[str, int], tuple[int, int]] = {}
    for t in request.topic_data:
        if writable is not None and not writable(t.name):
            continue
        for p in t.partition_data:
            try:
                found = _transactional(p.records or b"")
            except WireError:
                found = None
            if found is not None:
                txn[(t.name, p.index)] = found
    if not txn:
        return {}
    tid = request.transactional_id
    if tid is None:
        return None
    if len({pid for pid, _ in txn.values()}) > 1:
        message = "transactional records of more than one producer id"
        return {key: _answer(key[1], ErrorCode.invalid_producer_id_mapping, message)
                for key in ((t.name, p.index) for t in request.topic_data for p in t.partition_data)}
    service = getattr(broker, "transactions", None)
    if service is None:
        return {key: _answer(key[1], ErrorCode.invalid_txn_state, "this gateway has no transaction coordinator")
                for key in txn}
    keys = list(txn)
    pid, epoch = next(iter(txn.values()))  # one producer id (checked above): one question for every partition
    codes: list[int | BaseException]
    if api_version >= _IMPLICIT_ADD_SINCE:
        try:
            added = await service.add_implicitly(tid, pid, epoch, keys)
            codes = [added[key] for key in keys]
        except Exception as exc:  # noqa: BLE001 - the coordinator could not answer: retriable, as Kafka's
            codes = [error_of(exc, TRANSACTIONS)] * len(keys)
    else:
        try:
            verified = await service.verify(tid, pid, epoch, keys, api_version)
            codes = [verified[key] for key in keys]
        except Exception as exc:  # noqa: BLE001 - the coordinator could not answer: retriable, as Kafka's
            codes = [exc] * len(keys)
    refused = {}
    for (topic, partition), code in zip(keys, codes):
        if isinstance(code, BaseException):  # the coordinator could not answer: the partition's error, not the request's
            refused[(topic, partition)] = _answer(partition, error_of(code, PRODUCE), str(code))
        elif code in _RETRIABLE_VERIFICATION:
            refused[(topic, partition)] = _answer(partition, ErrorCode.not_enough_replicas, "unable to verify the "
                                                  f"partition is in the transaction ({ErrorCode(code).name})")
        elif code in (ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable):
            refused[(topic, partition)] = _answer(partition, code, "the partition was not added to the transaction")
        elif code != ErrorCode.none:
            refused[(topic, partition)] = _answer(partition, code, f"transaction verification: {ErrorCode(code).name}")
    return refused


def _produce(engine: Engine, request: ProduceRequest, now: int, writable: Callable[[str], bool] | None, denied: int,
             refused: dict[tuple[str, int], PartitionAnswer], node_id: int, others: Endpoints,
             led: LedVnodes | None) -> tuple[dict[tuple[str, int], PartitionAnswer],
                                             dict[tuple[str, int], list[Need]],
                                             dict[tuple[str, int], list[LedAppend]]]:
    """Every partition's answer (storage thread): a topic's partitions that pass the request's checks are appended
    in one call of the partition interface (:meth:`~walgate.storage.partitions.Partitions.append`), each answered
    on its own. With them, what each written partition needs to be durable before it is answered (group commit). A
    topic ``writable`` refuses (None: all allowed) answers ``denied`` in every partition, unwritten; a partition of
    ``refused`` (transaction verification) its answer there, unwritten. Topics' configs apply over node
    *node_id*'s dynamic broker defaults; a partition placed on another node names it when it is one of ``others``
    (:mod:`walgate.gateway.kafka.leaders`). A partition of a replicated vnode is checked first (:func:`_replication`);
    with acks=all, its vnode, the leader epoch it was appended in and its last WAL version are returned to wait for
    the high watermark (``waits``); a TDengine topic's partition written with acks=all waits for every append the
    topic's rows made to the replicated vnodes led here (:mod:`walgate.storage.led_appends`)."""
    answers: dict[tuple[str, int], PartitionAnswer] = {}
    needs: dict[tuple[str, int], list[Need]] = {}
    waits: dict[tuple[str, int], list[LedAppend]] = {}
    vnodes: dict[int, tuple[VnodeKey, int]] = {}
    for t in request.topic_data:
        if writable is not None and not writable(t.name):  # ``denied``: the ACL error code
            answers.update(((t.name, p.index), _answer(p.index, denied)) for p in t.partition_data)
            continue
        appends: list[tuple[int, bytes]] = []
        for p in t.partition_data:
            if (t.name, p.index) in refused:
                answers[(t.name, p.index)] = refused[(t.name, p.index)]
            elif request.acks not in _ACKS:
                answers[(t.name, p.index)] = _answer(p.index, ErrorCode.invalid_required_acks,
                                                     f"acks must be -1, 0 or 1, not {request.acks}")
            elif (replicated := _replication(engine, led, t.name, p.index, request.acks)) and replicated[2]:
                answers[(t.name, p.index)] = _answer(p.index, replicated[2])
            else:
                appends.append((p.index, p.records or b""))
                if replicated is not None and request.acks == -1:
                    vnodes[p.index] = replicated[0], replicated[1]
        with contextlib.ExitStack() as stack:
            rows_appended = stack.enter_context(recording()) if request.acks == -1 else []
            try:
                results = engine.partitions.append(t.name, appends, now, node_id) if appends else []
            except Exception as exc:  # noqa: BLE001 - the topic's partitions answer it, other topics unaffected
                results = [exc] * len(appends)
        for (index, _), result in zip(appends, results):
            if isinstance(result, Exception):
                answers[(t.name, index)] = _refused(index, result, others)
            else:
                answers[(t.name, index)] = _answer(index, ErrorCode.none, None, result.base_offset,
                                                   result.log_append_time, result.log_start)
                needs[(t.name, index)] = result.needs
                if index in vnodes:  # (a partition is a vnode of its own: its append is the WAL's last)
                    vnode, epoch = vnodes[index]
                    waits[(t.name, index)] = [LedAppend(vnode, epoch, engine.store.local_vnode(*vnode).wal.next_version - 1)]
                elif rows_appended:  # (rows of a TDengine topic: noted by the commit path)
                    waits[(t.name, index)] = list(rows_appended)
        vnodes.clear()
    return answers, needs, waits


def _refused(index: int, exc: Exception, others: Endpoints) -> PartitionAnswer:
    """The answer of a partition that *exc* refused; NOT_LEADER_OR_FOLLOWER (:class:`NotHere`) with the partition's
    ``current_leader`` (KIP-951), named when it is one of ``others``."""
    if isinstance(exc, NotHere):
        leader, epoch = current_leader(exc.node, others)
        return {**_answer(index, error_of(exc, PRODUCE), str(exc)),
                "current_leader": {"leader_id": leader, "leader_epoch": epoch}}
    if isinstance(exc, SequenceError):
        return _answer(index, exc.error_code, str(exc))
    if isinstance(exc, RecordsRefused):
        return _answer(index, ErrorCode.invalid_record, str(exc), record_errors=exc.records)
    if isinstance(exc, TransactionsUnsupported):  # Kafka's answer for a log that cannot hold transactions
        return _answer(index, ErrorCode.unsupported_for_message_format, str(exc))
    return _answer(index, error_of(exc, PRODUCE), str(exc))
