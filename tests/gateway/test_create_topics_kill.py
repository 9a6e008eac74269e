"""kill -9 while topics are being created, their files made off the storage thread first (issue 23): after each
restart every topic whose creation was acknowledged is served with its partitions (a record produced to it is read
back), the node answers, and the only damage reported is a directory no catalog record names (a topic's files made
and not yet recorded when the kill came, kept as a kill during a creation always left it)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from livewalgate import running_walgate
from walgate.storage.engine import Engine

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

CYCLES = 3
PARTITIONS = 2
UNNAMED = "is named by no catalog record"


class Creator(threading.Thread):
    """Creates topics one request each until the server dies; ``acked``: the names answered created."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
        self.prefix = prefix
        self.acked: list[str] = []

    def run(self) -> None:
        for i in range(10_000):  # bounded; the kill ends it far sooner
            name = f"{self.prefix}-{i}"
            try:
                self.admin.create_topics([NewTopic(name, PARTITIONS)], request_timeout=5)[name].result(10)
            except Exception:  # noqa: BLE001 - the server is gone
                return
            self.acked.append(name)


def _served(bootstrap: str, topics: list[str]) -> None:
    """Each of ``topics`` has PARTITIONS partitions, and a record produced to its last one is read back."""
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    for name in topics:
        assert name in listed and len(listed[name].partitions) == PARTITIONS, name
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for name in topics:
        producer.produce(name, b"after " + name.encode(), partition=PARTITIONS - 1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, PARTITIONS - 1, 0) for name in topics])
    got: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(got) < len(topics) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.add(m.value())
    consumer.close()
    assert got == {b"after " + name.encode() for name in topics}


def test_kill_9_while_creating_topics_keeps_every_acknowledged_topic(tmp_path: Path) -> None:
    rng = random.Random(23)
    data_dir = tmp_path / "data"
    acked: list[str] = []
    for cycle in range(CYCLES + 1):
        with running_walgate(tmp_path / f"run{cycle}", data_dir=data_dir) as server:
            bootstrap = f"127.0.0.1:{server.kafka_port}"
            if acked:
                _served(bootstrap, acked[-5:])  # (the last ones: those nearest to the kill)
                assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics.keys() >= set(acked)
            if cycle == CYCLES:
                break
            creator = Creator(bootstrap, f"c{cycle}")
            creator.start()
            deadline = time.monotonic() + 60
            while len(creator.acked) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.5))
            server.proc.kill()
            server.proc.wait(15)
            creator.join(30)
            acked += creator.acked
            assert creator.acked, "no topic was created before the kill"
    engine = Engine.open(data_dir)
    try:
        assert set(acked) <= set(engine.catalog.topics)
        assert all(UNNAMED in d.reason for d in engine.damage())  # nothing else damaged
        assert len(engine.damage()) <= CYCLES  # at most the one topic being made at each kill
    finally:
        engine.close()
