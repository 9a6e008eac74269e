"""walgate only: the transaction coordinator as stock transactional clients use it (issue 17: KIP-98, KIP-447,
KIP-890).

1. The Java 4.3 transactional producer (``java/TransactionalProducer.java``): a transaction committed, one aborted,
   and a zombie: a second producer with the same transactional.id initialises and the first one's next commit fails
   (then its abort with ProducerFencedException). A read_committed consumer (confluent-kafka) sees the committed
   records only. Run at ``transaction.version`` 2 (the default: kafka-clients 4.3 then runs KIP-890 part 2, which
   walgate's request metrics show: Produce v12, EndTxn v5, no AddPartitionsToTxn) and at 1 (AddPartitionsToTxn,
   EndTxn v4), as the Java consume-transform-produce loop (TxnOffsetCommit v5 and no AddOffsetsToTxn at 2);
   kafka-clients 3.9 (no version 2) runs version 1 at both levels.
2. confluent-kafka's consume-transform-produce loop: a read_committed consumer in a group, a transactional producer
   writing each batch's transformed records and ``send_offsets_to_transaction`` (AddOffsetsToTxn, TxnOffsetCommit
   with the consumer's group metadata, KIP-447), then commit; one round aborted. The output holds every input record
   transformed exactly once, and the group's committed offsets are the input's end (never the aborted round's). The
   same loop in Java (``java/ConsumeTransformProduce.java``) in a classic group and in a KIP-848 group.
3. kafkajs 2.2.4 (``node/kjs_txn.js``): commit, abort, and a transaction that commits group offsets; the Java
   Admin's listTransactions (unfiltered and with a transactional id pattern, KIP-1152: ListTransactions v2) /
   describeTransactions (``java/TransactionsAdmin.java``, kafka-transactions.sh's calls).
4. kill -9 of ``walgate serve`` while a transaction is open (it is still open after the restart, with its
   partitions, and the producer's next InitProducerId aborts it), and between PrepareCommit and CompleteCommit (the
   restart writes the commit markers again: the records become visible exactly once); a transaction whose
   transactional id's state is lost is aborted once ``transaction.max.timeout.ms`` has passed after the restart
   (Kafka would leave it hanging, holding back the last stable offset forever). Under transaction version 2: a
   kafka-clients 4.3 transaction decided by EndTxn v5 when the kill came is completed at the bumped epoch.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_brokers import Walgate, serving_walgate
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import running_walgate
from walgate.coordinator.transactions import TransactionCoordinator, Txn, TxnState
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog


@pytest.fixture(scope="module")
def walgate_tv1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    """A walgate whose finalized transaction.version is 1: kafka-clients 4.3 stays on transaction version 1."""
    with serving_walgate(tmp_path_factory.mktemp("walgate-tv1"), "--transaction-version", "1") as server:
        yield server


@pytest.fixture(params=[2, 1], ids=["tv2", "tv1"])
def at_level(request: pytest.FixtureRequest) -> tuple[int, Walgate]:
    """(transaction.version, a walgate finalized at it)."""
    return request.param, request.getfixturevalue("walgate" if request.param == 2 else "walgate_tv1")


def requests_answered(server: Walgate) -> Counter[tuple[str, int]]:
    """(API, version) -> requests walgate answered, from its Prometheus metrics (kafka_network_requestmetrics)."""
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    pattern = r'^kafka_network_requestmetrics_requests_total\{request="(\w+)",version="(\d+)"\} ([0-9.e+]+)$'
    return Counter({(m[1], int(m[2])): int(float(m[3])) for m in re.finditer(pattern, text, re.M)})


def by_api(counts: Counter[tuple[str, int]], api: str) -> dict[int, int]:
    return {v: n for (a, v), n in sorted(counts.items()) if a == api and n}


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


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_transactional_producer_commits_aborts_and_is_fenced(at_level: tuple[int, Walgate], java, show,
                                                                  clients: str) -> None:
    """kafka-clients 3.9 knows no transaction version 2: it runs version 1 on a node finalized at 2 too."""
    level, server = at_level
    tv2 = level == 2 and clients != "3.9"
    topic = f"txn_java_tv{level}_{clients.replace('.', '')}"
    create_topic(server.bootstrap, topic)
    before = requests_answered(server)
    run = java("TransactionalProducer.java", server.bootstrap, topic, f"java-{uuid.uuid4().hex[:8]}", timeout=180,
               clients=clients)
    show(run)
    seen = requests_answered(server) - before
    steps = {s["name"]: s for s in run.events("step")}
    assert [n for n, s in steps.items() if s["ok"]] == ["init", "commit", "abort", "second-init", "second-commit"], \
        run.describe()
    # version 2: the fenced send is INVALID_PRODUCER_EPOCH (abortable, as Kafka's broker-side add answers it), the
    # abort that follows PRODUCER_FENCED; version 1: AddPartitionsToTxn answers PRODUCER_FENCED at once
    fenced_commit = "InvalidProducerEpochException" if tv2 else "ProducerFencedException"
    assert steps["zombie-commit"]["error"] == fenced_commit, run.describe()
    assert steps["zombie-abort"]["error"] == "ProducerFencedException", run.describe()
    assert sorted(read_committed(server.bootstrap, topic)) == ["commit-0", "commit-1", "commit-2", "fenced-by-0"]
    if tv2:  # KIP-890 part 2 in use: no AddPartitionsToTxn reached walgate
        assert set(by_api(seen, "EndTxn")) == {5} and set(by_api(seen, "Produce")) == {12}, seen
        assert by_api(seen, "AddPartitionsToTxn") == {}, seen
    else:
        assert set(by_api(seen, "EndTxn")) <= {3, 4} and set(by_api(seen, "Produce")) <= {9, 10, 11}, seen
        assert set(by_api(seen, "AddPartitionsToTxn")) == {3}, seen
    assert "Traceback" not in server.log()


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
def test_java_consume_transform_produce(at_level: tuple[int, Walgate], java, show, protocol: str) -> None:
    """KIP-447 from the Java clients: sendOffsetsToTransaction with the consumer's group metadata, in a classic group
    (generation) and in a KIP-848 group (member epoch); at transaction.version 2 the group joins the transaction
    with TxnOffsetCommit v5 (no AddOffsetsToTxn)."""
    level, server = at_level
    source, sink = f"jctp_in_{protocol}_tv{level}", f"jctp_out_{protocol}_tv{level}"
    group = f"jctp-{protocol}-tv{level}"
    create_topic(server.bootstrap, source)
    create_topic(server.bootstrap, sink)
    plain = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(30):
        plain.produce(source, f"in-{i}".encode(), partition=i % 2)
    assert plain.flush(30) == 0
    before = requests_answered(server)
    run = java("ConsumeTransformProduce.java", server.bootstrap, source, sink, group, f"jctp-{uuid.uuid4().hex[:8]}",
               "30", protocol, timeout=120)
    show(run)
    seen = requests_answered(server) - before
    assert [s["consumed"] for s in run.events("summary")] == [30], run.describe()
    assert sorted(read_committed(server.bootstrap, sink)) == sorted(f"out-in-{i}" for i in range(30))
    assert committed_offsets(server.bootstrap, group, source) == [15, 15]
    if level == 2:
        assert set(by_api(seen, "TxnOffsetCommit")) == {5} and by_api(seen, "AddOffsetsToTxn") == {}, seen
    else:
        assert set(by_api(seen, "TxnOffsetCommit")) == {4} and set(by_api(seen, "AddOffsetsToTxn")) == {4}, seen
    assert "Traceback" not in server.log()


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
    _open_transaction(walgate.bootstrap, topic, f"other-{uuid.uuid4().hex[:8]}")
    run = java("TransactionsAdmin.java", walgate.bootstrap, tid, "described-.*", timeout=120)
    show(run)
    listed = {t["id"]: t["state"] for t in run.events("listed")}
    assert listed.get(tid) == "Ongoing", run.describe()
    assert any(t.startswith("other-") for t in listed), run.describe()
    assert [t["id"] for t in run.events("matched")] == [tid], run.describe()  # ListTransactions v2's pattern
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
    # transaction.version 2: the fence (epoch 1) is bumped again by its abort, the retried InitProducerId bumps it
    assert (states["crash-open"].state, states["crash-open"].producer_epoch) == (TxnState.EMPTY, 3)


def test_kill_9_between_a_version_2_decision_and_its_markers(tmp_path: Path, java, show) -> None:
    """kafka-clients 4.3 at transaction.version 2 leaves a transaction open (its partitions added by Produce v12);
    walgate is killed (-9) with it decided by an EndTxn v5 but no marker written: the restart writes the markers at
    the bumped epoch and completes it there, before any client is served."""
    topic, tid, data = "txn_crash_v2", f"crash-v2-{uuid.uuid4().hex[:8]}", tmp_path / "data"
    with running_walgate(tmp_path / "run1", data_dir=data) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        create_topic(bootstrap, topic)
        run = java("TransactionalProducer.java", bootstrap, topic, tid, "--leave-open", timeout=120)
        show(run)
        assert [s["ok"] for s in run.events("step")] == [True], run.describe()
        server.proc.kill()  # kill -9
        server.proc.wait(30)
    log = TransactionLog.open(data / TRANSACTIONS_LOG)
    ongoing = Txn.from_record(tid, log.records[tid])
    assert (ongoing.state, ongoing.tv, len(ongoing.partitions)) == (TxnState.ONGOING, 2, 2)  # added by Produce v12
    # what the EndTxn v5 (commit) of that producer makes durable before its markers: the coordinator's own decision
    coordinator = TransactionCoordinator()
    coordinator.apply(tid, ongoing)
    decided = coordinator.end_txn(tid, ongoing.producer_id, ongoing.producer_epoch, True, int(time.time() * 1000), 2,
                                  lambda: -1)
    assert decided.txn is not None and decided.txn.producer_epoch == ongoing.producer_epoch + 1
    log.append([(tid, decided.txn.to_record())])
    with running_walgate(tmp_path / "run2", data_dir=data) as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        assert sorted(read_committed(bootstrap, topic)) == [f"open-{i}" for i in range(3)]  # exactly once
        for partition in ("0", "1"):  # the markers carried the bumped epoch (kafka-transactions.sh's view)
            producers = java("DescribeProducers.java", bootstrap, topic, partition, timeout=60).events("producer")
            assert [(p["id"], p["epoch"], p["txn_start_offset"]) for p in producers] == \
                [(ongoing.producer_id, ongoing.producer_epoch + 1, None)]
        assert "Traceback" not in server.log()
    done = Txn.from_record(tid, TransactionLog.open(data / TRANSACTIONS_LOG).records[tid])
    assert (done.state, done.producer_id, done.producer_epoch) == \
        (TxnState.COMPLETE_COMMIT, ongoing.producer_id, ongoing.producer_epoch + 1)
