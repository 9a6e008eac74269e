"""A consumer group's own configs (KIP-848 ``GroupConfig``): the session timeout and heartbeat interval its members
get, when set for the group, instead of the broker's ``group.consumer.*`` settings.

Keys: ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` (integers). Kafka bounds them by
``group.consumer.min/max.session.timeout.ms`` (45000..60000 by default) and
``group.consumer.min/max.heartbeat.interval.ms`` (5000..15000); walgate has no such settings, so its bounds are
Kafka's defaults widened to take in the broker's own ``group.consumer.*`` value (a broker run with a short session
timeout accepts it for a group too). The ``share.*`` keys are Kafka's share groups, which walgate does not have:
refused as unknown, like any other name.

:class:`GroupTimeouts` is what the consumer-group coordinator asks; the gateway gives it the stored configs
(:mod:`walgate.storage.resource_configs`), so a change applies to each member's next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["SESSION_TIMEOUT", "HEARTBEAT_INTERVAL", "GroupTimeouts"]

SESSION_TIMEOUT: Final = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL: Final = "consumer.heartbeat.interval.ms"
_KAFKA_BOUNDS: Final = {SESSION_TIMEOUT: (45_000, 60_000), HEARTBEAT_INTERVAL: (5_000, 15_000)}


@dataclass(frozen=True)
class GroupTimeouts:
    """The broker's defaults and the lookup of a group's stored configs (empty when it has none)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    stored: Callable[[str], Mapping[str, str]] = lambda group_id: {}

    def defaults(self) -> dict[str, str]:
        """Every group config key with the value a group that does not set it gets."""
        return {SESSION_TIMEOUT: str(self.session_timeout_ms), HEARTBEAT_INTERVAL: str(self.heartbeat_interval_ms)}

    def of(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) in ms of ``group_id``'s members."""
        configs = {**self.defaults(), **self.stored(group_id)}
        return int(configs[SESSION_TIMEOUT]), int(configs[HEARTBEAT_INTERVAL])

    def validate(self, configs: Mapping[str, str]) -> None:
        """Refuse (``ValueError``, Kafka's INVALID_CONFIG) an unknown key or a value out of its bounds."""
        for key, value in configs.items():
            if key not in _KAFKA_BOUNDS:
                raise ValueError(f"Unknown group config name: {key}")
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"Invalid value {value!r} for configuration {key}: expected an integer") from None
            low, high = _KAFKA_BOUNDS[key]
            own = int(self.defaults()[key])
            low, high = min(low, own), max(high, own)
            if not low <= number <= high:
                raise ValueError(f"Invalid value {value} for configuration {key}: must be in {low}..{high}")
