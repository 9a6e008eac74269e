"""OffsetFetch (key 9) v0–v9: committed offsets of one group (v0–v7) or several (v8+); all topics when null.

v7+ requests with require_stable (read_committed consumers) get UNSTABLE_OFFSET_COMMIT for a partition whose
offset an unfinished transaction holds pending (TxnOffsetCommit before its EndTxn completes).

v9 requests of KIP-848 members carry their member id and epoch: a consumer-protocol group checks them
(UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH); admins send none. A group whose offsets cannot be read answers its
error code (:mod:`.common`); the other groups are answered.

ACLs (Kafka's ``handleOffsetFetchRequest``): Describe on the group, else the group answers
GROUP_AUTHORIZATION_FAILED; a requested topic the principal may not Describe answers TOPIC_AUTHORIZATION_FAILED
(offset -1) in its partitions, and is left out of an all-topics answer.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`). A share group's id answers GROUP_ID_NOT_FOUND, as Kafka's
share group refuses the offset APIs (:mod:`walgate.gateway.kafka.group_types`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from walgate.coordinator.offsets import fetch_offsets
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import share_group_code
from walgate.gateway.kafka.handlers.common import answered, error_of
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 9, 0, 9
Group = OffsetFetchResponseGroup


def _topics(topics: Sequence[OffsetFetchRequestTopics | OffsetFetchRequestTopic] | None
            ) -> list[tuple[str, list[int]]] | None:
    return None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]


async def handle(broker: Broker, ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    svc = broker.groups
    if ctx.api_version >= 8:
        wanted = [(g.group_id, _topics(g.topics), g.member_id, g.member_epoch) for g in request.groups]
    else:
        wanted = [(request.group_id, _topics(request.topics), None, -1)]

    require_stable = request.require_stable  # False before v7
    describable = checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC)
    denied_groups = {w[0] for w in wanted if not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, w[0])}
    elsewhere = {g: code for g in dict.fromkeys(w[0] for w in wanted if w[0] not in denied_groups)
                 if (code := await refusal(broker.coordinators, g) or share_group_code(broker, g))}  # or a share group has it

    def fetch(store: EngineOffsetStore, group_id: str, topics: list[tuple[str, list[int]]] | None,
              member_id: str | None, member_epoch: int) -> Group:
        if group_id in denied_groups:
            return {"group_id": group_id, "error_code": ErrorCode.group_authorization_failed, "topics": []}
        if group_id in elsewhere:
            return {"group_id": group_id, "error_code": elsewhere[group_id], "topics": []}
        answer = unchecked(store, group_id, topics, member_id, member_epoch)
        if require_stable and broker.transactions is not None:
            answer = _stable(answer, broker.transactions.coordinator.pending_offsets(group_id))
        return answer if describable is None else _authorized(answer, describable, listing=topics is None)

    def unchecked(store: EngineOffsetStore, group_id: str, topics: list[tuple[str, list[int]]] | None,
                  member_id: str | None, member_epoch: int) -> Group:
        consumer = svc.groups.consumer
        try:
            # v9: a KIP-848 member reads its group's offsets at its current epoch
            error = consumer.offset_fetch_error(group_id, member_id, member_epoch) if consumer.has_group(group_id) else None
            if error is None:  # the coordinator answers in the response's field names
                return cast(Group, fetch_offsets(store, group_id=group_id, topics=topics))
        except Exception as exc:  # noqa: BLE001 - mapped per group, siblings unaffected
            error = error_of(exc)
        return {"group_id": group_id, "error_code": error, "topics": []}

    answers = await answered(svc.with_store(lambda store: ([fetch(store, *w) for w in wanted], [])),
                             lambda code: [{"group_id": w[0], "error_code": code, "topics": []} for w in wanted])
    if ctx.api_version >= 8:
        return {"throttle_time": 0, "groups": answers}
    single = answers[0]  # v0-v7 answer one group at the top level, in structs of the same fields
    if ctx.api_version < 2 and single["error_code"]:  # no top-level error field: in every partition asked (Kafka's
        return {"throttle_time": 0, "groups": [], "error_code": 0,  # OffsetFetchRequest.getErrorResponse)
                "topics": _each_partition(wanted[0][1] or [], single["error_code"])}
    return {"throttle_time": 0, "groups": [], "error_code": single["error_code"],
            "topics": cast(list[OffsetFetchResponseTopic], single["topics"])}


def _each_partition(topics: list[tuple[str, list[int]]], code: int) -> list[OffsetFetchResponseTopic]:
    """A group's error as v0/v1 carry it: each partition asked, offset -1 and the error."""
    return [{"name": name, "partitions": [{"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                           "metadata": "", "error_code": code} for p in partitions]}
            for name, partitions in topics]


def _stable(answer: Group, pending: set[tuple[str, int]]) -> Group:
    """A group's answer for require_stable (v7+, read_committed consumers): a partition whose offset a transaction
    still holds pending answers UNSTABLE_OFFSET_COMMIT with offset -1, which the client retries (Kafka's
    ``fetchOffsets`` with requireStable)."""
    if not pending:
        return answer
    return {**answer, "topics": [{**t, "partitions": [
        {**p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": ErrorCode.unstable_offset_commit} if (t["name"], p["partition_index"]) in pending else p
        for p in t["partitions"]]} for t in answer.get("topics", [])]}


def _authorized(answer: Group, describable: Callable[[str], bool], *, listing: bool) -> Group:
    """A group's answer without what the principal may not Describe: left out of a listing, else
    TOPIC_AUTHORIZATION_FAILED with offset -1 (Kafka's UNAUTHORIZED_PARTITION)."""
    topics = []
    for t in answer.get("topics", []):
        if describable(t["name"]):
            topics.append(t)
        elif not listing:
            topics.append({**t, "partitions": [
                {**p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ErrorCode.topic_authorization_failed} for p in t["partitions"]]})
    return {**answer, "topics": topics}
