"""CreatePartitions (key 37) v0–v3: grow a Kafka-native topic (new vgroups of its database).

Only larger counts (INVALID_PARTITIONS otherwise). The new partitions have as many replicas as the topic's others;
more than one is refused by :func:`walgate.cluster.placement.unserved` (INVALID_REPLICATION_FACTOR) unless
``replication.enable`` is set (issue 25). Manual
assignments name the replicas of each new partition (as many lists as partitions are added): distinct live nodes of
the cluster (this node alone on a single node), as many as the topic's other partitions have, checked by
:func:`walgate.cluster.placement.assigned` (INVALID_REPLICA_ASSIGNMENT with Kafka's message otherwise); each new
partition is placed on the nodes named. TDengine topics have their database's vgroups: INVALID_REQUEST. Growth
the engine refuses answers that topic's error (:mod:`.common`'s table; a limit
is INVALID_PARTITIONS) with its message; the other topics grow.

ACLs (as Kafka): Alter on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.cluster.placement import BadAssignment, assigned, unserved
from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import CREATE_PARTITIONS, error_of
from walgate.gateway.kafka.handlers.create_topics import MAX_PARTITIONS
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 37, 0, 3


def _result(t: CreatePartitionsTopic, error: int, message: str | None = None) -> CreatePartitionsTopicResult:
    return {"name": t.name, "error_code": error, "error_message": message}


def grow(engine: Engine, t: CreatePartitionsTopic, validate_only: bool) -> CreatePartitionsTopicResult:
    topic = engine.catalog.topics.get(t.name)
    if topic is None:
        return _result(t, ErrorCode.unknown_topic_or_partition, f"topic {t.name} does not exist")
    if topic.kind != "kafka":
        return _result(t, ErrorCode.invalid_request, f"{t.name} is a TDengine topic: its partitions are {topic.db}'s vgroups")
    current = engine.partition_count(t.name)
    if not current < t.count <= MAX_PARTITIONS:
        return _result(t, ErrorCode.invalid_partitions,
                      f"topic {t.name} has {current} partitions: ask for more, at most {MAX_PARTITIONS}")
    factor = engine.catalog.database(topic.db).replication_factor
    refused = unserved(factor, engine.catalog.replication)
    if refused is not None:
        return _result(t, ErrorCode.invalid_replication_factor, refused)
    nodes = None
    if t.assignments is not None:
        if len(t.assignments) != t.count - current:
            return _result(t, ErrorCode.invalid_replica_assignment,
                           f"Attempted to add {t.count - current} additional partition(s), but only "
                           f"{len(t.assignments)} assignment(s) were specified.")
        try:
            nodes = assigned([(current + k, a.broker_ids) for k, a in enumerate(t.assignments)],
                             engine.catalog.placeable(), first=current, replicas=factor)
        except BadAssignment as exc:
            return _result(t, ErrorCode.invalid_replica_assignment, str(exc))
    if not validate_only:
        engine.create_partitions(t.name, t.count, nodes)
    return _result(t, ErrorCode.none)


def _grow_all(engine: Engine, request: CreatePartitionsRequest,
              alterable: Callable[[str], bool] | None) -> list[CreatePartitionsTopicResult]:
    results: list[CreatePartitionsTopicResult] = []
    for t in request.topics:
        if alterable is not None and not alterable(t.name):
            results.append(_result(t, ErrorCode.topic_authorization_failed, "The topic authorization is failed."))
            continue
        try:
            results.append(grow(engine, t, request.validate_only))
        except Exception as exc:  # noqa: BLE001 - mapped per topic, siblings unaffected
            results.append(_result(t, error_of(exc, CREATE_PARTITIONS), str(exc)))
    return results


async def handle(broker: Broker, ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    try:
        results = await broker.call(_grow_all, request, checker(broker, ctx, Operation.ALTER, ResourceType.TOPIC))
    except Exception as exc:  # noqa: BLE001 - cluster mode: the cluster's catalog refused them (nothing grown)
        results = [_result(t, error_of(exc, CREATE_PARTITIONS), str(exc)) for t in request.topics]
    if not request.validate_only:
        for t, r in zip(request.topics, results):
            audit_kafka(ctx, "CreatePartitions", f"topic {r['name']} to {t.count} partitions", r["error_code"])
    return {"throttle_time": 0, "results": results}
