"""The replicated transaction coordinator under faults (issue 25's scenario list: "transaction coordinator killed
between prepare and markers"; step 7 increment 4: a transactional id's coordinator is the leader of its
``__consumer_offsets`` partition, its state that partition's records, docs/cluster.md "Transaction coordinators",
"In a replicated cluster"). Three real ``walgate serve --cluster`` nodes (replicated_workload.py's :class:`Nodes`,
a 2 s lease), stock confluent-kafka transactional producers and read_committed consumers.

- **Killed between prepare and markers.** Two transactions of two transactional ids of one ``__consumer_offsets``
  partition (its leader C coordinates both) write to partition p of a replication-factor-1 topic, placed on another
  node D; the one to be aborted first, so the other's records stand behind its last stable offset. D is paused
  (SIGSTOP): the markers cannot be written. One transaction is committed and the other aborted: C answers both EndTxn
  once their decision (PrepareCommit / PrepareAbort) is held by the partition's in-sync replicas, the markers failed.
  C is then killed -9 and D resumed: the partition's new leader, the third node, loads the decided transactions and
  sends their markers. A read_committed consumer of p reads the committed transaction's records once each (which
  also shows the abort marker written: they stand behind the aborted transaction) and none of the aborted one's.
- **A zombie coordinator.** A producer's transaction is open when C, its coordinator, is paused (SIGSTOP) and its
  commit (EndTxn) is sent to C meanwhile. Once another node leads the partition the application starts a new
  producer with the same transactional id there (the old transaction aborted, the old producer fenced) and commits
  with it; then C is resumed. Whatever C does with the EndTxn it held, nothing of it is acknowledged: the old
  producer's commit fails, its records are never read, the new producer's transactions (one before and one after
  the resume) are read once each.

Seeded (the record counts, the partition): one seed in CI, ``WALGATE_JEPSEN=1`` ten (replicated_workload.SEEDS).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from replicated_workload import SEEDS, Nodes, ready_nodes, wait_until
from serve_support import create_topics

from walgate.storage.coordinator_partitions import partition_for

__all__ = ["coordinator", "leader_of", "read_committed"]

OFFSETS = "__consumer_offsets"


def _bootstrap(nodes: Nodes) -> str:
    """The running nodes that are not paused (a client waiting on a paused one only slows the test)."""
    return ",".join(nodes.kafka(i) for i in nodes.servers if i not in nodes.paused)


def leader_of(nodes: Nodes, topic: str, partition: int) -> int:
    """The leader Metadata names for ``topic``'s ``partition``, asked of the answering nodes (-1: none, or no such
    topic yet)."""
    described = AdminClient({"bootstrap.servers": _bootstrap(nodes)}).list_topics(topic, timeout=10).topics[topic]
    part = described.partitions.get(partition)
    return -1 if described.error is not None or part is None else int(part.leader)


def offsets_partitions(nodes: Nodes) -> int:
    """How many partitions ``__consumer_offsets`` has (made by the first coordinator lookup)."""
    return len(AdminClient({"bootstrap.servers": _bootstrap(nodes)}).list_topics(OFFSETS, timeout=10)
               .topics[OFFSETS].partitions)


def coordinator(nodes: Nodes, transactional_id: str) -> int:
    """The node coordinating ``transactional_id``: the leader of its ``__consumer_offsets`` partition (-1: none)."""
    return leader_of(nodes, OFFSETS, partition_for(transactional_id, offsets_partitions(nodes)))


def producer(nodes: Nodes, transactional_id: str) -> Producer:
    """A transactional producer (transaction timeout 60 s: no transaction here ends by its timeout), initialized."""
    made = Producer({"bootstrap.servers": _bootstrap(nodes), "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
    made.init_transactions(60)
    return made


def topic_and_producer(nodes: Nodes, topic: NewTopic, transactional_id: str) -> tuple[Producer, int]:
    """``topic`` made, then a transactional :func:`producer` of ``transactional_id`` (the first one's coordinator
    lookup makes ``__consumer_offsets``), and the node coordinating the id."""
    create_topics(_bootstrap(nodes), topic)
    made = producer(nodes, transactional_id)
    c = coordinator(nodes, transactional_id)
    assert c in (1, 2, 3)
    return made, c


def open_transaction(made: Producer, topic: str, partition: int, values: list[bytes]) -> None:
    """A transaction begun with ``values`` written to ``partition`` (delivered, not ended)."""
    made.begin_transaction()
    for value in values:
        made.produce(topic, value=value, partition=partition)
    assert made.flush(60) == 0


def read_committed(nodes: Nodes, topic: str, partitions: list[int], until: set[bytes]) -> list[bytes]:
    """Every value a read_committed consumer reads from ``partitions`` of ``topic`` from offset 0: until it has read
    every value of ``until`` (at most 60 s), then 2 s more for anything beyond."""
    consumer = Consumer({"bootstrap.servers": _bootstrap(nodes), "group.id": "txn-faults-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    read: list[bytes] = []
    deadline, settled = time.monotonic() + 60, 0.0
    try:
        while time.monotonic() < (settled or deadline):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                read.append(msg.value())
            if not settled and until <= set(read):
                settled = time.monotonic() + 2
    finally:
        consumer.close()
    return read


def values(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{k}".encode() for k in range(count)]


def same_partition_id(prefix: str, like: str, partitions: int) -> str:
    """A transactional id ``prefix-<n>`` whose ``__consumer_offsets`` partition is ``like``'s."""
    return next(f"{prefix}-{n}" for n in range(1000)
                if partition_for(f"{prefix}-{n}", partitions) == partition_for(like, partitions))


@pytest.fixture
def nodes(etcd1: EtcdCluster, tmp_path: Path) -> Iterator[Nodes]:
    """Nodes 1-3 ready (:func:`replicated_workload.ready_nodes`)."""
    with ready_nodes(etcd1, tmp_path) as cluster:
        yield cluster


@pytest.mark.parametrize("seed", SEEDS)
def test_coordinator_killed_between_prepare_and_markers(nodes: Nodes, seed: int) -> None:
    rng = random.Random(seed)
    topic = "txm"
    commit_id = f"txm-commit-{seed}"
    committer, c = topic_and_producer(nodes, NewTopic(topic, 3, 1, config={"flush.messages": "1"}), commit_id)
    abort_id = same_partition_id(f"txm-abort-{seed}", commit_id, offsets_partitions(nodes))
    aborter = producer(nodes, abort_id)
    assert coordinator(nodes, abort_id) == c
    placed = {p: leader_of(nodes, topic, p) for p in range(3)}
    p = rng.choice(sorted(q for q, leader in placed.items() if leader not in (c, -1)))
    d = placed[p]
    aborted, committed = values("aborted", rng.randint(1, 8)), values("committed", rng.randint(1, 8))
    open_transaction(aborter, topic, p, aborted)  # (first: the committed records stand behind it)
    open_transaction(committer, topic, p, committed)

    nodes.pause(d)  # the markers for p cannot be written
    with ThreadPoolExecutor(2) as pool:  # (each EndTxn waits for its failed markers: at once)
        ends = [pool.submit(committer.commit_transaction, 60), pool.submit(aborter.abort_transaction, 60)]
        for end in ends:
            end.result()  # answered: the decision is durable, the markers not written
    log = nodes.servers[c].log()
    assert all(f"transaction '{i}' stays decided but not complete" in log for i in (commit_id, abort_id)), log[-3000:]
    nodes.kill(c)  # between prepare and markers
    wait_until("another node coordinates the transactional ids", lambda: coordinator(nodes, commit_id) not in (-1, c))
    nodes.resume(d)

    read = read_committed(nodes, topic, [p], set(committed))
    assert sorted(read) == sorted(committed), f"seed {seed}: C={c} D={d} p={p}"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_zombie_coordinators_writes_are_never_acknowledged(nodes: Nodes, seed: int) -> None:
    rng = random.Random(seed)
    topic = "txz"
    tid = f"txz-{seed}"
    old, c = topic_and_producer(nodes, NewTopic(topic, 2, 3, config={"min.insync.replicas": "2"}), tid)
    p = rng.randrange(2)
    zombie, before, after = (values(tag, rng.randint(1, 8)) for tag in ("zombie", "before", "after"))
    open_transaction(old, topic, p, zombie)

    nodes.pause(c)
    with ThreadPoolExecutor(1) as pool:
        held: Future[None] = pool.submit(old.commit_transaction, 60)  # EndTxn sent to the paused coordinator
        wait_until("another node coordinates the transactional id", lambda: coordinator(nodes, tid) not in (-1, c))
        new = producer(nodes, tid)  # the application's restart: a bumped epoch, the old transaction aborted
        open_transaction(new, topic, p, before)
        new.commit_transaction(60)
        nodes.resume(c)
        with pytest.raises(KafkaException):
            held.result(90)  # never acknowledged
    open_transaction(new, topic, p, after)  # the new producer goes on, the zombie back
    new.commit_transaction(60)

    read = read_committed(nodes, topic, [p], set(before + after))
    assert sorted(read) == sorted(before + after), f"seed {seed}: C={c} p={p}"
