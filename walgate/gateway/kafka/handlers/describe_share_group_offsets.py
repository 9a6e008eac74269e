"""DescribeShareGroupOffsets (key 90) v0–v1: the share-partition start offsets of share groups (and their lag, v1),
as :func:`walgate.coordinator.share_admin.describe_offsets` answers them.

ACLs (as Kafka's ``handleDescribeShareGroupOffsetsRequest``): Describe on the group, else the group answers
GROUP_AUTHORIZATION_FAILED; Describe on each asked topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED
(start offset -1); with no topics asked, the topics the principal may not Describe are left out. A share
coordinator that fails answers every asked group's error (:mod:`.common`).

In cluster mode a group answers NOT_COORDINATOR from every node but its coordinator, and an asked partition placed on
another node, whose share-partition state its leader keeps, answers NOT_LEADER_OR_FOLLOWER with a message saying so
(start offset -1; :mod:`walgate.gateway.kafka.share_leaders`); with no topics asked, the share-partitions whose state
the coordinator's node keeps are answered: administration across nodes is not supported yet.
"""

from __future__ import annotations

from typing import cast

from walgate.coordinator.share_admin import describe_offsets
from walgate.coordinator.share_coordinator import ReadWant, ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.share_admin import TOPIC_DENIED, SnapshotTopics, topic_uuid
from walgate.gateway.kafka.share_leaders import state_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 90, 0, 1
Group = DescribeShareGroupOffsetsResponseGroup
Topic = DescribeShareGroupOffsetsResponseTopic


def _group(group_id: str, code: int, topics: list[Topic] | None = None) -> Group:
    return {"group_id": group_id, "error_code": code, "error_message": None, "topics": topics or []}


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    shares = broker.shares
    groups = list(request.groups)
    if shares is None:
        return {"throttle_time": 0, "groups": [_group(g.group_id, ErrorCode.unsupported_version) for g in groups]}
    permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, [g.group_id for g in groups])
    names = {t.topic_name for g in groups for t in g.topics or ()}
    readable = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
    refused = {g.group_id: code for g in groups if g.group_id in permitted
               if (code := await refusal(broker.coordinators, g.group_id))}  # another node coordinates it
    wanted = [g for g in groups if g.group_id in permitted and g.group_id not in refused]

    def describe(snapshot: TopicsSnapshot, coordinator: ShareCoordinator) -> list[Group]:
        topics = SnapshotTopics(snapshot)
        out: list[Group] = []
        for g in wanted:
            if g.topics is None:
                found = describe_offsets(coordinator, topics, g.group_id, None)
                found = [t for t in found if t["topic_name"] in allowed_names(
                    broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, [t["topic_name"]])]
            else:
                asked = [t for t in g.topics if t.topic_name in readable]
                elsewhere = {t.topic_name: state_elsewhere(broker.node_id, snapshot, t.topic_name, t.partitions)
                             for t in asked}
                found = describe_offsets(coordinator, topics, g.group_id, [
                    (t.topic_name, [p for p in t.partitions if p not in elsewhere[t.topic_name]]) for t in asked])
                for t in found:  # one per topic asked, in order
                    t["partitions"] += [{"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                                         "error_code": ErrorCode.not_leader_or_follower, "error_message": why}
                                        for p, why in elsewhere[t["topic_name"]].items()]
                found += [{"topic_name": t.topic_name, "topic_id": None, "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed, "error_message": TOPIC_DENIED}
                    for p in t.partitions]} for t in g.topics if t.topic_name not in readable]
            # the coordinator answers in the response's field names, a topic's id as its key
            out.append(_group(g.group_id, ErrorCode.none, [cast(Topic, {**t, "topic_id": topic_uuid(t["topic_id"])})
                                                           for t in found]))
        return out

    async def described() -> list[Group]:
        """The lags need the high watermarks: the share-partitions with state named on the coordinator lane, their
        watermarks read on the storage lane, then the description on the coordinator lane."""
        assert shares is not None
        keys = await shares.run(lambda _, coordinator: list(dict.fromkeys(
            (topic, p) for g in wanted for _, topic, p in coordinator.state_keys(g.group_id))))
        reads = await shares.read([ReadWant(topic, p, None, 0) for topic, p in keys], False, 0)
        return await shares.with_reads(reads, 0, lambda snapshot, coordinator, _: describe(snapshot, coordinator))

    groups_described = await answered(described(), lambda code: [_group(g.group_id, code) for g in wanted])
    by_id = {g["group_id"]: g for g in groups_described} | {g: _group(g, code) for g, code in refused.items()}
    return {"throttle_time": 0, "groups": [
        by_id[g.group_id] if g.group_id in permitted else _group(g.group_id, ErrorCode.group_authorization_failed)
        for g in groups]}
