"""Issue 25's "Measured" benchmarks: bench/replicated.py's throughput rows, bench/failover.py and bench/follower.py.
Their rows from given samples (the target each carries, what counts as over the failover bound), and each scenario's
whole code path in ``--quick`` mode on a real 3-node cluster over one etcd member (loopback addresses, every process
stopped by PID by :class:`walgate.gateway.cluster_up.LocalCluster`): its rows made, no number asserted but what a
working run must give (every kill followed by a failover, every follower read served by the follower)."""

from __future__ import annotations

import math

import pytest

from bench import cclient, failover, follower, replicated
from bench.cclient import Produced
from bench.failover import BOUND_S, Round, failover_rows
from bench.replicated import throughput_rows


def _produced(rate: float, p99: float) -> Produced:
    """A 2-second sample at ``rate`` records/s; the nodes spent 1 CPU-second per 10,000 records, the producer half
    a second."""
    return Produced(count=int(rate * 2), seconds=2.0, cpu=rate * 2 / 10_000, p50=p99 / 2, p99=p99,
                    client_cpu=rate / 10_000)


def test_factor_3_throughput_is_the_median_sample_against_factor_1_with_the_half_target() -> None:
    rows = throughput_rows({3: [_produced(10_000, 0.9), _produced(30_000, 0.3), _produced(20_000, 0.5)],
                            1: [_produced(50_000, 0.2), _produced(30_000, 0.4), _produced(40_000, 0.25)]})
    records, mb, latency, cpu, producer = rows
    assert (records.value, records.limit, records.verdict) == (20_000, 40_000, "met")  # exactly 50 %
    assert mb.value == pytest.approx(20_000 * replicated.VALUE / 1e6)
    assert (latency.value, latency.limit) == (pytest.approx(500), pytest.approx(250))  # the median samples' p99, ms
    per_mb = 1e3 / (10_000 * replicated.VALUE / 1e6)  # 1 CPU-s per 10,000 records of VALUE bytes, in CPU-ms/MB
    assert (cpu.value, cpu.limit) == (pytest.approx(per_mb), pytest.approx(per_mb))
    assert (producer.value, producer.limit) == (pytest.approx(per_mb / 2), pytest.approx(per_mb / 2))
    slower = throughput_rows({3: [_produced(19_999, 0.5)], 1: [_produced(40_000, 0.25)]})
    assert slower[0].verdict == "missed"
    assert throughput_rows({3: [], 1: []}) == []  # no C producer: no rows


def test_failover_rows_count_the_kills_over_the_lease_ttl_plus_3_s() -> None:
    times = [1.0, 2.0, BOUND_S + 0.5, 3.0, BOUND_S + 1.0]
    rounds = [Round(1 + i % 3, i == 2, t / 2, t, 3.0, 1.0) for i, t in enumerate(times)]
    p50, p99, slowest, elected, elected_p99, over, start, catch_up = failover_rows(rounds, 1000)
    assert p50.value == 3.0
    assert (p99.value, p99.verdict) == (BOUND_S + 1.0, "missed")
    assert (slowest.value, slowest.limit) == (BOUND_S + 1.0, BOUND_S)
    assert (elected.value, elected_p99.value) == (1.5, (BOUND_S + 1.0) / 2)
    assert over.value == 2 and "1 killed leaders were the controller, 1 of those over" in over.scenario
    assert (start.value, catch_up.value) == (3.0, 1.0)
    assert failover_rows(rounds[:2], 10)[1].verdict == "met"


def test_replicated_quick_run_makes_its_throughput_rows() -> None:
    assert cclient.build("cproduce") is not None, "the throughput rows need the C producer (bench/cclient.py)"
    rows = {r.scenario.split(" (")[0]: r for r in replicated.run(quick=True, repeat=1)}
    throughput = rows["replicated: acks=all produce, replication factor 3"]
    assert throughput.value > 0 and throughput.limit > 0 and throughput.target is not None
    assert rows["  latency p99"].value > 0
    assert rows["  CPU-milliseconds per MB written, the 3 nodes together, factor 3"].value > 0
    defaults = rows[f"replicated: acks=all produce at librdkafka's defaults, no idempotence, "
                    f"{replicated.DEFAULTS_PARTITIONS} partitions, factor 3"]
    assert defaults.value > 0 and defaults.limit > 0


def test_failover_quick_run_times_three_kills() -> None:
    rows = failover.run(quick=True, repeat=1)
    p50, p99, slowest, elected, elected_p99, over = rows[:6]
    assert "3 kills" in p50.scenario
    assert 0 < p50.value <= p99.value <= slowest.value < failover.ACK_WAIT_S
    assert 0 < elected.value <= elected_p99.value < failover.ACK_WAIT_S
    assert over.value in (0, 1, 2, 3)
    assert all(math.isfinite(r.value) for r in rows)


def test_follower_quick_run_reads_from_the_follower_of_its_rack() -> None:
    """The scenario itself stops when the follower served less than 90 % of a read with its rack."""
    assert cclient.build("cproduce") is not None and cclient.build() is not None, "the rows need the C clients"
    rows = follower.run(quick=True, repeat=1)
    cpu, _, copied, reads, serving = rows
    assert cpu.value > 0 and cpu.limit > 0
    assert copied.value == pytest.approx(1.0, abs=0.1)  # each follower copied every MB (plus its WAL framing)
    assert reads.value > 0 and reads.limit > 0 and serving.value > 0
