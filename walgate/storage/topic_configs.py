"""Kafka-native topics' configs, names and the database that holds each (see :mod:`.native_topics`).

A topic created through Kafka's CreateTopics gets a database of its own whose
vgroups are the topic's partitions (:func:`backing_database`).

Kafka configs map onto the database's WAL settings (rounded up to the WAL's
units: seconds and MB); the configs themselves are kept as set, so
DescribeConfigs answers what the client wrote.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from typing import Final

from walgate.storage.errors import InvalidValue
from walgate.storage.names import DB_NAME_MAX

__all__ = [
    "TOPIC_CONFIG_DEFAULTS",
    "backing_database",
    "topic_configs",
    "validate_configs",
    "validate_topic_name",
    "wal_options",
]

TOPIC_CONFIG_DEFAULTS: Final[dict[str, str]] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "67108864",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "flush.messages": "9223372036854775807",
    "flush.ms": "3000",
}
"""Every topic config walgate knows, with its defaults: Kafka's, except ``flush.ms`` (the WAL's periodic fsync).

``flush.messages=1`` makes the topic's WAL fsync every append before the
answer (WAL_LEVEL 2, period 0); otherwise it is fsynced every ``flush.ms``
(at most 180000, WAL_FSYNC_PERIOD).
"""

_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_MB = 1 << 20

def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidValue(
            f"Invalid topic name {name!r}: 1 to 249 characters of ASCII letters, digits, '.', '_' and '-'"
        )


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


def _integer(configs: Mapping[str, str], key: str) -> int:
    try:
        return int(configs.get(key, TOPIC_CONFIG_DEFAULTS[key]))
    except ValueError:
        raise InvalidValue(f"Invalid value {configs[key]!r} for configuration {key}: expected an integer") from None


def validate_configs(configs: Mapping[str, str]) -> None:
    """Refuse unknown keys and values walgate cannot honour, with a message naming them."""
    unknown = sorted(set(configs) - set(TOPIC_CONFIG_DEFAULTS))
    if unknown:
        raise InvalidValue(f"Unknown topic config name: {unknown[0]} (walgate knows {', '.join(TOPIC_CONFIG_DEFAULTS)})")
    if configs.get("cleanup.policy", "delete") != "delete":
        raise InvalidValue("Invalid value for cleanup.policy: walgate supports only 'delete' (no compaction)")
    if configs.get("message.timestamp.type", "CreateTime") not in ("CreateTime", "LogAppendTime"):
        raise InvalidValue("Invalid value for message.timestamp.type: CreateTime or LogAppendTime")
    if _integer(configs, "flush.ms") < 0:
        raise InvalidValue("Invalid value for flush.ms: 0 or more")
    for key in ("retention.ms", "retention.bytes"):
        if _integer(configs, key) < -1:
            raise InvalidValue(f"Invalid value for {key}: -1 (unlimited) or more")
    for key in ("segment.bytes", "max.message.bytes", "flush.messages"):
        if _integer(configs, key) < 1:
            raise InvalidValue(f"Invalid value for {key}: at least 1")


def wal_options(configs: Mapping[str, str]) -> dict[str, int]:
    """WAL settings of the backing database for *configs* (validated): seconds and MB, rounded up."""
    validate_configs(configs)
    retention_ms = _integer(configs, "retention.ms")
    retention_bytes = _integer(configs, "retention.bytes")
    return {
        "WAL_RETENTION_PERIOD": -1 if retention_ms < 0 else -(-retention_ms // 1000),
        "WAL_RETENTION_SIZE": -1 if retention_bytes < 0 else -(-retention_bytes // _MB),
        "WAL_SEGMENT_SIZE": max(1, -(-_integer(configs, "segment.bytes") // _MB)),
        "WAL_LEVEL": 2 if _integer(configs, "flush.messages") == 1 else 1,
        "WAL_FSYNC_PERIOD": 0 if _integer(configs, "flush.messages") == 1 else min(_integer(configs, "flush.ms"), 180_000),
    }
