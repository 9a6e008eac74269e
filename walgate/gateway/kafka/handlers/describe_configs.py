"""DescribeConfigs (key 32) v0–v4: topic configs (real values), this broker's settings and groups' configs.

Kafka-native topics answer their configs as set (TOPIC_CONFIG), the broker's
value of the config's synonym for the rest (DYNAMIC_BROKER_CONFIG set for this
node, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG), else Kafka's
defaults (DEFAULT_CONFIG); with IncludeSynonyms, as Kafka's
``createTopicConfigEntry``: the topic's own value, then every level's value of
the broker config's synonyms (``retention.ms``: ``log.retention.ms``, then
``log.retention.minutes`` / ``log.retention.hours``) from the first that names the
config itself. TDengine topics answer what their database's WAL settings amount
to (no synonyms: the database sets them). The broker (resource name = its node id) answers the settings
walgate runs with (STATIC_BROKER_CONFIG), its dynamic configs over them
(DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG) and the defaults of the
dynamic ones not set (DEFAULT_CONFIG); the cluster-default resource (name "")
answers only the cluster-wide dynamic configs, as Kafka does. As Kafka's: a broker
config that is not dynamic is read-only, a password's value is null (sensitive),
and with IncludeSynonyms (v1+) each broker config lists its value at every level
that sets it or a synonym of it (``log.retention.hours`` under ``log.retention.ms``), the one in
force first. A group (32, KIP-848
group configs) answers its own configs (GROUP_CONFIG) and the broker's
``group.consumer.*`` settings for the rest (DEFAULT_CONFIG). A resource that
cannot be described answers its error; the others are answered.

ACLs (as Kafka): DescribeConfigs on the topic (TOPIC_AUTHORIZATION_FAILED), the group
(GROUP_AUTHORIZATION_FAILED) or, for the broker, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from walgate.gateway.kafka.access import Operation, config_denials
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.config_changes import group_timeouts
from walgate.storage.broker_configs import (
    BROKER_SYNONYMS,
    KAFKA_DEFAULTS,
    TOPIC_SYNONYMS,
    describe_type,
    is_dynamic,
    synonyms_of,
)
from walgate.storage.catalog import TopicDef
from walgate.storage.engine import Engine
from walgate.storage.resource_configs import GROUP as GROUP_KIND
from walgate.storage.topic_configs import CONFIG_TYPES, topic_configs
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)

API_KEY, MIN_VERSION, MAX_VERSION = 32, 0, 4
TOPIC, BROKER, GROUP = 2, 4, 32  # resource types
_TOPIC_CONFIG, _DYNAMIC_BROKER_CONFIG, _DYNAMIC_DEFAULT_BROKER_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 1, 2, 3, 4, 5
_GROUP_CONFIG = 8
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
             "PASSWORD": 9}  # Kafka's DescribeConfigsResponse.ConfigType
_TYPES = {**{k: _TYPE_IDS[t] for k, t in CONFIG_TYPES.items()},
          "consumer.session.timeout.ms": _TYPE_IDS["INT"], "consumer.heartbeat.interval.ms": _TYPE_IDS["INT"]}


Level = tuple[dict[str, str | None], int]
"""A level of broker configs (name -> value; None: Kafka's null) and its config source."""
Entry = DescribeConfigsResourceResult
Synonym = DescribeConfigsSynonym


def _entry(name: str, value: str | None, source: int, synonyms: list[Synonym] | None = None) -> Entry:
    """A topic's or a group's config."""
    return {"name": name, "value": value, "read_only": False, "is_default": source == _DEFAULT_CONFIG,
            "config_source": source, "is_sensitive": False, "synonyms": synonyms or [],
            "config_type": _TYPES.get(name, 2), "documentation": None}


def _synonyms(levels: list[Level], name: str, sensitive: bool) -> list[Synonym]:
    """Kafka's ``configSynonyms``: the values of ``name``'s synonyms at every level, level by level, from the first
    that is ``name`` itself (a null default is no value)."""
    names = synonyms_of(name)
    found: list[Synonym] = [{"name": k, "value": None if sensitive else level[k], "source": source}
                            for level, source in levels for k in names if level.get(k) is not None]
    first = next((i for i, s in enumerate(found) if s["name"] == name), len(found))
    return found[first:]


def _broker_entry(name: str, levels: list[Level], synonyms: bool) -> Entry:
    """A broker config from the ``levels`` that set it, the one in force first (Kafka's ``createBrokerConfigEntry``):
    read-only unless dynamic, a password's value hidden."""
    kind, sensitive = describe_type(name)
    found = _synonyms(levels, name, sensitive)
    value, source = (found[0]["value"], found[0]["source"]) if found else (None, _DEFAULT_CONFIG)
    return {"name": name, "value": value, "read_only": not is_dynamic(name),
            "is_default": source == _DEFAULT_CONFIG, "config_source": source, "is_sensitive": sensitive,
            "synonyms": found if synonyms else [], "config_type": _TYPE_IDS[kind],
            "documentation": None}


def _levels(engine: Engine, broker: Broker) -> list[Level]:
    """This node's broker configs, level by level in Kafka's order: per-broker dynamic, cluster-wide dynamic,
    static, default."""
    return [(dict(engine.resource_configs("broker", str(broker.node_id))), _DYNAMIC_BROKER_CONFIG),
            (dict(engine.resource_configs("broker", "")), _DYNAMIC_DEFAULT_BROKER_CONFIG),
            (dict(broker.configs), _STATIC_BROKER_CONFIG), (dict(KAFKA_DEFAULTS), _DEFAULT_CONFIG)]


def _broker_entries(engine: Engine, broker: Broker, name: str, synonyms: bool) -> list[Entry]:
    """The broker resource ``name`` (node id, or "" for the cluster-wide defaults): every config with the values it
    has at each level; the cluster-wide resource answers only its own configs, as Kafka does."""
    if not name:
        cluster: list[Level] = [(dict(engine.resource_configs("broker", "")), _DYNAMIC_DEFAULT_BROKER_CONFIG)]
        return [_broker_entry(k, cluster, synonyms) for k in cluster[0][0]]
    levels = _levels(engine, broker)
    names = dict.fromkeys(k for configs, _ in reversed(levels) for k in configs)
    return [_broker_entry(k, levels, synonyms) for k in names]


def topic_defaults(engine: Engine, node_id: int) -> dict[str, tuple[str, int]]:
    """Topic config -> (value, config source) of every topic config the dynamic broker configs default."""
    own = {BROKER_SYNONYMS[k] for k in engine.resource_configs("broker", str(node_id)) if k in BROKER_SYNONYMS}
    return {k: (v, _DYNAMIC_BROKER_CONFIG if k in own else _DYNAMIC_DEFAULT_BROKER_CONFIG)
            for k, v in engine.topic_defaults(node_id).items()}


def _topic_entries(engine: Engine, broker: Broker, topic: TopicDef, synonyms: bool) -> list[Entry]:
    """A topic's configs; a Kafka-native one's with their synonyms (Kafka's ``createTopicConfigEntry``): its own
    value, then its broker config's (:func:`_synonyms`); the source is the first of them's."""
    options = engine.catalog.database(topic.db).options
    described = topic_configs(topic.kind, topic.configs, options)
    if topic.kind != "kafka":
        return [_entry(k, v, _TOPIC_CONFIG if set_ else _DEFAULT_CONFIG) for k, (v, set_) in described.items()]
    levels, defaults = _levels(engine, broker), engine.topic_defaults(broker.node_id)
    entries: list[Entry] = []
    for k, (v, set_) in described.items():
        own: list[Synonym] = [{"name": k, "value": v, "source": _TOPIC_CONFIG}] if set_ else []
        found = own + (_synonyms(levels, TOPIC_SYNONYMS[k], False) if k in TOPIC_SYNONYMS else [])
        entries.append(_entry(k, v if set_ else defaults.get(k, v), found[0]["source"] if found else _DEFAULT_CONFIG,
                              found if synonyms else []))
    return entries


def _group_entries(engine: Engine, broker: Broker, name: str) -> list[Entry]:
    own = engine.resource_configs(GROUP_KIND, name)
    defaults = group_timeouts(broker).defaults()
    return [_entry(k, own[k], _GROUP_CONFIG) if k in own else _entry(k, v, _DEFAULT_CONFIG)
            for k, v in defaults.items()]


def _result(r: DescribeConfigsResource, error: int, message: str | None,
            configs: list[Entry]) -> DescribeConfigsResult:
    return {"error_code": error, "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name, "configs": configs}


def describe(engine: Engine, broker: Broker, r: DescribeConfigsResource, synonyms: bool) -> DescribeConfigsResult:
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    if r.resource_type == TOPIC:
        topic = engine.catalog.topics.get(r.resource_name)
        if topic is None:
            return _result(r, ErrorCode.unknown_topic_or_partition, f"topic {r.resource_name} does not exist", [])
        entries = _topic_entries(engine, broker, topic, synonyms)
    elif r.resource_type == BROKER:
        if r.resource_name not in ("", str(broker.node_id)):
            return _result(r, ErrorCode.invalid_request, f"Unexpected broker id, expected {broker.node_id} or empty "
                                                         f"string, but received {r.resource_name}", [])
        entries = _broker_entries(engine, broker, r.resource_name, synonyms)
    elif r.resource_type == GROUP:
        entries = _group_entries(engine, broker, r.resource_name)
    else:
        return _result(r, ErrorCode.invalid_request,
                       f"resource type {r.resource_type}: topics (2), brokers (4) and groups (32)", [])
    return _result(r, ErrorCode.none, None, [e for e in entries if keys is None or e["name"] in keys])


def _describe_all(engine: Engine, broker: Broker, request: DescribeConfigsRequest,
                  denied: dict[int, int]) -> list[DescribeConfigsResult]:
    results: list[DescribeConfigsResult] = []
    for i, r in enumerate(request.resources):
        if i in denied:
            results.append(_result(r, denied[i], "Authorization failed.", []))
            continue
        try:
            results.append(describe(engine, broker, r, request.include_synonyms))  # v1+ (False before)
        except Exception as exc:  # noqa: BLE001 - mapped per resource, siblings unaffected
            results.append(_result(r, error_of(exc), str(exc), []))
    return results


async def handle(broker: Broker, ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    return {"throttle_time": 0, "results": await broker.call(
        _describe_all, broker, request, config_denials(broker, ctx, Operation.DESCRIBE_CONFIGS,
                                                       [(r.resource_type, r.resource_name) for r in request.resources]))}
