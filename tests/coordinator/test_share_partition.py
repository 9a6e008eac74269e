"""The share-partition state machine (walgate/coordinator/share_partition.py), on a clock moved by hand."""

from __future__ import annotations

import random

import pytest

from walgate.coordinator.share_partition import Ack, AckError, Acquired, RecordState, SharePartition

LOCK = 1000


def sp(start: int = 0, limit: int = 3, max_in_flight: int = 2000) -> SharePartition:
    return SharePartition(start, LOCK, limit, max_in_flight)


def test_acquire_locks_records_for_one_member_and_counts_the_delivery():
    p = sp()
    assert p.acquire("a", log_end=5, max_records=3, now_ms=0) == [Acquired(0, 2, 1)]
    assert p.acquire("b", log_end=5, max_records=10, now_ms=0) == [Acquired(3, 4, 1)]
    assert p.acquire("c", log_end=5, max_records=10, now_ms=0) == []  # everything is held
    assert [p.holder(o) for o in range(5)] == ["a", "a", "a", "b", "b"]
    assert p.next_deadline() == LOCK and p.in_flight() == 5


def test_accept_moves_the_start_offset_past_finished_records_only():
    p = sp()
    p.acquire("a", 6, 6, 0)
    p.acknowledge("a", 2, 3, [Ack.ACCEPT], 0)
    assert p.start == 0  # 0 and 1 are still in flight
    p.acknowledge("a", 0, 1, [Ack.ACCEPT, Ack.REJECT], 0)
    assert p.start == 4 and p.state(1) == (RecordState.ACKNOWLEDGED, 0)  # below the start: done
    assert p.state(4) == (RecordState.ACQUIRED, 1)


def test_a_lock_that_ends_makes_the_record_available_to_another_member_with_a_higher_count():
    p = sp()
    p.acquire("a", 2, 10, now_ms=0)
    assert p.acquire("b", 2, 10, now_ms=LOCK - 1) == []
    assert p.acquire("b", 2, 10, now_ms=LOCK) == [Acquired(0, 1, 2)]
    with pytest.raises(AckError):  # a's lock is gone: its late acknowledgement is refused, nothing changes
        p.acknowledge("a", 0, 1, [Ack.ACCEPT], LOCK)
    assert p.holder(0) == "b"


def test_release_redelivers_and_the_limit_archives():
    p = sp(limit=3)
    for delivery in (1, 2, 3):
        assert p.acquire("a", 1, 10, 0) == [Acquired(0, 0, delivery)]
        p.acknowledge("a", 0, 0, [Ack.RELEASE], 0)
    assert p.start == 1 and p.acquire("a", 1, 10, 0) == []  # archived at the third delivery: gone


def test_an_expired_lock_at_the_limit_archives_too():
    p = sp(limit=1)
    p.acquire("a", 3, 10, 0)
    p.acknowledge("a", 1, 1, [Ack.ACCEPT], 0)
    assert p.expire(LOCK) and p.start == 3 and p.records == {}


def test_renew_extends_the_lock():
    p = sp()
    p.acquire("a", 1, 1, 0)
    p.acknowledge("a", 0, 0, [Ack.RENEW], 900)
    assert not p.expire(LOCK) and p.holder(0) == "a" and p.next_deadline() == 900 + LOCK


def test_a_bad_batch_changes_nothing():
    p = sp()
    p.acquire("a", 3, 2, 0)
    before = p.copy()
    with pytest.raises(AckError) as bad:
        p.acknowledge("a", 0, 2, [Ack.ACCEPT], 0)  # offset 2 is not acquired
    assert not bad.value.invalid_request and p.records == before.records and p.start == 0
    for types in ([], [1, 1], [9]):
        with pytest.raises(AckError) as bad:
            p.acknowledge("a", 0, 2, types, 0)
        assert bad.value.invalid_request
    with pytest.raises(AckError):
        p.acknowledge("b", 0, 0, [Ack.ACCEPT], 0)  # another member's record


def test_release_member_and_log_start_movement():
    p = sp()
    p.acquire("a", 4, 2, 0)
    p.acquire("b", 4, 2, 0)
    assert p.release_member("a") and p.holder(0) is None and p.holder(2) == "b"
    p.move_start(3)
    assert p.start == 3 and p.holder(2) is None and p.holder(3) == "b"


def test_max_in_flight_bounds_the_window():
    p = sp(max_in_flight=3)
    assert p.acquire("a", 10, 10, 0) == [Acquired(0, 2, 1)]
    p.acknowledge("a", 0, 0, [Ack.ACCEPT], 0)
    assert p.acquire("a", 10, 10, 0) == [Acquired(3, 3, 1)]


def test_the_durable_form_keeps_counts_and_finished_records_and_releases_acquired_ones():
    p = sp(limit=5)
    p.acquire("a", 6, 6, 0)
    p.acknowledge("a", 1, 1, [Ack.ACCEPT], 0)
    p.acknowledge("a", 2, 2, [Ack.RELEASE], 0)
    p.acknowledge("a", 3, 3, [Ack.REJECT], 0)
    back = SharePartition.from_record(p.to_record(), LOCK, 5)
    assert back.start == 0 and back.end == 6
    assert [back.state(o) for o in range(6)] == [
        (RecordState.AVAILABLE, 1), (RecordState.ACKNOWLEDGED, 1), (RecordState.AVAILABLE, 1),
        (RecordState.ARCHIVED, 1), (RecordState.AVAILABLE, 1), (RecordState.AVAILABLE, 1)]
    assert back.acquire("b", 6, 10, 0) == [Acquired(0, 0, 2), Acquired(2, 2, 2), Acquired(4, 5, 2)]
    for bad in ({"s": 3, "e": 1, "r": []}, {"s": 0, "e": 2, "r": [[0, 5, 0, 1]]}, {"s": 0, "e": 2, "r": [[0, 0, 1, 1]]},
                {"s": 0}, {"s": 0, "e": 1, "r": [[0, 0, 7, 1]]}):
        with pytest.raises((KeyError, TypeError, ValueError)):
            SharePartition.from_record(bad, LOCK, 5)


@pytest.mark.parametrize("seed", range(30))
def test_random_sequences_keep_the_invariants(seed):
    rng = random.Random(seed)
    limit = rng.randint(1, 4)
    p = sp(limit=limit, max_in_flight=rng.choice((5, 50)))
    members = ["a", "b", "c"]
    log_end, now = 0, 0
    deliveries: dict[int, int] = {}
    held: dict[int, str] = {}
    for _ in range(300):
        op = rng.random()
        if op < 0.15:
            log_end += rng.randint(1, 5)
        elif op < 0.45:
            member = rng.choice(members)
            before = {o: p.state(o)[1] for o in range(p.start, p.end)}
            expired = {o for o, m in held.items() if p.holder(o) is None or p.records[o].deadline_ms <= now}
            for ranges in p.acquire(member, log_end, rng.randint(1, 6), now):
                for o in range(ranges.first, ranges.last + 1):
                    assert o not in held or o in expired  # never acquired by two members at once
                    assert ranges.delivery_count == before.get(o, 0) + 1  # +1 per acquisition
                    assert ranges.delivery_count <= limit  # archived at the limit: never delivered again
                    deliveries[o] = ranges.delivery_count
                    held[o] = member
        elif op < 0.8 and held:
            offset = rng.choice(sorted(held))
            member = held[offset]
            kind = rng.choice((Ack.ACCEPT, Ack.RELEASE, Ack.REJECT, Ack.GAP, Ack.RENEW))
            try:
                p.acknowledge(member, offset, offset, [kind], now)
            except AckError:
                assert p.holder(offset) != member  # only a lost lock refuses the holder's acknowledgement
        else:
            now += rng.randint(1, LOCK)
        held = {o: p.holder(o) for o in range(p.start, p.end) if p.holder(o) is not None}  # type: ignore[misc]
        assert all(p.state(o)[0] == RecordState.ACKNOWLEDGED for o in range(p.start))
        locks = [r.deadline_ms for r in p.records.values() if r.state == RecordState.ACQUIRED]
        assert p.next_deadline() == (min(locks) if locks else None)  # the kept earliest lock is true
        assert p.start == p.end or p.state(p.start)[0] in (RecordState.AVAILABLE, RecordState.ACQUIRED)
    # drain: everyone accepts what they get until nothing is left; every record ends done
    for _ in range(1000):
        now += LOCK
        for member in members:
            for r in p.acquire(member, log_end, 10, now):
                p.acknowledge(member, r.first, r.last, [Ack.ACCEPT], now)
        if p.start == log_end:
            break
    assert p.start == log_end and p.records == {}


def test_first_available_is_what_acquire_would_take_first():
    p = sp(max_in_flight=4)
    assert p.first_available(0) is None and p.first_available(3) == 0
    p.acquire("a", 3, 2, 0)
    assert p.first_available(3) == 2
    p.acknowledge("a", 1, 1, [Ack.RELEASE], 0)
    assert p.first_available(3) == 1
    p.acquire("a", 10, 10, 0)  # the window is full: 0..3 in flight
    assert p.first_available(10) is None
