"""Group coordinators sharded over the nodes (docs/cluster.md, "Group coordinators"): real ``walgate serve
--cluster`` nodes over a real etcd (stopped by PID), ``offsets.topic.num.partitions=4``.

The first FindCoordinator places the 4 coordinator partitions over the two live nodes (1, 2, 1, 2); groups whose
ids hash to node 1's partitions and to node 2's are looked up through either node (v0 and v3 single key, v4
batched) and answered with their node; every group API of node 2's group asked of node 1 answers NOT_COORDINATOR in its own
field, and ListGroups lists each node's own groups. Real clients bootstrapped on one node follow FindCoordinator to
the other: confluent-kafka's consumer (commit, committed), the Java client's classic consumer and its KIP-848
consumer (``group.protocol=consumer``), committing offsets of a topic whose partitions are on both nodes. After kill
-9 of node 2, FindCoordinator of its group answers COORDINATOR_NOT_AVAILABLE while node 1's groups go on; restarted,
node 2 coordinates its group again with every acknowledged commit kept. A data dir made with another number of
coordinator partitions is refused at start."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import (
    JARS,
    JAVA_DIR,
    ONE_COPY,
    cluster_args,
    eventually,
    no_traceback,
    node,
    produce_to,
    setup_clients,  # compat-tests/setup_clients.py, which serve_support puts on the path
    wait_log,
)
from test_serve_cluster import serve_fails

from coordinator_admin import described_groups
from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.cluster.coordinators import CoordinatorPlacement
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import Keys
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode

TOPIC = "orders"
PARTITIONS = "offsets.topic.num.partitions=4"
COORDINATED = ("--override", PARTITIONS, *ONE_COPY)  # 4 coordinator partitions placed over the nodes, one copy each
NOT_COORDINATOR = ErrorCode.not_coordinator


def _request(port: int, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """kio's decoding of the answer to one request of ``fields`` sent to the node at ``port``."""
    with KafkaConnection(("127.0.0.1", port)) as conn:
        return conn.request(build(kio_classes(api_key, version)[0], fields))


def _find(port: int, *groups: str) -> list[tuple[str, int, int, ErrorCode]]:
    """FindCoordinator v4 (batched) of ``groups`` through the node at ``port``: (key, node id, port, error)."""
    answer = _request(port, 10, 4, {"key_type": 0, "coordinator_keys": list(groups)})
    return [(c.key, c.node_id, c.port, c.error_code) for c in answer.coordinators]


def _placement(etcd: EtcdCluster) -> tuple[int, ...]:
    async def read() -> tuple[int, ...]:
        session = EtcdSession(etcd.endpoints)
        try:
            kv = await session.get(Keys("walgate").coordinator_placement)
            assert kv is not None, "placed by the first FindCoordinator"
            return CoordinatorPlacement.decode(bytes(kv.value), 4).nodes
        finally:
            await session.close()

    return asyncio.run(read())


def _group_of(placement: tuple[int, ...], node_id: int, prefix: str) -> str:
    """The first id ``prefix-<i>`` whose coordinator partition is placed on ``node_id``."""
    return next(g for g in (f"{prefix}-{i}" for i in range(1000)) if placement[partition_for(g, len(placement))] == node_id)


def _topic(port: int) -> None:
    """``TOPIC`` with 2 partitions (placed over both nodes), created through the node at ``port``, 10 records each."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
    assert produce_to(port, TOPIC, {p: [b"%d-%d" % (p, i) for i in range(10)] for p in (0, 1)}) == {
        0: list(range(10)), 1: list(range(10))}


def _consume_and_commit(port: int, group: str) -> None:
    """confluent-kafka's consumer of ``group`` bootstrapped on ``port``: reads the 20 records, commits them."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        read = 0
        for _ in range(120):  # bounded: polls of at most 1 s
            msg = consumer.poll(1.0)
            read += msg is not None and msg.error() is None
            if read == 20:
                break
        assert read == 20
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _commit(port: int, group: str, offsets: dict[int, int]) -> None:
    """``offsets`` committed for ``group`` by confluent-kafka bootstrapped on ``port``, outside any generation."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _committed(port: int, group: str) -> dict[int, int]:
    """``group``'s committed offsets of both partitions, read by confluent-kafka bootstrapped on ``port``."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        got = consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def _java_consumer(port: int, group: str, *properties: str) -> None:
    """The Java client's kafka-console-consumer calls (compat-tests/java/ConsoleConsumer.java) for ``group``,
    bootstrapped on ``port``: the 20 records read, their positions committed by close()."""
    failed = setup_clients.setup(JARS)
    assert failed is None, failed
    java = shutil.which("java")
    assert java is not None, "java is not installed (.ci/run installs it)"
    extra = [arg for p in properties for arg in ("--consumer-property", p)]
    run = subprocess.run([java, "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}", "-cp",
                          setup_clients.classpath(JARS), str(JAVA_DIR / "ConsoleConsumer.java"),
                          "--bootstrap-server", f"127.0.0.1:{port}", "--topic", TOPIC, "--group", group,
                          "--from-beginning", "--max-messages", "20", "--timeout-ms", "60000", *extra],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(run.stdout.split()) == sorted(f"{p}-{i}" for p in (0, 1) for i in range(10))


def test_each_group_is_coordinated_by_the_node_of_its_partition(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *COORDINATED) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *COORDINATED) as n2:
            ports = {1: n1.kafka_port, 2: n2.kafka_port}
            wait_log(n1, "nodes 1,2")
            _find(n1.kafka_port, "first")  # places the coordinator partitions over both nodes
            placement = _placement(etcd1)
            assert placement == (1, 2, 1, 2)
            g1, g2 = _group_of(placement, 1, "one"), _group_of(placement, 2, "two")
            for port in ports.values():  # every node answers the same coordinators, v4 batched and v3 single
                assert _find(port, g1, g2) == [(g1, 1, ports[1], ErrorCode.none), (g2, 2, ports[2], ErrorCode.none)]
                for version in (0, 3):
                    single = _request(port, 10, version, {"key": g2, "key_type": 0})
                    assert (single.error_code, single.node_id, single.port) == (ErrorCode.none, 2, ports[2])

            _topic(n1.kafka_port)
            _consume_and_commit(n1.kafka_port, g2)  # bootstrapped on node 1, coordinated by node 2
            _consume_and_commit(n2.kafka_port, g1)  # and the reverse
            assert _committed(n1.kafka_port, g2) == _committed(n2.kafka_port, g1) == {0: 10, 1: 10}
            described = described_groups(f"127.0.0.1:{n1.kafka_port}", [g1, g2], 30)
            assert {g: d.coordinator.id for g, d in described.items()} == {g1: 1, g2: 2}

            java_classic, java_848 = _group_of(placement, 2, "java-classic"), _group_of(placement, 1, "java-848")
            _java_consumer(n1.kafka_port, java_classic)
            _java_consumer(n2.kafka_port, java_848, "group.protocol=consumer")
            assert _committed(n1.kafka_port, java_classic) == _committed(n1.kafka_port, java_848) == {0: 10, 1: 10}

            _not_coordinator(n1.kafka_port, g1, g2)
            listed = {i: {g.group_id for g in _request(port, 16, 5, {}).groups} for i, port in ports.items()}
            assert listed == {1: {g1, java_848}, 2: {g2, java_classic}}, "each node lists the groups it coordinates"
            no_traceback(n2)
        no_traceback(n1)


def _not_coordinator(port: int, own: str, other: str) -> None:
    """Every group API of ``other`` (another node's group) asked of the node at ``port`` answers NOT_COORDINATOR in
    its own field; ``own``'s are answered."""
    member = {"group_id": other, "member_id": "m", "generation_id": 1}
    assert _request(port, 11, 9, {"group_id": other, "session_timeout": 10000, "rebalance_timeout": 10000,
                                  "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
                    ).error_code == NOT_COORDINATOR
    assert _request(port, 14, 5, {**member, "protocol_type": "consumer", "protocol_name": "range"}
                    ).error_code == NOT_COORDINATOR
    assert _request(port, 12, 4, member).error_code == NOT_COORDINATOR
    assert _request(port, 13, 5, {"group_id": other, "members": [{"member_id": "m"}]}).error_code == NOT_COORDINATOR
    commit = _request(port, 8, 9, {"group_id": other, "generation_id_or_member_epoch": -1, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 3}]}]})
    assert [p.error_code for t in commit.topics for p in t.partitions] == [NOT_COORDINATOR]
    fetched = _request(port, 9, 9, {"groups": [{"group_id": own, "topics": None}, {"group_id": other, "topics": None}]})
    assert [(g.group_id, g.error_code) for g in fetched.groups] == [(own, ErrorCode.none), (other, NOT_COORDINATOR)]
    assert {(t.name, p.partition_index, p.committed_offset) for t in fetched.groups[0].topics for p in t.partitions} == {
        (TOPIC, 0, 10), (TOPIC, 1, 10)}
    asked = {"group_id": other, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}
    v1 = _request(port, 9, 1, asked)  # no group error field before v2: each partition asked carries it (Kafka's
    assert [(p.partition_index, p.committed_offset, p.error_code) for t in v1.topics for p in t.partitions] == [
        (0, -1, NOT_COORDINATOR), (1, -1, NOT_COORDINATOR)]  # OffsetFetchRequest.getErrorResponse)
    v2 = _request(port, 9, 2, asked)
    assert (v2.error_code, list(v2.topics)) == (NOT_COORDINATOR, [])
    txn = _request(port, 28, 3, {"transactional_id": "tx", "group_id": other, "producer_id": 0, "producer_epoch": 0,
                                 "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                                     {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                                     "committed_leader_epoch": -1,
                                                                     "committed_metadata": ""}]}]})
    assert [p.error_code for t in txn.topics for p in t.partitions] == [NOT_COORDINATOR]
    assert _request(port, 47, 0, {"group_id": other, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]}
                    ).error_code == NOT_COORDINATOR
    described = _request(port, 15, 5, {"groups": [own, other]})
    assert [(g.group_id, g.error_code) for g in described.groups] == [(own, ErrorCode.none), (other, NOT_COORDINATOR)]
    assert [(r.group_id, r.error_code) for r in _request(port, 42, 2, {"groups_names": [other]}).results] == [
        (other, NOT_COORDINATOR)]
    assert _request(port, 68, 0, {"group_id": other, "member_id": "m", "member_epoch": 0, "rebalance_timeout": 30000,
                                  "subscribed_topic_names": [TOPIC], "server_assignor": None, "topic_partitions": []}
                    ).error_code == NOT_COORDINATOR
    assert [(g.group_id, g.error_code) for g in _request(port, 69, 0, {"group_ids": [other]}).groups] == [
        (other, NOT_COORDINATOR)]


def test_a_dead_coordinator_is_not_available_until_it_is_back(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *COORDINATED) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *COORDINATED) as n2:
            wait_log(n1, "nodes 1,2")
            _find(n1.kafka_port, "first")
            placement = _placement(etcd1)
            g1, g2 = _group_of(placement, 1, "one"), _group_of(placement, 2, "two")
            _topic(n1.kafka_port)
            _consume_and_commit(n1.kafka_port, g2)
            port2, data2 = n2.kafka_port, n2.data_dir
            n2.proc.send_signal(signal.SIGKILL)
            n2.proc.wait(timeout=30)
        eventually("node 2's lease expired: its groups' coordinator is not available",
                   lambda: _find(n1.kafka_port, g2)[0][1:] == (-1, -1, ErrorCode.coordinator_not_available))
        assert _find(n1.kafka_port, g1) == [(g1, 1, n1.kafka_port, ErrorCode.none)]
        _commit(n1.kafka_port, g1, {0: 4, 1: 6})  # node 1's groups go on (partition 1 is on node 2, down: a commit
        assert _committed(n1.kafka_port, g1) == {0: 4, 1: 6}  # needs only its coordinator)
        with node(etcd1, tmp_path, 2, *COORDINATED, data_dir=data2, kafka_port=port2) as again:
            eventually("node 2 coordinates its groups again",
                       lambda: _find(n1.kafka_port, g2) == [(g2, 2, port2, ErrorCode.none)])
            assert _committed(n1.kafka_port, g2) == {0: 10, 1: 10}, "the acknowledged commit survived kill -9"
            no_traceback(again)
        no_traceback(n1)


def test_a_data_dir_with_another_number_of_coordinator_partitions_is_refused(etcd1: EtcdCluster,
                                                                             tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *COORDINATED) as n1:
        wait_log(n1, "walgate ready")
        other = tmp_path / "other"
        with node(etcd1, other, 2, "--override", "offsets.topic.num.partitions=1", *ONE_COPY, data_dir=other / "data"):
            pass  # a data dir made by this start has the cluster's 4, whatever the setting
        assert sorted(p.name for p in (other / "data" / "coordinator").iterdir()) == [
            f"offsets-{p}.log" for p in range(4)]
        Engine.open(tmp_path / "single" / "data").close()  # a single node's data dir: 1 partition
        refused = serve_fails(tmp_path / "single", *cluster_args(etcd1, 3))
        assert refused.returncode == 1, refused.stderr
        assert "holds 1 group coordinator partitions" in refused.stderr and "has 4" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        no_traceback(n1)


def test_a_replicated_cluster_below_its_offsets_factor_has_no_coordinator_and_says_why(etcd1: EtcdCluster,
                                                                                       tmp_path: Path) -> None:
    """A replicated cluster (the default) of one node with Kafka's default ``offsets.topic.replication.factor`` 3:
    ``__consumer_offsets`` is not made, FindCoordinator answers COORDINATOR_NOT_AVAILABLE saying why, and the node
    logs it once (as Kafka's "Number of alive brokers ... does not meet the required replication factor")."""
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        for _ in range(3):
            [(key, node_id, _port, error)] = _find(n1.kafka_port, "g")
            assert (key, node_id, error) == ("g", -1, ErrorCode.coordinator_not_available)
        answer = _request(n1.kafka_port, 10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert "The target replication factor of 3 cannot be reached because only 1 broker(s) are registered" in (
            answer.coordinators[0].error_message), answer
        assert n1.log().count("no group or transaction coordinator: the __consumer_offsets topic cannot be made now "
                              "(offsets.topic.replication.factor 3)") == 1, n1.log()[-3000:]
        no_traceback(n1)
