"""The log cleaner's fsyncs run off the storage thread (issue 23): a Produce completes while one is held.

Deterministic, not timed: a hook on ``walgate.storage.fileio.os`` (the one attribute storage's file operations go
through, as the fault tests use it) holds the fsync of the cleaner's first staged log (``<first version>.log.tmp``, the
whole-file fsync before its swap's rename) on an Event. While it is held, a real client (confluent-kafka, acks=1)
produces to the partition being cleaned and consumes what it produced; once it is let go, the pass finishes and a
consumer reads the compacted log. On main that fsync ran on the storage thread, so the produce waited behind it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.gateway_helpers import gateway_thread
from tests.gateway.held_fsync import HeldFsync, holding

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

STAGED_LOG = re.compile(r"/\d{20}\.log\.tmp$")  # a WAL segment's rewritten log, staged by the cleaner


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldFsync]:
    with holding(monkeypatch, STAGED_LOG) as hook:
        yield hook


def consume(bootstrap: str, topic: str, until: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of partition 0 from its log start up to offset ``until`` (bounded)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    while (not got or got[-1][0] < until) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.key(), m.value()))
    consumer.close()
    return got


def test_a_produce_completes_while_the_cleaners_fsync_is_held(tmp_path: Path, held: HeldFsync) -> None:
    with gateway_thread(tmp_path / "data", log_cleaner_backoff_ms=10) as gateway:
        try:
            bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
            configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", "segment.ms": "1"}
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("c", 1, config=configs)])["c"].result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
            for i in range(12):  # k0..k2 four times each, one batch a segment (segment.ms=1)
                producer.produce("c", b"v%d" % i, key=b"k%d" % (i % 3), partition=0)
                assert producer.flush(30) == 0
                time.sleep(0.002)
            assert held.reached.wait(60), "the cleaner never staged a rewritten segment"
            for i in range(12, 15):  # while the cleaner's fsync is held: produced (acks=1) and read back
                producer.produce("c", b"v%d" % i, key=b"new%d" % i, partition=0)
            assert producer.flush(30) == 0, "the produce waited behind the cleaner's fsync"
            assert [v for _, _, v in consume(bootstrap, "c", 14)][-3:] == [b"v12", b"v13", b"v14"]
            assert not held.release.is_set()  # all of that while the fsync was still held
            assert not held.thread.startswith("walgate-storage")
        finally:
            held.release.set()
        deadline = time.monotonic() + 60  # the pass goes on: the old versions of k0..k2 go
        while len(got := consume(bootstrap, "c", 14)) > 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        newest = {k: v for _, k, v in got}
        assert (newest[b"k0"], newest[b"k1"], newest[b"k2"]) == (b"v9", b"v10", b"v11")
        assert [v for _, _, v in got][-3:] == [b"v12", b"v13", b"v14"]
        assert len(got) < 15  # compacted
