"""Dynamic configs of brokers and groups (Kafka's ``ConfigRecord`` of resource types BROKER and GROUP), as the
catalog stores them, and what the broker's dynamic configs mean for topics.

State: (kind, name) -> {config key: value}, kind ``broker`` (name: a node id, or ``""`` for the cluster-wide
default) or ``group`` (name: a group id). Only validated sets are stored: broker keys by :func:`validate_broker`,
group keys by :mod:`walgate.coordinator.group_configs`.

Durability: one catalog record per change, ``{"op": "resource_configs", "kind": ..., "name": ..., "configs":
{key: value}}`` holding the resource's *whole* set after the change (an empty set removes the resource), so
replaying a record is idempotent and the latest record of a resource is its state. :func:`apply_record` replays
one (raising ``ValueError`` for a record it cannot apply, which the catalog quarantines, changing nothing);
:func:`records` rebuilds the state for a rewrite.

Broker configs as topic defaults (Kafka's ``ServerTopicConfigSynonyms``): a dynamic broker config such as
``log.retention.ms`` is the default of its topic config (``retention.ms``) for every Kafka-native topic that does
not set that config itself; this node's own resource wins over the cluster-wide default (:func:`topic_defaults`).
Only the synonyms of topic configs walgate knows (:data:`walgate.storage.topic_configs.TOPIC_CONFIG_DEFAULTS`)
and acts on (:data:`_ACTED_ON`) can be set; the broker's other settings are fixed at start (:func:`validate_broker`
refuses them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from walgate.storage.errors import InvalidValue
from walgate.storage.topic_configs import TOPIC_CONFIG_DEFAULTS, validate_configs

__all__ = ["RESOURCE_OP", "BROKER", "GROUP", "ResourceConfigs", "BROKER_SYNONYMS", "record", "apply_record",
           "records", "topic_defaults", "validate_broker"]

ResourceConfigs: TypeAlias = dict[tuple[str, str], dict[str, str]]

RESOURCE_OP: Final = "resource_configs"
BROKER: Final = "broker"
GROUP: Final = "group"
_KINDS: Final = (BROKER, GROUP)

_KAFKA_SYNONYMS: Final[dict[str, str]] = {
    "segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms", "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes", "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms", "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes", "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms", "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy", "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level", "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level", "preallocate": "log.preallocate",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "local.retention.ms": "log.local.retention.ms", "local.retention.bytes": "log.local.retention.bytes",
}
"""Topic config -> the broker config of the highest priority that sets its default (Kafka 4's
``ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS``, every one of them dynamic, cluster-wide or per broker)."""

_ACTED_ON: Final = ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "flush.ms", "flush.messages",
                    "cleanup.policy", "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
                    "min.cleanable.dirty.ratio", "max.message.bytes", "message.timestamp.type")
"""The topic configs whose broker defaults walgate acts on: the WAL settings of a topic's database follow them
(:meth:`walgate.storage.engine.Engine.apply_topic_defaults`), and so do the log cleaner
(:meth:`~walgate.storage.engine.Engine.clean`) and Produce (``max.message.bytes``, ``message.timestamp.type``,
``cleanup.policy``), which read a topic's configs over :meth:`~walgate.storage.engine.Engine.topic_defaults`."""

BROKER_SYNONYMS: Final[dict[str, str]] = {
    b: t for t, b in _KAFKA_SYNONYMS.items() if t in TOPIC_CONFIG_DEFAULTS and t in _ACTED_ON}
"""Broker config -> topic config: the broker configs that can be altered."""


def record(kind: str, name: str, configs: Mapping[str, str]) -> dict[str, Any]:
    """The catalog record setting resource (``kind``, ``name``) to ``configs`` (removing it when empty)."""
    return {"op": RESOURCE_OP, "kind": kind, "name": name, "configs": dict(configs)}


def apply_record(state: ResourceConfigs, r: Mapping[str, Any]) -> None:
    """Replay one :func:`record` into ``state``; raises ``ValueError`` (changing nothing) when it is malformed."""
    kind, name, configs = r.get("kind"), r.get("name"), r.get("configs")
    if kind not in _KINDS or not isinstance(name, str) or not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
        raise ValueError(f"resource configs record: kind {kind!r}, name {name!r}, configs {configs!r}")
    if configs:
        state[(kind, name)] = dict(configs)
    else:
        state.pop((kind, name), None)


def records(state: Mapping[tuple[str, str], Mapping[str, str]]) -> list[dict[str, Any]]:
    """Records that rebuild ``state``."""
    return [record(kind, name, configs) for (kind, name), configs in state.items()]


def topic_defaults(state: Mapping[tuple[str, str], Mapping[str, str]], node_id: str) -> dict[str, str]:
    """The topic configs the dynamic broker configs default (topic key -> value): the cluster-wide default
    resource, overridden by node ``node_id``'s own."""
    merged = {**state.get((BROKER, ""), {}), **state.get((BROKER, node_id), {})}
    return {BROKER_SYNONYMS[k]: v for k, v in merged.items() if k in BROKER_SYNONYMS}


def validate_broker(configs: Mapping[str, str]) -> None:
    """Refuse (:class:`InvalidValue`, Kafka's INVALID_REQUEST for broker configs) a set of dynamic broker configs
    with a key that is not a topic default walgate knows, or a value its topic config does not take."""
    fixed = sorted(set(configs) - set(BROKER_SYNONYMS))
    if fixed:
        raise InvalidValue(f"Cannot update these configs dynamically: {', '.join(fixed)} (walgate changes only "
                           f"{', '.join(sorted(BROKER_SYNONYMS))} at run time)")
    validate_configs({BROKER_SYNONYMS[k]: v for k, v in configs.items()})
