"""Server configuration: one dataclass, three sources.

Precedence, lowest to highest (a later source overrides an earlier one, field by field):

1. the defaults below;
2. the TOML file given with ``--config FILE`` (top-level keys named like the fields,
   e.g. ``http_port = 6041``; unknown keys are an error);
3. ``WALGATE_<FIELD>`` environment variables (e.g. ``WALGATE_HTTP_PORT=6041``);
4. command-line flags (only those actually given).

``queued_max_request_bytes`` (Kafka's ``queued.max.request.bytes``, unbounded in Kafka) defaults to
:data:`QUEUED_MAX_REQUEST_BYTES` or ``max_request_bytes`` if larger, and may not be set below
``max_request_bytes`` (a request of the largest accepted size must fit).

``advertised_host`` / ``advertised_port`` default to ``host`` / ``kafka_port``: they
are what the Kafka Metadata response will name, so a node behind NAT or in a
container can announce a reachable address. Port 0 means "any free port" (the
``ready`` log line reports the port actually bound).
"""

from __future__ import annotations

import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from walgate.gateway.logs import LOG_FORMATS

__all__ = ["Config", "ConfigError", "load_config", "ENV_PREFIX", "QUEUED_MAX_REQUEST_BYTES"]

ENV_PREFIX = "WALGATE_"
QUEUED_MAX_REQUEST_BYTES = 100 << 20
"""Default bound on the bytes of Kafka requests being read or handled, over all connections."""
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or malformed."""


@dataclass(frozen=True)
class Config:
    """Everything ``walgate serve`` needs; validated on construction."""

    data_dir: Path
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    http_port: int = 6041
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    max_request_bytes: int = 16 << 20
    batch_cache_bytes: int = 256 << 20  # rendered Kafka record batches kept for re-reads
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms: idle Kafka connections are closed
    # Kafka's queued.max.request.bytes: request bytes read or being handled, all connections together; a
    # connection whose next request does not fit stops reading until others finish (None: see module doc)
    queued_max_request_bytes: int | None = None
    request_read_timeout_ms: int = 30_000  # a Kafka request begun but not received in full by then: close
    listen_backlog: int = 4096  # Kafka's socket.listen.backlog.size; the kernel caps it at net.core.somaxconn
    max_partitions: int = 10_000  # partitions (vnodes) of all databases and topics together
    # Consumer groups (Kafka's broker settings; TDengine's 2 s rebalance tick and 6 s - 30 min session range).
    group_initial_rebalance_delay_ms: int = 2_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_session_timeout_ms: int = 45_000  # KIP-848 members
    group_consumer_heartbeat_interval_ms: int = 5_000
    # Kafka's auto.create.topics.enable + num.partitions in one: 0 = off (the default)
    auto_create_topic_partitions: int = 0
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one JSON object per line (walgate.gateway.logs)
    # Authentication (docs/security-authentication.md). kafka_security_protocol: PLAINTEXT or SASL_PLAINTEXT for
    # the one Kafka listener (the listeners setting replaces it); http_auth: basic | none (None: basic when the
    # Kafka listener uses SASL)
    kafka_security_protocol: str = "PLAINTEXT"
    sasl_enabled_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    connections_max_reauth_ms: int = 0  # KIP-368: 0 = sessions never expire
    super_users: tuple[str, ...] = ()  # "User:name" principals allowed everything (";"-separated in Kafka)
    http_auth: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        object.__setattr__(self, "log_level", self.log_level.upper())
        if self.advertised_host is None:
            object.__setattr__(self, "advertised_host", self.host)
        if self.advertised_port is None:
            object.__setattr__(self, "advertised_port", self.kafka_port)
        queued = self.queued_max_request_bytes
        if queued is None:
            queued = max(QUEUED_MAX_REQUEST_BYTES, self.max_request_bytes)
            object.__setattr__(self, "queued_max_request_bytes", queued)
        for name in ("kafka_port", "http_port", "advertised_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ConfigError(f"{name} must be in 0..65535, got {port}")
        if self.node_id < 0:
            raise ConfigError(f"node_id must be >= 0, got {self.node_id}")
        for name in ("max_request_bytes", "batch_cache_bytes", "connections_max_idle_ms", "request_read_timeout_ms",
                     "listen_backlog", "max_partitions"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if queued < self.max_request_bytes:
            raise ConfigError(
                f"queued_max_request_bytes ({queued}) must be >= max_request_bytes "
                f"({self.max_request_bytes})"
            )
        if not 0 <= self.auto_create_topic_partitions <= 1024:
            raise ConfigError(f"auto_create_topic_partitions must be in 0..1024, got {self.auto_create_topic_partitions}")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ConfigError(f"group_initial_rebalance_delay_ms must be >= 0, got {self.group_initial_rebalance_delay_ms}")
        if not 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ConfigError(
                "need 0 < group_min_session_timeout_ms <= group_max_session_timeout_ms, got "
                f"{self.group_min_session_timeout_ms} and {self.group_max_session_timeout_ms}"
            )
        if not 0 < self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms:
            raise ConfigError(
                "need 0 < group_consumer_heartbeat_interval_ms < group_consumer_session_timeout_ms, got "
                f"{self.group_consumer_heartbeat_interval_ms} and {self.group_consumer_session_timeout_ms}"
            )
        if self.log_level not in _LOG_LEVELS:
            raise ConfigError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, got {self.log_level!r}")
        if self.kafka_security_protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
            raise ConfigError(f"kafka_security_protocol must be PLAINTEXT or SASL_PLAINTEXT, got "
                              f"{self.kafka_security_protocol!r}")
        if self.http_auth is None:
            object.__setattr__(self, "http_auth", "basic" if self.kafka_security_protocol.startswith("SASL_") else "none")
        if self.http_auth not in ("basic", "none"):
            raise ConfigError(f"http_auth must be basic or none, got {self.http_auth!r}")
        if self.connections_max_reauth_ms < 0:
            raise ConfigError(f"connections_max_reauth_ms must be >= 0, got {self.connections_max_reauth_ms}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")


def _field_types() -> dict[str, type]:
    """Field name -> the type a raw value is converted to (``X | None`` -> ``X``; ``tuple[str, ...]`` -> tuple)."""
    types = {}
    for name, hint in typing.get_type_hints(Config).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        types[name] = tuple if typing.get_origin(hint) is tuple else args[0] if args else hint
    return types


_FIELD_TYPES = _field_types()


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _FIELD_TYPES[name]
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}") from None
    if kind is tuple:  # a list (TOML) or a ","-separated string (";" for super_users, as in Kafka)
        items = value.split(";" if name == "super_users" else ",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{source}: {name} must be a list of strings, got {value!r}")
        return tuple(v.strip() for v in items if v.strip())
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{source}: {name} must be a string, got {value!r}")
    return kind(value)


def _from_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            table = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    unknown = sorted(set(table) - set(_FIELD_TYPES))
    if unknown:
        raise ConfigError(f"config file {path}: unknown key(s) {', '.join(unknown)}")
    return {k: _coerce(k, v, str(path)) for k, v in table.items()}


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for name in _FIELD_TYPES:
        var = ENV_PREFIX + name.upper()
        if var in env:
            values[name] = _coerce(name, env[var], var)
    return values


def load_config(
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Merge defaults, ``file``, ``env`` (default ``os.environ``) and ``overrides``
    (CLI flags; ``None`` values are ignored) into a :class:`Config`.

    Raises :class:`ConfigError` for an unreadable file, an unknown key, a bad
    value, or when no source sets ``data_dir``.
    """
    values: dict[str, Any] = {}
    if file is not None:
        values.update(_from_file(file))
    values.update(_from_env(os.environ if env is None else env))
    values.update({k: _coerce(k, v, "command line") for k, v in (overrides or {}).items() if v is not None})
    if "data_dir" not in values:
        raise ConfigError(f"data_dir is required (--data-dir, {ENV_PREFIX}DATA_DIR or data_dir in the config file)")
    return Config(**values)
