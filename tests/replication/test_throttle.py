"""The replication quota (KIP-73, walgate/replication/throttle.py): Kafka's SimpleRate over 11 one-second windows,
the throttled-replica lists read for one node, the rate configs' levels; and that a follower held back by it copies
no more than the rate allows over a catch-up (the accounting the real-process test cannot time on a loaded machine).
The lists and the rate are also fuzzed (seeded, 100 examples each; ``WALGATE_FUZZ_LONG=1``: 2000, fresh randomness)
against a model.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.replication.throttle import SAMPLES, UNLIMITED, WINDOW_S, ReplicationQuota, rate_in_force, throttled

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"
FUZZ = settings(max_examples=2000 if LONG else 100, derandomize=not LONG, deadline=None)


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


@FUZZ
@given(st.text(alphabet=" ,:*0123456789x-", max_size=30), st.integers(0, 99), st.integers(0, 99))
def test_any_list_value_is_read_without_error(value: str, partition: int, node: int) -> None:
    assert throttled(value, partition, node) in (True, False)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=8), st.integers(0, 20),
       st.integers(0, 5))
def test_a_pair_list_throttles_exactly_the_pairs_it_names(pairs: list[tuple[int, int]], partition: int,
                                                        node: int) -> None:
    value = ",".join(f"{p}:{b}" for p, b in pairs)
    assert throttled(value, partition, node) is ((partition, node) in pairs)


@FUZZ
@given(st.integers(1, 10**7), st.lists(st.tuples(st.floats(0, 3, allow_nan=False), st.integers(0, 10**7)),
                                       max_size=30))
def test_the_rate_is_the_bytes_of_the_kept_windows_and_the_delay_ends_the_excess(
        bound: int, steps: list[tuple[float, int]]) -> None:
    """Against a model: every record kept while its window began within ``SAMPLES`` windows of now; the rate their
    sum over the time since the oldest kept window began, at least one window; after ``delay`` (when below the
    one-window cap) the rate is back at the bound, when no window expired meanwhile (an expiring window may shorten
    the span and so raise the rate: ``delay`` is an estimate the fetcher checks again)."""
    q, now, windows = ReplicationQuota(bound), 0.0, []
    for gap, size in steps:
        now += gap
        q.record(size, now)
        if not windows or now >= windows[-1][0] + WINDOW_S:
            windows.append([now, 0])
        windows[-1][1] += size
        kept = [w for w in windows if w[0] > now - SAMPLES * WINDOW_S]
        rate = sum(w[1] for w in kept) / max(now - kept[0][0], WINDOW_S) if kept else 0.0
        assert q.rate(now) == pytest.approx(rate)
        assert q.exceeded(now) is (q.rate(now) > bound)
        delay = q.delay(now)
        assert 0 <= delay <= WINDOW_S and (delay == 0) is (not q.exceeded(now))
        if 0 < delay < WINDOW_S and kept[0][0] > now + delay - SAMPLES * WINDOW_S:  # (no window expires by then)
            assert q.rate(now + delay) <= bound * (1 + 1e-9)


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
