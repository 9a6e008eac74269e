"""Reconciliation: moving one consumer-group member from its current assignment towards its target.

Kafka's ``CurrentAssignmentBuilder`` (and the member side of ``GroupMetadataManager.maybeReconcile``), topics by
name. Revoke before assign: a partition leaves a member's assignment first (the member is UNREVOKED_PARTITIONS at its
old epoch until its heartbeat no longer lists it), and is added to another member's assignment only once no member
holds it (until then that member is UNRELEASED_PARTITIONS and the partition is withheld). With
:meth:`ConsumerGroup.set_member_ownership <walgate.coordinator.consumer_model.ConsumerGroup.set_member_ownership>`
this keeps every partition with at most one member at any time.

Pure functions of the group and the member's heartbeat: timers (the rebalance timeout of a member that must revoke)
are the caller's, :mod:`walgate.coordinator.consumer_membership`.
"""

from __future__ import annotations

from walgate.coordinator.consumer_model import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    OwnedPartitions,
    partition_pairs,
)

__all__ = ["compute_next_assignment", "is_subset", "owns_any", "reconcile"]


def reconcile(group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None) -> bool:
    """Kafka's ``maybeReconcile``: move *member* (which owns *owned*) towards its target; whether it changed.

    Nothing happens to a member that is STABLE at the assignment epoch, nor to one that still owns partitions it
    must revoke. Otherwise its state, epoch, assignment and pending revocation are recomputed and the group's
    partition holders updated.
    """
    if member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
        return False
    if member.state is MemberState.UNREVOKED_PARTITIONS and owns_any(owned, member.pending_revocation):
        return False
    before = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
    old_pairs = list(partition_pairs(member.assigned, member.pending_revocation))
    compute_next_assignment(group, member, owned)
    group.set_member_ownership(member, old_pairs)
    return (member.state, member.member_epoch, member.assigned, member.pending_revocation) != before


def compute_next_assignment(group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None) -> None:
    """``CurrentAssignmentBuilder.computeNextAssignment`` (topics by name)."""
    target = group.target.get(member.member_id, {})
    held_epochs = member.assignment_epochs
    had = set(partition_pairs(member.assigned))
    subscribed = set(member.subscribed_topic_names)
    has_unreleased = False
    new_assigned: dict[str, frozenset[int]] = {}
    new_pending_revocation: dict[str, frozenset[int]] = {}
    new_pending_assignment: dict[str, frozenset[int]] = {}
    for topic in sorted(set(target) | set(member.assigned)):
        tgt = target.get(topic, frozenset()) if topic in subscribed else frozenset()
        current = member.assigned.get(topic, frozenset())
        assigned = current & tgt
        revoke = current - assigned
        pending = tgt - assigned
        # A partition held by another member (assigned or being revoked) is unreleased.
        unreleased = {p for p in pending if group.partition_owner.get((topic, p)) not in (None, member.member_id)}
        if unreleased:
            has_unreleased = True
            pending = pending - unreleased
        if assigned:
            new_assigned[topic] = assigned
        if revoke:
            new_pending_revocation[topic] = revoke
        if pending:
            new_pending_assignment[topic] = pending

    if new_pending_revocation and owns_any(owned, new_pending_revocation):
        member.state = MemberState.UNREVOKED_PARTITIONS
        member.update_member_epoch(member.member_epoch)
        member.assigned = new_assigned
        member.pending_revocation = new_pending_revocation
    else:
        for topic, partitions in new_pending_assignment.items():
            new_assigned[topic] = new_assigned.get(topic, frozenset()) | partitions
        member.state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        member.update_member_epoch(group.assignment_epoch)
        member.assigned = new_assigned
        member.pending_revocation = {}
    # A partition the member keeps (or is still revoking) keeps its epoch; one it is given now, even one it
    # just revoked, gets the epoch it is given at.
    member.assignment_epochs = {
        key: held_epochs.get(key, member.member_epoch) if key in had else member.member_epoch
        for key in partition_pairs(member.assigned)
    } | {key: held_epochs.get(key, member.member_epoch) for key in partition_pairs(member.pending_revocation)}


def owns_any(owned: OwnedPartitions | None, pending: Assignment) -> bool:
    """``ownsRevokedPartitions``: whether *owned* still lists a partition of *pending* (None: assume so)."""
    if owned is None:
        return True
    return any(p in pending.get(topic, ()) for topic, partitions in owned for p in partitions)


def is_subset(owned: OwnedPartitions | None, assigned: Assignment) -> bool:
    """Whether *owned* lists only partitions of *assigned* (None: unknown, so no)."""
    if owned is None:
        return False
    for topic, partitions in owned:
        mine = assigned.get(topic)
        if mine is None:
            return False
        if any(p not in mine for p in partitions):
            return False
    return True
