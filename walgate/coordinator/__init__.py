"""Consumer groups: membership, generations and epochs, rebalance, sessions, committed offsets; transactions.

Pure, synchronous state machines on an injected clock: no sockets, no asyncio, no threads, no clock reads —
``now_ms`` is an argument of every call and timers fire only in ``tick(now_ms)``, which
:meth:`GroupCoordinator.next_deadline` says when to call. The gateway (``walgate.gateway.kafka.groups``) wires them
to the network and runs them on the storage thread.

* :mod:`~walgate.coordinator.coordinator` — :class:`GroupCoordinator`: one namespace of group ids over both
  protocols (conversion, upgrade, cleanup); what the gateway calls.
* Classic protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup): :mod:`~walgate.coordinator.classic`
  (:class:`ClassicGroups`), :mod:`~walgate.coordinator.classic_model` (one group: states, transition table,
  members), :mod:`~walgate.coordinator.classic_rebalance` (timers, join phase, generations),
  :mod:`~walgate.coordinator.classic_admin` (describe, list, delete, upgrade hand-over).
* KIP-848 protocol (ConsumerGroupHeartbeat): :mod:`~walgate.coordinator.consumer_group` (:class:`ConsumerGroups`),
  :mod:`~walgate.coordinator.consumer_model`, :mod:`~walgate.coordinator.uniform_assignor`,
  :mod:`~walgate.coordinator.reconciliation`, :mod:`~walgate.coordinator.consumer_membership`,
  :mod:`~walgate.coordinator.consumer_classic_members`, :mod:`~walgate.coordinator.consumer_admin`.
* Committed offsets: :mod:`~walgate.coordinator.offsets` (OffsetCommit / OffsetFetch / OffsetDelete /
  DeleteGroups plans and the :class:`OffsetStore` interface), :mod:`~walgate.coordinator.store` (the store over
  the storage engine).
* Transactions (KIP-98, KIP-447): :mod:`~walgate.coordinator.transactions` (:class:`TransactionCoordinator`: one
  state machine per transactional id; the gateway's ``walgate.gateway.kafka.transactions`` makes its decisions
  durable and writes the markers).
* Shared: :mod:`~walgate.coordinator.consumer_protocol` (the consumer protocol's embedded bytes),
  :mod:`~walgate.coordinator.timer` (:class:`KeyedTimer`), :mod:`~walgate.coordinator.errors`,
  :mod:`~walgate.coordinator.snapshots` (:class:`ConsumerInfo`, :class:`GroupStats`),
  :mod:`~walgate.coordinator.group_log` (the ``walgate.groups`` log lines).
"""

from __future__ import annotations

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.classic_model import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    ClassicGroupMember,
    Completion,
    GroupState,
    RequestId,
)
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.consumer_model import ConsumerGroupState, MemberState
from walgate.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    assigned_partitions,
    subscribed_topics,
)
from walgate.coordinator.coordinator import CLEANUP_INTERVAL_MS, GroupCoordinator
from walgate.coordinator.errors import (
    ERROR_CODES,
    ConsumerProtocolError,
    FencedInstanceId,
    GroupError,
    GroupIdNotFound,
    GroupNotRecorded,
    IllegalGeneration,
    NonEmptyGroup,
    NotCoordinatorNow,
    RebalanceInProgress,
    UnknownMemberId,
)
from walgate.coordinator.offsets import (
    OFFSET_METADATA_MAX_SIZE,
    CommittedOffset,
    GroupDeletePlan,
    OffsetCommitPlan,
    OffsetCommitRecord,
    OffsetDeletePlan,
    OffsetStore,
    PartitionCommit,
    commit_offsets,
    delete_groups,
    delete_offsets,
    fetch_offsets,
    validate_offset_commit,
)
from walgate.coordinator.snapshots import (
    CLASSIC_GROUP_TYPE,
    CONSUMER_GROUP_TYPE,
    ConsumerInfo,
    GroupStats,
)
from walgate.coordinator.timer import KeyedTimer

__all__ = [
    "CLASSIC_GROUP_TYPE",
    "CLEANUP_INTERVAL_MS",
    "CONSUMER_GROUP_TYPE",
    "ERROR_CODES",
    "OFFSET_METADATA_MAX_SIZE",
    "PROTOCOL_TYPE",
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "ClassicGroupMember",
    "ClassicGroups",
    "CommittedOffset",
    "Completion",
    "ConsumerGroupState",
    "ConsumerGroups",
    "ConsumerInfo",
    "ConsumerProtocolError",
    "FencedInstanceId",
    "GroupCoordinator",
    "GroupDeletePlan",
    "GroupError",
    "GroupIdNotFound",
    "GroupNotRecorded",
    "NotCoordinatorNow",
    "GroupState",
    "GroupStats",
    "IllegalGeneration",
    "KeyedTimer",
    "MemberState",
    "NonEmptyGroup",
    "OffsetCommitPlan",
    "OffsetCommitRecord",
    "OffsetDeletePlan",
    "OffsetStore",
    "PartitionCommit",
    "RebalanceInProgress",
    "RequestId",
    "UnknownMemberId",
    "assigned_partitions",
    "commit_offsets",
    "delete_groups",
    "delete_offsets",
    "fetch_offsets",
    "subscribed_topics",
    "validate_offset_commit",
]
