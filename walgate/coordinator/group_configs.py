"""A consumer group's own configs (KIP-848 ``GroupConfig``): the session timeout and heartbeat interval its members
get, when set for the group, instead of the broker's ``group.consumer.*`` settings.

Keys: ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` (integers). Kafka bounds them by
``group.consumer.min/max.session.timeout.ms`` (45000..60000 by default) and
``group.consumer.min/max.heartbeat.interval.ms`` (5000..15000); walgate has no such settings, so its bounds are
Kafka's defaults widened to take in the broker's own ``group.consumer.*`` value (a broker run with a short session
timeout accepts it for a group too).

Share groups (KIP-932) read ``share.auto.offset.reset`` (``latest``, the default, or ``earliest``),
``share.isolation.level`` (``read_uncommitted``, the default, or ``read_committed``),
``share.record.lock.duration.ms`` and ``share.delivery.count.limit``, bounded by the broker's
``group.share.min/max.record.lock.duration.ms`` (15000..60000 by default, as Kafka) and
``group.share.min/max.delivery.count.limit`` (2..10), widened to take in the broker's own ``group.share.*`` value; :meth:`GroupTimeouts.share` is a
group's values. Other ``share.*`` keys are not supported yet: refused as unknown.

:class:`GroupTimeouts` is what the consumer-group coordinator asks; the gateway gives it the stored configs
(:mod:`walgate.storage.resource_configs`), so a change applies to each member's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["SESSION_TIMEOUT", "HEARTBEAT_INTERVAL", "SHARE_AUTO_OFFSET_RESET", "SHARE_DELIVERY_COUNT_LIMIT",
           "SHARE_ISOLATION_LEVEL", "SHARE_RECORD_LOCK_DURATION", "GroupTimeouts"]

SESSION_TIMEOUT: Final = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL: Final = "consumer.heartbeat.interval.ms"
SHARE_AUTO_OFFSET_RESET: Final = "share.auto.offset.reset"
SHARE_RECORD_LOCK_DURATION: Final = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT: Final = "share.delivery.count.limit"
SHARE_ISOLATION_LEVEL: Final = "share.isolation.level"
_KAFKA_BOUNDS: Final = {SESSION_TIMEOUT: (45_000, 60_000), HEARTBEAT_INTERVAL: (5_000, 15_000)}
_RESETS: Final = ("latest", "earliest")
_ISOLATION_LEVELS: Final = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class GroupTimeouts:
    """The broker's defaults and the lookup of a group's stored configs (empty when it has none)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    stored: Callable[[str], Mapping[str, str]] = lambda group_id: {}
    share_lock_ms: int = 30_000  # group.share.record.lock.duration.ms
    share_delivery_limit: int = 5  # group.share.delivery.count.limit
    share_lock_bounds: tuple[int, int] = (15_000, 60_000)  # group.share.min/max.record.lock.duration.ms
    share_delivery_bounds: tuple[int, int] = (2, 10)  # group.share.min/max.delivery.count.limit

    def defaults(self) -> dict[str, str]:
        """Every group config key with the value a group that does not set it gets."""
        return {SESSION_TIMEOUT: str(self.session_timeout_ms), HEARTBEAT_INTERVAL: str(self.heartbeat_interval_ms),
                SHARE_AUTO_OFFSET_RESET: "latest", SHARE_ISOLATION_LEVEL: "read_uncommitted",
                SHARE_RECORD_LOCK_DURATION: str(self.share_lock_ms),
                SHARE_DELIVERY_COUNT_LIMIT: str(self.share_delivery_limit)}

    def of(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) in ms of ``group_id``'s members."""
        configs = {**self.defaults(), **self.stored(group_id)}
        return int(configs[SESSION_TIMEOUT]), int(configs[HEARTBEAT_INTERVAL])

    def share(self, group_id: str) -> tuple[int, int, str, bool]:
        """(record lock duration ms, delivery count limit, auto offset reset, read_committed) of share group
        ``group_id``."""
        stored = self.stored(group_id)
        return (int(stored.get(SHARE_RECORD_LOCK_DURATION, self.share_lock_ms)),
                int(stored.get(SHARE_DELIVERY_COUNT_LIMIT, self.share_delivery_limit)),
                stored.get(SHARE_AUTO_OFFSET_RESET, "latest"),
                stored.get(SHARE_ISOLATION_LEVEL) == "read_committed")

    def validate(self, configs: Mapping[str, str]) -> None:
        """Refuse (``ValueError``, Kafka's INVALID_CONFIG) an unknown key or a value out of its bounds."""
        own_values = self.defaults()
        for key, value in configs.items():
            choices = {SHARE_AUTO_OFFSET_RESET: _RESETS, SHARE_ISOLATION_LEVEL: _ISOLATION_LEVELS}.get(key)
            if choices is not None:
                if value not in choices:
                    raise ValueError(f"Invalid value {value!r} for configuration {key}: must be one of {choices}")
                continue
            bounds = {**_KAFKA_BOUNDS, SHARE_RECORD_LOCK_DURATION: self.share_lock_bounds,
                      SHARE_DELIVERY_COUNT_LIMIT: self.share_delivery_bounds}
            if key not in bounds:
                raise ValueError(f"Unknown group config name: {key}")
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"Invalid value {value!r} for configuration {key}: expected an integer") from None
            low, high = bounds[key]
            own = int(own_values[key])
            low, high = min(low, own), max(high, own)
            if not low <= number <= high:
                raise ValueError(f"Invalid value {value} for configuration {key}: must be in {low}..{high}")
