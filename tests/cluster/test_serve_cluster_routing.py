"""Kafka clients routed by placement: real ``walgate serve --cluster`` nodes over a real etcd (stopped by PID), a
Kafka-native topic whose partition 0 is placed on node 1 and partition 1 on node 2.

Topics are not the cluster's yet (docs/cluster.md): both data dirs are given the same catalog record, placement
included, as the cluster's record stream will give it, so that each node opens only its own partition. Then
confluent-kafka and Java clients bootstrapped on node 1 alone are routed by Metadata: producers write to both
partitions, a consumer group (its coordinator node 1) reads both and commits offsets of both, the Java consumer reads
both up to their high watermarks; after kill -9 of node 2 its
partition answers LEADER_NOT_AVAILABLE while node 1's keeps serving, and after node 2 restarts nothing acknowledged
is missing. Under load (an idempotent producer writing to both partitions while node 2 is killed with SIGKILL and
restarted), the history checker (history.py) finds no lost, duplicated or phantom write."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from etcd_cluster import EtcdCluster
from history import Assign, Op, Poll, Send, Write, check
from serve_support import ONE_COPY, eventually, java_events, no_traceback, node, poll_until, produce_to, sql, wait_log

from walgate.storage import lines
from walgate.storage.engine import Engine

TOPIC = "routed"


def _data_dirs(tmp_path: Path) -> tuple[Path, Path, str]:
    """Data dirs of nodes 1 and 2 holding topic ``TOPIC`` of 2 partitions placed on nodes [1, 2]; its database."""
    first = tmp_path / "data1"
    engine = Engine.open(first, node_id=1)  # a single node's record, given the placement below
    db = engine.create_kafka_topic(TOPIC, 2, {}).db
    engine.close()
    catalog = first / "catalog.log"
    scan = lines.scan(catalog.read_bytes())
    records = [{**r, "nodes": [1, 2]} if r.get("op") == "create_kafka_topic" else r for _, _, r in scan.records]
    catalog.write_bytes(b"".join(lines.encode(r) for r in records))
    second = tmp_path / "data2"
    shutil.copytree(first, second)
    return first, second, db


def _leaders(port: int) -> dict[int, int]:
    """Partition -> leader id of ``TOPIC`` as confluent-kafka's Metadata through the node at ``port`` reads it."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    topic = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
    return {p.id: p.leader for p in topic.partitions.values()}


def _consume(port: int, group: str, count: int) -> dict[int, list[bytes]]:
    """``count`` messages of ``TOPIC`` read by a consumer of ``group`` bootstrapped on ``port``, committed; per
    partition, in offset order."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        consumer.subscribe([TOPIC])
        poll_until(consumer, got, count)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == {p: len(v) for p, v in got.items()}
    finally:
        consumer.close()
    return got


def test_clients_bootstrapped_on_one_node_are_routed_to_each_partitions_node(etcd1: EtcdCluster,
                                                                              tmp_path: Path) -> None:
    data1, data2, db = _data_dirs(tmp_path)
    with node(etcd1, tmp_path, 1, *ONE_COPY, data_dir=data1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *ONE_COPY, data_dir=data2) as n2:
            eventually("node 1 names node 2 the leader of partition 1", lambda: _leaders(n1.kafka_port) == {0: 1, 1: 2})
            assert _leaders(n2.kafka_port) == {0: 1, 1: 2}
            assert sql(n2, f"SHOW {db}.VGROUPS") == [[0, db, None, 1, "leader"], [1, db, 0, 2, "leader"]]
            first = {0: [b"a%d" % i for i in range(10)], 1: [b"b%d" % i for i in range(10)]}
            assert produce_to(n1.kafka_port, TOPIC, first) == {0: list(range(10)), 1: list(range(10))}
            assert _consume(n1.kafka_port, "g", 20) == first  # group coordinator: node 1, for both partitions
            bootstrap = f"127.0.0.1:{n1.kafka_port}"
            produced = java_events("Producer.java", bootstrap, TOPIC, "none", "10", "--first", "100", "--partitions", "2")
            assert produced[-1]["delivered"] == 10 and produced[-1]["errors"] == [], produced[-1]
            assert sorted((e["partition"], e["offset"]) for e in produced if e["event"] == "delivery") == [
                (p, o) for p in (0, 1) for o in range(10, 15)]
            read = java_events("Assign.java", bootstrap, TOPIC, "--start", "beginning")
            metadata = next(e for e in read if e["event"] == "metadata")
            assert metadata["brokers"] == sorted([bootstrap, f"127.0.0.1:{n2.kafka_port}"])
            assert read[-1]["event"] == "summary" and read[-1]["records"] == 30, read[-1]
            kafka_port2 = n2.kafka_port
            n2.proc.send_signal(signal.SIGKILL)
            n2.proc.wait(timeout=30)
        eventually("partition 1 has no leader once node 2's lease expired", lambda: _leaders(n1.kafka_port) == {0: 1, 1: -1})
        assert produce_to(n1.kafka_port, TOPIC, {0: [b"c0", b"c1"]}) == {0: [15, 16]}  # node 1's partition serves on
        with node(etcd1, tmp_path, 2, *ONE_COPY, data_dir=data2, kafka_port=kafka_port2) as n2:
            eventually("node 2 leads partition 1 again", lambda: _leaders(n1.kafka_port) == {0: 1, 1: 2})
            assert produce_to(n1.kafka_port, TOPIC, {1: [b"d0"]}) == {1: [15]}
            everything = _consume(n1.kafka_port, "fresh", 33)
            java_values = {p: [json.dumps({"codec": "none", "i": i, "text": f"record {i} of the walgate produce scenario"},
                                          separators=(",", ":")).encode() for i in range(100 + p, 110, 2)]
                           for p in (0, 1)}
            assert everything == {0: first[0] + java_values[0] + [b"c0", b"c1"],
                                  1: first[1] + java_values[1] + [b"d0"]}, "nothing acknowledged lost"
            no_traceback(n2)
        no_traceback(n1)


def _load(port: int, stop: threading.Event, ops: list[Op]) -> None:
    """Until ``stop``: values 0, 1, 2, ... to partition ``value % 2`` through an idempotent producer bootstrapped on
    ``port``, each a :class:`Send` once answered (``info`` when not acknowledged: it may or may not be written)."""
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True,
                         "message.timeout.ms": 30000, "linger.ms": 5})
    value = 0
    while not stop.is_set():
        def done(err: Any, msg: Any, value: int = value) -> None:
            write = Write(f"p{value % 2}", value, None if err is not None else msg.offset())
            ops.append(Send(1, (write,), "info" if err is not None else "ok"))

        producer.produce(TOPIC, str(value).encode(), partition=value % 2, on_delivery=done)
        value += 1
        producer.poll(0.005)
    assert producer.flush(60) == 0, "every message answered"


def _drain(port: int) -> list[Op]:
    """One more acknowledged value per partition, then everything of both partitions up to it, read back."""
    ops: list[Op] = []
    acked = produce_to(port, TOPIC, {0: [b"1000000000"], 1: [b"1000000001"]})
    ops += [Send(2, (Write(f"p{p}", 1_000_000_000 + p, offsets[0]),), "ok") for p, offsets in acked.items()]
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "drain", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
        ops.append(Assign(2))
        position = {0: -1, 1: -1}
        deadline = time.monotonic() + 60
        while any(position[p] < acked[p][0] for p in (0, 1)):
            assert time.monotonic() < deadline, f"read up to {position}, not to {acked}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                position[msg.partition()] = msg.offset()
                ops.append(Poll(2, {f"p{msg.partition()}": [(msg.offset(), int(msg.value()))]}))
    finally:
        consumer.close()
    return ops


def test_kill_9_of_one_node_under_load_loses_nothing_acknowledged(etcd1: EtcdCluster, tmp_path: Path) -> None:
    data1, data2, _ = _data_dirs(tmp_path)
    ops: list[Op] = []
    stop = threading.Event()
    with node(etcd1, tmp_path, 1, *ONE_COPY, data_dir=data1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *ONE_COPY, data_dir=data2) as n2:
            eventually("node 2 leads partition 1", lambda: _leaders(n1.kafka_port) == {0: 1, 1: 2})
            load = threading.Thread(target=_load, args=(n1.kafka_port, stop, ops))
            load.start()
            try:
                eventually("both partitions took writes", lambda: {w.key for op in ops if isinstance(op, Send)
                                                                   for w in op.writes if w.offset is not None} >= {"p0", "p1"})
                port2 = n2.kafka_port
                n2.proc.send_signal(signal.SIGKILL)
                n2.proc.wait(timeout=30)
                eventually("partition 1 has no leader", lambda: _leaders(n1.kafka_port)[1] == -1)
                with node(etcd1, tmp_path, 2, *ONE_COPY, data_dir=data2, kafka_port=port2) as again:
                    eventually("node 2 leads partition 1 again", lambda: _leaders(n1.kafka_port) == {0: 1, 1: 2})
                    served = len(ops)
                    eventually("partition 1 takes writes again",
                               lambda: any(isinstance(op, Send) and op.writes[0].key == "p1" and op.outcome == "ok"
                                           for op in ops[served:]))
                    stop.set()
                    load.join(timeout=90)
                    assert not load.is_alive()
                    history = ops + _drain(n1.kafka_port)
                    no_traceback(again)
            finally:
                stop.set()
                load.join(timeout=90)
        no_traceback(n1)
    acknowledged = [op for op in history if isinstance(op, Send) and op.outcome == "ok"]
    assert len(acknowledged) > 10 and {op.writes[0].key for op in acknowledged} == {"p0", "p1"}
    assert check(history) == []
    lost = acknowledged[len(acknowledged) // 2].writes[0]  # the check of the check: its reads taken out, it is lost
    pruned = [op for op in history if not (isinstance(op, Poll) and any(v == lost.value for _, v in op.reads.get(lost.key, ())))]
    assert "lost-write" in {v.kind for v in check(pruned)}
