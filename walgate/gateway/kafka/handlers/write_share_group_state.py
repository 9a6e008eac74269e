"""WriteShareGroupState (key 85) v0: a share-partition's leader on another cluster node persists share-partition
states in the share coordinator (KIP-932), here the leader of the group's ``__consumer_offsets`` partition in a
replicated cluster (:mod:`walgate.gateway.kafka.share_persister`). Each partition's state (its start offset and
state batches; start offset -1 without batches: deleted) is written as a record of that partition, answered once
its in-sync replicas hold it; FENCED_LEADER_EPOCH for a leader epoch older than the stored state's, nothing written
of it. Only a cluster node is answered (CLUSTER_AUTHORIZATION_FAILED otherwise); NOT_COORDINATOR for a group whose
partition this node does not lead, COORDINATOR_LOAD_IN_PROGRESS while it loads it, COORDINATOR_NOT_AVAILABLE when
the in-sync replicas did not take the write (all retriable: the sender tries again).
"""

from __future__ import annotations

from typing import Any

from walgate.coordinator.share_state_batches import from_wire
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.share_persister import write_states
from walgate.gateway.kafka.share_state import answer_persisted
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.storage.share_state_log import ShareKey
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateRequestPartitionData,
    WriteShareGroupStateResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 85, 0, 0


def _write(shares: ReplicatedShareStateLog, keys: list[ShareKey],
           items: list[WriteShareGroupStateRequestPartitionData]) -> list[dict[str, Any]]:
    """On the coordinator lane: the writes that decode, queued as one; each partition's result."""
    results: dict[int, dict[str, Any]] = {}
    writes = []
    for n, (key, item) in enumerate(zip(keys, items, strict=True)):
        try:
            value = from_wire(item.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                                  for b in item.state_batches])
        except ValueError as e:
            results[n] = {"partition": item.partition, "error_code": ErrorCode.invalid_request, "error_message": str(e)}
            continue
        writes.append((key, value, item.leader_epoch))
    refused = write_states(shares, writes)
    return [results.get(n) or {"partition": item.partition, "error_code": refused.get(key, ErrorCode.none)}
            for n, (key, item) in enumerate(zip(keys, items, strict=True))]


async def handle(broker: Broker, ctx: RequestContext,
                 request: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    results = await answer_persisted(broker, ctx, request.group_id, [(t.topic_id, t.partitions) for t in request.topics],
                                     _write)
    return {"results": results}  # type: ignore[typeddict-item]
