"""Moving a partition's replicas: KIP-455's reassignment requests, as Kafka's controller judges them (pure).

A move goes through three partition states (:class:`~walgate.replication.partition.PartitionState`):

1. :func:`reassign` (AlterPartitionReassignments with replicas; ``REDISTRIBUTE VGROUP``) writes the target:
   ``replicas`` becomes the target followed by the replicas being removed, ``adding`` the target replicas not
   already replicas, ``removing`` the replicas not in the target (Kafka's ``PartitionReassignmentReplicas``). Adding
   replicas open the vnode empty and fetch from the leader like any follower; they are not in the ISR, so none
   leads, nor takes part in an unclean election. Removing replicas keep replicating (and may go on leading) until
   the move completes.
2. The leader admits each adding replica to the ISR once it caught up (AlterPartition, KIP-497).
3. The controller completes the move once every target replica is in the ISR
   (:func:`~walgate.replication.partition.complete_reassignment`, within its reconciliation): ``replicas`` := the
   target, the ISR shrunk to it, and a removed leader replaced by a target one in a new leader epoch.

:func:`cancel` (AlterPartitionReassignments with null replicas) reverts a move in progress to the original replicas
(Kafka's ``PartitionReassignmentRevert``): the adding ones leave the replicas, the ISR and the ELR.

Each request is judged on the state the controller's rules leave (:func:`~walgate.replication.partition.settle`), so
its answer is what the controller writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from walgate.replication.partition import PartitionState, change_isr, settle
from walgate.wire.errors import ErrorCode

__all__ = ["Refusal", "reassign", "cancel"]


@dataclass(frozen=True)
class Refusal:
    """Why a reassignment request is refused: the Kafka error code and the message sent with it."""

    error: ErrorCode
    message: str


def reassign(state: PartitionState, target: tuple[int, ...], live: Mapping[int, int]) -> PartitionState | Refusal:
    """The state that moves ``state``'s replicas to ``target`` (the first the preferred leader), given the registered
    brokers ``live`` (node id -> broker epoch), or why not: INVALID_REPLICA_ASSIGNMENT for a target that is empty,
    repeats a replica, names a broker not registered (Kafka's ``validateManualPartitionAssignment``), or has fewer
    replicas than the topic's ``min.insync.replicas`` (walgate's own refusal: such a move could never complete).

    A move already in progress is replaced, as in Kafka: the replicas now are the old move's union, so an adding
    replica the new target leaves out is removed, and a removing one it names stays; an adding one it names stays
    adding (unlike Kafka's, which counts it an original replica). A target that needs no new
    replica completes at once when the target replicas are all in the ISR (a replication factor lowered)."""
    if not target or len(set(target)) != len(target):
        return Refusal(ErrorCode.invalid_replica_assignment,
                       f"the replica assignment {list(target)} is empty or repeats a replica")
    unknown = [r for r in target if r not in live]
    if unknown:
        return Refusal(ErrorCode.invalid_replica_assignment,
                       f"the replica assignment includes broker {unknown[0]}, but no broker with that id is registered")
    if len(target) < state.min_isr:
        return Refusal(ErrorCode.invalid_replica_assignment,
                       f"the replica assignment {list(target)} has fewer replicas than min.insync.replicas"
                       f" ({state.min_isr}): the move could never complete")
    removing = tuple(sorted(set(state.replicas) - set(target)))
    # (a replica the move in progress is adding stays an adding one: it may not have caught up; Kafka's
    # PartitionReassignmentReplicas would take it for an original replica, eligible in an unclean election)
    adding = tuple(sorted(set(target) - set(state.original)))
    moved = replace(state, replicas=target + removing, adding=adding, removing=removing,
                    partition_epoch=state.partition_epoch + 1)
    return settle(moved, live)


def cancel(state: PartitionState, live: Mapping[int, int]) -> PartitionState | Refusal:
    """The state that reverts ``state``'s move to its original replicas, or why not: NO_REASSIGNMENT_IN_PROGRESS,
    or INVALID_REPLICA_ASSIGNMENT when every ISR member is an adding replica and the topic does not allow unclean
    leader election (Kafka's ``cancelPartitionReassignment``: the revert would need one). A leader that was an
    adding replica is replaced (a new leader epoch)."""
    if not state.moving:
        return Refusal(ErrorCode.no_reassignment_in_progress, "no reassignment is in progress for this partition")
    isr = tuple(m for m in state.isr if m.replica not in state.adding)
    if not isr and not state.unclean_election:
        return Refusal(ErrorCode.invalid_replica_assignment,
                       "reverting the reassignment would need an unclean leader election: every in-sync replica is "
                       "one being added")
    reverted = change_isr(replace(state, replicas=state.original, adding=(), removing=(),
                                  elr=tuple(r for r in state.elr if r not in state.adding)), isr)
    return settle(reverted, live)
