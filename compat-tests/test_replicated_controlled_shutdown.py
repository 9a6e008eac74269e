"""A controlled shutdown watched by Kafka clients (issue 25 "controlled shutdown moves leadership first", issue 26):
confluent-kafka's idempotent producer (acks=all) and an assigned consumer on a Kafka topic of replication factor 3
and ``min.insync.replicas=2`` on a 3-node cluster (tests/jepsen/replicated_workload.py's nodes over one etcd
member), while partition 0's leader gets SIGTERM, then is started again.

The node hands its leadership over before it stops (its log says so and it exits 0). No delivery report carries an
error and every value is delivered; whatever ``error_cb`` is told is retriable, never fatal (measured: nothing at all,
1119 deliveries); the consumer reads on from the new leader (values sent after the SIGTERM, before the restart). The history checker (tests/cluster/history.py), given every
delivery with its offset, every read and a final read of each partition: nothing acknowledged lost, nothing
duplicated, one value per offset, no read going back or skipping.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from history import Assign, FinalRead, Op, Poll, Send, Write, check  # noqa: E402
from replicated_workload import Nodes, three_ready, wait_until  # noqa: E402

TOPIC, PARTITIONS = "cs", 2
ACKS = 30  # deliveries between steps
PRODUCER, CONSUMER, FINAL = 1, 100, 200


class Clients:
    """A producer sending ``0, 1, 2, ...`` (value i to partition i % PARTITIONS, one every 10 ms) and a consumer
    of both partitions from offset 0, each in a thread, recording the history; ``errors``: what ``error_cb`` got."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.history: list[Op] = []
        self.errors: list[KafkaError] = []
        self.delivered = 0
        self.sent = 0  # the next value the producer sends
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def record(self, op: Op) -> None:
        with self.lock:
            self.history.append(op)

    def wait_delivered(self, more: int, what: str) -> None:
        target = self.delivered + more
        wait_until(f"{more} more deliveries ({what}; errors {self.errors})", lambda: self.delivered >= target)

    def values_read(self, partition: int) -> set[int]:
        with self.lock:
            return {v for op in self.history if isinstance(op, Poll) for v in (int(x) for _, x in op.reads.get(
                f"p{partition}", ()))}

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "error_cb": self.errors.append, "reconnect.backoff.max.ms": 200})

        def report(err: KafkaError | None, msg: object, value: int) -> None:
            if err is None:
                self.record(Send(PRODUCER, (Write(f"p{msg.partition()}", value, msg.offset()),), "ok"))
                with self.lock:
                    self.delivered += 1
            else:  # (any error the producer reports is one the test fails on: see test_...)
                self.errors.append(err)
                self.record(Send(PRODUCER, (Write(f"p{value % PARTITIONS}", value),), "info"))

        value = 0
        while not self.stop.is_set():
            producer.produce(TOPIC, str(value).encode(), partition=value % PARTITIONS,
                             on_delivery=lambda err, msg, v=value: report(err, msg, v))
            producer.poll(0.01)
            value += 1
            self.sent = value
        assert producer.flush(60) == 0, "undelivered after 60 s"

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "cs-reader", "enable.auto.commit": False,
                             "reconnect.backoff.max.ms": 200, "topic.metadata.refresh.interval.ms": 1000})
        try:
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            self.record(Assign(CONSUMER))
            while not self.stop.is_set():
                m = consumer.poll(0.2)
                if m is None or m.error() is not None:
                    continue
                self.record(Poll(CONSUMER, {f"p{m.partition()}": [(m.offset(), int(m.value()))]}))
        finally:
            consumer.close()


def leader_of(nodes: Nodes, partition: int) -> int:
    """The leader Metadata names for ``partition`` of the topic, asked of any running node (-1: none)."""
    described = AdminClient({"bootstrap.servers": nodes.bootstrap()}).list_topics(TOPIC, timeout=10).topics[TOPIC]
    part = described.partitions.get(partition)
    return -1 if part is None else int(part.leader)


def final_read(bootstrap: str, partition: int) -> FinalRead:
    """Partition ``partition`` read in full, up to the end ListOffsets gives."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cs-final", "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[1]
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        pairs: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while (pairs[-1][0] + 1 if pairs else 0) < end:
            assert time.monotonic() < deadline, f"partition {partition} read to {pairs[-1:]}, not {end}"
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                pairs.append((m.offset(), int(m.value())))
        return FinalRead(FINAL, f"p{partition}", pairs)
    finally:
        consumer.close()


def test_a_controlled_shutdown_of_a_leader_under_confluent_kafka_clients(tmp_path: Path) -> None:
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path)
        try:
            nodes.start_all((1, 2, 3))
            three_ready(nodes)
            admin = AdminClient({"bootstrap.servers": nodes.bootstrap()})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
            wait_until("a leader of each partition", lambda: all(leader_of(nodes, p) in (1, 2, 3)
                                                               for p in range(PARTITIONS)))
            leader = leader_of(nodes, 0)
            with Clients(nodes.bootstrap()) as clients:
                clients.wait_delivered(ACKS, "before the SIGTERM")
                first_after = clients.sent
                code = nodes.stop(leader)
                log = next(p for p in reversed(nodes.logs()) if p.parent.name == f"node{leader}").read_text()
                assert code == 0 and "controlled shutdown: leadership of" in log, (code, log[-3000:])
                clients.wait_delivered(ACKS, f"after node {leader}'s SIGTERM")
                wait_until("the consumer read partition 0 from its new leader",
                           lambda: max(clients.values_read(0), default=-1) >= first_after)
                nodes.start(leader)
                clients.wait_delivered(ACKS, f"after node {leader} restarted")
            history = clients.history + [final_read(nodes.bootstrap(), p) for p in range(PARTITIONS)]
            logs = [p.read_text() for p in nodes.logs()]
        finally:
            nodes.close()
    assert not [e for e in clients.errors if e.fatal()], clients.errors
    assert all(e.retriable() or e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
               for e in clients.errors), clients.errors
    assert not [op for op in history if isinstance(op, Send) and op.outcome != "ok"], "a delivery failed"
    found = check(history)
    assert found == [], f"{len(found)} violations, the first: {found[:10]}"
    assert not [log for log in logs if "Traceback" in log]
    print(f"delivered {clients.delivered}, error_cb: {[e.name() for e in clients.errors]}")
