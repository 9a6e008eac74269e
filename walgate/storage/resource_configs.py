"""Dynamic configs of brokers and groups (Kafka's ``ConfigRecord`` of resource types BROKER and GROUP), as the
catalog stores them, and what the broker's dynamic configs mean for topics.

State: (kind, name) -> {config key: value}, kind ``broker`` (name: a node id, or ``""`` for the cluster-wide
default) or ``group`` (name: a group id). Only validated sets are stored: broker keys by
:func:`walgate.storage.broker_configs.validate`, group keys by :mod:`walgate.coordinator.group_configs`.

Durability: one catalog record per change, ``{"op": "resource_configs", "kind": ..., "name": ..., "configs":
{key: value}}`` holding the resource's *whole* set after the change (an empty set removes the resource), so
replaying a record is idempotent and the latest record of a resource is its state. :func:`apply_record` replays
one (raising ``ValueError`` for a record it cannot apply, which the catalog quarantines, changing nothing);
:func:`records` rebuilds the state for a rewrite.

Broker configs as topic defaults (Kafka's ``ServerTopicConfigSynonyms``): a dynamic broker config such as
``log.retention.ms`` is the default of its topic config (``retention.ms``) for every Kafka-native topic that does
not set that config itself; this node's own resource wins over the cluster-wide default (:func:`topic_defaults`).
The topic configs walgate acts on (:mod:`walgate.storage.topic_configs`) are then acted on over these defaults: the
WAL settings of a topic's database (:meth:`walgate.storage.engine.Engine.apply_topic_defaults`), the log cleaner and
Produce (``max.message.bytes``, ``message.timestamp.type``, ``cleanup.policy``). The other dynamic broker configs
(:mod:`walgate.storage.broker_configs`) are only stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from walgate.storage.broker_configs import BROKER_SYNONYMS

__all__ = ["RESOURCE_OP", "BROKER", "GROUP", "ResourceConfigs", "record", "apply_record", "records",
           "topic_defaults"]

ResourceConfigs: TypeAlias = dict[tuple[str, str], dict[str, str]]

RESOURCE_OP: Final = "resource_configs"
BROKER: Final = "broker"
GROUP: Final = "group"
_KINDS: Final = (BROKER, GROUP)


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
