"""Kafka 4's dynamic broker configs: which names AlterConfigs / IncrementalAlterConfigs may set on a BROKER resource,
at which level, with which values (Kafka's ``DynamicBrokerConfig`` reconfigurable sets and its validation).

Levels: a resource named for a node id holds that broker's own configs (DYNAMIC_BROKER_CONFIG), the resource named
``""`` the cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG). Every dynamic config may be set per broker; the
listener and SASL/SSL configs (:data:`_PER_BROKER`, and every ``listener.name.<listener>.<config>``) only per broker,
as Kafka has them. :func:`validate` checks a resource's whole new set in Kafka's order and with its messages:

1. a name that is not dynamic: ``Cannot update these configs dynamically: Set(...)`` — Kafka's static configs, and
   also any name Kafka does not know (Kafka would keep an unknown name as a custom config for a plugin; walgate,
   which has no plugins, refuses it so a typo is not stored);
2. an SSL keystore/truststore config without a listener prefix: ``These security configs can be dynamically
   updated only per-listener using the listener prefix: Set(...)``;
3. a value of the wrong type or out of range: ``Invalid value V for configuration K: ...`` (ConfigDef's words);
4. on the cluster default, a per-broker config: ``Cannot update these configs at default cluster level, broker id
   must be specified: Set(...)``;
5. the reconfiguration checks: a thread count (``num.io.threads``, ``background.threads``, ...) at least 1, at least
   half and at most double the value it replaces; ``log.cleaner.threads`` likewise.

Kafka answers all of these INVALID_REQUEST (KAFKA-13609); so does the caller.

What walgate acts on: the log configs (:data:`BROKER_SYNONYMS`) default the topic configs they are synonyms of
(:mod:`.resource_configs`), and so act as those topic configs do (:mod:`.topic_configs`). Every other dynamic config
is stored and described but changes nothing: walgate's threads, listeners, TLS and SASL are set when it starts —
except ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``, which are refused
(:data:`_FIXED`) because storing them would describe listeners walgate does not have.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final

from walgate.storage.errors import InvalidValue
from walgate.storage.topic_configs import TOPIC_CONFIGS, ConfigSpec, check_value

__all__ = ["BROKER_SYNONYMS", "DYNAMIC", "default_of", "is_dynamic", "spec_of", "validate"]

_LONG_MAX: Final = str(2**63 - 1)
_INT_MAX: Final = str(2**31 - 1)

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
``ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS``; Kafka's ``DynamicLogConfig`` makes every one dynamic)."""

BROKER_SYNONYMS: Final[dict[str, str]] = {b: t for t, b in _KAFKA_SYNONYMS.items() if t in TOPIC_CONFIGS}
"""Broker config -> topic config: the dynamic log configs, each the default of its topic config."""


def _s(type_: str, default: str | None, low: float | None = None, high: float | None = None,
       allowed: tuple[str, ...] = ()) -> ConfigSpec:
    return ConfigSpec(default, type_, low, high, allowed)


_THREADS: Final = {"num.io.threads": _s("INT", "8", 1), "num.replica.fetchers": _s("INT", "1"),
                   "num.recovery.threads.per.data.dir": _s("INT", "2", 1), "background.threads": _s("INT", "10", 1)}
"""Kafka's ``DynamicThreadPool``: each may at most double or halve at a time."""

_SSL_STORES: Final = {
    "ssl.keystore.type": _s("STRING", "JKS"), "ssl.keystore.location": _s("STRING", None),
    "ssl.keystore.password": _s("PASSWORD", None), "ssl.key.password": _s("PASSWORD", None),
    "ssl.truststore.type": _s("STRING", "JKS"), "ssl.truststore.location": _s("STRING", None),
    "ssl.truststore.password": _s("PASSWORD", None), "ssl.keystore.certificate.chain": _s("PASSWORD", None),
    "ssl.keystore.key": _s("PASSWORD", None), "ssl.truststore.certificates": _s("PASSWORD", None)}
"""``SslConfigs.RECONFIGURABLE_CONFIGS``: dynamic only with a listener prefix."""

_LISTENER: Final = {
    "principal.builder.class": _s("CLASS", "org.apache.kafka.common.security.authenticator."
                                           "DefaultKafkaPrincipalBuilder"),
    "ssl.protocol": _s("STRING", "TLSv1.3"), "ssl.provider": _s("STRING", None),
    "ssl.cipher.suites": _s("LIST", ""), "ssl.enabled.protocols": _s("LIST", "TLSv1.2,TLSv1.3"),
    "ssl.keymanager.algorithm": _s("STRING", "SunX509"), "ssl.trustmanager.algorithm": _s("STRING", "PKIX"),
    "ssl.endpoint.identification.algorithm": _s("STRING", "https"),
    "ssl.secure.random.implementation": _s("STRING", None),
    "ssl.client.auth": _s("STRING", "none", allowed=("required", "requested", "none")),
    "ssl.engine.factory.class": _s("CLASS", None),
    "sasl.mechanism.inter.broker.protocol": _s("STRING", "GSSAPI"), "sasl.jaas.config": _s("PASSWORD", None),
    "sasl.enabled.mechanisms": _s("LIST", "GSSAPI"), "sasl.kerberos.service.name": _s("STRING", None),
    "sasl.kerberos.kinit.cmd": _s("STRING", "/usr/bin/kinit"),
    "sasl.kerberos.ticket.renew.window.factor": _s("DOUBLE", "0.8"),
    "sasl.kerberos.ticket.renew.jitter": _s("DOUBLE", "0.05"),
    "sasl.kerberos.min.time.before.relogin": _s("LONG", "60000"),
    "sasl.kerberos.principal.to.local.rules": _s("LIST", "DEFAULT"),
    "sasl.login.refresh.window.factor": _s("DOUBLE", "0.8", 0.5, 1.0),
    "sasl.login.refresh.window.jitter": _s("DOUBLE", "0.05", 0.0, 0.25),
    "sasl.login.refresh.min.period.seconds": _s("SHORT", "60", 0, 900),
    "sasl.login.refresh.buffer.seconds": _s("SHORT", "300", 0, 3600),
}
"""Kafka's ``DynamicListenerConfig`` listener, SSL and SASL configs (but the listener set itself, :data:`_FIXED`):
per broker only."""

_CLUSTER_LEVEL_LISTENER: Final = {"max.connections": _s("INT", _INT_MAX, 0),
                                  "max.connection.creation.rate": _s("INT", _INT_MAX, 0),
                                  "num.network.threads": _s("INT", "3", 1)}
"""The listener configs Kafka also takes cluster-wide (``ClusterLevelListenerConfigs``)."""

_OTHERS: Final = {
    "log.cleaner.threads": _s("INT", "1", 0), "log.cleaner.dedupe.buffer.size": _s("LONG", "134217728"),
    "log.cleaner.io.buffer.load.factor": _s("DOUBLE", "0.9"), "log.cleaner.io.buffer.size": _s("INT", "524288", 0),
    "log.cleaner.io.max.bytes.per.second": _s("DOUBLE", "1.7976931348623157E308"),
    "log.cleaner.backoff.ms": _s("LONG", "15000", 0),
    "metric.reporters": _s("LIST", "org.apache.kafka.common.metrics.JmxReporter"),
    "max.connections.per.ip": _s("INT", _INT_MAX, 0), "max.connections.per.ip.overrides": _s("STRING", ""),
    "producer.id.expiration.ms": _s("INT", "86400000", 1),
    "transaction.partition.verification.enable": _s("BOOLEAN", "true"),
    "remote.log.index.file.cache.total.size.bytes": _s("LONG", "1073741824", 1),
    "remote.fetch.max.wait.ms": _s("INT", "500", 1),
    "remote.log.manager.copy.max.bytes.per.second": _s("LONG", _LONG_MAX, 1),
    "remote.log.manager.fetch.max.bytes.per.second": _s("LONG", _LONG_MAX, 1),
    "remote.list.offsets.request.timeout.ms": _s("LONG", "30000", 1),
    "leader.replication.throttled.rate": _s("LONG", _LONG_MAX, 0),
    "follower.replication.throttled.rate": _s("LONG", _LONG_MAX, 0),
    "replica.alter.log.dirs.io.max.bytes.per.second": _s("LONG", _LONG_MAX, 0),
}
"""The rest of Kafka's dynamic broker configs: ``LogCleaner``, metric reporters, ``SocketServer``, the producer
state manager, ``DynamicRemoteLogConfig`` and the broker quotas."""

_LOG: Final = {b: TOPIC_CONFIGS[t] for b, t in BROKER_SYNONYMS.items()}

DYNAMIC: Final[dict[str, ConfigSpec]] = {**_LOG, **_OTHERS, **_THREADS, **_CLUSTER_LEVEL_LISTENER, **_LISTENER}
"""Every broker config that may be set without a listener prefix, with Kafka's default, type and range."""

_PER_BROKER: Final = frozenset(_LISTENER)
_FIXED: Final = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})
_MECHANISM_CONFIGS: Final = {"sasl.jaas.config": _s("PASSWORD", None), "sasl.login.callback.handler.class":
                             _s("CLASS", None), "sasl.login.class": _s("CLASS", None),
                             "sasl.server.callback.handler.class": _s("CLASS", None),
                             "connections.max.reauth.ms": _s("LONG", "0")}
"""Kafka's ``ListenerMechanismConfigs``: under a listener prefix, also with a SASL mechanism before the name."""

_LISTENER_NAME: Final = re.compile(r"listener\.name\.[^.]*\.(.*)")


def _listener_base(name: str) -> str | None:
    """The config a ``listener.name.<listener>.`` name sets (None when it has no such prefix)."""
    m = _LISTENER_NAME.fullmatch(name)
    return m.group(1) if m else None


def spec_of(name: str) -> ConfigSpec | None:
    """The spec of a dynamic broker config name, listener-prefixed ones included (None: not dynamic)."""
    base = _listener_base(name)
    if base is None:
        return DYNAMIC.get(name)
    for table in (_LISTENER, _SSL_STORES, _CLUSTER_LEVEL_LISTENER, _MECHANISM_CONFIGS):
        if base in table:
            return table[base]
    return next((s for k, s in _MECHANISM_CONFIGS.items() if base.endswith("." + k)), None)


def is_dynamic(name: str) -> bool:
    """Kafka's ``AllDynamicConfigs``: the names DescribeConfigs answers as not read-only."""
    return name in DYNAMIC or name in _SSL_STORES


def default_of(name: str) -> str | None:
    """Kafka's default of a dynamic broker config (None: null)."""
    spec = spec_of(name)
    return None if spec is None else spec.default


def _per_broker(name: str) -> bool:
    base = _listener_base(name)
    return name in _PER_BROKER if base is None else base not in _CLUSTER_LEVEL_LISTENER


def _kafka_set(names: list[str]) -> str:
    return f"Set({', '.join(sorted(names))})"


def validate(configs: Mapping[str, str], per_broker: bool, current: Mapping[str, str],
             overridden: Collection[str] = ()) -> None:
    """Refuse (:class:`InvalidValue`) the new whole set ``configs`` of a broker resource — this node's own
    (``per_broker``) or the cluster default — as Kafka's ``DynamicBrokerConfig.validate`` does (see the module).
    ``current`` holds the values now in force on this node and ``overridden`` the names this node sets itself (a
    cluster-wide value of those is not in force here): the thread counts are checked against them."""
    fixed = [k for k in configs if (spec_of(k) is None and k not in _SSL_STORES) or k in _FIXED]
    if fixed:
        raise InvalidValue(f"Cannot update these configs dynamically: {_kafka_set(fixed)}")
    unprefixed = [k for k in configs if k in _SSL_STORES]
    if unprefixed:
        raise InvalidValue("These security configs can be dynamically updated only per-listener using the "
                           f"listener prefix: {_kafka_set(unprefixed)}")
    for key, value in configs.items():
        spec = spec_of(key)
        assert spec is not None  # every name passed the first check
        check_value(key, value, spec)
    if not per_broker and (brokers := [k for k in configs if _per_broker(k)]):
        raise InvalidValue("Cannot update these configs at default cluster level, broker id must be specified: "
                           f"{_kafka_set(brokers)}")
    for key in (*_THREADS, "log.cleaner.threads"):
        if key in configs and (per_broker or key not in overridden) and (old := int(current.get(key, DYNAMIC[key].default or "0"))) != int(configs[key]):
            _check_threads(key, int(configs[key]), old)


def _check_threads(key: str, new: int, old: int) -> None:
    if key == "log.cleaner.threads":
        what = "Log cleaner threads"
        if new < 1:
            raise InvalidValue(f"{what} should be at least 1")
        if new < old // 2:
            raise InvalidValue(f"{what} cannot be reduced to less than half the current value {old}")
        if new > old * 2:
            raise InvalidValue(f"{what} cannot be increased to more than double the current value {old}")
        return
    what = f"Dynamic thread count update validation failed for {key}={new}"
    if new <= 0:
        raise InvalidValue(f"{what}, value should be at least 1")
    if new < old // 2:
        raise InvalidValue(f"{what}, value should be at least half the current value {old}")
    if new > old * 2:
        raise InvalidValue(f"{what}, value should not be greater than double the current value {old}")
