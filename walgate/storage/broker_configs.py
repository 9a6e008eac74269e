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
5. what Kafka's ``KafkaConfig`` requires of the configs the change puts in force (``requirement failed: ...``;
   walgate checks each only when the change alters a config it reads, see :func:`_check_requirements`):
   ``log.retention.ms`` -1 or at least 1, ``log.cleaner.dedupe.buffer.size`` over 1 MiB per ``log.cleaner.threads``
   (``log.cleaner.threads=0`` divides by zero: ``/ by zero``), ``max.connections.per.ip`` 0 only with overrides;
6. the reconfiguration checks, each against the value in force and only when the change alters what they watch,
   worded as Kafka wraps them (``Invalid value org.apache.kafka.common.config.ConfigException: <why> for
   configuration Invalid dynamic configuration``): per listener, its ``num.network.threads`` (a
   ``listener.name.<listener>.`` value, else the plain one) at least 1, at least half and at most double the count
   it replaces, and its ``max.connections`` / ``max.connection.creation.rate`` above 0; the thread pools
   (``num.io.threads``, ``background.threads``, ...) likewise; ``log.cleaner.threads`` likewise, whenever a
   ``log.cleaner.*`` config changes.

Kafka answers all of these INVALID_REQUEST (KAFKA-13609); so does the caller.

Synonyms (Kafka's ``brokerConfigSynonyms``): ``log.retention.ms`` / ``log.retention.minutes`` /
``log.retention.hours``, ``log.roll.ms`` / ``log.roll.hours`` and ``log.roll.jitter.ms`` / ``log.roll.jitter.hours``
set one setting in different units, the first that is set winning; ``log.flush.interval.ms`` falls back to
``log.flush.scheduler.interval.ms``; a ``listener.name.<listener>.<config>`` to ``<config>``. As in Kafka, only the
first name of each is dynamic (the hours and minutes are static: ``Cannot update these configs dynamically``), and
a level that sets one name of a setting hides the others at the levels below it (:func:`in_force`);
:func:`synonyms_of` orders them for DescribeConfigs, :data:`STATIC_SYNONYMS` holds the static ones' defaults.

What walgate acts on: the log configs (:data:`BROKER_SYNONYMS`) default the topic configs they are synonyms of
(:mod:`.resource_configs`), and so act as those topic configs do (:mod:`.topic_configs`); the replication throttles'
rates bound a cluster node's replication traffic (:mod:`walgate.gateway.replication_traffic`, KIP-73). Every other
dynamic config is stored and described but changes nothing: walgate's threads, listeners, TLS and SASL are set when it starts —
except ``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map``, which are refused
(:data:`_FIXED`) because storing them would describe listeners walgate does not have.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Final

from walgate.storage.errors import InvalidValue
from walgate.storage.topic_configs import TOPIC_CONFIGS, ConfigSpec, check_value

__all__ = ["BROKER_SYNONYMS", "DYNAMIC", "KAFKA_DEFAULTS", "STATIC_SYNONYMS", "TOPIC_SYNONYMS", "default_of",
           "describe_type",
           "in_force", "is_dynamic", "spec_of", "synonyms_of", "validate"]

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
    "min.insync.replicas": "min.insync.replicas", "unclean.leader.election.enable": "unclean.leader.election.enable",
}
"""Topic config -> the broker config of the highest priority that sets its default (Kafka 4's
``ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS``; Kafka's ``DynamicLogConfig`` makes every one dynamic)."""

BROKER_SYNONYMS: Final[dict[str, str]] = {b: t for t, b in _KAFKA_SYNONYMS.items() if t in TOPIC_CONFIGS}
"""Broker config -> topic config: the dynamic log configs, each the default of its topic config."""

TOPIC_SYNONYMS: Final[dict[str, str]] = {t: b for b, t in BROKER_SYNONYMS.items()}
"""Topic config -> the broker config (the first of its synonyms) DescribeConfigs lists under it."""

_UNIT_SYNONYMS: Final = (("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                         ("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"))
"""Kafka's names of one setting in several units, the one of the highest priority first."""


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

_NULL_DEFAULTS: Final = frozenset({"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"})
"""The log configs whose default Kafka leaves null, falling back to a synonym (:data:`STATIC_SYNONYMS`)."""

_LOG: Final = {b: dataclasses.replace(TOPIC_CONFIGS[t], default=None) if b in _NULL_DEFAULTS else TOPIC_CONFIGS[t]
               for b, t in BROKER_SYNONYMS.items()}

STATIC_SYNONYMS: Final[dict[str, ConfigSpec]] = {
    "log.retention.minutes": _s("INT", None), "log.retention.hours": _s("INT", "168"),
    "log.roll.hours": _s("INT", "168", 1), "log.roll.jitter.hours": _s("INT", "0", 0),
    "log.flush.scheduler.interval.ms": _s("LONG", _LONG_MAX)}
"""The static synonyms of dynamic log configs, with Kafka's defaults: described (read-only), never set at run time
(walgate's own settings of retention and flushing are per database and topic, or these configs' dynamic names)."""

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


_STATIC_TYPES: Final = {
    **dict.fromkeys(("connections.max.reauth.ms", "connections.max.idle.ms", "queued.max.request.bytes",
                     "offsets.retention.check.interval.ms"), "LONG"),
    **dict.fromkeys(("node.id", "broker.id", "num.partitions", "socket.request.max.bytes",
                     "socket.listen.backlog.size", "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms",
                     "group.max.session.timeout.ms", "group.consumer.session.timeout.ms",
                     "group.consumer.heartbeat.interval.ms", "transaction.max.timeout.ms",
                     "transactional.id.expiration.ms", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                     "sasl.oauthbearer.clock.skew.seconds", "offsets.topic.num.partitions"), "INT"),
    **dict.fromkeys(("auto.create.topics.enable", "log.cleaner.enable", "allow.everyone.if.no.acl.found"), "BOOLEAN"),
    **dict.fromkeys(("controller.listener.names", "sasl.oauthbearer.expected.audience"), "LIST"),
    "default.replication.factor": "SHORT", "authorizer.class.name": "STRING",
}
"""Kafka's types of the static broker configs walgate is started with that are not dynamic (the rest are STRING)."""


def describe_type(name: str) -> tuple[str, bool]:
    """(Kafka's type, whether the value is sensitive) of a broker config DescribeConfigs answers, static or dynamic:
    a PASSWORD (``ssl.key.password``, ``ssl.keystore.key``, with or without a listener prefix) is sensitive."""
    spec = spec_of(name) or _SSL_STORES.get(name) or STATIC_SYNONYMS.get(name)
    if spec is not None:
        return spec.type, spec.type == "PASSWORD"
    return _STATIC_TYPES.get(name, "STRING"), False


def is_dynamic(name: str) -> bool:
    """Kafka's ``AllDynamicConfigs``: the names DescribeConfigs answers as not read-only."""
    return name in DYNAMIC or name in _SSL_STORES


def default_of(name: str) -> str | None:
    """Kafka's default of a dynamic broker config (None: null)."""
    spec = spec_of(name)
    return None if spec is None else spec.default


KAFKA_DEFAULTS: Final[dict[str, str | None]] = {k: s.default for k, s in {**DYNAMIC, **STATIC_SYNONYMS}.items()}
"""Kafka's default (None: null) of every broker config DescribeConfigs answers beyond walgate's own settings."""


def synonyms_of(name: str, listener_override: bool = True) -> tuple[str, ...]:
    """Kafka's ``brokerConfigSynonyms``: the names that set the same setting as ``name``, in priority order (a
    ``listener.name.`` name and its base config only when ``listener_override``)."""
    for names in _UNIT_SYNONYMS:
        if name in names:
            return names
    if name == "log.flush.interval.ms":
        return name, "log.flush.scheduler.interval.ms"
    base = _listener_base(name) if listener_override else None
    if base is None:
        return (name,)
    return name, next((k for k in _MECHANISM_CONFIGS if base.endswith(k)), base)


def in_force(static: Mapping[str, str], cluster: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The broker configs set on this node (Kafka's ``overrideProps``): the static ones under the cluster-wide
    dynamic ones under the node's own; a name set at a level hides its unit synonyms from the levels below it."""
    values = dict(static)
    for level in (cluster, own):
        for key, value in level.items():
            for synonym in synonyms_of(key, listener_override=False):
                values.pop(synonym, None)
            values[key] = value
    return values


def _per_broker(name: str) -> bool:
    base = _listener_base(name)
    return name in _PER_BROKER if base is None else base not in _CLUSTER_LEVEL_LISTENER


def _kafka_set(names: list[str]) -> str:
    return f"Set({', '.join(sorted(names))})"


def validate(configs: Mapping[str, str], per_broker: bool, static: Mapping[str, str], cluster: Mapping[str, str],
             own: Mapping[str, str]) -> None:
    """Refuse (:class:`InvalidValue`) the new whole set ``configs`` of a broker resource — this node's own
    (``per_broker``) or the cluster default — as Kafka's ``DynamicBrokerConfig.validate`` does (see the module).
    ``static``, ``cluster`` and ``own`` are this node's static settings and its two dynamic levels now: the
    requirements and the reconfiguration checks look at what the change would put in force against what is."""
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
    old, new = in_force(static, cluster, own), (in_force(static, cluster, configs) if per_broker else
                                                in_force(static, configs, own))
    _check_requirements(old, new)
    try:
        _check_reconfiguration(old, new)
    except InvalidValue as exc:  # as Kafka's processReconfiguration wraps a Reconfigurable's ConfigException
        raise InvalidValue(f"Invalid value org.apache.kafka.common.config.ConfigException: {exc} for configuration "
                           "Invalid dynamic configuration") from exc


def _value(values: Mapping[str, str], key: str) -> str | None:
    """The value of ``key`` among ``values`` (the configs set), else Kafka's default."""
    return values.get(key, KAFKA_DEFAULTS.get(key))


def _int(values: Mapping[str, str], key: str) -> int:
    return int(_value(values, key) or 0)


def _retention_ms(values: Mapping[str, str]) -> int:
    """Kafka's ``logRetentionTimeMillis``: the first of its unit synonyms set, in ms (any negative: -1)."""
    ms = next((int(v) * unit for k, unit in (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                                              ("log.retention.hours", 3_600_000)) if (v := _value(values, k))), 0)
    return -1 if ms < 0 else ms


def _check_requirements(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """What Kafka's ``KafkaConfig`` requires of the configs in force (an ``IllegalArgumentException``'s words), each
    checked when the change alters a config it reads: walgate's own static settings need not meet them (a
    ``log.cleaner.dedupe.buffer.size`` under 1 MiB is a valid walgate setting), and a change elsewhere is not
    refused for them."""
    def changed(*keys: str) -> bool:
        return any(_value(new, k) != _value(old, k) for k in keys)

    if changed(*_UNIT_SYNONYMS[0]) and _retention_ms(new) == 0:
        raise InvalidValue("requirement failed: log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
    if changed("log.cleaner.threads", "log.cleaner.dedupe.buffer.size"):
        threads = _int(new, "log.cleaner.threads")
        if threads == 0:
            raise InvalidValue("/ by zero")
        if _int(new, "log.cleaner.dedupe.buffer.size") // threads <= 1024 * 1024:
            raise InvalidValue("requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner "
                               "thread.")
    if changed("max.connections.per.ip", "max.connections.per.ip.overrides") and _int(
            new, "max.connections.per.ip") == 0 and not _value(new, "max.connections.per.ip.overrides"):
        raise InvalidValue("requirement failed: max.connections.per.ip can be set to zero only if "
                           "max.connections.per.ip.overrides property is set.")


_LOG_CLEANER: Final = ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
                       "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms")
"""Kafka's ``LogCleaner.ReconfigurableConfigs``: a change of any one checks the cleaner's thread count."""


def _listeners(values: Mapping[str, str]) -> list[str]:
    """The listener names of ``listeners`` (``NAME://host:port,...``), as their config prefixes spell them."""
    return [x.split("://", 1)[0].strip().lower() for x in (values.get("listeners") or "").split(",") if "://" in x]


def _of_listener(values: Mapping[str, str], listener: str, key: str) -> int:
    """A listener's value of an INT config: its ``listener.name.<listener>.`` one, else the plain one."""
    return int(values.get(f"listener.name.{listener}.{key}") or _value(values, key) or 0)


def _check_reconfiguration(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """Kafka's Reconfigurables' checks of what changes (``old`` -> ``new``: the configs in force)."""
    for listener in _listeners(new):
        threads, before = (_of_listener(v, listener, "num.network.threads") for v in (new, old))
        if threads != before:
            _check_threads("num.network.threads", threads, before)
        quotas = ("max.connections", "max.connection.creation.rate")
        if any(_of_listener(new, listener, k) != _of_listener(old, listener, k) for k in quotas):
            for key in quotas:
                if (value := _of_listener(new, listener, key)) <= 0:
                    raise InvalidValue(f"Invalid {key} {value}")
    for key in _THREADS:
        if (threads := _int(new, key)) != (before := _int(old, key)):
            _check_threads(key, threads, before)
    if any(_value(new, k) != _value(old, k) for k in _LOG_CLEANER):
        threads, before = _int(new, "log.cleaner.threads"), _int(old, "log.cleaner.threads")
        what = "Log cleaner threads"  # at least 1: _check_requirements refused 0
        if threads < before // 2:
            raise InvalidValue(f"{what} cannot be reduced to less than half the current value {before}")
        if threads > before * 2:
            raise InvalidValue(f"{what} cannot be increased to more than double the current value {before}")


def _check_threads(key: str, new: int, old: int) -> None:
    """Kafka's ``DynamicThreadPool`` / ``DataPlaneAcceptor`` rule for a thread count that changes."""
    what = f"Dynamic thread count update validation failed for {key}={new}"
    if new <= 0:
        raise InvalidValue(f"{what}, value should be at least 1")
    if new < old // 2:
        raise InvalidValue(f"{what}, value should be at least half the current value {old}")
    if new > old * 2:
        raise InvalidValue(f"{what}, value should not be greater than double the current value {old}")
