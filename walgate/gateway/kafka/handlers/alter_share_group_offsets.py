"""AlterShareGroupOffsets (key 91) v0: set the share-partition start offsets of an empty share group, as
:func:`walgate.coordinator.share_admin.alter_offsets` answers it (NON_EMPTY_GROUP while it has members,
GROUP_ID_NOT_FOUND for no share group). The new start offsets are in ``share_groups.log`` (fsynced) before the
answer; a refused write changes nothing and answers the group's error (:mod:`.common`).

In cluster mode the group's coordinator answers it (NOT_COORDINATOR from the other nodes), and a partition placed on
another node, whose share-partition state its leader keeps, answers NOT_LEADER_OR_FOLLOWER with a message saying so
(:mod:`walgate.gateway.kafka.share_leaders`): administration across nodes is not supported yet.

ACLs (as Kafka's ``handleAlterShareGroupOffsetsRequest``): Read on the group, else GROUP_AUTHORIZATION_FAILED for
the whole request; Read on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from walgate.coordinator.share_admin import alter_offsets
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.share_admin import TOPIC_DENIED, Outcome, SnapshotTopics, change_offsets, refused_group
from walgate.gateway.kafka.share_leaders import state_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 91, 0, 0


async def handle(broker: Broker, ctx: RequestContext,
                 request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    group_id = request.group_id
    refused = refused_group(broker, ctx, group_id, Operation.READ)
    if refused is None and (code := await refusal(broker.coordinators, group_id)):
        refused = code, None
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "responses": []}
    readable = allowed_names(broker, ctx, Operation.READ, ResourceType.TOPIC, [t.topic_name for t in request.topics])
    denied: list[AlterShareGroupOffsetsResponseTopic] = [
        {"topic_name": t.topic_name, "topic_id": None, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.topic_authorization_failed,
             "error_message": TOPIC_DENIED} for p in t.partitions]}
        for t in request.topics if t.topic_name not in readable]
    offsets = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
               for t in request.topics if t.topic_name in readable]

    def alter(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> Outcome:
        elsewhere = {name: state_elsewhere(broker.node_id, topics, name, [p for p, _ in ps]) for name, ps in offsets}
        code, message, results = alter_offsets(coordinator, SnapshotTopics(topics), group_id, [
            (name, [(p, start) for p, start in ps if p not in elsewhere[name]]) for name, ps in offsets])
        for t in results:  # one per topic asked, in order
            t["partitions"] += [{"partition_index": p, "error_code": ErrorCode.not_leader_or_follower,
                                 "error_message": why} for p, why in elsewhere[t["topic_name"]].items()]
        return code, message, results

    code, message, topics = await change_offsets(broker, ctx, "AlterShareGroupOffsets", group_id, alter, denied)
    return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": topics}
