"""Stock clients' exactly-once consume-transform-produce on a replicated cluster while the node coordinating the
transactional id is killed (issue 25 step 7 increment 4: a transactional id's coordinator is the leader of its
``__consumer_offsets`` partition, its state and the offsets a transaction holds are that partition's records, and the
partition's new leader loads them and ends the transactions it finds decided: docs/cluster.md "Transaction
coordinators", "In a replicated cluster").

The cluster is the Jepsen-style suite's (tests/jepsen/replicated_workload.py's :class:`Nodes`): three
``walgate serve --cluster`` nodes with ``replication.enable=true`` over one etcd member, a 2 s lease;
``__consumer_offsets`` of replication factor 3 (Kafka's default). Topics of replication factor 3,
``min.insync.replicas=2``.

- **The Java client** (kafka-clients 4.3.0, java/ExactlyOnceLoop.java): a read_committed consumer in a group and a
  KafkaProducer with a ``transactional.id`` that, per poll, sends each record transformed and
  ``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``, then commits, handling errors as Kafka's docs say
  (ProducerFencedException: a new producer, abortable errors: abort; both rewind to the group's committed offsets).
  After :data:`KILL_AFTER` commits the leader of the transactional id's ``__consumer_offsets`` partition is killed
  -9, stays down :data:`DOWN_S` s (past its lease: the partition gets a new leader) and is restarted on its data dir.
  The exactly-once check: the output topic read with read_committed holds each input record's transformation exactly
  once, in the input's order per partition, and the group's committed offsets are the input's end offsets.

CI runs one kill (``WALGATE_COMPAT_LONG=1``: :data:`ROUNDS` = 3 kills, each of the coordinator of that moment).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from compat_brokers import LONG
from compat_procs import Background
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from replicated_workload import Nodes, ready_nodes, wait_until  # noqa: E402
from serve_support import create_topics, readyz  # noqa: E402
from test_replicated_txn_coordinator import coordinator, read_committed  # noqa: E402

NODES = (1, 2, 3)
PARTITIONS = 2
ROUNDS = 3 if LONG else 1
COUNT = 200 * ROUNDS  # input records
KILL_AFTER = 4  # commits before each kill
DOWN_S = 3.0  # past the 2 s lease
PACE_MS = 100  # the application's pause after each commit: ~20 records a second, the kills land mid-run
RUN_S = 120 * ROUNDS  # the application's own deadline


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Nodes 1-3 (replicated, 2 s lease), every one ready (:func:`replicated_workload.ready_nodes`)."""
    workdir = tmp_path_factory.mktemp("txn-kills")
    with etcd_cluster(workdir / "etcd", 1) as etcd, ready_nodes(etcd, workdir) as cluster:
        yield cluster


def kill_coordinator(nodes: Nodes, transactional_id: str) -> int:
    """kill -9 of the transactional id's coordinator's node, until another node leads its partition, then that node
    restarted on its data dir; the node killed."""
    victim = coordinator(nodes, transactional_id)
    assert victim in NODES
    nodes.kill(victim)
    time.sleep(DOWN_S)
    wait_until("another node coordinates the transactional id",
               lambda: coordinator(nodes, transactional_id) not in (-1, victim))
    nodes.start(victim)
    wait_until(f"node {victim} ready again", lambda: readyz(nodes.servers[victim]).get("status") == "ready")
    return victim


def produce_input(nodes: Nodes, topic: str) -> dict[int, list[str]]:
    """:data:`COUNT` records ``0``, ``1``, ... (acks=all, idempotent) round-robin over the partitions; the values of
    each partition in order."""
    producer = Producer({"bootstrap.servers": nodes.bootstrap(), "enable.idempotence": True})
    values: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for n in range(COUNT):
        values[n % PARTITIONS].append(str(n))
        producer.produce(topic, key=str(n), value=str(n), partition=n % PARTITIONS)
    assert producer.flush(60) == 0
    return values


def committed_and_ends(nodes: Nodes, group: str, topic: str) -> tuple[list[int], list[int]]:
    """The group's committed offsets of ``topic``'s partitions and their high watermarks."""
    consumer = Consumer({"bootstrap.servers": nodes.bootstrap(), "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = [tp.offset for tp in consumer.committed(tps, timeout=30)]
        ends = [consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in tps]
        return committed, ends
    finally:
        consumer.close()


def events(app: Background, kind: str) -> list[dict[str, object]]:
    return [e for e in (json.loads(line) for line in list(app.out) if line.startswith("{")) if e["event"] == kind]


def test_java_exactly_once_while_the_transaction_coordinator_is_killed(java_argv: Callable[..., list[str]],
                                                                       nodes: Nodes) -> None:
    source, sink, group, tid = "eos-in", "eos-out", "eos-group", "eos-app"
    create_topics(nodes.bootstrap(), *(NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                       for t in (source, sink)))
    values = produce_input(nodes, source)
    app = Background.start(java_argv("ExactlyOnceLoop.java", nodes.bootstrap(), source, sink, group, tid,
                                     str(COUNT), str(PACE_MS), str(RUN_S)))
    try:
        killed: list[int] = []
        for r in range(ROUNDS):
            before = len(events(app, "committed"))
            app.wait_for(lambda a, before=before: len(events(a, "committed")) >= before + KILL_AFTER, 120,
                         f"{KILL_AFTER} commits before kill {r + 1}")
            killed.append(kill_coordinator(nodes, tid))
        app.wait_for(lambda a: events(a, "summary") or events(a, "error"), RUN_S + 60, "the application's end")
    finally:
        app.stop()
    assert not events(app, "error"), app.describe()
    [summary] = events(app, "summary")
    assert summary["committed"] == COUNT, app.describe()
    for p, vs in values.items():
        expected = [f"out-{v}".encode() for v in vs]
        assert read_committed(nodes, sink, [p], set(expected)) == expected, (
            f"partition {p}; killed {killed}; recovered: {events(app, 'recovered')}")
    committed, ends = committed_and_ends(nodes, group, source)
    assert committed == ends == [COUNT // PARTITIONS] * PARTITIONS
