"""The share coordinator's state RPCs answered by a partition's leader (KIP-932; docs/cluster.md, "Share groups"):
InitializeShareGroupState (83), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87), which a share
group's coordinator on another node sends (:mod:`.share_remote`) to reach the share-partition state this node keeps
in its ``share_groups.log``.

Only a cluster node is answered (Kafka's ClusterAction, :mod:`.node_auth`): any other principal gets
CLUSTER_AUTHORIZATION_FAILED for every partition, nothing read or changed, and so does every client of a single
node. Then, per partition: INVALID_REQUEST for an empty group id or no topic id, NOT_COORDINATOR for a partition
another node serves now (placed there, or, replicated, led there or by none:
:func:`~walgate.gateway.kafka.share_remote.led_elsewhere`; as Kafka's share coordinator answers a key it does not
own; the sender looks the leader up again), the answer of :mod:`walgate.coordinator.share_admin`'s leader functions otherwise, run on the share service
(a change durable before the answer; a refused write answers every partition COORDINATOR_NOT_AVAILABLE, retriable,
nothing changed). The group's coordinator made the group's checks (members, authorization of the client) before
sending them: a leader has none to make.

ReadShareGroupState (84) and WriteShareGroupState (85), which a replicated cluster's share-partition leaders send to
the share coordinator (:mod:`.share_persister`), are answered by :func:`answer_persisted`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from walgate.coordinator.share_admin import StateResult
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, answered
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.kafka.share_admin import SnapshotTopics
from walgate.gateway.kafka.share_remote import led_elsewhere
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.storage.share_state_log import ShareKey
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode

__all__ = ["answer_persisted", "answer_states"]

Item = TypeVar("Item")
"""A partition of a state request (its request struct)."""
Run = Callable[[ShareCoordinator, SnapshotTopics, list[tuple[str, Item]]], list[StateResult]]
"""The leader's function over (topic key, item) of the partitions it may answer, one result each, in order."""


def _refused(partition: int, code: int, message: str | None = None) -> StateResult:
    return {"partition": partition, "error_code": code, "error_message": message}


async def answer_states(broker: Broker, ctx: RequestContext, group_id: str,
                        topics: Sequence[tuple[uuid.UUID | None, Sequence[Item]]], partition_of: Callable[[Item], int],
                        run: Run[Item]) -> list[dict[str, Any]]:
    """The answer's topics (``topic_id``, ``partitions``: one result per asked partition, in the request's order) to
    a state request of ``group_id`` over ``topics`` as (topic id, partition items) (see the module docstring)."""
    asked = [(tid, list(items)) for tid, items in topics]

    def every(code: int, message: str | None = None) -> list[dict[str, Any]]:
        return [{"topic_id": tid, "partitions": [_refused(partition_of(i), code, message) for i in items]}
                for tid, items in asked]

    shares = broker.shares
    if not from_cluster_node(broker, ctx) or shares is None:  # (a cluster node always has the share service)
        return every(ErrorCode.cluster_authorization_failed)
    if not group_id:
        return every(ErrorCode.invalid_request, "The group id is empty.")

    now = broker.topics()
    away = led_elsewhere(broker, now, [(name, partition_of(i)) for tid, items in asked if tid is not None
                                       and (name := now.topic_name(tid)) is not None for i in items])

    def on_lane(snapshot: TopicsSnapshot, coordinator: ShareCoordinator) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for tid, items in asked:
            name = None if tid is None else snapshot.topic_name(tid)
            answers: dict[int, StateResult] = {}
            mine: list[tuple[str, Item]] = []
            for i, item in enumerate(items):
                p = partition_of(item)
                if tid is None:
                    answers[i] = _refused(p, ErrorCode.invalid_request, "The topic id is missing.")
                elif name is not None and (node := away.get((name, p))) is not None:
                    answers[i] = _refused(p, ErrorCode.not_coordinator,
                                          f"The share-partition state of {name}-{p} is kept by node {node}.")
                else:
                    mine.append((str(tid), item))
            results = iter(run(coordinator, SnapshotTopics(snapshot), mine))
            out.append({"topic_id": tid, "partitions": [answers[i] if i in answers else next(results)
                                                        for i in range(len(items))]})
        return out

    # a replicated cluster's share-partitions not used here since this node leads them: their state read first
    await answered(shares.ensure_read(group_id, [(str(tid), partition_of(i)) for tid, items in asked if tid is not None
                                                 for i in items]), lambda code: None)
    return await answered(shares.run(on_lane), every, TRANSACTIONS)  # (a refused write: COORDINATOR_NOT_AVAILABLE)


Asked = Sequence[tuple[uuid.UUID | None, Sequence[Any]]]
"""A state request's (topic id, its partition items)."""


async def answer_persisted(broker: Broker, ctx: RequestContext, group_id: str, topics: Asked,
                           answer: Callable[[ReplicatedShareStateLog, list[ShareKey], list[Any]], list[dict[str, Any]]]
                           ) -> list[dict[str, Any]]:
    """The results (topic id, one per asked partition, in order) of a ReadShareGroupState / WriteShareGroupState of
    ``group_id`` over ``topics`` (:mod:`.share_persister`): refused for every partition unless a cluster node sent it
    and this node has the group's partition loaded, else ``answer(log, keys, items)`` on the coordinator lane (a write
    refused by the in-sync replicas: COORDINATOR_NOT_AVAILABLE, retriable)."""
    def every(code: int, message: str | None = None) -> list[dict[str, Any]]:
        return [{"topic_id": tid, "partitions": [{"partition": i.partition, "error_code": code,
                                                  "error_message": message} for i in items]} for tid, items in topics]

    if not from_cluster_node(broker, ctx) or broker.shares is None:  # (a cluster node always has the share service)
        return every(ErrorCode.cluster_authorization_failed)
    if not group_id or any(tid is None for tid, _ in topics):
        return every(ErrorCode.invalid_request, "The group id or a topic id is missing.")
    code = await refusal(broker.coordinators, group_id)
    coordinators = broker.coordinators
    replicas = None if coordinators is None else coordinators.replicated
    shares = None if coordinators is None or replicas is None else replicas.share_log(
        partition_for(group_id, coordinators.partitions))
    if code == ErrorCode.none and shares is None:
        code = ErrorCode.coordinator_load_in_progress if replicas is not None else ErrorCode.not_coordinator
    if code != ErrorCode.none or shares is None:
        return every(code, "The share-partition states of this group are not kept here now.")
    keys = [(group_id, str(tid), int(i.partition)) for tid, items in topics for i in items]
    items = [i for _, items in topics for i in items]
    results = iter(await answered(broker.shares.lane.call(answer, shares, keys, items),
                                  lambda c: [{"partition": i.partition, "error_code": c} for i in items], TRANSACTIONS))
    return [{"topic_id": tid, "partitions": [next(results) for _ in items]} for tid, items in topics]
