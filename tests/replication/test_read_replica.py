"""KIP-392's replica selection (walgate.replication.read_replica), against Kafka's ``RackAwareReplicaSelector`` and
``ReplicaManager.findPreferredReadReplica``: the leader unless the client's rack holds in-sync followers and not the
leader; among those, the highest log end, then the one caught up most recently, then the highest node id; only an
ISR member of the incarnation admitted, holding the fetch offset, reachable on the client's listener."""

from __future__ import annotations

from walgate.replication.leader import LeaderView
from walgate.replication.partition import IsrMember, PartitionState
from walgate.replication.read_replica import (
    LEADER_SELECTOR,
    NO_PREFERENCE,
    RACK_AWARE_SELECTOR,
    Candidate,
    preferred_read_replica,
    rack_aware,
)

RACKS = {1: "r1", 2: "r2", 3: "r2", 4: "r4"}
EPOCHS = {1: 10, 2: 20, 3: 30, 4: 40}  # broker epochs


def view(isr: tuple[int, ...] = (1, 2, 3, 4), ends: dict[int, tuple[int, int]] | None = None) -> LeaderView:
    """Node 1's view of a partition of replicas 1-4 with ISR ``isr``; each follower of ``ends`` fetched up to its
    (end, at ms) under its broker epoch (caught up then: the leader's end is 100)."""
    state = PartitionState((1, 2, 3, 4), 1, 5, 0, tuple(IsrMember(n, EPOCHS[n]) for n in isr), (), 1)
    v = LeaderView(1, EPOCHS[1], state, 0, 0, 0, 30_000)
    for node, (end, at) in (ends or {}).items():
        assert v.on_fetch(node, EPOCHS[node], EPOCHS[node], 5, end, end, 100, at) is None
    return v


def preferred(v: LeaderView, rack: str | None, needed: int = 50, reachable: tuple[int, ...] = (2, 3, 4),
              selector: str | None = RACK_AWARE_SELECTOR) -> int:
    return preferred_read_replica(selector, rack, v, needed, RACKS, reachable, 1_000)


def test_the_rack_aware_selector_prefers_the_leader_unless_only_followers_are_in_the_clients_rack() -> None:
    far = Candidate(4, "r4", 90, 0)
    assert rack_aware(None, 1, "r1", [far]) == 1
    assert rack_aware("", 1, "r1", [far]) == 1
    assert rack_aware("r4", 1, "r4", [far]) == 1  # the leader in the client's rack: the leader
    assert rack_aware("r9", 1, "r1", [far]) == 1  # nobody there: the leader
    assert rack_aware("r4", 1, "r1", [far]) == 4
    same = [Candidate(2, "r2", 80, 0), Candidate(3, "r2", 90, 500)]
    assert rack_aware("r2", 1, "r1", same) == 3  # the highest log end first
    same = [Candidate(2, "r2", 90, 100), Candidate(3, "r2", 90, 500)]
    assert rack_aware("r2", 1, "r1", same) == 2  # then the one caught up most recently
    same = [Candidate(2, "r2", 90, 100), Candidate(3, "r2", 90, 100)]
    assert rack_aware("r2", 1, "r1", same) == 3  # then the highest id, as Kafka's comparator


def test_only_in_sync_followers_holding_the_fetch_offset_and_reachable_are_preferred() -> None:
    ends = {2: (60, 900), 3: (70, 800), 4: (100, 1_000)}
    assert preferred(view(ends=ends), "r2") == 3
    assert preferred(view(ends=ends), "r4") == 4
    assert preferred(view(ends=ends), "r1") == NO_PREFERENCE  # the leader's rack: the leader serves
    assert preferred(view(ends=ends), None) == NO_PREFERENCE
    assert preferred(view(ends=ends), "r2", needed=65) == 3  # node 2 does not hold the offset
    assert preferred(view(ends=ends), "r2", needed=75) == NO_PREFERENCE  # neither does node 3
    assert preferred(view(isr=(1, 2, 4), ends=ends), "r2") == 2  # node 3 out of the ISR
    assert preferred(view(ends=ends), "r2", reachable=(2, 4)) == 2  # node 3 has no endpoint on the listener
    assert preferred(view(ends={4: (100, 1_000)}), "r2") == NO_PREFERENCE  # nodes 2 and 3 never fetched
    assert preferred(view(ends=ends), "r2", selector=LEADER_SELECTOR) == NO_PREFERENCE
    assert preferred(view(ends=ends), "r2", selector=None) == NO_PREFERENCE


def test_a_follower_restarted_under_a_new_broker_epoch_is_not_the_isr_member_it_was() -> None:
    v = view(ends={2: (60, 900)})
    assert v.on_fetch(3, EPOCHS[3] + 1, EPOCHS[3] + 1, 5, 100, 100, 100, 1_000) is None  # its new incarnation
    assert preferred(v, "r2") == 2
