"""DeleteShareGroupState (key 86) v0: a share group's coordinator on another cluster node deletes the state of
share-partitions this node keeps (KIP-932's share coordinator RPC; DeleteShareGroupOffsets and DeleteGroups of a
share group, :mod:`walgate.gateway.kafka.share_remote`). Each partition's state is deleted (NONE for one without
state), durable in ``share_groups.log`` before the answer. Only a cluster node is answered
(CLUSTER_AUTHORIZATION_FAILED otherwise): :mod:`walgate.gateway.kafka.share_state`.
"""

from __future__ import annotations

from walgate.coordinator.share_admin import delete_states
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.share_state import answer_states
from walgate.wire.messages import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse

API_KEY, MIN_VERSION, MAX_VERSION = 86, 0, 0


async def handle(broker: Broker, ctx: RequestContext,
                 request: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    group_id = request.group_id
    results = await answer_states(
        broker, ctx, group_id, [(t.topic_id, t.partitions) for t in request.topics],
        lambda p: p.partition, lambda coordinator, topics, asked: delete_states(
            coordinator, topics, group_id, [(tid, p.partition) for tid, p in asked]))
    return {"results": results}  # type: ignore[typeddict-item]
