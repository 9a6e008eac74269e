"""A replicated cluster's share-partition states (KIP-932's persister): the share coordinator uses a share-partition
only once its durable state was read, forgets a topic-partition whose leadership changed, and writes a deletion
even of a state it did not read (walgate/coordinator/share_coordinator.py); the state's wire form and leader-epoch
fencing (walgate/coordinator/share_state_batches.py)."""

from __future__ import annotations

import random

import pytest

from tests.coordinator.test_share_membership import Logs, beat
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.coordinator.share_group import ShareGroups
from walgate.coordinator.share_partition import Acquired, SharePartition
from walgate.coordinator.share_state_batches import NO_START, epoch_of, fenced, from_wire, to_wire, with_epoch


def never(exc: Exception) -> int:
    raise AssertionError(exc)


def persisted() -> ShareCoordinator:
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), Logs(), persisted=True)
    beat(c.groups, "a", 0, ["t"])
    c.session("g", "a", 0, fetch=True)
    c.update_session("g", "a", [("t", 0)], [])
    return c


def test_a_share_partition_acquires_nothing_before_its_state_is_read_then_goes_on_from_it():
    c = persisted()
    assert c.unread("g", [("t", 0)]) == [("g", "t", 0)]
    assert c.reads("g", [("t", 0)]) == []  # nothing to read from the log before the state is
    assert c.acquire("g", "a", [("t", 0)], 5, 0, never)[("t", 0)].acquired == []
    assert c.take_records() == [] and c.partitions == {}  # not started at share.auto.offset.reset meanwhile
    c.states_read({("g", "t", 0): {"s": 4, "e": 6, "r": [[4, 4, 2, 1], [5, 5, 0, 1]]}}, 0)
    assert c.unread("g", [("t", 0)]) == []
    assert c.acquire("g", "a", [("t", 0)], 3, 0, never)[("t", 0)].acquired == [Acquired(5, 5, 2), Acquired(6, 7, 1)]


def test_a_share_partition_read_without_state_starts_at_the_reset_and_a_late_read_changes_nothing():
    c = persisted()
    c.states_read({("g", "t", 0): None}, 0)
    assert c.acquire("g", "a", [("t", 0)], 2, 0, never)[("t", 0)].acquired == [Acquired(0, 1, 1)]  # earliest
    c.states_read({("g", "t", 0): {"s": 9, "e": 9, "r": []}}, 0)  # a read that crossed the first: what is used stays
    assert c.partitions[("g", "t", 0)].start == 0


def test_forgetting_a_topic_partition_drops_every_group_s_state_there_and_a_refused_write_does_not_restore_it():
    c = persisted()
    c.states_read({("g", "t", 0): None, ("h", "t", 0): {"s": 3, "e": 3, "r": []}, ("g", "t", 1): None}, 0)
    c.acquire("g", "a", [("t", 0)], 2, 0, never)
    c.written(1)  # the new share-partition's write, not durable yet
    c.forget("t", 0)
    assert c.unread("g", [("t", 0), ("t", 1)]) == [("g", "t", 0)] and c.unread("h", [("t", 0)]) == [("h", "t", 0)]
    c.refused()
    assert ("g", "t", 0) not in c.partitions and c.take_records() == []
    c.states_read({("g", "t", 0): {"s": 7, "e": 7, "r": []}}, 0)  # a read begun before the forget: not taken
    assert c.unread("g", [("t", 0)]) == [("g", "t", 0)]
    c.states_read({("g", "t", 0): {"s": 7, "e": 7, "r": []}}, c.forgotten)
    assert c.unread("g", [("t", 0)]) == []


def test_dropping_a_share_partition_whose_state_was_not_read_writes_its_deletion():
    c = persisted()
    c.drop(("g", "t", 0))
    assert c.take_records() == [(("g", "t", 0), None)]
    c.written(1)
    assert c.unread("g", [("t", 0)]) == []  # known to have none now


def test_a_one_copy_coordinator_never_waits_for_a_read():
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), Logs())
    assert c.unread("g", [("t", 0)]) == []


# ------------------------------------------------------------------------------------------------ the wire form

def test_every_state_a_share_partition_records_goes_over_the_wire_and_back_unchanged():
    rng = random.Random(25)
    for _ in range(200):
        sp = SharePartition(rng.randrange(0, 50), 1000, 3)
        now = 0
        for _ in range(rng.randrange(0, 12)):
            got = sp.acquire("m", sp.start + 40, rng.randrange(1, 6), now)
            for a in got:
                if rng.random() < 0.7:
                    sp.acknowledge("m", a.first, a.last, [rng.choice([1, 2, 3])], now)
            now += 1
        value = sp.to_record()
        start, batches = to_wire(value)
        assert from_wire(start, [tuple(b) for b in batches]) == value


def test_a_deletion_and_no_state_are_start_offset_minus_one_without_batches():
    assert to_wire(None) == (NO_START, [])
    assert from_wire(NO_START, []) is None


@pytest.mark.parametrize(("start", "batches"), [
    (5, [(6, 7, 0, 1)]),  # a gap after the start
    (5, [(5, 6, 0, 1), (8, 8, 2, 1)]),  # a gap between batches
    (5, [(5, 4, 0, 1)]),  # a batch ending before it begins
    (-1, [(-1, 0, 0, 1)]),  # a negative start with batches
    (-2, []),
])
def test_batches_that_are_no_recorded_state_are_refused(start, batches):
    with pytest.raises(ValueError):
        from_wire(start, batches)


def test_a_write_of_an_older_leader_epoch_is_fenced():
    stored = with_epoch({"s": 0, "e": 0, "r": []}, 4)
    assert epoch_of(stored) == 4 and SharePartition.from_record(stored, 1000, 3).start == 0
    assert fenced(stored, 3) and not fenced(stored, 4) and not fenced(stored, 5)
    assert not fenced(None, 0) and with_epoch(None, 4) is None and epoch_of({"s": 0, "e": 0, "r": []}) == -1
