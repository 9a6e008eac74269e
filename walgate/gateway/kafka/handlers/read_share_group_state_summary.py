"""ReadShareGroupStateSummary (key 87) v0–v1: a share group's coordinator on another cluster node reads the start
offsets of share-partitions whose state this node keeps (KIP-932's share coordinator RPC; DescribeShareGroupOffsets
of a partition led here, :mod:`walgate.gateway.kafka.share_remote`), and (v1, KIP-1226) the records past it whose
delivery is complete; start offset -1 for a partition without state. Only a cluster node is answered
(CLUSTER_AUTHORIZATION_FAILED otherwise): :mod:`walgate.gateway.kafka.share_state`.
"""

from __future__ import annotations

from walgate.coordinator.share_admin import state_summaries
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.share_state import answer_states
from walgate.wire.messages import ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse

API_KEY, MIN_VERSION, MAX_VERSION = 87, 0, 1


async def handle(broker: Broker, ctx: RequestContext,
                 request: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    group_id = request.group_id
    results = await answer_states(
        broker, ctx, group_id, [(t.topic_id, t.partitions) for t in request.topics],
        lambda p: p.partition, lambda coordinator, topics, asked: state_summaries(
            coordinator, topics, group_id, [(tid, p.partition) for tid, p in asked]))
    return {"results": results}  # type: ignore[typeddict-item]
