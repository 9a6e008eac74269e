"""Read-only snapshots of group state: members for ``SHOW CONSUMERS``, per-group figures for metrics.

Both are frozen values built on request from the groups in memory; changing or keeping one changes nothing in the
coordinator. :data:`CLASSIC_GROUP_TYPE` / :data:`CONSUMER_GROUP_TYPE` are Kafka's names of the two group types
(ListGroups' ``group_type``), used by both protocols' modules and by :class:`GroupStats`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["CLASSIC_GROUP_TYPE", "CONSUMER_GROUP_TYPE", "ConsumerInfo", "GroupStats"]

CLASSIC_GROUP_TYPE: Final = "classic"
"""Kafka's ``Group.GroupType.CLASSIC``: JoinGroup / SyncGroup groups."""

CONSUMER_GROUP_TYPE: Final = "consumer"
"""Kafka's ``Group.GroupType.CONSUMER``: KIP-848 (ConsumerGroupHeartbeat) groups."""


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One member as ``SHOW CONSUMERS`` lists it."""

    group_id: str
    group_state: str
    """Kafka's state name of the group (``Stable``, ``PreparingRebalance``, ...)."""
    generation_id: int
    """The classic group's generation, or the consumer group's group epoch."""
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    state: str
    """TDengine's consumer state: ``ready`` once the member holds this generation's assignment, else ``rebalancing``."""
    assignment: Mapping[str, tuple[int, ...]] | None
    """Topic -> partitions; None for classic groups of another protocol type than ``consumer`` or unparsable bytes."""
    last_heartbeat_ms: int
    session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One group as metrics report it."""

    group: str
    protocol: str
    """:data:`CONSUMER_GROUP_TYPE` for KIP-848 groups, :data:`CLASSIC_GROUP_TYPE` otherwise."""
    state: str
    """Kafka's state name: ``Empty``, ``PreparingRebalance``, ``CompletingRebalance``, ``Stable`` (classic);
    ``Empty``, ``Assigning``, ``Reconciling``, ``Stable`` (consumer)."""
    members: int
    rebalances: int
    """Completed rebalances of the group (kept across restarts with the group's record; the cleanup of an empty
    group starts again from 0): a classic group's generation, a consumer group's group epoch (which continues the
    generation of an upgraded classic group)."""
