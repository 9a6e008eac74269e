"""The replication quota (KIP-73, walgate/replication/throttle.py): Kafka's SimpleRate over 11 one-second windows,
the throttled-replica lists read for one node, the rate configs' levels; and that a follower held back by it copies
no more than the rate allows over a catch-up (the accounting the real-process test cannot time on a loaded machine).
"""

from __future__ import annotations

import pytest

from walgate.replication.throttle import SAMPLES, UNLIMITED, WINDOW_S, ReplicationQuota, rate_in_force, throttled


@pytest.mark.parametrize(("value", "partition", "node", "expected"), [
    ("", 0, 1, False),
    ("*", 7, 3, True),
    (" * ", 0, 0, True),
    ("0:1,1:2", 0, 1, True),
    ("0:1,1:2", 1, 2, True),
    ("0:1,1:2", 0, 2, False),  # (an entry names the partition on one broker only)
    ("0:1,1:2", 2, 1, False),
    ("00:01", 0, 1, True),  # (integers, as Kafka's toInt reads them)
    ("10:1", 1, 1, False),
])
def test_a_throttled_replica_list_names_partitions_on_this_node_only(value: str, partition: int, node: int,
                                                                     expected: bool) -> None:
    assert throttled(value, partition, node) is expected


def test_the_rate_in_force_is_the_nodes_own_then_the_cluster_default_then_unlimited() -> None:
    assert rate_in_force("100", "200") == 100
    assert rate_in_force(None, "200") == 200
    assert rate_in_force(None, None) == UNLIMITED
    assert rate_in_force("0", None) == 0


def test_the_rate_is_the_bytes_kept_over_at_least_one_window() -> None:
    q = ReplicationQuota(bound=1000)
    assert q.rate(0.0) == 0 and not q.exceeded(0.0)
    q.record(500, 0.0)
    assert q.rate(0.2) == 500  # (one window at least: not 500 / 0.2)
    assert not q.exceeded(0.2)
    q.record(600, 0.5)
    assert q.rate(0.5) == 1100 and q.exceeded(0.5)
    assert q.rate(2.0) == pytest.approx(1100 / 2.0) and not q.exceeded(2.0)
    assert q.total == 1100


def test_windows_older_than_the_samples_are_forgotten() -> None:
    q = ReplicationQuota(bound=10)
    q.record(1_000_000, 0.0)
    assert q.exceeded(SAMPLES * WINDOW_S - 0.5)
    assert q.rate(SAMPLES * WINDOW_S) == 0 and not q.exceeded(SAMPLES * WINDOW_S)
    assert not q.samples


def test_unlimited_is_never_exceeded_and_a_zero_bound_is_by_any_byte() -> None:
    q = ReplicationQuota()
    q.record(10**12, 0.0)
    assert not q.exceeded(0.0) and q.delay(0.0) == 0
    zero = ReplicationQuota(bound=0)
    assert not zero.exceeded(0.0)
    zero.record(1, 0.0)
    assert zero.exceeded(0.0) and zero.delay(0.0) == WINDOW_S


def test_the_delay_is_until_the_rate_is_back_at_the_bound_at_most_one_window() -> None:
    q = ReplicationQuota(bound=1000)
    q.record(1500, 0.0)
    assert q.delay(0.7) == pytest.approx(0.8)  # 1500 bytes at 1000/s: 1.5 s after the first
    assert q.exceeded(1.49) and not q.exceeded(1.5)
    assert q.delay(0.0) == WINDOW_S  # (capped: checked again then)


@pytest.mark.parametrize(("bound", "answer"), [(100_000, 64 << 10), (1 << 20, 1 << 20), (10_000_000, 1 << 20)])
def test_a_follower_held_back_by_the_quota_copies_no_more_than_the_rate_allows(bound: int, answer: int) -> None:
    """A follower catching up on 20 MB in answers of ``answer`` bytes (WalFetch's ``partition_max_bytes``, 1 MiB
    by default): it fetches only while the quota is not exceeded and waits ``delay`` otherwise, as the fetcher does.
    The bytes it copied by any time ``t`` stay within the rate over the elapsed time plus one answer (the one that
    crossed the bound); unthrottled it would copy everything at once. (An answer larger than the rate allows over
    the 11 windows overshoots, as in Kafka: it is forgotten before the rate has paid for it.)"""
    q = ReplicationQuota(bound=bound)
    lacking, now, copied = 20_000_000, 0.0, 0
    worst = 0.0
    while lacking > 0 and now < 600:
        if q.exceeded(now):
            now += max(q.delay(now), 0.001)
            continue
        size = min(answer, lacking)
        q.record(size, now)
        copied, lacking = copied + size, lacking - size
        worst = max(worst, copied - bound * max(now, WINDOW_S) - answer)
        now += 0.001  # (a round trip)
    assert lacking == 0 or copied <= bound * 600 + answer
    assert worst <= 0
    if lacking == 0:
        assert now >= (20_000_000 - answer) / bound - WINDOW_S  # (the catch-up took as long as the rate makes it)
