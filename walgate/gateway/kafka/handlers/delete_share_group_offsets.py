"""DeleteShareGroupOffsets (key 92) v0: delete an empty share group's state for some topics, as
:func:`walgate.coordinator.share_admin.delete_offsets` answers it (NON_EMPTY_GROUP while it has members,
GROUP_ID_NOT_FOUND for no share group). The deletions are in ``share_groups.log`` (fsynced) before the answer; a
refused write deletes nothing and answers the group's error (:mod:`.common`).

In cluster mode the group's coordinator answers it (NOT_COORDINATOR from the other nodes): it checks the group,
deletes the state its node keeps of the topics, then has the leader of each of their partitions on another node
delete its own (DeleteShareGroupState, :mod:`walgate.gateway.kafka.share_remote`); a topic answers the first error
a leader gave for it (COORDINATOR_NOT_AVAILABLE, retriable, when one did not answer: the state of its other
partitions is deleted, and asking again deletes the rest). A topic with a partition on another node is not answered
"no offset information": the coordinator does not know whether that node kept any. In a replicated cluster it does:
the share coordinator's records (:mod:`walgate.gateway.kafka.share_records`) name the share-partitions with state,
each deleted by its partition's leader now (here, or with DeleteShareGroupState), and a topic without any is
answered "no offset information", as Kafka's. A group without members or
state on its coordinator's node is an empty one when another node keeps state of it
(:func:`walgate.gateway.kafka.share_admin.cluster_states`), else GROUP_ID_NOT_FOUND, but COORDINATOR_NOT_AVAILABLE
(retriable) when a node did not answer whether it keeps state of it.
The group is held from that check until the other nodes answered (:func:`walgate.gateway.kafka.share_admin.holding`):
a member's join meanwhile answers COORDINATOR_LOAD_IN_PROGRESS (retriable), so none fetches from a partition whose
state is being changed under it.

ACLs (as Kafka's ``handleDeleteShareGroupOffsetsRequest``): Delete on the group, else GROUP_AUTHORIZATION_FAILED
for the whole request; Read on each topic, else it answers TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import uuid

from walgate.coordinator.share_admin import delete_offsets
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.share_admin import (
    TOPIC_DENIED,
    Outcome,
    SnapshotTopics,
    change_offsets,
    held_change,
    refused_group,
)
from walgate.gateway.kafka.share_records import group_records, persisted
from walgate.gateway.kafka.share_remote import delete, led_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 92, 0, 0


async def handle(broker: Broker, ctx: RequestContext,
                 request: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    group_id = request.group_id
    refused = refused_group(broker, ctx, group_id, Operation.DELETE)
    if refused is None and (code := await refusal(broker.coordinators, group_id)):
        refused = code, None
    return await held_change(broker, group_id, refused, lambda state: _delete(broker, ctx, request, state))


async def _delete(broker: Broker, ctx: RequestContext, request: DeleteShareGroupOffsetsRequest,
                  state: str | None) -> DeleteShareGroupOffsetsResponse:
    """The change, its group held (``state``: the group's across the nodes,
    :func:`~walgate.gateway.kafka.share_admin.cluster_states`)."""
    group_id = request.group_id
    names = [t.topic_name for t in request.topics]
    readable = allowed_names(broker, ctx, Operation.READ, ResourceType.TOPIC, names)
    denied: list[DeleteShareGroupOffsetsResponseTopic] = [
        {"topic_name": n, "topic_id": None, "error_code": ErrorCode.topic_authorization_failed,
         "error_message": TOPIC_DENIED} for n in names if n not in readable]

    placed = broker.topics()
    assert broker.shares is not None  # (refused_group answered first)
    recorded = await answered(broker.shares.run(lambda _topics, _c: group_records(broker, [group_id])),
                              lambda code: {})
    if persisted(broker):  # only the share-partitions the share coordinator records have state to delete
        asked = {(n, p) for _, key, p in recorded for n in [placed.topic_name(uuid.UUID(key))] if n in readable}
    else:  # any partition of a topic may have state on its node
        asked = {(n, p) for n in names if n in readable for p in range(placed.partition_count(n) or 0)}
    remote = led_elsewhere(broker, placed, sorted(asked))

    def delete_here(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> Outcome:
        return delete_offsets(coordinator, SnapshotTopics(topics), group_id, [n for n in names if n in readable],
                              lambda name, p: (name, p) not in remote, state == "Empty", recorded)

    code, message, topics = await change_offsets(broker, ctx, "DeleteShareGroupOffsets", group_id, delete_here,
                                                 denied)
    deleted = {t["topic_name"] for t in topics if t["error_code"] == ErrorCode.none}
    answers = await delete(broker.links, placed, group_id, {k: n for k, n in remote.items() if k[0] in deleted})
    for t in topics:
        failed = next((a for (name, _), a in sorted(answers.items())
                       if name == t["topic_name"] and a.error_code != ErrorCode.none), None)
        if failed is not None:
            t["error_code"], t["error_message"] = failed.error_code, failed.error_message
    return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": topics}
