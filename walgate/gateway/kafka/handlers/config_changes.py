"""What IncrementalAlterConfigs (key 44) and the legacy AlterConfigs (key 33) share: a resource's new set of
configs, computed by the API from the current one, is checked and stored for topics, brokers and groups.

* TOPIC (2): a Kafka-native topic's configs (:mod:`walgate.storage.topic_configs`; a refused one is
  INVALID_CONFIG); TDengine topics take their settings from their database (INVALID_REQUEST naming
  ``ALTER DATABASE``); its WAL settings follow at once, over the dynamic broker defaults.
* BROKER (4): name = this node's id (its own dynamic configs) or ``""`` (the cluster-wide default); Kafka's
  dynamic broker configs, validated as Kafka validates them (:mod:`walgate.storage.broker_configs`: a static or
  unknown name, a bad value, a per-broker config on the cluster default, a requirement of Kafka's broker config
  unmet, a thread count more than doubled or halved is INVALID_REQUEST with Kafka's message; APPEND/SUBTRACT on a
  config that is not a list is INVALID_CONFIG). Every Kafka-native topic without its own value follows a changed log config
  (``log.retention.ms`` ...) at once.
* GROUP (32): a consumer group's ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``
  (:mod:`walgate.coordinator.group_configs`, INVALID_CONFIG when refused); the group need not exist (Kafka's
  neither); its members get them at their next heartbeat.

As Kafka's ``ConfigAdminManager.preprocess``: a resource named twice in one request answers INVALID_REQUEST (both
times), as does a config key named twice for one resource or a null value (but for a DELETE). ``validate_only``
checks everything and changes nothing. Every change is durable (a catalog record) before it is answered.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from walgate.coordinator.group_configs import GroupTimeouts
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.storage import broker_configs
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.resource_configs import BROKER as BROKER_KIND
from walgate.storage.resource_configs import GROUP as GROUP_KIND
from walgate.storage.topic_configs import validate_configs
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AlterConfigsRequest,
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsRequest,
)

__all__ = ["TOPIC", "BROKER", "GROUP", "Change", "alter", "alter_all", "alter_each", "group_timeouts", "preprocess"]

TOPIC, BROKER, GROUP = 2, 4, 32  # config resource types
Change = Callable[[dict[str, str]], dict[str, str]]
"""A resource's new configs from its current ones (raises ``ValueError`` for an operation that cannot apply)."""


def preprocess(resources: list[Any], null_allowed: Callable[[Any], bool]) -> dict[int, tuple[int, str]]:
    """Index -> (error code, message) of the resources Kafka refuses before looking at them: duplicates, repeated
    config keys, null values (where ``null_allowed(config)`` is false)."""
    seen = Counter((r.resource_type, r.resource_name) for r in resources)
    out: dict[int, tuple[int, str]] = {}
    for i, r in enumerate(resources):
        if seen[(r.resource_type, r.resource_name)] > 1:
            out[i] = (ErrorCode.invalid_request, "Each resource must appear at most once.")
        elif len({c.name for c in r.configs}) != len(r.configs):
            out[i] = (ErrorCode.invalid_request, "Error due to duplicate config keys")
        elif nulls := [c.name for c in r.configs if c.value is None and not null_allowed(c)]:
            out[i] = (ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}")
    return out


def alter_each(engine: Engine, broker: Broker, request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
               denied: dict[int, int], null_allowed: Callable[[Any], bool],
               change_of: Callable[[Any], Change]) -> list[AlterConfigsResourceResponse]:
    """Every resource's answer (storage thread): its ACL error (*denied*), what :func:`preprocess` refuses, or what
    :func:`alter` makes of ``change_of(resource)``; an exception answers that resource only. (IncrementalAlterConfigs'
    answer has the same fields as AlterConfigs'.)"""
    resources: Sequence[Any] = request.resources  # either API's resources: the same fields but configs
    refused = preprocess(list(resources), null_allowed)
    responses: list[AlterConfigsResourceResponse] = []
    for i, r in enumerate(resources):
        message: str | None
        if i in denied:
            error, message = denied[i], "Authorization failed."
        elif i in refused:
            error, message = refused[i]
        else:
            try:
                error, message = alter(engine, broker, r.resource_type, r.resource_name, change_of(r),
                                       request.validate_only)
            except Exception as exc:  # noqa: BLE001 - mapped per resource, siblings unaffected
                error, message = error_of(exc), str(exc)
        responses.append({"error_code": error, "error_message": message, "resource_type": r.resource_type,
                          "resource_name": r.resource_name})
    return responses


async def alter_all(broker: Broker, request: AlterConfigsRequest | IncrementalAlterConfigsRequest,
                    denied: dict[int, int], null_allowed: Callable[[Any], bool],
                    change_of: Callable[[Any], Change]) -> list[AlterConfigsResourceResponse]:
    """:func:`alter_each` on the storage thread; in cluster mode, when the cluster's catalog refuses the changes
    after the call (no controller or etcd quorum: nothing changed), every resource not denied is answered so."""
    try:
        return await broker.call(alter_each, broker, request, denied, null_allowed, change_of)
    except Exception as exc:  # noqa: BLE001 - answered per resource
        code = error_of(exc)
        resources: Sequence[Any] = request.resources  # either API's resources, as in alter_each
        return [{"error_code": denied.get(i, code), "error_message": "Authorization failed." if i in denied
                 else str(exc), "resource_type": r.resource_type, "resource_name": r.resource_name}
                for i, r in enumerate(resources)]


def group_timeouts(broker: Broker) -> GroupTimeouts:
    """The broker's ``group.consumer.*`` and ``group.share.*`` settings, the defaults and bounds of group configs
    (storage thread)."""
    consumer = broker.groups.groups.consumer
    if broker.shares is None:
        return GroupTimeouts(consumer.session_timeout_ms, consumer.heartbeat_interval_ms)
    return dataclasses.replace(broker.shares.configs, session_timeout_ms=consumer.session_timeout_ms,
                               heartbeat_interval_ms=consumer.heartbeat_interval_ms, stored=lambda group_id: {})


def alter(engine: Engine, broker: Broker, rtype: int, name: str, change: Change,
          validate_only: bool) -> tuple[int, str | None]:
    """Apply ``change`` to resource (``rtype``, ``name``): (error code, message). Runs on the storage thread."""
    node_id = broker.node_id
    if rtype == TOPIC:
        return _topic(engine, node_id, name, change, validate_only)
    if rtype == BROKER:
        if name and name != str(node_id):
            return ErrorCode.invalid_request, (f"Node id must be an integer, but it is: {name}" if not
                                               name.lstrip("-").isdigit() else
                                               f"Unexpected broker id, expected {node_id}, but received {name}")
        try:
            configs = change(engine.resource_configs(BROKER_KIND, name))
        except ValueError as exc:
            return ErrorCode.invalid_config, str(exc)
        try:
            broker_configs.validate(configs, bool(name), broker.configs, engine.resource_configs(BROKER_KIND, ""),
                                    engine.resource_configs(BROKER_KIND, str(node_id)))
        except StorageError as exc:
            return ErrorCode.invalid_request, str(exc)
        if not validate_only:
            engine.set_resource_configs(BROKER_KIND, name, configs)
            engine.apply_topic_defaults(node_id)
        return ErrorCode.none, None
    if rtype == GROUP:
        if not name:
            return ErrorCode.invalid_request, "A group config resource needs a group id"
        try:
            configs = change(engine.resource_configs(GROUP_KIND, name))
            group_timeouts(broker).validate(configs)
        except ValueError as exc:
            return ErrorCode.invalid_config, str(exc)
        if not validate_only:
            engine.set_resource_configs(GROUP_KIND, name, configs)
        return ErrorCode.none, None
    return ErrorCode.invalid_request, f"Unknown resource type {rtype}: walgate alters topics (2), brokers (4), groups (32)"


def _topic(engine: Engine, node_id: int, name: str, change: Change, validate_only: bool) -> tuple[int, str | None]:
    topic = engine.catalog.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {name} does not exist"
    if topic.kind != "kafka":
        try:
            compacting = "compact" in change({}).get("cleanup.policy", "")
        except ValueError:
            compacting = False
        if compacting:
            return ErrorCode.invalid_config, (f"{name} is a TDengine topic: its records are rows of its database's "
                                              "tables and cannot be compacted (cleanup.policy=compact is for "
                                              "Kafka-native topics)")
        return ErrorCode.invalid_request, f"{name} is a TDengine topic: ALTER DATABASE {topic.db}"
    try:
        configs = change(topic.configs)
        validate_configs(configs)
    except (ValueError, StorageError) as exc:
        return ErrorCode.invalid_config, str(exc)
    if not validate_only:
        engine.alter_topic_configs(name, configs, engine.topic_defaults(node_id))
    return ErrorCode.none, None
