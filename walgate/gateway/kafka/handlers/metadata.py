"""Metadata (key 3) v0–v12: TDengine topics with partitions = vgroups, each led by the node its vgroup is placed on.

A replicated partition (issue 25) is answered from its partition state: its leader (LEADER_NOT_AVAILABLE, -1, when
that node is not registered now, and when it is this node while this node does not serve it:
:func:`~walgate.gateway.kafka.leaders.named_state`), leader epoch, replicas, ISR, and the replicas not registered now
offline; while this node has read no state of it (it is starting), LEADER_NOT_AVAILABLE with leader and epoch -1.
Another partition's leader is the node the catalog places its vgroup on (docs/cluster.md, "Placement"): this node, or
another node registered now (cluster mode), which is then listed among the brokers with the endpoint it advertises
on the listener the client came through; a partition placed on a node that is not registered now (or has no such
listener) answers LEADER_NOT_AVAILABLE, leader -1, the node among its replicas and offline replicas, as Kafka
answers a partition whose leader is offline. The brokers are this node and every other node registered now (with an
endpoint on the client's listener), as Kafka lists every live broker: every node knows the topics of the cluster's
catalog, so a client may ask any of them next.

v0 asks for all topics with an empty list, v1+ with a null list. Unknown names
get UNKNOWN_TOPIC_OR_PARTITION, unless ``auto_create_topic_partitions`` is set
(off by default, as Kafka's ``auto.create.topics.enable`` should be) and the
request allows it (``allow_auto_topic_creation``, v4+): then a Kafka-native
topic of that many partitions is created (a creation over a limit or refused
by the disk answers that error, :mod:`.common`'s table). A name Kafka could
never create (``Topic.validate``: not 1-249 characters of ``[a-zA-Z0-9._-]``,
or ``.``/``..``) answers INVALID_TOPIC_EXCEPTION, with or without auto-creation,
as Kafka does: clients fail such a topic at once instead of waiting for it;
so does a name auto-creation refuses because it collides with an existing
topic's (``alice_a`` beside ``alice.a``, :mod:`walgate.storage.names`).
Topic ids (v10+) are the stable UUIDs the catalog stores per topic. A topic
that cannot be described answers its error; the others are answered.

ACLs (as Kafka's ``handleTopicMetadataRequest``): a listing of all topics leaves out those the principal may not
Describe; a requested one it may not Describe answers TOPIC_AUTHORIZATION_FAILED (its existence not disclosed);
auto-creation needs Create on the cluster or on the topic (else TOPIC_AUTHORIZATION_FAILED). Authorized
operations are answered when asked for (v8+): a topic's, and the cluster's (v8–v10) when it may Describe it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection
from typing import Any

from walgate.gateway.kafka.access import Operation, ResourceType, checker, cluster_allowed, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import AUTO_CREATE, LEADER_EPOCH, answered, error_of
from walgate.gateway.kafka.leaders import named_state, node_endpoints, other_nodes
from walgate.replication.partition import PartitionState
from walgate.security.acl import CLUSTER_NAME
from walgate.storage.catalog import DatabaseDef
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.lanes import TopicLookup, VnodeKey
from walgate.storage.topic_configs import INTERNAL_TOPICS, validate_topic_name
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from walgate.wire.protocol import ZERO_UUID

API_KEY, MIN_VERSION, MAX_VERSION = 3, 0, 12
_NO_AUTH_OPS = -2147483648
States = Callable[[str, int], PartitionState | None]
"""A replicated vgroup's partition state by (database id, vgroup), as this node read it."""


def _no_states(_db_id: str, _vgroup: int) -> PartitionState | None:
    return None


def broker_states(broker: Broker) -> States:
    """The partition states this node read (its replica manager's), as Metadata names them
    (:func:`~walgate.gateway.kafka.leaders.named_state`: one naming this node leader while it does not serve it has
    no leader); none on a single node."""
    return _no_states if broker.led is None else functools.partial(named_state, broker.led, broker.node_id)


def topic_entries(engine: Engine, node_id: int, names: list[str] | None,
                  errors: dict[str, int] | None = None,
                  describable: Callable[[str], bool] | None = None,
                  live: Collection[int] = (), states: States = _no_states) -> list[MetadataResponseTopic]:
    """Metadata entries for ``names`` (None: every topic, none when they cannot be listed); ``errors``: the answer
    of names that failed before (auto-creation); ``describable`` (None: all) hides topics from the listing and
    answers requested ones TOPIC_AUTHORIZATION_FAILED; ``live``: the other nodes that may be named as leaders
    (:func:`~walgate.gateway.kafka.leaders.other_nodes`); ``states``: a replicated vgroup's partition state by
    (database id, vgroup), as read here. Runs on the storage thread."""
    out: list[MetadataResponseTopic] = []
    if names is None:
        try:
            names = sorted(engine.catalog.topics)
        except Exception as exc:  # noqa: BLE001 - logged by error_of; no topic to carry it
            error_of(exc)
            return []
        if describable is not None:
            names = [n for n in names if describable(n)]
    for name in names:
        if describable is not None and not describable(name):
            out.append(_missing(name, ErrorCode.topic_authorization_failed))
            continue
        try:
            out.append(_entry(engine, node_id, name, (errors or {}).get(name) or unknown_topic_error(name), live,
                              states))
        except Exception as exc:  # noqa: BLE001 - mapped per topic, siblings unaffected
            out.append(_missing(name, error_of(exc)))
    return out


def unknown_topic_error(name: str) -> ErrorCode:
    """What a topic that does not exist answers: INVALID_TOPIC_EXCEPTION if its name is not one Kafka takes, else
    UNKNOWN_TOPIC_OR_PARTITION (Kafka's ``getTopicMetadata``)."""
    try:
        validate_topic_name(name)
    except StorageError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


def _missing(name: str, error: int) -> MetadataResponseTopic:
    return {"error_code": error, "name": name, "topic_id": ZERO_UUID, "partitions": []}


def _replicated(index: int, state: PartitionState, node_id: int, live: Collection[int]) -> MetadataResponsePartition:
    """Partition ``index``'s entry from its partition state (issue 25): its leader when registered now (else
    LEADER_NOT_AVAILABLE, leader -1), its leader epoch, replicas and ISR; the replicas not registered now offline."""
    up = {*live, node_id}
    offline = [r for r in state.replicas if r not in up]
    entry: MetadataResponsePartition = {
        "error_code": ErrorCode.none, "partition_index": index, "leader_id": state.leader,
        "leader_epoch": state.leader_epoch, "replica_nodes": list(state.replicas),
        "isr_nodes": [m.replica for m in state.isr], "offline_replicas": offline}
    if state.leader not in up:
        entry.update({"error_code": ErrorCode.leader_not_available, "leader_id": -1})
    return entry


def _unknown(index: int, replicas: tuple[int, ...], node_id: int, live: Collection[int]) -> MetadataResponsePartition:
    """Partition ``index`` of a replicated vgroup whose partition state this node has not read (it is starting):
    LEADER_NOT_AVAILABLE, leader -1 and epoch -1, the catalog's ``replicas``, those not registered now offline."""
    up = {*live, node_id}
    return {"error_code": ErrorCode.leader_not_available, "partition_index": index, "leader_id": -1,
            "leader_epoch": -1, "replica_nodes": list(replicas), "isr_nodes": [],
            "offline_replicas": [r for r in replicas if r not in up]}


def _partition(index: int, leader: int, node_id: int, live: Collection[int]) -> MetadataResponsePartition:
    """Partition ``index``'s entry, placed on node ``leader`` (see the module docstring)."""
    if leader == node_id or leader in live:
        return {"error_code": ErrorCode.none, "partition_index": index, "leader_id": leader,
                "leader_epoch": LEADER_EPOCH, "replica_nodes": [leader], "isr_nodes": [leader],
                "offline_replicas": []}
    return {"error_code": ErrorCode.leader_not_available, "partition_index": index, "leader_id": -1,
            "leader_epoch": LEADER_EPOCH, "replica_nodes": [leader], "isr_nodes": [], "offline_replicas": [leader]}


def _partition_of(db: DatabaseDef, index: int, node_id: int, live: Collection[int],
                  states: States) -> MetadataResponsePartition:
    """The entry of ``db``'s vgroup ``index``: placed (one copy), or from its partition state (replicated)."""
    if not db.replicated(index):
        return _partition(index, db.node_of(index, node_id), node_id, live)
    state = states(db.id, index)
    return _unknown(index, db.replicas_of(index, node_id), node_id, live) if state is None else _replicated(
        index, state, node_id, live)


def _entry(engine: Engine, node_id: int, name: str, missing: int, live: Collection[int],
           states: States) -> MetadataResponseTopic:
    t = engine.catalog.topics.get(name)
    if t is None:
        return _missing(name, missing)
    db = engine.catalog.database(t.db)
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": uuid.UUID(t.topic_id),
        "is_internal": name in INTERNAL_TOPICS,  # (a replicated cluster's __consumer_offsets: coordinator_replicas.py)
        "topic_authorized_operations": _NO_AUTH_OPS,
        "partitions": [_partition_of(db, p, node_id, live, states) for p in range(db.vgroups)],
    }


def _requested(engine: TopicLookup, request: MetadataRequest, version: int) -> list[str] | None:
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return None
    names = []
    for t in topics:
        name = t.name
        if name is None:
            name = (None if t.topic_id is None else engine.topic_name(t.topic_id)) or str(t.topic_id)
        names.append(name)
    return names


def _keys(broker: Broker, request: MetadataRequest, version: int, topics: TopicLookup) -> frozenset[VnodeKey] | None:
    """Metadata reads the catalog only: it holds no vnode (it runs beside calls holding vnodes, a large write among
    them), unless it may create a topic it names (auto-creation): then the whole storage lane."""
    if broker.auto_create_partitions and request.allow_auto_topic_creation:
        if any(topics.topic(name) is None for name in _requested(topics, request, version) or ()):
            return None
    return frozenset()


async def handle(broker: Broker, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    others = other_nodes(broker, ctx.listener.name)
    describable = checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC)
    creatable = None if cluster_allowed(broker, ctx, Operation.CREATE) else checker(broker, ctx, Operation.CREATE,
                                                                                ResourceType.TOPIC)

    def describe(engine: Engine) -> list[MetadataResponseTopic]:
        names = _requested(engine, request, ctx.api_version)
        failed: dict[str, int] = {}
        if broker.auto_create_partitions and request.allow_auto_topic_creation:
            for name in names or ():
                if name not in engine.catalog.topics and (describable is None or describable(name)):
                    if creatable is not None and not creatable(name):
                        failed[name] = ErrorCode.topic_authorization_failed
                        continue
                    if unknown_topic_error(name) != ErrorCode.unknown_topic_or_partition or name in INTERNAL_TOPICS:
                        continue  # never created: answered INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION
                    try:
                        engine.create_kafka_topic(name, broker.auto_create_partitions, {},
                                                  engine.topic_defaults(broker.node_id))
                    except Exception as exc:  # noqa: BLE001 - answered in the topic's entry
                        failed[name] = error_of(exc, AUTO_CREATE)
        return topic_entries(engine, broker.node_id, names, failed, describable, frozenset(others),
                             broker_states(broker))

    topics = await answered(broker.call_on(functools.partial(_keys, broker, request, ctx.api_version), describe),
                            lambda code: [
        _missing(t.name, code) for t in request.topics or () if t.name is not None
    ])
    if request.include_topic_authorized_operations:
        for t in topics:  # every topic answered but those hidden from the principal, as Kafka
            if t["error_code"] != ErrorCode.topic_authorization_failed:
                t["topic_authorized_operations"] = operations(broker, ctx, ResourceType.TOPIC, t.get("name") or "")
    cluster_ops = _NO_AUTH_OPS
    if request.include_cluster_authorized_operations and cluster_allowed(broker, ctx, Operation.DESCRIBE):
        cluster_ops = operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    host, port = broker.address(ctx.listener)
    brokers: list[Any] = [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}]
    brokers += node_endpoints(others, others)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "brokers": brokers,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_ops,
    }
