"""ListPartitionReassignments (key 46) v0: the replica moves in progress (KIP-455; the Admin's
``listPartitionReassignments``, ``kafka-reassign-partitions --list``).

As Kafka's ``ReplicationControlManager.listPartitionReassignments``: Describe on the cluster, else the request's
error CLUSTER_AUTHORIZATION_FAILED; null ``topics``: every partition being moved; otherwise those of the partitions
named that are being moved (a topic or partition that does not exist is left out, as Kafka does). Each with its
replicas (the target's, then those being removed), adding and removing replicas, from the partition states this
node read (:mod:`walgate.replication.reassignment`): a move the controller wrote a moment ago may show a moment
later here.
"""

from __future__ import annotations

from collections.abc import Iterable

from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.metadata import broker_states
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseOngoingTopicReassignment,
)

API_KEY, MIN_VERSION, MAX_VERSION = 46, 0, 0


async def handle(broker: Broker, ctx: RequestContext,
                 request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "topics": []}
    try:
        topics = broker.topics()
    except Exception as exc:  # noqa: BLE001 - answered, as every handler answers
        return {"throttle_time": 0, "error_code": error_of(exc), "error_message": str(exc), "topics": []}
    named: list[tuple[str, Iterable[int]]]
    if request.topics is None:
        named = [(t, range(topics.partition_count(t) or 0)) for t in sorted(topics.names())]
    else:
        named = [(t.name, t.partition_indexes) for t in request.topics]
    states = broker_states(broker)
    out: list[ListPartitionReassignmentsResponseOngoingTopicReassignment] = []
    for topic, partitions in named:
        moving = []
        for partition in dict.fromkeys(partitions):
            vgroup = topics.replicated_vgroup(topic, partition) if topics.has_partition(topic, partition) else None
            state = None if vgroup is None else states(*vgroup)
            if state is not None and state.moving:
                moving.append({"partition_index": partition, "replicas": list(state.replicas),
                               "adding_replicas": list(state.adding), "removing_replicas": list(state.removing)})
        if moving:
            out.append({"name": topic, "partitions": moving})  # type: ignore[typeddict-item]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "topics": out}
