"""bench/cluster.py's scale-out rows (issue 24): 2 nodes against 1 as medians of interleaved samples, MB/s from the
records' value bytes, each process's CPU-seconds per million records and the machine's busy cores in the median
sample, so that a ratio can be explained; and its routing rows taken on a live 3-node and 1-node cluster (a quick
run: when the replication default made those clusters lose their group coordinator, its FindCoordinator failed and
no test noticed)."""

from __future__ import annotations

import time

import pytest

from bench.cluster import MACHINE, ONE_COPY, VALUE, Sample, _routing_rows, _scale_rows, cluster, machine_cpu


def _sample(produce_rate: float, fetch_rate: float, nodes: int, load: float) -> Sample:
    """A sample of 1,000,000 records; each node spent 0.5 CPU-s producing, the client 0.7, the machine 3.0 over 2 s."""
    names = [f"node{k}" for k in range(1, nodes + 1)]
    return Sample(1_000_000, 1_000_000 / produce_rate, 1_000_000, 1_000_000 * VALUE, 1_000_000 / fetch_rate,
                  {**dict.fromkeys(names, 0.5), "producer": 0.7, MACHINE: 3.0},
                  {**dict.fromkeys(names, 0.2), "consumer": 0.6, MACHINE: 1.0}, 2.0, 0.5, load)


def test_two_nodes_are_compared_with_one_by_the_medians_of_their_samples() -> None:
    rows = {r.scenario: r for r in _scale_rows({
        1: [_sample(100_000, 1e6, 1, 2.0), _sample(300_000, 3e6, 1, 4.0), _sample(200_000, 2e6, 1, 3.0)],
        2: [_sample(350_000, 1e6, 2, 5.0), _sample(250_000, 4e6, 2, 1.0), _sample(400_000, 2e6, 2, 6.0)]})}
    [produce] = [r for name, r in rows.items() if name.startswith("cluster scale-out: produce")]
    [fetch] = [r for name, r in rows.items() if name.startswith("cluster scale-out: fetch")]
    assert (produce.value, produce.limit, produce.verdict) == (350_000, 200_000, "met")  # 1.75x >= 1.5x
    assert (fetch.value, fetch.limit, fetch.verdict) == (2e6, 2e6, "missed")  # 1.0x
    assert rows["  produce, 2 nodes (2 cores)"].value == pytest.approx(350_000 * VALUE / 1e6)
    assert rows["  fetch, 2 nodes (2 cores)"].limit == pytest.approx(2e6 * VALUE / 1e6)
    assert rows["  CPU-seconds per million records produced, 2 node(s): node2"].value == pytest.approx(0.5)
    assert rows["  CPU-seconds per million records fetched, 1 node(s): consumer"].value == pytest.approx(0.6)
    assert rows["  busy cores of the machine while producing, 1 node(s)"].value == pytest.approx(1.5)  # 3.0 / 2 s
    assert rows["  busy cores of the machine while fetching, 2 node(s)"].value == pytest.approx(2.0)  # 1.0 / 0.5 s
    assert rows["  1-minute load average before each scale-out sample, median"].value == 3.5


def test_no_scale_out_rows_without_samples() -> None:
    """Without the C clients (no compiler or header) no sample is taken and no row is made."""
    assert _scale_rows({1: [], 2: []}) == []


def test_the_machine_has_spent_at_least_this_process_s_cpu() -> None:
    """/proc/stat's busy time (every process) is read as CPU-seconds: never less than this process alone has used."""
    before = machine_cpu()
    assert machine_cpu() >= before
    assert machine_cpu() >= time.process_time()


def test_routing_quick_run_compares_every_request_of_three_nodes_with_one() -> None:
    with cluster(3, *ONE_COPY) as three, cluster(1, *ONE_COPY) as one:
        rows = {r.scenario.split(", 3 nodes")[0]: r for r in _routing_rows(three, one, quick=True)}
    for name in ("produce p50 once connected", "fetch p50 (a Fetch answered at once)", "Metadata p99",
                 "FindCoordinator p99"):
        row = rows[f"cluster routing: {name}"]
        assert row.value > 0 and row.limit > 0 and row.target is not None, row
