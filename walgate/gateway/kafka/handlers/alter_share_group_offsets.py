"""AlterShareGroupOffsets (key 91) v0: set the share-partition start offsets of an empty share group, as
:func:`walgate.coordinator.share_admin.alter_offsets` answers it (NON_EMPTY_GROUP while it has members,
GROUP_ID_NOT_FOUND for no share group). The new start offsets are in ``share_groups.log`` (fsynced) before the
answer; a refused write changes nothing and answers the group's error (:mod:`.common`).

In cluster mode the group's coordinator answers it (NOT_COORDINATOR from the other nodes): it checks the group and
the partitions, sets those its node serves, then has each other partition's leader set its own
(InitializeShareGroupState, :mod:`walgate.gateway.kafka.share_remote`: a one-copy partition's node, a replicated
one's leader now, which writes it to the share coordinator's record) and answers what that leader said: a leader
that does not answer, or a replicated partition without one, makes its partitions answer
COORDINATOR_NOT_AVAILABLE, retriable, the others changed.
A group without members or state on its coordinator's node is an empty one when another node keeps state of it
(:func:`walgate.gateway.kafka.share_admin.cluster_states`), else GROUP_ID_NOT_FOUND, but COORDINATOR_NOT_AVAILABLE
(retriable) when a node did not answer whether it keeps state of it.
The group is held from that check until the other nodes answered (:func:`walgate.gateway.kafka.share_admin.holding`):
a member's join meanwhile answers COORDINATOR_LOAD_IN_PROGRESS (retriable), so none fetches from a partition whose
state is being changed under it.

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
from walgate.gateway.kafka.share_admin import (
    TOPIC_DENIED,
    Outcome,
    SnapshotTopics,
    change_offsets,
    held_change,
    refused_group,
)
from walgate.gateway.kafka.share_remote import initialize, led_elsewhere
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
    return await held_change(broker, group_id, refused, lambda state: _alter(broker, ctx, request, state))


async def _alter(broker: Broker, ctx: RequestContext, request: AlterShareGroupOffsetsRequest,
                  state: str | None) -> AlterShareGroupOffsetsResponse:
    """The change, its group held (``state``: the group's across the nodes,
    :func:`~walgate.gateway.kafka.share_admin.cluster_states`)."""
    group_id = request.group_id
    readable = allowed_names(broker, ctx, Operation.READ, ResourceType.TOPIC, [t.topic_name for t in request.topics])
    denied: list[AlterShareGroupOffsetsResponseTopic] = [
        {"topic_name": t.topic_name, "topic_id": None, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.topic_authorization_failed,
             "error_message": TOPIC_DENIED} for p in t.partitions]}
        for t in request.topics if t.topic_name not in readable]
    offsets = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
               for t in request.topics if t.topic_name in readable]

    placed = broker.topics()
    remote = led_elsewhere(broker, placed, ((name, p) for name, ps in offsets for p, _ in ps))

    def alter(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> Outcome:
        return alter_offsets(coordinator, SnapshotTopics(topics), group_id, offsets,
                             lambda name, p: (name, p) not in remote, state == "Empty")

    code, message, topics = await change_offsets(broker, ctx, "AlterShareGroupOffsets", group_id, alter, denied)
    starts = {(name, p): start for name, ps in offsets for p, start in ps}
    valid = {(t["topic_name"], r["partition_index"]) for t in topics for r in t["partitions"]
             if r["error_code"] == ErrorCode.none} & remote.keys()
    answers = await initialize(broker.links, placed, group_id, {k: remote[k] for k in valid}, starts)
    for t in topics:
        for r in t["partitions"]:
            answer = answers.get((t["topic_name"], r["partition_index"]))
            if answer is not None:
                r["error_code"], r["error_message"] = answer.error_code, answer.error_message
    return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": topics}
