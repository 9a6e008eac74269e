"""Leader elections an operator asks for, and the controller's preferred-leader rebalance (pure).

* :func:`elect_leader`: one partition's answer to ElectLeaders (api 43; KIP-460's election types), as Kafka's
  controller gives it (``ReplicationControlManager.electLeader``): PREFERRED moves leadership to the first replica
  when it is in the ISR (ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE when it is not in
  sync or not registered under its ISR entry's broker epoch); UNCLEAN elects only a partition with no leader: an ISR
  member, else an eligible leader replica (KIP-966), else any registered replica, its ISR restarting from it
  (ELECTION_NOT_NEEDED while it has a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is registered).
* :func:`imbalanced`: the partitions Kafka's controller moves back to their preferred leader when
  ``auto.leader.rebalance.enable`` is on (``KafkaController.checkAndTriggerAutoLeaderRebalance``): per preferred
  broker, when more than ``leader.imbalance.per.broker.percentage`` of the partitions it is the preferred replica of
  are led by another, each of those whose preferred replica is in its ISR.

Each is judged on the state the controller's reconciliation leaves (:func:`~walgate.replication.partition.reconcile`:
brokers not registered, or registered under another broker epoch, fenced out of the ISR first), so an election never
names a replica that is not live under the broker epoch it was admitted with (KIP-903). Every election bumps the
leader epoch and the partition epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import IntEnum
from typing import TypeVar

from walgate.replication.partition import NO_LEADER, PartitionState, elect, reconcile
from walgate.wire.errors import ErrorCode

__all__ = ["ElectionType", "elect_leader", "imbalanced"]

K = TypeVar("K")


class ElectionType(IntEnum):
    """ElectLeaders' ``election_type`` (KIP-460): v0 requests are PREFERRED."""

    PREFERRED = 0
    UNCLEAN = 1


def elect_leader(state: PartitionState, election: ElectionType, live: Mapping[int, int]) -> PartitionState | ErrorCode:
    """The state to write for an ``election`` of this partition given the registered brokers ``live`` (node id ->
    broker epoch), or why there is none (see the module docstring). The state returned also carries what the
    controller's reconciliation would change (a fenced ISR), so it is what the controller writes."""
    current = reconcile(state, live) or state
    if election == ElectionType.PREFERRED:
        preferred = current.replicas[0]
        if current.leader == preferred:
            return ErrorCode.election_not_needed
        if preferred not in current.isr_ids:
            return ErrorCode.preferred_leader_not_available
        return replace(current, leader=preferred, leader_epoch=current.leader_epoch + 1,
                       partition_epoch=current.partition_epoch + 1)
    if current.leader != NO_LEADER:
        return ErrorCode.election_not_needed
    elected = elect(replace(current, unclean_election=True), live)
    if elected.leader == NO_LEADER:
        return ErrorCode.eligible_leaders_not_available
    return replace(elected, unclean_election=current.unclean_election)


def imbalanced(states: Mapping[K, PartitionState], percentage: int) -> list[K]:
    """The partitions of ``states`` (each as the controller's reconciliation left it) whose leadership goes back
    to their preferred replica: per preferred replica, when the share of its partitions another replica leads is
    above ``percentage`` %, those of them whose preferred replica is in the ISR; in ``states``' order."""
    by_preferred: dict[int, list[K]] = {}
    for key, state in states.items():
        by_preferred.setdefault(state.replicas[0], []).append(key)
    moved: set[K] = set()
    for preferred, keys in by_preferred.items():
        elsewhere = [k for k in keys if states[k].leader != preferred]
        if len(elsewhere) * 100 > percentage * len(keys):
            moved.update(k for k in elsewhere if preferred in states[k].isr_ids)
    return [k for k in states if k in moved]
