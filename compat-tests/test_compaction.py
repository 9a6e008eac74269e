"""Compacted topics (issue 17) with real clients: kafka-python's admin creates one, confluent-kafka produces every key
over and over, the cleaner runs (``log.cleaner.backoff.ms`` short, ``segment.ms`` rolling segments), and
confluent-kafka, kafka-python, aiokafka, the Java client, kafkajs, @confluentinc/kafka-javascript and kcat read
from the beginning: the newest record of every
key, at the offsets it was given (gaps where the cleaner dropped batches), tombstones gone after
``delete.retention.ms``. A TDengine topic cannot be compacted (INVALID_CONFIG)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_brokers import Walgate, serving_walgate
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient, NewTopic
from test_transactions import ck_read

from livewalgate import running_walgate
from walgate.storage.engine import Engine
from walgate.wire import decode_batches

KEYS = [f"k{i}" for i in range(5)]
ROUNDS = 6
CONFIGS = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "100"}


@pytest.fixture(scope="module")
def walgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    with serving_walgate(tmp_path_factory.mktemp("walgate"), "--override", "log.cleaner.backoff.ms=100") as server:
        yield server


def produce_rounds(bootstrap: str, topic: str) -> dict[str, tuple[int, str | None]]:
    """ROUNDS rounds of every key (k4 deleted by a tombstone in the last but one), one segment each; the newest
    (offset, value) per key."""
    newest: dict[str, tuple[int, str | None]] = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True})
    for r in range(ROUNDS):
        reports: list[tuple[str, int, str | None]] = []
        for key in KEYS:
            value = None if (key == "k4" and r == ROUNDS - 2) else f"{key}-{r}"
            if key == "k4" and r == ROUNDS - 1:
                continue  # k4's tombstone stays its newest record
            p.produce(topic, value.encode() if value else None, key.encode(), on_delivery=lambda err, msg: reports.append(
                (msg.key().decode(), msg.offset(), None if msg.value() is None else msg.value().decode())))
        p.flush(20)
        for key, offset, value in reports:
            newest[key] = (offset, value)
        time.sleep(0.15)  # the next append rolls the segment (segment.ms)
    return newest


def read_all(bootstrap: str, topic: str) -> list[tuple[int, str, str | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, str, str | None]] = []
        deadline = time.monotonic() + 20
        position = low
        while position < high and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            out.append((m.offset(), m.key().decode(), None if m.value() is None else m.value().decode()))
            position = m.offset() + 1
        return out
    finally:
        c.close()


def test_a_compacted_topic_keeps_the_newest_record_per_key(walgate: Walgate, pyclient, java, node, kcat):
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=walgate.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=CONFIGS)])
        described = admin.describe_configs([KpConfigResource("TOPIC", topic)])
        assert "compact" in str(described)
    finally:
        admin.close()
    newest = produce_rounds(walgate.bootstrap, topic)
    p = Producer({"bootstrap.servers": walgate.bootstrap})
    p.produce(topic, b"last", b"k9")  # seals the last round's segment (the active one is never cleaned)
    p.flush(10)
    tail = read_all(walgate.bootstrap, topic)[-1]
    newest["k9"] = (tail[0], "last")
    del newest["k4"]  # its tombstone goes after delete.retention.ms (100 ms)
    want = sorted((offset, key, value) for key, (offset, value) in newest.items())
    deadline = time.monotonic() + 30
    got = read_all(walgate.bootstrap, topic)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.3)
        got = read_all(walgate.bootstrap, topic)
    assert got == want, walgate.log()[-3000:]
    assert want[0][0] > 0  # a gap from the log start (0) to the first kept record, as in Kafka
    for client in ("kp_assign.py", "aio_assign.py"):  # kafka-python and aiokafka read the same
        run = pyclient(client, walgate.bootstrap, topic, "--start", "beginning")
        assert [(d["offset"], d["key"], d["value"]) for d in run.events("record")] == want, run.describe()
    run = java("Assign.java", walgate.bootstrap, topic, "--start", "beginning")  # the Java client too
    assert [(d["offset"], d["key"], d["value"]) for d in run.events("record")] == want, run.describe()
    for script in ("kjs_read.js", "ckjs_assign.js"):  # kafkajs and @confluentinc/kafka-javascript
        run = node(script, walgate.bootstrap, topic, "--start", "beginning")
        assert sorted((d["offset"], d["key"], d["value"]) for d in run.events("record")) == want, run.describe()
    run = kcat("-C", "-b", walgate.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%o %k %s\\n")
    assert [tuple(line.split(" ")) for line in run.stdout.splitlines()] == [(str(o), k, v) for o, k, v in want]
    assert "Traceback" not in walgate.log()


def test_compaction_is_turned_on_later_and_refused_for_tdengine_topics(walgate: Walgate):
    topic = f"later-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    admin.create_topics([CkNewTopic(topic, 1, 1, config={"segment.ms": "100"})])[topic].result(timeout=30)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    described = admin.describe_configs([ConfigResource("TOPIC", topic)])
    configs = next(iter(described.values())).result(timeout=30)
    assert configs["cleanup.policy"].value == "compact" and configs["delete.retention.ms"].value == "86400000"
    walgate.sql("CREATE DATABASE IF NOT EXISTS cdb VGROUPS 1")
    walgate.sql("CREATE STABLE IF NOT EXISTS cdb.m (ts TIMESTAMP, v INT) TAGS (s INT)")
    walgate.sql("CREATE TOPIC IF NOT EXISTS tdtopic AS STABLE cdb.m")
    refused = ConfigResource("TOPIC", "tdtopic", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([refused])[refused].result(timeout=30)
    assert info.value.args[0].name() == "INVALID_CONFIG" and "cannot be compacted" in info.value.args[0].str()


def test_a_compacted_topic_refuses_records_without_a_key(walgate: Walgate):
    """Kafka's LogValidator: INVALID_RECORD for a keyless record on a compacted topic, nothing of it written; the
    policy may come from the dynamic broker default (``log.cleanup.policy``), as Kafka's does."""
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    own, inherited = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("keyless", "inherits"))
    admin.create_topics([CkNewTopic(own, 1, 1, config={"cleanup.policy": "compact"}),
                         CkNewTopic(inherited, 1, 1)])[own].result(timeout=30)
    node = str(next(iter(admin.list_topics(timeout=10).brokers)))
    broker = ConfigResource("BROKER", node, incremental_configs=[
        ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([broker])[broker].result(timeout=30)
    try:
        p = Producer({"bootstrap.servers": walgate.bootstrap, "enable.idempotence": False, "retries": 0})
        reports: list[tuple[str, str | None, int]] = []
        for topic in (own, inherited):
            for key in (b"k", None):
                p.produce(topic, b"v", key, on_delivery=lambda err, msg: reports.append(
                    (msg.topic(), err.name() if err else None, msg.offset())))
                p.flush(20)
        assert [(t, e) for t, e, _ in reports] == [(own, None), (own, "INVALID_RECORD"),
                                                   (inherited, None), (inherited, "INVALID_RECORD")]
        low, high = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": "wm"}).get_watermark_offsets(
            TopicPartition(own, 0), timeout=10)
        assert (low, high) == (0, 1)  # the refused record took no offset
    finally:
        reset = ConfigResource("BROKER", node, incremental_configs=[
            ConfigEntry("log.cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])
        admin.incremental_alter_configs([reset])[reset].result(timeout=30)


def test_the_markers_of_a_cleaned_transactional_topic_go_and_read_committed_still_sees_the_newest(
        tmp_path: Path, java) -> None:
    """walgate only: a transactional producer (confluent-kafka) rewrites three keys in eight transactions (two
    aborted) of a compacted topic; plain records keep segments rolling so passes follow. The cleaner removes the
    aborted records, the superseded ones, then (a pass later, after ``delete.retention.ms``) the markers whose
    transaction has no batch left. Restarted on that log (the transaction state rebuilt without those markers), a
    read_committed consumer (confluent-kafka, the Java console consumer) gets exactly the newest committed record
    of each key and reaches the high watermark (the last stable offset is not held back by a lost transaction)."""
    topic = "txn-compacted"
    args = ("--override", "log.cleaner.backoff.ms=100")
    with running_walgate(tmp_path, *args) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([CkNewTopic(topic, 1, 1, config={
            "cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100"})])[topic].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tc-{uuid.uuid4().hex[:6]}",
                             "linger.ms": 5})
        producer.init_transactions(30)
        for r in range(8):  # several transactions in a segment: their markers are inside it
            producer.begin_transaction()
            for key in ("k0", "k1", "k2"):
                producer.produce(topic, f"{key}-{r}".encode(), key.encode(), partition=0)
            if r in (2, 5):
                producer.flush(30)
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        plain = Producer({"bootstrap.servers": bootstrap})
        for n in range(10):  # roll segments: every pass has something dirty
            time.sleep(0.6)
            plain.produce(topic, f"tick-{n}".encode(), b"tick", partition=0)
            plain.flush(10)
        want = ["k0-7", "k1-7", "k2-7", "tick-8", "tick-9"]  # (tick-9, in the active segment, is not mapped)
        deadline = time.monotonic() + 30
        got, _, _ = ck_read(bootstrap, "read_committed", 0, topic)
        while got != want and time.monotonic() < deadline:
            time.sleep(0.5)
            got, _, _ = ck_read(bootstrap, "read_committed", 0, topic)
        assert got == want, server.log()[-3000:]
        assert "Traceback" not in server.log()
    e = Engine.open(tmp_path / "data")
    try:
        markers = [r for _, version, _ in e.index_entries(topic, 0, 0)
                   for b in decode_batches(e.kafka_batch(topic, 0, version)) if b.is_control for r in b.records]
    finally:
        e.close()
    assert len(markers) < 8  # some markers went (the producer's last batches and its first one stay)
    with running_walgate(tmp_path, *args) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        for isolation in ("read_committed", "read_uncommitted"):
            got, position, high = ck_read(bootstrap, isolation, 0, topic)
            assert (got, position) == (want, high), isolation
        run = java("ConsoleConsumer.java", "--bootstrap-server", bootstrap, "--topic", topic, "--group",
                   f"tc-java-{uuid.uuid4().hex[:6]}", "--from-beginning", "--max-messages", "5", "--timeout-ms",
                   "10000", "--consumer-property", "isolation.level=read_committed")
        assert run.stdout.splitlines() == want
        assert "Traceback" not in server.log()
