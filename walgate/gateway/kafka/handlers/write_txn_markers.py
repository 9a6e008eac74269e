"""WriteTxnMarkers (key 27) v1–v2: a transaction coordinator on another cluster node ends a transaction here.

Sent by the coordinator of a transactional id to the node of each partition of its transaction
(:mod:`walgate.gateway.kafka.transactions`), as Kafka's ``TransactionMarkerChannelManager`` sends it to each
partition's leader. Each marker is written with ``Engine.write_txn_markers`` and answered once durable, per
partition: NONE, NOT_LEADER_OR_FOLLOWER for a partition placed on another node, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED for a stale epoch, KAFKA_STORAGE_ERROR when the disk refused
it (the coordinator retries until every partition answers NONE).

Only a cluster node may send it (Kafka's ClusterAction on the cluster): the request's client id must name a node
registered now with its data dir's incarnation (:func:`walgate.gateway.kafka.node_links.cluster_node`), and, with an
authorizer, the principal must hold ClusterAction; otherwise every partition answers CLUSTER_AUTHORIZATION_FAILED
and nothing is written. A single node has no other node to take it from and refuses it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.node_links import cluster_node
from walgate.storage.engine import Engine
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


async def _from_node(broker: Broker, ctx: RequestContext) -> bool:
    member = broker.cluster
    if member is None or not cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION):
        return False
    if cluster_node(ctx.client_id, member.view) is not None:
        return True
    try:  # a node that registered since this one last read the membership
        return cluster_node(ctx.client_id, await member.refresh()) is not None
    except Exception:  # noqa: BLE001 - etcd not answering: not known to be a node, refused (the sender retries)
        return False


def _write(engine: Engine, marker: WriteTxnMarkersRequestWritableTxnMarker) -> list[Exception | None]:
    return engine.write_txn_markers(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                    marker.transaction_result, _partitions(marker))


async def handle(broker: Broker, ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if not await _from_node(broker, ctx):
        return {"markers": [_result(m, [ErrorCode.cluster_authorization_failed] * len(_partitions(m)))
                            for m in request.markers]}
    results = []
    for marker in request.markers:
        try:
            errors = await broker.call(_write, marker)
            codes = [ErrorCode.none if e is None else error_of(e) for e in errors]
        except Exception as exc:  # noqa: BLE001 - answered, the connection stays
            codes = [error_of(exc)] * len(_partitions(marker))
        results.append(_result(marker, codes))
    return {"markers": results}
