"""AddPartitionsToTxn (key 24) v0–v5: partitions join a producer's transaction; v4+ (brokers) verify only.

v0–v3 are the clients' form (one transaction); v4+ batch transactions and are what brokers send, either to add
or, with ``verify_only`` (KIP-890 part 1), to ask whether each partition is in the transaction (NONE, or
TRANSACTION_ABORTABLE when not; INVALID_TXN_STATE in v4, which predates that code). As Kafka's ``handleAddPartitionsToTxnRequest``: every partition must exist
(UNKNOWN_TOPIC_OR_PARTITION) and be of a Kafka-native topic (a TDengine topic cannot take transaction markers:
UNSUPPORTED_FOR_MESSAGE_FORMAT, as Kafka answers a log whose format cannot hold them); when any partition is refused
the others answer OPERATION_NOT_ATTEMPTED and nothing is added. Otherwise the coordinator's answer applies to every
partition (:mod:`walgate.coordinator.transactions`), PRODUCER_FENCED answered as INVALID_PRODUCER_EPOCH below v2.
An add of v4+ is transaction version 2's (a broker adding a Produce v12's partitions), as Kafka's
``transactionVersionForAddPartitionsToTxn`` counts it; v0–v3 are version 1's.

ACLs (Kafka's): v0–v3 need Write on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every
partition) and Write on each topic (TOPIC_AUTHORIZATION_FAILED); v4+ need ClusterAction on the cluster, which only another node of
the cluster has (authenticated with the node token: :mod:`walgate.gateway.kafka.node_auth`; else the top-level
CLUSTER_AUTHORIZATION_FAILED, with or without an authorizer).
In cluster mode a transactional id another node coordinates answers NOT_COORDINATOR for each of its partitions, after the ACL checks
(docs/cluster.md, "Transaction coordinators"): the client looks its coordinator up again.
A v5 request also comes from another cluster node: the node of a partition a transactional Produce writes to, asking
this node, the id's coordinator (:mod:`walgate.gateway.kafka.txn_remote`), or a group's coordinator verifying a
TxnOffsetCommit v0–v4 for the group's ``__consumer_offsets`` partition (which stands for the transaction's groups
that partition coordinates, as in Kafka, where AddOffsetsToTxn adds that partition).
"""

from __future__ import annotations

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.transactions import Step, TransactionCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.kafka.transactions import OFFSETS_TOPIC, for_version, partition_errors
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 24, 0, 5


def _result(tid: str, codes: dict[tuple[str, int], int]) -> AddPartitionsToTxnResult:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return {"transactional_id": tid,
            "topic_results": [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]}


async def _one(broker: Broker, ctx: RequestContext, tid: str, producer_id: int, epoch: int, verify_only: bool,
               partitions: list[tuple[str, int]]) -> AddPartitionsToTxnResult:
    svc, version = broker.transactions, ctx.api_version
    if svc is None:
        return _result(tid, dict.fromkeys(partitions, ErrorCode.coordinator_not_available))
    if version < 4 and not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _result(tid, dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed))
    if code := await refusal(broker.coordinators, tid, transactional=True):  # another node's transactional id (cluster mode)
        return _result(tid, dict.fromkeys(partitions, code))
    group_partition = None
    if verify_only and broker.coordinators is not None and any(t == OFFSETS_TOPIC for t, _ in partitions):
        try:  # a group's coordinator verifying a TxnOffsetCommit v0-v4: its groups' coordinator partitions
            placement = await broker.coordinators.placement()
        except ControlPlaneError:
            return _result(tid, dict.fromkeys(partitions, ErrorCode.coordinator_not_available))
        group_partition = lambda group: (OFFSETS_TOPIC, placement.partition(group))  # noqa: E731
    writable = (allowed_names(broker, ctx, Operation.WRITE, ResourceType.TOPIC, {t for t, _ in partitions})
                if version < 4 else {t for t, _ in partitions})
    data = [tp for tp in partitions if group_partition is None or tp[0] != OFFSETS_TOPIC]
    try:
        refused = await broker.call(partition_errors, data, writable)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return _result(tid, dict.fromkeys(partitions, error_of(exc, TRANSACTIONS)))
    if refused:
        return _result(tid, {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in partitions})
    if verify_only:
        try:
            codes = await svc.call(lambda c: c.verify(tid, producer_id, epoch, partitions, group_partition))
        except Exception as exc:  # noqa: BLE001
            codes = dict.fromkeys(partitions, error_of(exc, TRANSACTIONS))
        if version < 5:  # TRANSACTION_ABORTABLE came with v5 (KIP-890)
            codes = {tp: ErrorCode.invalid_txn_state if code == ErrorCode.transaction_abortable else code
                     for tp, code in codes.items()}
        return _result(tid, codes)

    def add(c: TransactionCoordinator, engine: Engine) -> Step:
        return c.add_partitions(tid, producer_id, epoch, partitions, now_ms(), tv=2 if version >= 4 else 0)

    try:
        code = (await svc.decide(add)).error
    except Exception as exc:  # noqa: BLE001
        code = error_of(exc, TRANSACTIONS)
    return _result(tid, dict.fromkeys(partitions, for_version(code, version, 2)))


async def handle(broker: Broker, ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    version = ctx.api_version
    if version < 4:
        partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        result = await _one(broker, ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, False, partitions)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": [],  # v4+ only
                "results_by_topic_v3_and_below": result["topic_results"]}
    if not from_cluster_node(broker, ctx):  # v4+: the brokers' form, from a cluster node only
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []}
    results = [await _one(broker, ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only,
                          [(tp.name, p) for tp in t.topics for p in tp.partitions])
               for t in request.transactions]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results}
