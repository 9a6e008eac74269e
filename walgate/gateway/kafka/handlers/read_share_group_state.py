"""ReadShareGroupState (key 84) v0: a share-partition's new leader on another cluster node reads share-partition
states from the share coordinator (KIP-932) before it serves them, here the leader of the group's
``__consumer_offsets`` partition in a replicated cluster (:mod:`walgate.gateway.kafka.share_persister`). Each
partition answers its start offset and state batches (start offset -1 and no batches: no state), as the partition's
in-sync replicas hold them; its leader epoch, when newer than the stored state's, is recorded with it (written, and
answered once the in-sync replicas hold it: the previous leader's writes are fenced from then on), and an older one
answers FENCED_LEADER_EPOCH. Only a cluster node is answered (CLUSTER_AUTHORIZATION_FAILED otherwise);
NOT_COORDINATOR for a group whose partition this node does not lead, COORDINATOR_LOAD_IN_PROGRESS while it loads it.
"""

from __future__ import annotations

from typing import Any

from walgate.coordinator.share_state_batches import to_wire
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.share_persister import read_states
from walgate.gateway.kafka.share_state import answer_persisted
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.storage.share_state_log import ShareKey
from walgate.wire.messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateRequestPartitionData,
    ReadShareGroupStateResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 84, 0, 0


def _read(shares: ReplicatedShareStateLog, keys: list[ShareKey],
          items: list[ReadShareGroupStateRequestPartitionData]) -> list[dict[str, Any]]:
    """On the coordinator lane: each partition's stored state (its reader's leader epoch recorded)."""
    reads = read_states(shares, [(key, item.leader_epoch) for key, item in zip(keys, items, strict=True)])
    out = []
    for key, item in zip(keys, items, strict=True):
        start, batches = to_wire(reads[key].value)
        out.append({"partition": item.partition, "error_code": reads[key].error, "state_epoch": 0, "start_offset": start,
                    "state_batches": [{"first_offset": b.first, "last_offset": b.last, "delivery_state": b.state,
                                       "delivery_count": b.delivery_count} for b in batches]})
    return out


async def handle(broker: Broker, ctx: RequestContext, request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    results = await answer_persisted(broker, ctx, request.group_id, [(t.topic_id, t.partitions) for t in request.topics],
                                     _read)
    return {"results": results}  # type: ignore[typeddict-item]
