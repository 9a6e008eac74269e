"""Kafka-native topics' configs, names and the database that holds each (see :mod:`.native_topics`).

A topic created through Kafka's CreateTopics gets a database of its own whose
vgroups are the topic's partitions (:func:`backing_database`).

Configs: walgate knows Kafka 4's whole topic-config key set (:data:`TOPIC_CONFIGS`, from Kafka's ``LogConfig``),
validates every value as Kafka does (its type, its range, its allowed values) and refuses any other name. It acts on
the configs that apply to one node: retention and segments map onto the database's WAL settings (rounded up to the
WAL's units: seconds and MB; ``cleanup.policy`` without ``delete`` keeps every segment), ``flush.*`` onto its fsync
policy, ``max.message.bytes`` and ``message.timestamp.type`` onto Produce, and ``cleanup.policy=compact``,
``delete.retention.ms``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``, ``min.cleanable.dirty.ratio`` and
``segment.ms`` onto the cleaner (:mod:`.cleaner`). The others (replication, tiered storage, indexes, compression
levels, ...) are kept as set and described, changing nothing. The configs themselves are kept as set, so
DescribeConfigs answers what the client wrote (defaults for the rest).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from walgate.storage.errors import InvalidValue
from walgate.storage.names import DB_NAME_MAX

__all__ = [
    "CONFIG_TYPES",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_DEFAULTS",
    "CleanerSettings",
    "ConfigSpec",
    "backing_database",
    "cleaner_settings",
    "check_value",
    "cleanup_policy",
    "topic_configs",
    "validate_configs",
    "validate_topic_name",
    "INTERNAL_TOPICS",
    "wal_options",
]

_LONG_MAX: Final = 2**63 - 1
_INT_MAX: Final = 2**31 - 1


@dataclass(frozen=True)
class _Spec:
    """One Kafka config: its default (None: Kafka's null), type and what values it takes."""

    default: str | None
    type: str  # Kafka's ConfigDef type: LONG, INT, SHORT, DOUBLE, BOOLEAN, STRING, LIST, CLASS, PASSWORD
    low: float | None = None
    high: float | None = None
    allowed: tuple[str, ...] = ()
    check: Callable[[str], str] | None = None  # LIST values: why the value is invalid ("" when valid)


ConfigSpec = _Spec
"""A Kafka config's spec (default, type, range), public for the broker's configs (:mod:`.broker_configs`)."""


def _throttled(value: str) -> str:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    items = [x.strip() for x in value.split(",") if x.strip()]
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", x) for x in items):
        return ""
    return "must be the literal '*' or a list of replicas in the format [PartitionId]:[BrokerId],..."


TOPIC_CONFIGS: Final[dict[str, _Spec]] = {
    "cleanup.policy": _Spec("delete", "LIST", allowed=("compact", "delete")),
    "compression.gzip.level": _Spec("-1", "INT"),
    "compression.lz4.level": _Spec("9", "INT", 1, 17),
    "compression.type": _Spec("producer", "STRING", allowed=("uncompressed", "zstd", "lz4", "snappy", "gzip",
                                                             "producer")),
    "compression.zstd.level": _Spec("3", "INT", -131072, 22),
    "delete.retention.ms": _Spec("86400000", "LONG", 0),
    "file.delete.delay.ms": _Spec("60000", "LONG", 0),
    "flush.messages": _Spec(str(_LONG_MAX), "LONG", 1),
    "flush.ms": _Spec("3000", "LONG", 0),
    "follower.replication.throttled.replicas": _Spec("", "LIST", check=_throttled),
    "index.interval.bytes": _Spec("4096", "INT", 0),
    "leader.replication.throttled.replicas": _Spec("", "LIST", check=_throttled),
    "local.retention.bytes": _Spec("-2", "LONG", -2),
    "local.retention.ms": _Spec("-2", "LONG", -2),
    "max.compaction.lag.ms": _Spec(str(_LONG_MAX), "LONG", 1),
    "max.message.bytes": _Spec("1048588", "INT", 0),
    "message.timestamp.after.max.ms": _Spec("3600000", "LONG", 0),
    "message.timestamp.before.max.ms": _Spec(str(_LONG_MAX), "LONG", 0),
    "message.timestamp.type": _Spec("CreateTime", "STRING", allowed=("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": _Spec("0.5", "DOUBLE", 0, 1),
    "min.compaction.lag.ms": _Spec("0", "LONG", 0),
    "min.insync.replicas": _Spec("1", "INT", 1),
    "preallocate": _Spec("false", "BOOLEAN"),
    "remote.log.copy.disable": _Spec("false", "BOOLEAN"),
    "remote.log.delete.on.disable": _Spec("false", "BOOLEAN"),
    "remote.storage.enable": _Spec("false", "BOOLEAN"),
    "retention.bytes": _Spec("-1", "LONG", -1),
    "retention.ms": _Spec("604800000", "LONG", -1),
    "segment.bytes": _Spec("67108864", "INT", 1),
    "segment.index.bytes": _Spec("10485760", "INT", 4),
    "segment.jitter.ms": _Spec("0", "LONG", 0),
    "segment.ms": _Spec("604800000", "LONG", 1),
    "unclean.leader.election.enable": _Spec("false", "BOOLEAN"),
}
"""Kafka 4's topic configs (``LogConfig``), with their defaults, types and ranges. The defaults are Kafka's except
``flush.ms`` (the WAL's periodic fsync, 3 s) and ``segment.bytes`` (the WAL's 64 MiB segments). Values are
validated as Kafka does, except that walgate refuses nothing Kafka accepts and ``retention.bytes`` below -1 (Kafka
treats any negative value as unlimited) is refused; ``segment.bytes`` is honoured in whole MB.
``flush.messages=1`` makes the topic's WAL fsync every append before the answer (WAL_LEVEL 2, period 0); otherwise
it is fsynced every ``flush.ms`` (at most 180000, WAL_FSYNC_PERIOD)."""

TOPIC_CONFIG_DEFAULTS: Final[dict[str, str]] = {k: s.default or "" for k, s in TOPIC_CONFIGS.items()}
"""Every topic config walgate knows, with its default."""

CONFIG_TYPES: Final[dict[str, str]] = {k: s.type for k, s in TOPIC_CONFIGS.items()}
"""Every topic config's Kafka type (DescribeConfigs answers it)."""

_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_MB = 1 << 20


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidValue(
            f"Invalid topic name {name!r}: 1 to 249 characters of ASCII letters, digits, '.', '_' and '-'"
        )


INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka's internal topics (``Topic.isInternal``): walgate keeps their content in its own logs (the group
coordinators' and the transaction coordinator's), and a cluster node reads a marker for a ``__consumer_offsets``
partition as one for its group coordinator. A user topic may not take either name (CreateTopics answers
INVALID_REQUEST, auto-creation skips it); a data dir that already holds one still opens (the catalog's names are
checked by :func:`validate_topic_name` only)."""


def backing_database(topic: str, taken: Mapping[str, object]) -> str:
    """The name of the database holding *topic*: ``kafka_<topic>`` with ``.``/``-`` as ``_``, made unique (a CRC
    of the topic name appended) and cut to a valid database name (at most 64 characters)."""
    base = "kafka_" + re.sub(r"[.-]", "_", topic)
    if base not in taken and base == "kafka_" + topic and len(base) <= DB_NAME_MAX:
        return base
    return f"{base[: DB_NAME_MAX - 9]}_{zlib.crc32(topic.encode()):08x}"


def topic_configs(kind: str, configs: Mapping[str, str], db_options: Mapping[str, int | str]) -> dict[str, tuple[str, bool]]:
    """Every config of a topic: name -> (value, set explicitly).

    Kafka-native topics answer their configs as set (defaults for the rest);
    TDengine topics answer what their database's WAL settings amount to.
    """
    if kind == "kafka":
        return {k: (configs.get(k, v), k in configs) for k, v in TOPIC_CONFIG_DEFAULTS.items()}
    period, size = int(db_options["WAL_RETENTION_PERIOD"]), int(db_options["WAL_RETENTION_SIZE"])
    derived = {
        "retention.ms": str(-1 if period < 0 else period * 1000),
        "retention.bytes": str(-1 if size < 0 else size * _MB),
        "segment.bytes": str(max(1, int(db_options["WAL_SEGMENT_SIZE"])) * _MB),
    }
    return {k: (derived.get(k, v), k in derived) for k, v in TOPIC_CONFIG_DEFAULTS.items()}


def _invalid(key: str, value: str, why: str) -> InvalidValue:
    return InvalidValue(f"Invalid value {value} for configuration {key}: {why}")


def _number(key: str, value: str, spec: _Spec) -> float:
    text = value.strip()
    try:
        number: float = float(text) if spec.type == "DOUBLE" else int(text)
    except ValueError:
        raise _invalid(key, value, f"Not a number of type {spec.type}") from None
    if spec.type == "DOUBLE" and not math.isfinite(number):
        raise _invalid(key, value, "Not a number of type DOUBLE")
    limit = {"INT": _INT_MAX, "SHORT": 2**15 - 1}.get(spec.type, _LONG_MAX)
    if spec.type != "DOUBLE" and not -limit - 1 <= number <= limit:
        raise _invalid(key, value, f"Not a number of type {spec.type}")
    if spec.low is not None and number < spec.low:
        bound = f"be between {spec.low:g} and {spec.high:g}" if spec.high is not None else f"be at least {spec.low:g}"
        raise _invalid(key, value, f"Value must {bound}")
    if spec.high is not None and number > spec.high:
        raise _invalid(key, value, f"Value must be between {spec.low:g} and {spec.high:g}")
    return number


def check_value(key: str, value: str, spec: ConfigSpec) -> None:
    """Refuse (InvalidValue, Kafka's message) a value ``spec`` does not take; CLASS and PASSWORD take any."""
    if spec.type in ("LONG", "INT", "SHORT", "DOUBLE"):
        _number(key, value, spec)
        if key == "compression.gzip.level" and int(value) != -1 and not 1 <= int(value) <= 9:
            raise _invalid(key, value, "Value must be between 1 and 9, or -1")
    elif spec.type == "BOOLEAN":
        if value.strip().lower() not in ("true", "false"):
            raise _invalid(key, value, "Expected value to be either true or false")
    elif spec.type == "STRING":
        if spec.allowed and value not in spec.allowed:
            raise _invalid(key, value, f"String must be one of: {', '.join(spec.allowed)}")
    elif spec.allowed:  # cleanup.policy
        items = [x.strip() for x in value.split(",")]
        bad = [x for x in items if x not in spec.allowed]
        if bad:  # (an empty value is an empty item)
            raise _invalid(key, bad[0], f"String must be one of: {', '.join(spec.allowed)}")
    elif spec.check is not None and value.strip():
        why = spec.check(value)
        if why:
            raise _invalid(key, value, why)


def validate_configs(configs: Mapping[str, str]) -> None:
    """Refuse unknown keys and invalid values as Kafka does, with a message naming them (InvalidValue)."""
    unknown = sorted(set(configs) - set(TOPIC_CONFIGS))
    if unknown:
        raise InvalidValue(f"Unknown topic config name: {unknown[0]}")
    for key, value in configs.items():
        check_value(key, value, TOPIC_CONFIGS[key])


def cleanup_policy(configs: Mapping[str, str]) -> frozenset[str]:
    """The policies of a (validated) ``cleanup.policy``: ``delete``, ``compact`` or both, in any order."""
    return frozenset(x.strip() for x in configs.get("cleanup.policy", "delete").split(",") if x.strip())


def _integer(configs: Mapping[str, str], key: str) -> int:
    return int(configs.get(key, TOPIC_CONFIG_DEFAULTS[key]).strip())


@dataclass(frozen=True)
class CleanerSettings:
    """What the cleaner needs of a compacted topic's configs (ms; the ratio in [0, 1])."""

    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5


def cleaner_settings(configs: Mapping[str, str]) -> CleanerSettings | None:
    """The cleaner's settings of a topic with (validated) *configs*; None when its policy does not compact."""
    if "compact" not in cleanup_policy(configs):
        return None
    return CleanerSettings(_integer(configs, "delete.retention.ms"), _integer(configs, "min.compaction.lag.ms"),
                           _integer(configs, "max.compaction.lag.ms"),
                           float(configs.get("min.cleanable.dirty.ratio", TOPIC_CONFIG_DEFAULTS[
                               "min.cleanable.dirty.ratio"])))


def wal_options(configs: Mapping[str, str]) -> dict[str, int]:
    """WAL settings of the backing database for *configs* (validated): seconds and MB, rounded up.

    Without ``delete`` in ``cleanup.policy`` nothing is deleted by time or size (as Kafka: a compacted topic keeps
    the newest record of every key). ``segment.ms`` becomes WAL_SEGMENT_MS, the age at which an append rolls the
    active segment (-1: never, the default of a topic that does not set it and does not compact; for a compacted
    topic at most ``max.compaction.lag.ms``, as Kafka rolls them, so the cleaner gets to every record)."""
    validate_configs(configs)
    delete = "delete" in cleanup_policy(configs)
    retention_ms = _integer(configs, "retention.ms") if delete else -1
    retention_bytes = _integer(configs, "retention.bytes") if delete else -1
    segment_ms = _integer(configs, "segment.ms") if "segment.ms" in configs else -1
    if "compact" in cleanup_policy(configs):
        segment_ms = min(_integer(configs, "segment.ms"), _integer(configs, "max.compaction.lag.ms"))
    return {
        "WAL_RETENTION_PERIOD": -1 if retention_ms < 0 else -(-retention_ms // 1000),
        "WAL_RETENTION_SIZE": -1 if retention_bytes < 0 else -(-retention_bytes // _MB),
        "WAL_SEGMENT_SIZE": max(1, -(-_integer(configs, "segment.bytes") // _MB)),
        "WAL_LEVEL": 2 if _integer(configs, "flush.messages") == 1 else 1,
        "WAL_FSYNC_PERIOD": 0 if _integer(configs, "flush.messages") == 1 else min(_integer(configs, "flush.ms"), 180_000),
        "WAL_SEGMENT_MS": segment_ms,
    }
