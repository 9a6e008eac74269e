"""walgate only: the transaction coordinator as stock transactional clients use it (issue 17: KIP-98, KIP-447).

1. The Java 4.3 transactional producer (``java/TransactionalProducer.java``): a transaction committed, one aborted,
   and a zombie: a second producer with the same transactional.id initialises and the first one's next commit fails
   with ProducerFencedException. A read_committed consumer (confluent-kafka) sees the committed records only.
2. confluent-kafka's consume-transform-produce loop: a read_committed consumer in a group, a transactional producer
   writing each batch's transformed records and ``send_offsets_to_transaction`` (AddOffsetsToTxn, TxnOffsetCommit
   with the consumer's group metadata, KIP-447), then commit; one round aborted. The output holds every input record
   transformed exactly once, and the group's committed offsets are the input's end (never the aborted round's). The
   same loop in Java (``java/ConsumeTransformProduce.java``) in a classic group and in a KIP-848 group.
3. kafkajs 2.2.4 (``node/kjs_txn.js``): commit, abort, and a transaction that commits group offsets; the Java
   Admin's listTransactions / describeTransactions (``java/TransactionsAdmin.java``, kafka-transactions.sh's calls).
4. kill -9 of ``walgate serve`` while a transaction is open (it is still open after the restart, with its
   partitions, and the producer's next InitProducerId aborts it), and between PrepareCommit and CompleteCommit (the
   restart writes the commit markers again: the records become visible exactly once); a transaction whose
   transactional id's state is lost is aborted once ``transaction.max.timeout.ms`` has passed after the restart
   (Kafka would leave it hanging, holding back the last stable offset forever).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from compat_brokers import Walgate
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import running_walgate
from walgate.coordinator.transactions import Txn, TxnState
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def read_committed(bootstrap: str, topic: str, partitions: int = 2, *, timeout: float = 30) -> list[str]:
    """Every record value of ``topic`` a read_committed consumer gets up to the end it is told (the last stable
    offset), partition by partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[int, list[str]] = {p: [] for p in range(partitions)}
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"read_committed did not reach the end of {topic}: {values}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            values[msg.partition()].append(msg.value().decode())
        return [v for p in range(partitions) for v in values[p]]
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)]
    finally:
        consumer.close()


def test_java_transactional_producer_commits_aborts_and_is_fenced(walgate: Walgate, java, show) -> None:
    topic = "txn_java"
    create_topic(walgate.bootstrap, topic)
    run = java("TransactionalProducer.java", walgate.bootstrap, topic, f"java-{uuid.uuid4().hex[:8]}", timeout=180)
    show(run)
    steps = {s["name"]: s for s in run.events("step")}
    assert [n for n, s in steps.items() if s["ok"]] == ["init", "commit", "abort", "second-init", "second-commit"], \
        run.describe()
    assert steps["zombie-commit"]["error"] == "ProducerFencedException", run.describe()
    assert sorted(read_committed(walgate.bootstrap, topic)) == ["commit-0", "commit-1", "commit-2", "fenced-by-0"]


def test_confluent_consume_transform_produce_with_send_offsets(walgate: Walgate) -> None:
    source, sink, group = "txn_in", "txn_out", "txn-loop"
    create_topic(walgate.bootstrap, source)
    create_topic(walgate.bootstrap, sink)
    plain = Producer({"bootstrap.servers": walgate.bootstrap})
    for i in range(40):
        plain.produce(source, f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": walgate.bootstrap, "transactional.id": f"loop-{uuid.uuid4().hex[:8]}",
                         "transaction.timeout.ms": 60_000})
    try:
        producer.init_transactions(30)
        consumer.subscribe([source])
        seen: set[str] = set()
        aborted_once = False
        deadline = time.monotonic() + 90
        while len(seen) < 40:
            assert time.monotonic() < deadline, f"the loop did not consume every record: {sorted(seen)}"
            batch = [m for m in consumer.consume(10, 1.0) if not m.error()]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            if not aborted_once:  # the first round is aborted: its records and offsets must vanish
                aborted_once = True
                producer.abort_transaction(30)
                for tp in consumer.assignment():
                    first = min(m.offset() for m in batch if m.partition() == tp.partition) \
                        if any(m.partition() == tp.partition for m in batch) else None
                    if first is not None:
                        consumer.seek(TopicPartition(source, tp.partition, first))
                continue
            producer.commit_transaction(30)
            seen.update(m.value().decode() for m in batch)
    finally:
        consumer.close()
    out = read_committed(walgate.bootstrap, sink)
    assert sorted(out) == sorted(f"out-in-{i}" for i in range(40))  # exactly once, the aborted round never
    assert committed_offsets(walgate.bootstrap, group, source) == [20, 20]


def test_read_committed_committed_offsets_wait_for_the_transaction_holding_them(walgate: Walgate) -> None:
    """librdkafka's committed() under read_committed sets require_stable: UNSTABLE_OFFSET_COMMIT, which it retries
    until its timeout, while a transaction holds the group's offset; the offset once the transaction commits."""
    topic, group = "txn_stable", f"stable-{uuid.uuid4().hex[:8]}"
    create_topic(walgate.bootstrap, topic, 1)
    tp = [TopicPartition(topic, 0)]
    stable = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": group, "isolation.level": "read_committed"})
    loose = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": group,
                      "isolation.level": "read_uncommitted"})
    producer = Producer({"bootstrap.servers": walgate.bootstrap, "transactional.id": f"stable-{uuid.uuid4().hex[:8]}"})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], stable.consumer_group_metadata(), 30)
        with pytest.raises(KafkaException):
            stable.committed(tp, 3)
        assert loose.committed(tp, 30)[0].offset < 0  # no stable offset asked: none committed yet
        producer.commit_transaction(30)
        assert stable.committed(tp, 30)[0].offset == 7
    finally:
        stable.close()
        loose.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_consume_transform_produce(walgate: Walgate, java, show, protocol: str) -> None:
    """KIP-447 from the Java clients: sendOffsetsToTransaction with the consumer's group metadata, in a classic group
    (generation) and in a KIP-848 group (member epoch)."""
    source, sink, group = f"jctp_in_{protocol}", f"jctp_out_{protocol}", f"jctp-{protocol}"
    create_topic(walgate.bootstrap, source)
    create_topic(walgate.bootstrap, sink)
    plain = Producer({"bootstrap.servers": walgate.bootstrap})
    for i in range(30):
        plain.produce(source, f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(30) == 0
    run = java("ConsumeTransformProduce.java", walgate.bootstrap, source, sink, group, f"jctp-{uuid.uuid4().hex[:8]}",
               "30", protocol, timeout=120)
    show(run)
    assert [s["consumed"] for s in run.events("summary")] == [30], run.describe()
    assert sorted(read_committed(walgate.bootstrap, sink)) == sorted(f"out-in-{i}" for i in range(30))
    assert committed_offsets(walgate.bootstrap, group, source) == [15, 15]


def test_kafkajs_transactions(walgate: Walgate, node, show) -> None:
    """kafkajs's TxnOffsetCommit (v0/v1) has no member fields: accepted while the group has a member (Kafka's
    validateOffsetCommit for a transactional commit)."""
    topic, group = "txn_kjs", "kjs-offsets"
    create_topic(walgate.bootstrap, topic)
    member = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "the member did not join its group"
            member.poll(0.2)
        run = node("kjs_txn.js", walgate.bootstrap, topic, f"kjs-{uuid.uuid4().hex[:8]}", group, timeout=120)
    finally:
        member.close()
    show(run)
    assert [s["name"] for s in run.events("step") if s["ok"]] == ["commit", "abort", "offsets"], run.describe()
    assert sorted(read_committed(walgate.bootstrap, topic)) == ["commit-0", "commit-1", "commit-2", "offsets-0"]
    assert committed_offsets(walgate.bootstrap, group, topic)[0] == 3


def _open_transaction(bootstrap: str, topic: str, tid: str) -> None:
    """A confluent-kafka transactional producer leaves a transaction open: records sent and acknowledged, no end."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 300_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"{tid}-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def test_java_admin_lists_and_describes_transactions(walgate: Walgate, java, show) -> None:
    """kafka-transactions.sh's calls: Admin.listTransactions and describeTransactions of an open transaction."""
    topic, tid = "txn_admin", f"described-{uuid.uuid4().hex[:8]}"
    create_topic(walgate.bootstrap, topic)
    _open_transaction(walgate.bootstrap, topic, tid)
    run = java("TransactionsAdmin.java", walgate.bootstrap, tid, timeout=120)
    show(run)
    listed = {t["id"]: t["state"] for t in run.events("listed")}
    assert listed.get(tid) == "Ongoing", run.describe()
    (described,) = run.events("described")
    assert (described["state"], described["producerEpoch"], described["timeoutMs"], described["partitions"]) == (
        "Ongoing", 0, 300_000, [f"{topic}-0", f"{topic}-1"]), run.describe()


def test_kill_9_with_a_transaction_open_and_between_prepare_and_complete(tmp_path: Path) -> None:
    topic = "txn_crash"
    data = tmp_path / "data"
    with running_walgate(tmp_path / "run1", data_dir=data) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        create_topic(bootstrap, topic)
        _open_transaction(bootstrap, topic, "crash-open")
        _open_transaction(bootstrap, topic, "crash-prepared")
        _open_transaction(bootstrap, topic, "crash-lost")
        server.proc.kill()  # kill -9
        server.proc.wait(30)
    # what a kill between PrepareCommit and CompleteCommit leaves: the decision durable, no marker yet
    log = TransactionLog.open(data / TRANSACTIONS_LOG)
    prepared = Txn.from_record("crash-prepared", log.records["crash-prepared"])
    assert prepared.state is TxnState.ONGOING and len(prepared.partitions) == 2
    log.append([("crash-prepared", {**prepared.to_record(), "state": TxnState.PREPARE_COMMIT.value})])
    # and a transactional id whose state is lost: its producer's open transaction belongs to nobody
    log.append([("crash-lost", None)])
    settings = ("--override", "transaction.max.timeout.ms=3000",
                "--override", "transaction.abort.timed.out.transaction.cleanup.interval.ms=100")
    with running_walgate(tmp_path / "run2", *settings, data_dir=data) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        # the open transaction (first in both partitions) holds back the last stable offset until its producer
        # comes back: its InitProducerId aborts the transaction left open
        again = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-open",
                          "transaction.timeout.ms": 3000})
        again.init_transactions(60)
        # the prepared one was committed at start, before any client was served: its records, exactly once
        assert sorted(read_committed(bootstrap, topic)) == [f"crash-prepared-{i}" for i in range(3)]
        # the orphan is aborted once transaction.max.timeout.ms has passed
        assert "that no transactional id runs: it is aborted in 3000 ms" in server.log()
        deadline = time.monotonic() + 30
        while "transaction that no transactional id runs is aborted in txn_crash-0, txn_crash-1" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.2)
        assert sorted(read_committed(bootstrap, topic)) == [f"crash-prepared-{i}" for i in range(3)]
        assert "Traceback" not in server.log()
    states = {t: Txn.from_record(t, r) for t, r in TransactionLog.open(data / TRANSACTIONS_LOG).records.items()}
    assert states["crash-prepared"].state is TxnState.COMPLETE_COMMIT
    assert (states["crash-open"].state, states["crash-open"].producer_epoch) == (TxnState.EMPTY, 2)
