"""OffsetCommit (key 8) v0–v9: validated by the coordinator, fsynced into the partitions' vnodes, then answered.

Each partition is answered on its own: one whose vnode's write the disk refused answers NOT_COORDINATOR, as Kafka
does (:mod:`.common`'s GROUP_WRITE; clients find the coordinator again and retry), while the partitions of the other
vnodes are committed and answered NONE. A coordinator failure answers every partition its error code; the
connection stays. Under group commit (the gateway's) the answer waits for the fsync of every vnode written
(:mod:`walgate.gateway.storage_thread`); when one fails, every partition answers NOT_COORDINATOR (the refused commits
are never seen; the others' retry commits the same offsets again).

ACLs (Kafka's ``handleOffsetCommitRequest``): Read on the group, else every partition answers
GROUP_AUTHORIZATION_FAILED; a topic the principal may not Read answers TOPIC_AUTHORIZATION_FAILED in each of its
partitions, the others are committed.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`). A share group's id answers GROUP_ID_NOT_FOUND, as Kafka's
share group refuses the offset APIs (:mod:`walgate.gateway.kafka.group_types`)."""

from __future__ import annotations

from typing import cast

from walgate.coordinator.classic import Completion
from walgate.coordinator.offsets import PartitionCommit, commit_offsets
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import share_group_code
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import GROUP_WRITE, answered, error_of
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponseTopic

API_KEY, MIN_VERSION, MAX_VERSION = 8, 0, 9


def _failed(topics: list[tuple[str, list[PartitionCommit]]], code: int) -> list[OffsetCommitResponseTopic]:
    return [{"name": name, "topic_id": None,
             "partitions": [{"partition_index": p.partition, "error_code": code} for p in parts]}
            for name, parts in topics]


async def handle(broker: Broker, ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    svc = broker.groups
    topics = [
        (t.name, [PartitionCommit(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                  p.committed_metadata) for p in t.partitions])
        for t in request.topics
    ]
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "topics": _failed(topics, ErrorCode.group_authorization_failed)}
    readable = checker(broker, ctx, Operation.READ, ResourceType.TOPIC)
    denied = [t for t in topics if readable is not None and not readable(t[0])]
    if denied:
        topics = [t for t in topics if t not in denied]
        if not topics:
            return {"throttle_time": 0, "topics": _failed(denied, ErrorCode.topic_authorization_failed)}
    if code := await refusal(broker.coordinators, request.group_id) or share_group_code(broker, request.group_id):
        return {"throttle_time": 0, "topics": [*_failed(topics, code),
                                               *_failed(denied, ErrorCode.topic_authorization_failed)]}

    def commit(store: EngineOffsetStore) -> tuple[list[OffsetCommitResponseTopic], list[Completion]]:
        plan = commit_offsets(
            svc.groups.classic, store,
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            topics=topics,
            partition_exists=store.partition_exists,
            report_group_not_found=ctx.api_version >= 9,
            now_ms=now_ms(),
            consumer=svc.groups.consumer,
        )
        try:
            errors = store.commit(plan.records)  # durable (fsynced) before the answer: see the module docstring
        except Exception as exc:  # noqa: BLE001 - answered per partition
            code = error_of(exc, GROUP_WRITE)
            failed = {(r.topic, r.partition): code for r in plan.records}
        else:
            failed = {(r.topic, r.partition): error_of(e, GROUP_WRITE)
                      for r, e in zip(plan.records, errors) if e is not None}
        return cast(list[OffsetCommitResponseTopic], plan.failed(failed)["topics"]), []  # the response's field names

    answered_topics = await answered(svc.with_store(commit), lambda code: _failed(topics, code), GROUP_WRITE)
    return {"throttle_time": 0, "topics": [*answered_topics, *_failed(denied, ErrorCode.topic_authorization_failed)]}
