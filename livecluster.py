"""A real 3-node ``walgate serve --cluster`` on 127.0.0.1 over a one-member etcd, for compat-tests/ and tests/pipeline/.

:func:`running_cluster` starts the etcd member (tests/cluster/etcd_cluster.py: Debian's ``etcd``, stopped by PID),
then node 1 (waits until it is the controller), then the other nodes, each a ``livewalgate.running_walgate``
process on free ports, and returns once every node lists every node as ready in ``SHOW DNODES`` (the membership
placement uses) and every group coordinator partition answers (:func:`coordinators_answer`: in a replicated cluster
``__consumer_offsets`` is made by the first group lookup and its leaders load it, COORDINATOR_LOAD_IN_PROGRESS
meanwhile, which librdkafka's admin calls do not retry): a database or topic made after that is spread over all of
them.
Every node has ``offsets.topic.num.partitions`` = :data:`COORDINATOR_PARTITIONS` (Kafka's default; the first
node's is the cluster's), so groups are coordinated by whichever node their id's hash names. Teardown stops the
nodes by PID (last first), then etcd.

One etcd member, not three: these clusters test clients and the data plane; etcd's own faults are
tests/cluster's, and a second and third member only add CPU and fsyncs on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from coordinator_admin import described_groups
from livewalgate import WalgateServer, running_walgate
from walgate.storage.coordinator_partitions import partition_for

sys.path.insert(0, str(Path(__file__).parent / "tests" / "cluster"))
from etcd_cluster import EtcdCluster, etcd_cluster  # noqa: E402

__all__ = ["COORDINATOR_PARTITIONS", "LiveCluster", "coordinators_answer", "running_cluster"]

COORDINATOR_PARTITIONS = 50
READY_TIMEOUT_S = 120.0  # every node listing every node, on a loaded machine


@dataclass(frozen=True)
class LiveCluster:
    """The running nodes (node ``i + 1`` is ``nodes[i]``) and their etcd."""

    nodes: list[WalgateServer]
    etcd: EtcdCluster

    @property
    def brokers(self) -> list[str]:
        """Every node's Kafka endpoint, sorted as strings (as the compat clients print Metadata's brokers)."""
        return sorted(f"127.0.0.1:{n.kafka_port}" for n in self.nodes)

    def endpoint(self, node_id: int) -> str:
        return f"127.0.0.1:{self.nodes[node_id - 1].kafka_port}"

    def log(self) -> str:
        """Every node's output so far, each under its own heading."""
        return "\n".join(f"===== node {i + 1}\n{n.log()}" for i, n in enumerate(self.nodes))


def coordinators_answer(bootstrap: str, partitions: int) -> bool:
    """Whether DescribeConsumerGroups through ``bootstrap`` of one group id of each of the ``partitions`` coordinator
    partitions is answered within 15 s without an error (a group that does not exist is described as dead)."""
    groups: dict[int, str] = {}
    for i in range(100 * partitions):  # bounded: ids hash evenly, every partition is named long before
        groups.setdefault(partition_for(f"probe-{i}", partitions), f"probe-{i}")
    answers = described_groups(bootstrap, list(groups.values()), 15)
    return len(answers) == len(groups) and not any(isinstance(a, KafkaException) for a in answers.values())


def _ready_nodes(server: WalgateServer) -> set[int]:
    request = urllib.request.Request(server.http_url + "/rest/sql", data=b"SHOW DNODES", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return {row[0] for row in json.load(r)["data"] if row[2] == "ready"}
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return set()


def _wait(what: str, check: Callable[[], bool], servers: list[WalgateServer]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not check():
        for i, s in enumerate(servers):
            if s.proc.poll() is not None:
                pytest.fail(f"cluster node {i + 1} exited ({s.proc.returncode}):\n{s.log()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"not within {READY_TIMEOUT_S:g} s: {what}\n" +
                        "\n".join(s.log()[-1500:] for s in servers))
        time.sleep(0.2)


@contextlib.contextmanager
def running_cluster(workdir: Path, nodes: int = 3, *args: str,
                    node_args: Callable[[int], Sequence[str]] = lambda _: ()) -> Iterator[LiveCluster]:
    """``nodes`` nodes (``args``: more flags of each, ``node_args(id)``: of node ``id`` only) in
    ``workdir/node<id>`` over one etcd member in ``workdir/etcd``, all ready and seeing each other; stopped by PID at
    the end."""
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(etcd_cluster(workdir / "etcd", 1))
        started: list[WalgateServer] = []
        for node_id in range(1, nodes + 1):
            started.append(stack.enter_context(running_walgate(
                workdir / f"node{node_id}", "--cluster", f"etcd={etcd.spec}", "--node-id", str(node_id),
                "--override", f"offsets.topic.num.partitions={COORDINATOR_PARTITIONS}", *args, *node_args(node_id))))
            if node_id == 1:  # the controller before the others start: the same cluster every run
                _wait("node 1 the controller", lambda: "node 1: controller" in started[0].log(), started)
        want = set(range(1, nodes + 1))
        _wait(f"every node listing nodes {sorted(want)} as ready",
              lambda: all(_ready_nodes(s) >= want for s in started), started)
        cluster = LiveCluster(started, etcd)
        _wait("every group coordinator partition answering",
              lambda: coordinators_answer(",".join(cluster.brokers), COORDINATOR_PARTITIONS), started)
        yield cluster
