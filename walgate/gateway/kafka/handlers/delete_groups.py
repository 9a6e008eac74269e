"""DeleteGroups (key 42) v0–v2: empty groups go, with their committed offsets; others get NON_EMPTY_GROUP.

Share groups first (:func:`walgate.coordinator.share_admin.delete_group`: an empty one goes with its
share-partition state, written to ``share_groups.log`` before the answer; one with members is NON_EMPTY_GROUP);
the other ids are consumer groups'. A refused write of the share state deletes none of it and answers every
requested group NOT_COORDINATOR (clients retry).

A group whose offsets the engine cannot delete answers its error (:mod:`.common`'s GROUP_WRITE: a refused write
is NOT_COORDINATOR, which clients retry); a coordinator failure is every group's error.

ACLs (as Kafka): a group the principal may not Delete answers GROUP_AUTHORIZATION_FAILED.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`), a share group too: a node that only leads some of its
partitions does not know its members and must not delete their state (docs/cluster.md, "Share groups"). Its
coordinator deletes an empty share group's state on the other nodes first, as Kafka's group coordinator through its
persister: DeleteShareGroupState to every other node for its partitions of every topic
(:mod:`walgate.gateway.kafka.share_remote`), then the group here; a node that does not answer makes the group
answer COORDINATOR_NOT_AVAILABLE, retriable, and the group stays (with what the other nodes kept deleted). A group
without members or state on its coordinator's node whose state other nodes keep is an empty share group, deleted
as such (every id this node knows neither as a share group nor as a consumer or classic group, by its members,
state or committed offsets, is asked of the other nodes); one a node did not answer about answers
COORDINATOR_NOT_AVAILABLE, not GROUP_ID_NOT_FOUND, which Kafka's Admin takes as final. A consumer or classic group
here is deleted as one without asking other nodes: a group id has one type, as in Kafka. The share groups asked
about are held from that check until the other nodes answered (:func:`walgate.gateway.kafka.share_admin.holding`):
a member's join meanwhile answers COORDINATOR_LOAD_IN_PROGRESS (retriable), so none fetches from a partition whose
state is being deleted under it. In a replicated cluster the group's share-partitions with state are those the
share coordinator (this node) records (:mod:`walgate.gateway.kafka.share_records`), each deleted by its partition's
leader now: here, or with DeleteShareGroupState to that leader (COORDINATOR_NOT_AVAILABLE while it has none)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from typing import Any, cast

from walgate.coordinator.classic import Completion
from walgate.coordinator.offsets import delete_groups
from walgate.coordinator.share_admin import delete_group
from walgate.coordinator.share_coordinator import ShareCoordinator, ShareKey
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import GROUP_WRITE, answered, error_of
from walgate.gateway.kafka.share_admin import UNANSWERED, holding
from walgate.gateway.kafka.share_records import group_records, persisted
from walgate.gateway.kafka.share_remote import Placed, delete, everything_elsewhere, led_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import DeleteGroupsRequest, DeleteGroupsResponse, DeleteGroupsResponseDeletableGroupResult

API_KEY, MIN_VERSION, MAX_VERSION = 42, 0, 2
Result = DeleteGroupsResponseDeletableGroupResult


async def handle(broker: Broker, ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    svc = broker.groups
    permitted = allowed_names(broker, ctx, Operation.DELETE, ResourceType.GROUP, request.groups_names)
    denied: list[Result] = [{"group_id": g, "error_code": ErrorCode.group_authorization_failed}
                            for g in request.groups_names if g not in permitted]
    names = [g for g in request.groups_names if g in permitted]
    elsewhere: list[Result] = [{"group_id": g, "error_code": code} for g in dict.fromkeys(names)
                               if (code := await refusal(broker.coordinators, g))]  # groups another node has
    denied += elsewhere
    names = [g for g in names if g not in {r["group_id"] for r in elsewhere}]
    shared: list[Result] = []
    if broker.shares is not None and names:
        def ordinary(store: EngineOffsetStore) -> tuple[set[str], list[Completion]]:
            with_offsets = store.groups_with_offsets()
            return {g for g in names if svc.groups.has_group(g) or g in with_offsets}, []

        consumers = await answered(svc.with_store(ordinary), lambda code: set(), GROUP_WRITE)
        shared = [r for r in await _delete_share_groups(broker, list(dict.fromkeys(names)), consumers)
                  if r["error_code"] != ErrorCode.group_id_not_found]
        names = [g for g in names if g not in {r["group_id"] for r in shared}]
    if not names:
        for r in shared:
            audit_kafka(ctx, "DeleteGroups", f"group {r['group_id']}", r["error_code"])
        return {"throttle_time": 0, "results": shared + denied}

    def delete(store: EngineOffsetStore) -> tuple[list[Result], list[Completion]]:
        plan = delete_groups(svc.groups, store, group_ids=names, now_ms=now_ms())
        failed = {}
        for group, partitions in plan.deletions.items():
            try:
                store.delete(group, partitions)
            except Exception as exc:  # noqa: BLE001 - mapped per group, siblings unaffected
                failed[group] = error_of(exc, GROUP_WRITE)
        results = cast(list[Result], plan.results)  # in the response's field names
        return [{**r, "error_code": failed.get(r["group_id"], r["error_code"])} for r in results], []

    results = await answered(svc.with_store(delete), lambda code: [{"group_id": g, "error_code": code}
                                                                   for g in names], GROUP_WRITE)
    for r in shared + results + denied:
        audit_kafka(ctx, "DeleteGroups", f"group {r['group_id']}", r["error_code"])
    return {"throttle_time": 0, "results": shared + results + denied}


async def _delete_share_groups(broker: Broker, ids: list[str], consumers: set[str]) -> list[Result]:
    """Each of ``ids`` as a share group's deletion answers it (GROUP_ID_NOT_FOUND: no share group): an empty one's
    state deleted on the other nodes, then here (see the module docstring). The other nodes are not asked about
    ``consumers``, the consumer and classic groups here (a group id has one type, as in Kafka)."""
    placed = broker.topics()
    every = everything_elsewhere(broker.node_id, placed)
    recorded = persisted(broker)
    async with holding(broker, [g for g in ids if g not in consumers] if every or recorded else []) as states:
        if not recorded:
            return await _deleted(broker, ids, states, placed, lambda g: every, {})
        # (no member joins them meanwhile) the share-partitions the share coordinator records, each deleted by its
        # partition's leader now (a record of a topic deleted since is left: no leader writes it)
        assert broker.shares is not None
        records = await answered(broker.shares.run(lambda _topics, _c: group_records(broker, ids)), lambda code: {})
        named = {k: (name, k[2]) for k in records if (name := placed.topic_name(uuid.UUID(k[1]))) is not None}
        away = led_elsewhere(broker, placed, set(named.values()))
        remote = {g: {named[k]: away[named[k]] for k in named if k[0] == g and named[k] in away} for g in ids}
        return await _deleted(broker, ids, states, placed, remote.__getitem__,
                              {k: v for k, v in records.items() if k in named and named[k] not in away})


async def _deleted(broker: Broker, ids: list[str], states: dict[str, str | None], placed: TopicsSnapshot,
                   remote: Callable[[str], Placed], here: Mapping[ShareKey, Any]) -> list[Result]:
    """:func:`_delete_share_groups` once the groups are held (``states``: theirs across the nodes; ``remote``: the
    share-partitions of a group whose state another node may keep, and that node; ``here``: the share coordinator's
    records of share-partitions this node leads)."""
    shares = broker.shares
    assert shares is not None
    failed: dict[str, int] = {}
    empty = [g for g in ids if states.get(g) == "Empty"]
    failed.update((g, ErrorCode.coordinator_not_available) for g in ids if states.get(g) == UNANSWERED)
    for g, answers in zip(empty, await asyncio.gather(*(delete(broker.links, placed, g, remote(g)) for g in empty))):
        code = next((a.error_code for a in answers.values() if a.error_code != ErrorCode.none), ErrorCode.none)
        if code != ErrorCode.none:
            failed[g] = code
    kept = [g for g in ids if g not in failed]

    def delete_shared(_topics: TopicsSnapshot, coordinator: ShareCoordinator) -> list[Result]:
        return [{"group_id": g, "error_code": delete_group(coordinator, g, g in empty, here.keys())} for g in kept]

    deleted = await answered(shares.run(delete_shared), lambda code: [{"group_id": g, "error_code": code}
                                                                      for g in kept], GROUP_WRITE)
    return deleted + [{"group_id": g, "error_code": code} for g, code in failed.items()]
