"""TxnOffsetCommit (key 28) v0–v5: consumer-group offsets committed inside a producer's transaction (KIP-98, KIP-447).

The offsets are kept pending in the transaction (durable in the transaction log) and reach the group's committed
offsets, through the same path as OffsetCommit, only when the transaction commits; an abort drops them
(:mod:`walgate.gateway.kafka.transactions`). Up to v4 the group must have been added by AddOffsetsToTxn in the ongoing
transaction (else TRANSACTION_ABORTABLE, INVALID_TXN_STATE before v4 as Kafka answers older clients); from v5
(KIP-890 part 2, transaction version 2) the group joins the transaction (starting one) with the offsets, in the same
durable record, as Kafka's broker adds the offsets partition itself; while the previous transaction's markers are
written that is COORDINATOR_NOT_AVAILABLE (retried; Kafka's CONCURRENT_TRANSACTIONS through its offset-commit error
conversion). A producer id or epoch that is not the transactional id's current one answers
INVALID_PRODUCER_ID_MAPPING / INVALID_PRODUCER_EPOCH (what Kafka's offsets log answers a fenced producer). From v3
(KIP-447) the request names the consumer's generation (or KIP-848 member epoch), member id and instance id, checked as
OffsetCommit checks them (:func:`walgate.coordinator.offsets.commit_offsets`: ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID ...); generation -1 is a commit outside group management, accepted. Per
partition, one that does not exist answers UNKNOWN_TOPIC_OR_PARTITION and metadata over 4096 bytes
OFFSET_METADATA_TOO_LARGE, the others are kept.

ACLs (Kafka's ``handleTxnOffsetCommitRequest``): Write on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition), Read on the group (else GROUP_AUTHORIZATION_FAILED),
Read on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions; the others are kept). In cluster mode a node
that does not coordinate the group answers NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE) for every partition, after
the ACL checks, as OffsetCommit does, and a share group's id GROUP_ID_NOT_FOUND.

In cluster mode the transactional id may be another node's (docs/cluster.md, "Transaction coordinators"): this node,
the group's coordinator, asks that node to take the group into the transaction (v5: AddOffsetsToTxn, a version 2
add) or whether it is in the ongoing one (v0–v4: AddPartitionsToTxn ``verify_only`` for the group's coordinator
partition, as Kafka's group coordinator verifies older clients' commits; the client's AddOffsetsToTxn added it). The
answer carries the producer's checks (INVALID_PRODUCER_ID_MAPPING, a fenced epoch, TRANSACTION_ABORTABLE ...;
COORDINATOR_NOT_AVAILABLE when it cannot be asked). This node then keeps the offsets pending, durable in its
transaction log, until that node's marker for the group's coordinator partition commits or drops them
(WriteTxnMarkers), as Kafka's group coordinator holds them in ``__consumer_offsets`` until the marker; a marker of
the producer that arrived while the question was out ended that transaction, and the offsets are refused
(TRANSACTION_ABORTABLE, INVALID_TXN_STATE before v4: Kafka's verification guard) rather than held past it. OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for them meanwhile.

In a replicated cluster the offsets are always held that way, by the group's coordinator partition (its records,
replicated: Kafka's pending offsets in ``__consumer_offsets``), also when this node coordinates the transactional id
too, so they move with the group's partition, whichever node leads the id's partition then.
"""

from __future__ import annotations

from typing import cast

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.classic import Completion
from walgate.coordinator.offsets import PartitionCommit, commit_offsets
from walgate.coordinator.store import EngineOffsetStore
from walgate.coordinator.transactions import PendingOffset, Txn
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import share_group_code
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.gateway.kafka.transactions import abortable_for_version
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetCommitResponseTopic

API_KEY, MIN_VERSION, MAX_VERSION = 28, 0, 5
_IMPLICIT_ADD_SINCE = 5  # Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation: addPartition

Topics = list[tuple[str, list[PartitionCommit]]]


def _refused(code: int, api_version: int) -> int:
    """The coordinator's refusal ``code`` as TxnOffsetCommit at ``api_version`` answers it: CONCURRENT_TRANSACTIONS
    (the previous transaction's markers are being written) is COORDINATOR_NOT_AVAILABLE from v5, PRODUCER_FENCED is
    INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE is INVALID_TXN_STATE before v4."""
    if code == ErrorCode.concurrent_transactions and api_version >= _IMPLICIT_ADD_SINCE:
        code = ErrorCode.coordinator_not_available
    if code == ErrorCode.producer_fenced:
        code = ErrorCode.invalid_producer_epoch
    return abortable_for_version(code, "txn_offset_commit", api_version)


def _failed(topics: Topics, code: int) -> list[TxnOffsetCommitResponseTopic]:
    return [{"name": name, "partitions": [{"partition_index": p.partition, "error_code": code} for p in parts]}
            for name, parts in topics]


async def handle(broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    svc = broker.transactions
    tid, group = request.transactional_id, request.group_id
    topics: Topics = [
        (t.name, [PartitionCommit(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                  p.committed_metadata) for p in t.partitions])
        for t in request.topics
    ]
    if svc is None:
        return {"throttle_time": 0, "topics": _failed(topics, ErrorCode.coordinator_not_available)}
    if not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return {"throttle_time": 0, "topics": _failed(topics, ErrorCode.transactional_id_authorization_failed)}
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, group):
        return {"throttle_time": 0, "topics": _failed(topics, ErrorCode.group_authorization_failed)}
    if code := await refusal(broker.coordinators, group) or share_group_code(broker, group):  # (or a share group has it)
        return {"throttle_time": 0, "topics": _failed(topics, code)}
    readable = allowed_names(broker, ctx, Operation.READ, ResourceType.TOPIC, {name for name, _ in topics})
    denied = [t for t in topics if t[0] not in readable]
    topics = [t for t in topics if t[0] in readable]
    groups = broker.groups.groups
    producer_id, epoch = request.producer_id, request.producer_epoch
    try:
        coordinator = await svc.coordinator_of(tid)  # None: this node's transactional id
    except ControlPlaneError:
        return {"throttle_time": 0, "topics": _failed(topics, ErrorCode.coordinator_not_available)}
    guard = 0
    if coordinator is not None:  # the transaction's coordinator is another node: v5 adds the group there, v0-v4 verify
        guard = await svc.call(lambda c: c.proxy_guard(producer_id))
        there = (await svc.join_remote(coordinator, tid, producer_id, epoch, group)
                 if ctx.api_version >= _IMPLICIT_ADD_SINCE else
                 await svc.verify_group(coordinator, tid, producer_id, epoch, group))
        if there != ErrorCode.none:
            return {"throttle_time": 0, "topics": _failed(topics, _refused(there, ctx.api_version))}

    def commit(store: EngineOffsetStore) -> tuple[list[TxnOffsetCommitResponseTopic], list[Completion]]:
        joined = None
        if coordinator is not None:
            refused: int = ErrorCode.none  # checked by the transaction's coordinator
        elif ctx.api_version >= _IMPLICIT_ADD_SINCE:
            step = svc.coordinator.add_offsets(tid, producer_id, epoch, group, now_ms(), tv=2)
            refused, joined = step.error, step.txn
        else:
            refused = svc.coordinator.offset_commit_check(tid, producer_id, epoch, group)
        refused = _refused(refused, ctx.api_version)
        if refused != ErrorCode.none:
            return _failed(topics, refused), []
        now = now_ms()
        plan = commit_offsets(
            groups.classic, store, group_id=group, generation_id=request.generation_id,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            topics=topics, partition_exists=store.partition_exists, report_group_not_found=False, now_ms=now,
            consumer=groups.consumer, transactional=True,
        )
        pending = [PendingOffset(r.group_id, r.topic, r.partition, r.offset, r.leader_epoch, r.metadata,
                                 r.commit_timestamp_ms) for r in plan.records]
        held = coordinator is not None or svc.holds_own_offsets
        if held:  # held here, the group's node, until the transaction's marker comes
            step = svc.coordinator.proxy_offsets(tid, producer_id, epoch, group, pending, now,
                                                 guard if coordinator is not None else
                                                 svc.coordinator.proxy_guard(producer_id))
            if step.error != ErrorCode.none or step.txn is None:
                return _failed(topics, _refused(step.error, ctx.api_version)), []
            change: Txn | None = step.txn
        else:
            change = svc.coordinator.add_offsets_pending(tid, pending, now, joined) if pending or joined else None
        if change is not None:
            try:
                if held and joined is not None:  # replicated, this node's id: the group joined its transaction
                    svc.record([(tid, joined)])
                svc.record([(tid, change)], proxy=held)
            except Exception as exc:  # noqa: BLE001 - answered per partition
                code = error_of(exc, TRANSACTIONS)
                failed = plan.failed({(r.topic, r.partition): code for r in plan.records})
                return cast(list[TxnOffsetCommitResponseTopic], failed["topics"]), []  # the response's field names
        return cast(list[TxnOffsetCommitResponseTopic], plan.response["topics"]), []

    try:
        answered = await broker.groups.with_store(commit)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        answered = _failed(topics, error_of(exc, TRANSACTIONS))
    return {"throttle_time": 0, "topics": [*answered, *_failed(denied, ErrorCode.topic_authorization_failed)]}
