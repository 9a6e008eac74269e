"""Real clients on a 3-node walgate cluster (livecluster.py: one etcd member, bootstrap and SQL on node 1), beyond
the matrix's scenarios (test_matrix.py's ``walgate-cluster`` broker):

1. Spark's Kafka source (java/SparkSource.java: the driver's Admin calls and the executors' seek / poll / position
   on the real kafka-clients 4.3.0 and 3.9) reads a TDengine topic of a ``VGROUPS 3`` database, made through node 1
   on a cluster with nothing placed yet, so one vgroup on each node; its rows inserted through node 1's HTTP API,
   which forwards each table's rows to its vgroup's node: every partition led by another node, every row read
   exactly once, offsets dense from 0 in each partition.
2. The consumer group protocol (KIP-848, ``group.protocol=consumer``; confluent-kafka and the Java consumer) on a
   topic whose partitions are on the three nodes, coordinated by the node its group id hashes to: a member reads
   10 records, commits and leaves; the next resumes exactly after them and reads the rest.
3. A transaction over partitions on the three nodes (confluent-kafka, bootstrapped on node 1): the coordinator of
   its id writes the markers on every partition's node (WriteTxnMarkers between nodes); read_committed reads each
   partition's record.
4. A share group (KIP-932, the Java KafkaShareConsumer) over the same topic's partitions on three nodes: every
   partition's node answers its ShareFetch, so the worker gets every record once.

CI runs SparkSource on kafka-clients 3.9 and the KIP-848 member on confluent-kafka (:data:`IN_CI`);
``WALGATE_COMPAT_LONG=1`` adds kafka-clients 4.3.0 for both.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import compat_data as data
import pytest
from compat_brokers import LONG, STABLE, Walgate, serving_cluster
from compat_data import check_exactly, records
from compat_procs import COMPAT, Run, run
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from test_groups import group_name
from test_produce import new_topic

SPARK_DB, SPARK_TOPIC = "spark", "spark_meters"  # its 8 tables fall in all 3 vgroups (compat_data.vnode_of)
SPARK_VGROUPS = 3
IN_CI = {"3.9", "confluent-kafka"}
"""The Spark client and KIP-848 member CI runs (kafka-clients 3.9: what Spark 4 ships); WALGATE_COMPAT_LONG=1: all."""
CLIENTS = ["4.3.0", "3.9"]


def long_mode_unless(param: str) -> None:
    if param not in IN_CI and not LONG:
        pytest.skip(f"{param}: with WALGATE_COMPAT_LONG=1 (CI runs {sorted(IN_CI)})")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    """The cluster, with SPARK_DB made first (nothing placed before it: its 3 vgroups go to the 3 nodes)."""
    with serving_cluster(tmp_path_factory.mktemp("cluster-clients")) as broker:
        broker.load_meters(SPARK_DB, {SPARK_TOPIC: STABLE}, data.meter_rows(), vgroups=SPARK_VGROUPS)
        yield broker


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the node id Metadata names as its leader (confluent-kafka's Admin)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


# ------------------------------------------------------------------ 1. Spark's Kafka source


@pytest.mark.parametrize("clients", CLIENTS)
def test_spark_source_reads_a_database_placed_on_three_nodes(cluster, java, show, clients):
    long_mode_unless(clients)
    assert sorted(leaders(cluster.bootstrap, SPARK_TOPIC).values()) == [1, 2, 3]
    run = java("SparkSource.java", "--bootstrap", cluster.bootstrap, "--topic", SPARK_TOPIC, clients=clients,
               check=False)
    show(run)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    (describe,) = run.events("describe")
    assert [p["partition"] for p in describe["partitions"]] == list(range(SPARK_VGROUPS)), run.describe()
    assert sorted(p["leader"] for p in describe["partitions"]) == cluster.brokers, run.describe()
    want = data.expected_records(data.meter_rows(), data.DATA_COLUMNS + data.TAG_COLUMNS, db=SPARK_DB,
                                 vgroups=SPARK_VGROUPS)
    per_partition = {p: len(rs) for p, rs in data.by_partition(want).items()}
    assert sorted(per_partition) == list(range(SPARK_VGROUPS))  # every vgroup holds rows
    offsets = {d["partition"]: (d["earliest"], d["latest"]) for d in run.events("offsets")}
    assert offsets == {p: (0, n) for p, n in per_partition.items()}, run.describe()
    check_exactly(records(run.json_lines()), want, first_offsets={p: 0 for p in per_partition})  # dense, once
    (summary,) = run.events("summary")
    assert summary["records"] == len(want), run.describe()


# ------------------------------------------------------------------ 2. the consumer group protocol (KIP-848)

MEMBERS = ["confluent-kafka", "java-4.3"]
PER_PARTITION = 6


@pytest.fixture(scope="module")
def spread_topic(cluster) -> tuple[str, list[dict[str, Any]]]:
    """A Kafka-native topic of 4 partitions over the three nodes, PER_PARTITION records in each (offset order)."""
    topic = new_topic(cluster.bootstrap, "cluster-kip848", partitions=4)
    assert set(leaders(cluster.bootstrap, topic).values()) == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for p in range(4):
        for i in range(PER_PARTITION):
            producer.produce(topic, f"v{p}-{i}".encode(), key=f"k{p}".encode(), partition=p)
    assert producer.flush(60) == 0
    return topic, [{"partition": p, "offset": i, "value": f"v{p}-{i}"} for p in range(4) for i in range(PER_PARTITION)]


@pytest.fixture
def member(request: pytest.FixtureRequest) -> Callable[..., Run]:
    """member(bootstrap, topic, group, *args) runs request.param's group member program with group.protocol=consumer
    to completion."""
    long_mode_unless(request.param)
    if request.param == "confluent-kafka":
        argv = lambda *args: [sys.executable, str(COMPAT / "clients" / "ck_group.py"), *args]  # noqa: E731
    else:
        java_argv = request.getfixturevalue("java_argv")
        argv = lambda *args: java_argv("GroupMember.java", *args, clients="4.3.0")  # noqa: E731
    return lambda *args: run(argv(*args, "--protocol", "consumer", "--timeout", "60"), 90, check=False)


@pytest.mark.parametrize("member", MEMBERS, indirect=True)
def test_consumer_protocol_commit_close_restart_resume(cluster, spread_topic, member):
    topic, want = spread_topic
    group = group_name("kip848")
    first = member(cluster.bootstrap, topic, group, "--max-records", "10")
    assert first.returncode == 0 and not first.events("error"), first.describe()
    second = member(cluster.bootstrap, topic, group, "--until-end")
    assert second.returncode == 0 and not second.events("error"), second.describe()
    read_first, read_second = first.events("record"), second.events("record")
    assert len(read_first) == 10, first.describe()
    after = {r["partition"]: r["offset"] + 1 for r in read_first}
    resumed = {}
    for r in read_second:
        resumed.setdefault(r["partition"], r["offset"])
    assert all(resumed[p] == after[p] for p in after if p in resumed), \
        f"did not resume after the commit: {after} then {resumed}\n{first.describe()}\n{second.describe()}"
    got = sorted((r["partition"], r["offset"], r["value"]) for r in read_first + read_second)
    assert got == [(r["partition"], r["offset"], r["value"]) for r in want], \
        f"{first.describe()}\n{second.describe()}"


# ------------------------------------------------------------------ 3. a transaction across nodes


def test_a_transaction_over_partitions_of_three_nodes_commits_on_each(cluster):
    topic = new_topic(cluster.bootstrap, "cluster-txn", partitions=3)
    assert set(leaders(cluster.bootstrap, topic).values()) == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"cluster-{uuid.uuid4()}",
                         "transaction.timeout.ms": 20000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, f"t{p}".encode(), partition=p)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"cluster-txn-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(3)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got: dict[int, bytes] = {}
        for _ in range(30):  # bounded: 30 polls of at most 1 s
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got[msg.partition()] = msg.value()
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert ends == {p: 2 for p in range(3)}, f"last stable offsets {ends}: the record and the COMMIT marker each"
    assert got == {p: f"t{p}".encode() for p in range(3)}


# ------------------------------------------------------------------ 4. a share group across nodes


def test_a_share_group_over_partitions_of_three_nodes_gets_every_record_once(cluster, spread_topic, java):
    topic, want = spread_topic
    group = group_name("share")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    reset = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([reset]).values():
        future.result(30)
    run = java("ShareWorker.java", cluster.bootstrap, topic, group, "--max-records", str(len(want)), "--idle", "5",
               "--timeout", "40", timeout=90, check=False)
    got = sorted((e["partition"], e["offset"], e["value"]) for e in run.events("record"))
    assert got == [(r["partition"], r["offset"], r["value"]) for r in want], run.describe()
