"""Transaction coordinators sharded over the nodes, markers written between them (docs/cluster.md, "Transaction
coordinators"): real ``walgate serve --cluster`` nodes over a real etcd (stopped by PID),
``offsets.topic.num.partitions=4`` placed 1, 2, 1, 2, and a topic of 2 partitions, partition 0 on node 1 and 1 on
node 2, so every transaction below spans both nodes.

* FindCoordinator of a transactional id names the node of its partition through either node; every transactional API
  of node 2's id asked of node 1 answers NOT_COORDINATOR; WriteTxnMarkers from anything but a cluster node is
  CLUSTER_AUTHORIZATION_FAILED and writes nothing.
* The Java client's transactional producer (kafka-clients 4.3, transaction version 2), bootstrapped on node 1 with an
  id node 2 coordinates: committed, aborted and fenced transactions over both partitions; a read_committed consumer
  (confluent-kafka) sees exactly the committed records on both nodes.
* Then, on the same nodes, consume-transform-produce with the group on node 2 and the id on node 1 (Java, transaction
  version 2), and confluent-kafka's send_offsets_to_transaction with the group on node 1 and the id on node 2: the
  offsets are held by the group's coordinator until the transaction's marker reaches it; committed, they are the
  group's, aborted, not.
* confluent-kafka's transactional producer with an id node 1 coordinates, its records on both nodes: node 2 (a
  partition's owner) is killed -9 before the commit, so the markers cannot all be written; the commit is answered
  (decided); then node 1, the coordinator, is killed -9 too. Node 2 restarts with a full disk (ENOSPC injected into
  its storage writes, ``disk_full_site/``), so the marker node 1 sends again once restarted is refused, and
  partition 1 stays undecided for read_committed; the disk freed, the marker is written and the commit holds on
  both partitions; a later transaction commits as usual.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import eventually, java_events, no_traceback, node, produce_to, two_nodes, wait_log
from test_serve_cluster_coordinators import COORDINATED, _find, _group_of, _placement, _request
from test_transactions_coordinator import read_committed  # compat-tests/, which serve_support puts on the path

from livewalgate import walgate_env
from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.coordinator.transactions import PendingOffset, Txn, TxnState
from walgate.storage import lines
from walgate.storage.transactions_log import TRANSACTIONS_LOG
from walgate.wire.errors import ErrorCode

DISK_FULL_SITE = Path(__file__).parent / "disk_full_site"
TOPIC = "payments"
SOURCE, SINK = "payments_in", "payments_out"  # consume-transform-produce
CHECK_1S = "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"
NOT_COORDINATOR = ErrorCode.not_coordinator


def _topic(port: int) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)


def _find_txn(port: int, *ids: str) -> list[tuple[str, int, int, ErrorCode]]:
    answer = _request(port, 10, 4, {"key_type": 1, "coordinator_keys": list(ids)})
    return [(c.key, c.node_id, c.port, c.error_code) for c in answer.coordinators]


def _read_committed(port: int) -> list[str]:
    """What a read_committed confluent-kafka consumer bootstrapped on ``port`` reads of both partitions, partition 0's
    first, up to their last stable offsets."""
    return read_committed(f"127.0.0.1:{port}", TOPIC, timeout=60)


def _not_coordinator(port: int, tid: str) -> None:
    """Every transactional API of ``tid``, another node's id, asked of the node at ``port``."""
    init = _request(port, 22, 5, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
                                  "producer_epoch": -1})
    assert init.error_code == NOT_COORDINATOR
    add = _request(port, 24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": 7,
                                 "v3_and_below_producer_epoch": 0,
                                 "v3_and_below_topics": [{"name": TOPIC, "partitions": [0, 1]}]})
    assert [p.partition_error_code for t in add.results_by_topic_v3_and_below for p in t.results_by_partition] == [
        NOT_COORDINATOR, NOT_COORDINATOR]
    assert _request(port, 25, 4, {"transactional_id": tid, "producer_id": 7, "producer_epoch": 0, "group_id": "g"}
                    ).error_code == NOT_COORDINATOR
    assert _request(port, 26, 5, {"transactional_id": tid, "producer_id": 7, "producer_epoch": 0, "committed": True}
                    ).error_code == NOT_COORDINATOR
    described = _request(port, 65, 0, {"transactional_ids": [tid]})
    assert [(s.transactional_id, s.error_code) for s in described.transaction_states] == [(tid, NOT_COORDINATOR)]


def _markers_refused(port: int, client_id: str) -> None:
    """WriteTxnMarkers (v1 and v2) sent by a client that is no cluster node: refused, nothing written."""
    for version in (1, 2):
        fields: dict[str, Any] = {"markers": [{"producer_id": 5, "producer_epoch": 0, "transaction_result": True,
                                              "coordinator_epoch": 0, "transaction_version": 2,
                                              "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}]}
        with KafkaConnection(("127.0.0.1", port), client_id=client_id) as conn:
            answer = conn.request(build(kio_classes(27, version)[0], fields))
        assert [p.error_code for m in answer.markers for t in m.topics for p in t.partitions] == [
            ErrorCode.cluster_authorization_failed] * 2


def test_transactions_over_two_nodes_partitions_and_groups(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path, *COORDINATED) as (n1, n2, _, _):
        ports = {1: n1.kafka_port, 2: n2.kafka_port}
        wait_log(n1, "nodes 1,2")
        _find(n1.kafka_port, "first")
        placement = _placement(etcd1)
        assert placement == (1, 2, 1, 2)
        t1, t2 = _group_of(placement, 1, "tx-one"), _group_of(placement, 2, "tx-two")
        for port in ports.values():
            assert _find_txn(port, t1, t2) == [(t1, 1, ports[1], ErrorCode.none), (t2, 2, ports[2], ErrorCode.none)]
        _topic(n1.kafka_port)
        _not_coordinator(n1.kafka_port, t2)
        _markers_refused(n1.kafka_port, "walgate-node-2/not-its-incarnation")
        _markers_refused(n2.kafka_port, "walgate-tests")

        steps = {e["name"]: e for e in java_events("TransactionalProducer.java", f"127.0.0.1:{n1.kafka_port}",
                                                   TOPIC, t2) if e.get("event") == "step"}
        assert [n for n, s in steps.items() if s["ok"]] == ["init", "commit", "abort", "second-init",
                                                             "second-commit"], steps
        assert steps["zombie-abort"]["error"] == "ProducerFencedException", steps
        committed = ["commit-0", "commit-2", "commit-1", "fenced-by-0"]  # partition 0 (node 1), then 1 (node 2)
        assert _read_committed(n1.kafka_port) == _read_committed(n2.kafka_port) == committed
        _offsets_through_another_node(n1.kafka_port, n2.kafka_port, placement, n1.data_dir)
        no_traceback(n2)
        no_traceback(n1)


def _offsets_through_another_node(port1: int, port2: int, placement: tuple[int, ...], data1: Path) -> None:
    """Consume-transform-produce, exactly once (KIP-447), with the group coordinated by node 2 and the transactional
    id by node 1: the Java client (transaction version 2: TxnOffsetCommit v5 to node 2, which adds the group to the
    transaction on node 1); then confluent-kafka (AddOffsetsToTxn to node 2, TxnOffsetCommit v3 to node 1) with the
    group on node 1 and the id on node 2, committed and aborted."""
    group, tid = _group_of(placement, 2, "ctp"), _group_of(placement, 1, "ctp-tx")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port1}"})
    for topic in (SOURCE, SINK):
        admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    produce_to(port2, SOURCE, {p: [f"in-{i}".encode() for i in range(30) if i % 2 == p] for p in (0, 1)})
    events = java_events("ConsumeTransformProduce.java", f"127.0.0.1:{port1}", SOURCE, SINK, group, tid, "30",
                         "classic")
    assert [e.get("consumed") for e in events if e["event"] == "summary"] == [30], events
    out = read_committed(f"127.0.0.1:{port2}", SINK, timeout=60)
    assert sorted(out) == sorted(f"out-in-{i}" for i in range(30)), "each record once, none lost"
    assert _committed(port1, group) == {0: 15, 1: 15}
    ongoing = [r["txn"]["tv"] for r in _records(data1 / TRANSACTIONS_LOG)
               if r["id"] == tid and r["txn"] is not None and r["txn"]["state"] == "Ongoing"]
    assert ongoing and set(ongoing) == {2}, "node 2's AddOffsetsToTxn keeps the transaction at version 2"

    other, tid2 = _group_of(placement, 1, "py-ctp"), _group_of(placement, 2, "py-ctp-tx")
    metadata = Consumer({"bootstrap.servers": f"127.0.0.1:{port1}", "group.id": other})
    try:
        producer = _transactional(port1, tid2)
        for offset, commit in ((7, True), (9, False)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(SOURCE, 0, offset)],
                                                 metadata.consumer_group_metadata(), 30)
            producer.commit_transaction(60) if commit else producer.abort_transaction(60)
    finally:
        metadata.close()
    assert _committed(port2, other) == {0: 7, 1: -1001}, "the commit's offset, not the abort's"


def _records(path: Path) -> list[dict[str, Any]]:
    """Every record of a transaction log, in order (the coordinator's durable writes)."""
    return [record for _, _, record in lines.scan(path.read_bytes()).records]


def _committed(port: int, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(SOURCE, p) for p in (0, 1)], 30)}
    finally:
        consumer.close()


def _transactional(port: int, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "transactional.id": tid,
                         "message.timeout.ms": 60000, "transaction.timeout.ms": 120000})
    producer.init_transactions(60)
    return producer


def _send(producer: Producer, *values: str) -> None:
    """``values`` sent in the producer's transaction, value i to partition i % 2, every one acknowledged."""
    errors: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(TOPIC, value.encode(), partition=i % 2,
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(60) == 0 and errors == []


def test_markers_owed_to_a_dead_node_are_written_after_both_nodes_restart(etcd1: EtcdCluster,
                                                                          tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *COORDINATED) as n1:
        wait_log(n1, "node 1: controller")
        port1, data1 = n1.kafka_port, n1.data_dir
        with node(etcd1, tmp_path, 2, *COORDINATED) as n2:
            port2, data2 = n2.kafka_port, n2.data_dir
            wait_log(n1, "nodes 1,2")
            _find(port1, "first")
            tid = _group_of(_placement(etcd1), 1, "tx-kill")
            _topic(port1)
            producer = _transactional(port2, tid)
            producer.begin_transaction()
            _send(producer, "kept-0", "kept-1", "kept-2", "kept-3")
            n2.proc.send_signal(signal.SIGKILL)  # the owner of partition 1 dies before the commit
            n2.proc.wait(timeout=30)
        producer.commit_transaction(60)  # decided (PrepareCommit durable); partition 1's marker is owed
        wait_log(n1, "stays decided but not complete")
        n1.proc.send_signal(signal.SIGKILL)  # and the coordinator dies with the marker still owed
        n1.proc.wait(timeout=30)
    stale = _group_of(_placement(etcd1), 1, "tx-stale")  # offsets node 2 holds for a transaction node 1 never had
    proxy = Txn(stale, 9999, 0, 60_000, TxnState.ONGOING, 0, start_ms=0, groups=frozenset({"g-stale"}),
                offsets=(PendingOffset("g-stale", TOPIC, 0, 5, -1, "", 0),), proxy=True)
    with (data2 / TRANSACTIONS_LOG).open("ab") as f:  # as a data dir written before the verification guard
        f.write(lines.encode({"id": stale, "txn": proxy.to_record()}))
    full = tmp_path / "disk-full"  # node 2 comes back with a full disk: its marker write is refused (ENOSPC)
    env = {**walgate_env(), "WGT_DISK_FULL": str(full),
           "PYTHONPATH": os.pathsep.join(p for p in (str(DISK_FULL_SITE), os.environ.get("PYTHONPATH", "")) if p)}
    with node(etcd1, tmp_path, 2, *COORDINATED, "--override", CHECK_1S, data_dir=data2,
              kafka_port=port2, env=env) as again2:
        full.touch()
        with node(etcd1, tmp_path, 1, *COORDINATED, data_dir=data1, kafka_port=port1) as again1:
            wait_log(again1, "KAFKA_STORAGE_ERROR")  # node 2 answered its marker: not written, tried again
            assert _read_committed(port1) == ["kept-0", "kept-2"], "partition 1 stops before the undecided records"
            full.unlink()
            committed = ["kept-0", "kept-2", "kept-1", "kept-3"]
            eventually("the commit holds on both nodes", lambda: _read_committed(port1) == committed)
            after = _transactional(port2, tid)  # the producer goes on with the next transaction
            after.begin_transaction()
            _send(after, "next-0", "next-1")
            after.commit_transaction(60)
            assert _read_committed(port2) == ["kept-0", "kept-2", "next-0", "kept-1", "kept-3", "next-1"]
            eventually("node 2 drops the offsets node 1 has no transaction for",
                       lambda: {"id": stale, "txn": None} in _records(data2 / TRANSACTIONS_LOG))
            no_traceback(again2)
        no_traceback(again1)
