"""WriteTxnMarkers (key 27) v1–v2: a transaction coordinator on another cluster node ends a transaction here.

Sent by the coordinator of a transactional id to the node of each partition of its transaction
(:mod:`walgate.gateway.kafka.transactions`), as Kafka's ``TransactionMarkerChannelManager`` sends it to each
partition's leader. Each marker is written with ``Engine.write_txn_markers`` and answered once durable, per
partition (a replicated one's once its in-sync replicas hold it, as Kafka appends markers with acks=all: the
error its wait ended on otherwise, within :data:`~walgate.gateway.kafka.transactions.MARKER_ACK_S`): NONE, NOT_LEADER_OR_FOLLOWER for a partition
placed on another node or a replicated one not led here, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED for a stale epoch, KAFKA_STORAGE_ERROR when the disk refused
it (the coordinator retries until every partition answers NONE).

Partitions of :data:`~walgate.gateway.kafka.transactions.OFFSETS_TOPIC` are this node's group coordinator
partitions: the marker ends the offsets this node holds for the producer's transaction (TxnOffsetCommit gave them
here, to the group's coordinator), committed to their groups or dropped
(:meth:`~walgate.gateway.kafka.transactions.TransactionService.end_proxies`).

Only a cluster node may send it (Kafka's ClusterAction on the cluster, a connection authenticated with the node
token: :mod:`walgate.gateway.kafka.node_auth`);
otherwise every partition answers CLUSTER_AUTHORIZATION_FAILED and nothing is written. A single node has no other
node to take it from and refuses it the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.kafka.transactions import OFFSETS_TOPIC, acknowledged, written_markers
from walgate.storage.led_appends import LedAppend
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestWritableTxnMarker,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 27, 1, 2


def _result(marker: WriteTxnMarkersRequestWritableTxnMarker,
            codes: Sequence[int]) -> WriteTxnMarkersResponseWritableTxnMarkerResult:
    answers = iter(codes)
    return {"producer_id": marker.producer_id,
            "topics": [{"name": t.name, "partitions": [{"partition_index": p, "error_code": next(answers)}
                                                        for p in t.partition_indexes]} for t in marker.topics]}


def _partitions(marker: WriteTxnMarkersRequestWritableTxnMarker) -> list[tuple[str, int]]:
    return [(t.name, p) for t in marker.topics for p in t.partition_indexes]


async def _codes(broker: Broker, marker: WriteTxnMarkersRequestWritableTxnMarker) -> list[int]:
    """Each partition's answer, in the request's order."""
    partitions = _partitions(marker)
    data = [tp for tp in partitions if tp[0] != OFFSETS_TOPIC]
    offsets = sorted({p for t, p in partitions if t == OFFSETS_TOPIC})
    codes: dict[tuple[str, int], int] = {}
    if data:
        try:
            answers = await broker.call(written_markers, marker.producer_id, marker.producer_epoch,
                                        marker.coordinator_epoch, marker.transaction_result, data)
            acked = await asyncio.gather(*(acknowledged(broker.led, a if isinstance(a, LedAppend) else None)
                                           for a in answers))
            codes.update({tp: error_of(a) if isinstance(a, Exception) else code
                          for tp, a, code in zip(data, answers, acked)})
        except Exception as exc:  # noqa: BLE001 - answered, the connection stays
            codes.update(dict.fromkeys(data, error_of(exc)))
    if offsets:
        svc = broker.transactions
        try:
            if svc is None:  # (a cluster node, from_cluster_node: it has group coordinators)
                code = ErrorCode.coordinator_not_available
            else:
                await svc.end_proxies(marker.producer_id, marker.producer_epoch, marker.transaction_result, offsets)
                code = ErrorCode.none
        except Exception as exc:  # noqa: BLE001 - answered, the sender tries again
            code = error_of(exc, TRANSACTIONS)
        codes.update(dict.fromkeys([(OFFSETS_TOPIC, p) for p in offsets], code))
    return [codes[tp] for tp in partitions]


async def handle(broker: Broker, ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if not from_cluster_node(broker, ctx):
        return {"markers": [_result(m, [ErrorCode.cluster_authorization_failed] * len(_partitions(m)))
                            for m in request.markers]}
    return {"markers": [_result(m, await _codes(broker, m)) for m in request.markers]}
