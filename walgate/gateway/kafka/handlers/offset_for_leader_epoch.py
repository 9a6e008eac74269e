"""OffsetForLeaderEpoch (key 23) v0–v4: answered from the partition's leader-epoch cache (KIP-101).

The answer is the largest epoch ``<=`` the one asked that the partition's vnode holds and the offset where it ends
(:meth:`Partitions.epoch_end <walgate.storage.partitions.Partitions.epoch_end>`): without replicas every vnode holds
epoch 0 from its first version, so epoch 0 ends at the high watermark; an undefined epoch (-1) or one above the
latest is UNDEFINED (-1/-1), as Kafka's ``LeaderEpochFileCache.endOffsetFor`` answers. Leadership as Fetch's
(:class:`~walgate.gateway.kafka.leaders.Reads`): a current leader epoch below the partition's is FENCED_LEADER_EPOCH,
above it UNKNOWN_LEADER_EPOCH (KIP-320); a partition this node does not lead now (a replicated one while it starts
too) NOT_LEADER_OR_FOLLOWER.

ACLs (as Kafka): ClusterAction on the cluster, or Describe on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.kafka.access import Operation, ResourceType, checker, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.leaders import Reads
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResponseEpochEndOffset,
    OffsetForLeaderEpochResponseOffsetForLeaderTopicResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 23, 0, 4


def _answer(engine: Engine, request: OffsetForLeaderEpochRequest, describable: Callable[[str], bool] | None,
            broker: Broker) -> list[OffsetForLeaderEpochResponseOffsetForLeaderTopicResult]:
    """Each partition's epoch end where this node serves it (:meth:`~walgate.gateway.kafka.leaders.Reads.serve`: a
    replicated one, issue 25, only on its leader, its current leader epoch checked, else NOT_LEADER_OR_FOLLOWER)."""
    reads = Reads(broker)
    topics: list[OffsetForLeaderEpochResponseOffsetForLeaderTopicResult] = []
    for t in request.topics:
        parts: list[OffsetForLeaderEpochResponseEpochEndOffset] = []
        denied = describable is not None and not describable(t.topic)
        for p in t.partitions:
            error, found = ErrorCode.topic_authorization_failed, None
            if not denied:
                check, found = reads.serve(t.topic, p.partition, p.current_leader_epoch, lambda: (
                    engine.partitions.epoch_end(t.topic, p.partition, p.leader_epoch)))
                error = check.error
            epoch, end = (-1, -1) if found is None else found
            parts.append({"error_code": error, "partition": p.partition, "leader_epoch": epoch, "end_offset": end})
        topics.append({"topic": t.topic, "partitions": parts})
    return topics


async def handle(broker: Broker, ctx: RequestContext,
                 request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    return {"throttle_time": 0, "topics": await broker.call(
        _answer, request, None if cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION)
        else checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC), broker)}
