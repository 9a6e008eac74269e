"""InitializeShareGroupState (key 83) v0: a share group's coordinator on another cluster node sets the start offsets
of share-partitions whose state this node keeps (KIP-932's share coordinator RPC; AlterShareGroupOffsets of a
partition led here, :mod:`walgate.gateway.kafka.share_remote`). Each partition starts afresh at its offset,
durable in ``share_groups.log`` before the answer (a negative offset: INVALID_REQUEST). Only a cluster node is
answered (CLUSTER_AUTHORIZATION_FAILED otherwise): :mod:`walgate.gateway.kafka.share_state`.
"""

from __future__ import annotations

from walgate.coordinator.share_admin import initialize_states
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.share_state import answer_states
from walgate.wire.messages import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 83, 0, 0


async def handle(broker: Broker, ctx: RequestContext,
                 request: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    group_id = request.group_id
    results = await answer_states(
        broker, ctx, group_id, [(t.topic_id, t.partitions) for t in request.topics],
        lambda p: p.partition, lambda coordinator, topics, asked: initialize_states(
            coordinator, topics, group_id, [(tid, p.partition, p.start_offset) for tid, p in asked]))
    return {"results": results}  # type: ignore[typeddict-item]
