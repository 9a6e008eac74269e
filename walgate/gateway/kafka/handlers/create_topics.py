"""CreateTopics (key 19) v0–v7: Kafka-native topics, each in a database whose vgroups are its partitions.

A name that collides with an existing topic's (``alice_a`` beside ``alice.a``, Kafka's ``Topic.hasCollision``)
is INVALID_TOPIC_EXCEPTION with Kafka's message (:mod:`walgate.storage.names`). Kafka's internal topics
(``__consumer_offsets``, ``__transaction_state``: :data:`~walgate.storage.topic_configs.INTERNAL_TOPICS`) are
INVALID_REQUEST, on a single node and in a cluster alike.

A replication factor (-1: the broker's ``default.replication.factor``, 1) and ``num_partitions`` (-1: 1, Kafka's
``num.partitions``) are checked in Kafka's order with its messages: a factor below 1 (INVALID_REPLICATION_FACTOR), a
partition count below 1 (INVALID_PARTITIONS; walgate's own message above 1024, a database's VGROUPS limit), a factor
above the live nodes (INVALID_REPLICATION_FACTOR, "Unable to replicate the partition N time(s): " and the placer's
text); then a factor above 1 is refused by :func:`walgate.cluster.placement.unserved` (INVALID_REPLICATION_FACTOR)
unless ``replication.enable`` is set (issue 25): each partition's replicas are then placed on that many distinct live
nodes, racks spread (:mod:`walgate.cluster.placement`), the controller creates their partition states and the
followers copy the leader (``min.insync.replicas`` from the topic's configs). Manual assignments (``assignments``,
with both -1 as Kafka demands, else INVALID_REQUEST) name the replicas of each partition: distinct live nodes of the
cluster (this node alone on a single node), as many for each, checked by :func:`walgate.cluster.placement.assigned`
(INVALID_REPLICA_ASSIGNMENT with Kafka's message otherwise), then their count as a replication factor; each partition
is placed on the nodes named.
Configs: see :mod:`walgate.storage.topic_configs` (unknown keys and values
walgate cannot honour get INVALID_CONFIG); those not given follow the dynamic
broker defaults (:mod:`walgate.storage.resource_configs`). ``validate_only`` checks everything
and creates nothing. A creation refused by the engine answers that topic's
error (:mod:`.common`'s table: a limit, e.g. too many partitions in all, is
POLICY_VIOLATION; a refused disk write KAFKA_STORAGE_ERROR) with its message;
the other topics are created.

ACLs (as Kafka): Create on the cluster, or on the topic, else TOPIC_AUTHORIZATION_FAILED (before validation).

Each topic is created in a storage-thread call of its own, so a request of thousands of topics never holds the
storage thread for long: other clients' requests are served between its topics. Before that call, a topic's vnode
files (its WAL's first segment, its meta store's SQLite schema, their fsyncs: most of a creation's time) are made on
a thread of their own, holding no lane (the next topic's while this one's call runs), in a new database directory no
catalog names yet (:meth:`Engine.prepare_kafka_topic`); the call then validates, writes the catalog record and only
opens them, and removes the directory when the topic was not created with it. A request cancelled meanwhile (the
node stopping) leaves no directory: a call that got one runs whole (shielded), and files whose call never came are
removed by whichever ends last, the making or the cancelled handler (:class:`_Files`, :func:`_give_up`). The topics
snapshot the coordinator lane reads (:mod:`walgate.storage.topics_snapshot`) is published once, at the end of the
last one's call (not once per topic, which would copy the catalog n times for n topics).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

from walgate.cluster.placement import (
    BadAssignment,
    InvalidReplicationFactor,
    Replicas,
    assigned,
    check_replication_factor,
    unserved,
)
from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, checker, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.describe_configs import topic_defaults
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.topic_configs import (
    INTERNAL_TOPICS,
    TOPIC_CONFIG_DEFAULTS,
    validate_configs,
    validate_topic_name,
)
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicConfigs,
    CreateTopicsResponseCreatableTopicResult,
)
from walgate.wire.protocol import ZERO_UUID

log = logging.getLogger(__name__)

API_KEY, MIN_VERSION, MAX_VERSION = 19, 0, 7
MAX_PARTITIONS = 1024  # a database's VGROUPS limit
_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5  # config_source values
Result = CreateTopicsResponseCreatableTopicResult


class _Files:
    """One topic's vnode files made beside the lanes (:meth:`Engine.prepare_kafka_topic`) for a handler that may be
    cancelled while they are made: when it gives up, whichever of the two ends last removes them, so that no
    directory outlives a request that will never hand it to a creation."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._lock = threading.Lock()
        self._made: str | None = None  # the id handed to the handler
        self._abandoned = False

    def make(self, engine: Engine) -> str | None:
        """On the making thread: the new database id, or None when the handler gave up meanwhile (removed here)."""
        db_id = engine.prepare_kafka_topic(self.partitions)
        with self._lock:
            if not self._abandoned:
                self._made = db_id
                return db_id
        engine.drop_prepared(db_id)
        return None

    def abandon(self) -> str | None:
        """The handler gives up: the id already made and handed over, which no creation will get (the caller removes
        it), or None (:meth:`make` removes what it makes)."""
        with self._lock:
            self._abandoned = True
            return self._made


def _result(name: str, error: int, message: str | None, topic_id: uuid.UUID = ZERO_UUID,
            num_partitions: int = -1, replication_factor: int = -1,
            configs: list[CreateTopicsResponseCreatableTopicConfigs] | None = None) -> Result:
    return {"name": name, "topic_id": topic_id, "error_code": error, "error_message": message,
            "num_partitions": num_partitions, "replication_factor": replication_factor, "configs": configs}


def _partitions(engine: Engine, t: CreateTopicsRequestCreatableTopic, default_factor: int
                ) -> tuple[int, int, tuple[Replicas, ...] | None, str | None]:
    """(partition count, replication factor, the replicas of each partition a manual assignment names (None:
    placed), None) or (error code, 0, None, message); ``default_factor``: the factor of -1."""
    live = engine.catalog.placeable()
    if t.assignments:
        if t.replication_factor != -1 or t.num_partitions != -1:
            field = "replication factor" if t.replication_factor != -1 else "numPartitions"
            return (ErrorCode.invalid_request, 0, None,
                    f"A manual partition assignment was specified, but {field} was not set to -1.")
        if len(t.assignments) > MAX_PARTITIONS:
            return (ErrorCode.invalid_partitions, 0, None,
                    f"partitions must be 1..{MAX_PARTITIONS}, not {len(t.assignments)}")
        try:
            nodes = assigned([(a.partition_index, a.broker_ids) for a in t.assignments], live)
        except BadAssignment as exc:
            return ErrorCode.invalid_replica_assignment, 0, None, str(exc)
        refused = unserved(len(nodes[0]), engine.catalog.replication)
        if refused is not None:
            return ErrorCode.invalid_replication_factor, 0, None, refused
        return len(nodes), len(nodes[0]), nodes, None
    # Kafka's order (ReplicationControlManager.createTopic): the factor's sign, the partition count's, then placement
    factor = default_factor if t.replication_factor == -1 else t.replication_factor
    if factor < 1:
        return (ErrorCode.invalid_replication_factor, 0, None,
                "Replication factor must be larger than 0, or -1 to use the default value.")
    n = 1 if t.num_partitions == -1 else t.num_partitions
    if n < 1:
        return ErrorCode.invalid_partitions, 0, None, "Number of partitions was set to an invalid non-positive value."
    if n > MAX_PARTITIONS:
        return (ErrorCode.invalid_partitions, 0, None,
                f"partitions must be 1..{MAX_PARTITIONS}, not {t.num_partitions}")
    try:
        check_replication_factor(factor, len(live))
    except InvalidReplicationFactor as exc:  # Kafka prefixes its placer's text so
        return (ErrorCode.invalid_replication_factor, 0, None,
                f"Unable to replicate the partition {factor} time(s): {exc}")
    refused = unserved(factor, engine.catalog.replication)
    if refused is not None:
        return ErrorCode.invalid_replication_factor, 0, None, refused
    return n, factor, None, None


def _create(engine: Engine, broker: Broker, t: CreateTopicsRequestCreatableTopic, validate_only: bool,
            prepared: str | None) -> Result:
    n, factor, nodes, message = _partitions(engine, t, int(broker.configs.get("default.replication.factor", "1")))
    if message is not None:
        return _result(t.name, n, message)
    configs = {c.name: c.value for c in t.configs if c.value is not None}
    try:
        validate_topic_name(t.name)
    except StorageError as exc:
        return _result(t.name, ErrorCode.invalid_topic_exception, str(exc))
    if t.name in INTERNAL_TOPICS:  # Kafka's own (walgate's group and transaction coordinators keep them)
        return _result(t.name, ErrorCode.invalid_request, f"Creation of internal topic {t.name} is prohibited.")
    if t.name in engine.catalog.topics:
        return _result(t.name, ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    try:
        engine.catalog.check_collision(t.name)
    except StorageError as exc:
        return _result(t.name, ErrorCode.invalid_topic_exception, str(exc))
    try:
        validate_configs(configs)
    except StorageError as exc:
        return _result(t.name, ErrorCode.invalid_config, str(exc))
    topic_id = ZERO_UUID
    defaults = topic_defaults(engine, broker.node_id)
    if not validate_only:
        topic_id = uuid.UUID(engine.create_kafka_topic(t.name, n, configs, {k: v for k, (v, _) in defaults.items()},
                                                       nodes, prepared, factor).topic_id)
    effective = {k: (configs[k], _TOPIC_CONFIG) if k in configs else defaults.get(k, (v, _DEFAULT_CONFIG))
                 for k, v in TOPIC_CONFIG_DEFAULTS.items()}
    described: list[CreateTopicsResponseCreatableTopicConfigs] = [
        {"name": k, "value": value, "read_only": False, "is_sensitive": False, "config_source": source}
        for k, (value, source) in effective.items()]
    return _result(t.name, ErrorCode.none, None, topic_id=topic_id, num_partitions=n, replication_factor=factor,
                   configs=described)


def _give_up(broker: Broker, files: asyncio.Task[str | None]) -> None:
    """No call will get ``files``: remove them once made (being made: :class:`_Files` removes them itself)."""
    if not files.done():
        files.cancel()
    elif not files.cancelled() and files.exception() is None and (made := files.result()) is not None:
        broker.beside(Engine.drop_prepared, made).add_done_callback(_logged)


def _logged(done: asyncio.Future[None]) -> None:
    """A removal nobody awaits: its failure logged (the directory is then reported at the next start)."""
    if not done.cancelled() and done.exception() is not None:
        log.error("a topic's prepared directory could not be removed: %s", done.exception())


async def handle(broker: Broker, ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    validate_only = request.validate_only
    creatable = None if cluster_allowed(broker, ctx, Operation.CREATE) else checker(broker, ctx, Operation.CREATE,
                                                                                ResourceType.TOPIC)

    last = len(request.topics) - 1

    def create(engine: Engine, k: int, t: CreateTopicsRequestCreatableTopic, prepared: str | None) -> Result:
        try:
            if creatable is not None and not creatable(t.name):
                return _result(t.name, ErrorCode.topic_authorization_failed, "Authorization failed.")
            if k != last:
                engine.defer_topics_publication()  # the topics snapshot is published once, after the last topic
            return _create(engine, broker, t, validate_only, prepared)
        except Exception as exc:  # noqa: BLE001 - mapped per topic, siblings unaffected
            return _result(t.name, error_of(exc), str(exc))
        finally:
            if prepared is not None:
                engine.discard_prepared(prepared)  # unless the topic was created with it

    async def create_one(k: int, t: CreateTopicsRequestCreatableTopic, files: asyncio.Task[str | None]) -> Result:
        """One call each: others' requests go between; its ``files`` made first, beside the lanes (module
        docstring). In cluster mode the cluster's catalog may refuse it after the call (no controller or etcd quorum):
        answered for that topic."""
        try:
            prepared = await files
            if prepared is None:
                return await broker.call(create, k, t, None)
            return await asyncio.shield(broker.call(create, k, t, prepared))  # (it discards what it does not use)
        except Exception as exc:  # noqa: BLE001 - mapped per topic, siblings unaffected
            return _result(t.name, error_of(exc), str(exc))

    async def _prepared(t: CreateTopicsRequestCreatableTopic) -> str | None:
        """The database directory made for ``t``'s vnodes, when it is likely to be created here (not validate_only,
        one node, allowed, a valid partition count, not a topic that exists): else None (the call makes them)."""
        if (validate_only or broker.cluster is not None or t.assignments or t.replication_factor not in (-1, 1)
                or (creatable is not None and not creatable(t.name)) or t.name in broker.topics()):
            return None  # (an assignment is checked against the catalog: on the lane)
        n = 1 if t.num_partitions == -1 else t.num_partitions
        if not 1 <= n <= MAX_PARTITIONS:
            return None
        files = _Files(n)
        try:
            return await broker.beside(files.make)
        except asyncio.CancelledError:
            made = files.abandon()
            if made is not None:
                broker.beside(Engine.drop_prepared, made).add_done_callback(_logged)
            raise

    topics: list[Result] = []
    ahead: asyncio.Task[str | None] | None = None  # the next topic's files, made while this topic's call runs
    try:
        for k, t in enumerate(request.topics):
            files = ahead if ahead is not None else asyncio.ensure_future(_prepared(t))
            ahead = None
            if k + 1 < len(request.topics):
                ahead = asyncio.ensure_future(_prepared(request.topics[k + 1]))
            topics.append(await create_one(k, t, files))
    finally:
        if ahead is not None:  # cancelled (the node stopping) with the next topic's files made or being made
            _give_up(broker, ahead)
    if not validate_only:
        for result in topics:
            audit_kafka(ctx, "CreateTopics", f"topic {result['name']}", result["error_code"])
    return {"throttle_time": 0, "topics": topics}
