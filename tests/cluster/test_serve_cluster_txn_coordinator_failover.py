"""A replicated cluster's transaction coordinator fails over (issue 25, docs/plans/replication-wiring.md step 7,
increment 4): a transactional id's coordinator is the leader of its ``__consumer_offsets`` partition, its state and
the offsets a transaction commits for a group are that partition's records, and after the coordinator's node is
killed -9 the partition's new leader loads them: the producer (confluent-kafka, consume-transform-produce with
``send_offsets_to_transaction``) goes on through the new coordinator, every transaction it committed is read once by
a ``read_committed`` consumer, none it aborted is read, and the group's committed offsets are those of the last
committed transaction (real nodes and etcd).
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback
from test_serve_cluster_replicated_topics import bootstrap, three_nodes

from walgate.storage.coordinator_partitions import partition_for

TID, GROUP, SOURCE, SINK = "txn-failover", "txn-failover-group", "tsrc", "tsink"
BATCHES, PER_BATCH = 24, 3


def _coordinator(servers: str) -> int:
    """The leader of the transactional id's ``__consumer_offsets`` partition (one partition here: partition 0),
    from Metadata (-1: none now)."""
    admin = AdminClient({"bootstrap.servers": servers})
    topic = admin.list_topics(timeout=15).topics.get("__consumer_offsets")
    if topic is None:
        return -1
    return topic.partitions[partition_for(TID, len(topic.partitions))].leader


def _producer(servers: str) -> Producer:
    producer = Producer({"bootstrap.servers": servers, "transactional.id": TID, "transaction.timeout.ms": 60000,
                         "message.timeout.ms": 60000})
    producer.init_transactions(60)
    return producer


def _transaction(producer: Producer, batch: int) -> bool:
    """Batch ``batch``: :data:`PER_BATCH` records to :data:`SINK` and the group's offset of :data:`SOURCE` past
    record ``batch``, committed in one transaction; False when it was aborted (then it is tried again)."""
    producer.begin_transaction()
    for k in range(PER_BATCH):
        producer.produce(SINK, key=b"%d" % batch, value=b"%d-%d" % (batch, k), partition=k % 2)
    offsets = [TopicPartition(SOURCE, 0, batch + 1)]
    try:
        producer.send_offsets_to_transaction(offsets, _metadata(), 60)
        producer.commit_transaction(60)
        return True
    except KafkaException as exc:
        error = exc.args[0]
        if error.fatal() or not (error.txn_requires_abort() or error.retriable()):
            raise
        producer.abort_transaction(60)
        return False


def _metadata():  # noqa: ANN202 - confluent-kafka's ConsumerGroupMetadata has no public type
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": GROUP})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def _read_committed(servers: str, count: int) -> list[bytes]:
    """Every record of :data:`SINK` a ``read_committed`` consumer reads, until ``count`` or 60 s."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "txn-failover-reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(SINK, p, 0) for p in (0, 1)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        end = time.monotonic() + 2  # nothing more than expected arrives
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _committed(servers: str) -> int:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(SOURCE, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


def test_transactions_go_on_through_the_new_coordinator_and_commit_once(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path)
        servers = bootstrap(nodes)
        create_topics(servers, NewTopic(SOURCE, 1, 3), NewTopic(SINK, 2, 3))
        producer = _producer(servers)
        committed = [b for b in range(BATCHES // 2) if _transaction(producer, b)]
        assert committed == list(range(BATCHES // 2)), "no fault yet: every transaction commits"
        coordinator = _coordinator(servers)
        assert coordinator in (1, 2, 3)
        victim = nodes[coordinator - 1]  # (nodes 1, 2, 3 in order)
        producer.begin_transaction()  # one left open at the kill: aborted by its timeout or the next epoch, never read
        producer.produce(SINK, value=b"open-at-kill", partition=0)
        producer.flush(30)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        survivors = [s for s in nodes if s is not victim]
        left = bootstrap(survivors)
        eventually("another node coordinates the transactional id", lambda: _coordinator(left) not in (coordinator, -1))
        try:
            producer.abort_transaction(60)
        except KafkaException:  # (fenced or timed out meanwhile: a new producer takes over below)
            pass
        producer = _producer(left)  # the application's restart: the same transactional id, a bumped epoch
        for batch in range(BATCHES // 2, BATCHES):
            for _ in range(5):
                if _transaction(producer, batch):
                    committed.append(batch)
                    break
        assert committed == list(range(BATCHES))
        records = _read_committed(left, BATCHES * PER_BATCH)
        assert sorted(records) == sorted(b"%d-%d" % (b, k) for b in range(BATCHES) for k in range(PER_BATCH))
        assert _committed(left) == BATCHES, "the last committed transaction's offset"
        for s in survivors:
            no_traceback(s)
