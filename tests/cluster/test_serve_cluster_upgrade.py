"""A single node's data dir upgraded into a cluster (issue 26; docs/cluster.md, "A single node's data dir into a
cluster"): real ``walgate serve`` processes over a real etcd, stopped by PID.

A single node (no ``--cluster``) is given a database with rows in two subtables, a Kafka-native topic with records,
a TDengine topic, a user and a consumer group's committed offsets; stopped, its data dir starts as node 1 of a new
cluster run with ``replication.enable=false`` (set to 50 coordinator partitions: the cluster takes the data dir's 1)
and two empty nodes join. confluent-kafka bootstrapped on each node reads every record of both topics, the
group resumes from its committed offsets, Metadata answers the single node's cluster id, SQL through node 2 answers
the old rows and knows the user. A second
single node's data dir joining that cluster is refused at start (exit code 1, its catalog unchanged, not
registered). In a replicated cluster (the default) the committed offsets of a single node's groups are imported into
``__consumer_offsets`` once it is made (three nodes: the factor): the mark written at the take-in is removed, group
``g`` resumes where it committed, ``h``'s commit is there, and a restart imports nothing again; the nodes run an
authorizer whose ACLs grant the nodes nothing (a node's requests of another are allowed, as Kafka's brokers' own
principal is a super user)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import ONE_COPY, cluster_args, no_traceback, node, produce_to, registered_nodes, sql, wait_log
from test_serve_cluster import serve_fails
from test_serve_cluster_catalog import AUTHORIZER

from livewalgate import WalgateServer, running_walgate
from walgate.cluster.model import Keys
from walgate.storage import offsets_import
from walgate.storage.engine import Engine

TOPIC = "orders"
ROWS = [("2026-01-01 00:00:00.000", "d1001", 10.5), ("2026-01-01 00:00:01.000", "d1002", 11.5),
        ("2026-01-01 00:00:02.000", "d1001", 12.5)]
VALUES = {0: [b"a%d" % i for i in range(10)], 1: [b"b%d" % i for i in range(10)]}
COMMITTED = {0: 4, 1: 6}


def _single_node_data(single: WalgateServer) -> None:
    """The single node's objects: database, supertable, rows, TDengine topic, user, topic, records, group offsets."""
    for statement in ("CREATE DATABASE power VGROUPS 2",
                      "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT) TAGS (groupid INT)",
                      *(f"INSERT INTO power.{t} USING power.meters TAGS (1) VALUES ('{ts}', {v})" for ts, t, v in ROWS),
                      "CREATE TOPIC topic_meters AS SELECT ts, current FROM power.meters",
                      "CREATE USER alice PASS 'wonderland'"):
        sql(single, statement)
    port = single.kafka_port
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    produce_to(port, TOPIC, VALUES)
    committer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g"})
    committer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    committer.close()


def _read_all(port: int, topic: str, partitions: int, count: int) -> list[bytes]:
    """Every record of ``topic`` (``count`` of them) read from the beginning by a consumer bootstrapped on ``port``."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    try:
        for _ in range(60):
            got += [m.value() for m in consumer.consume(100, 1.0) if m.error() is None]
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def _resumed(port: int) -> dict[int, int]:
    """The first offset group ``g``'s consumer, bootstrapped on ``port``, reads in each partition of the topic."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    first: dict[int, int] = {}
    try:
        for _ in range(60):
            for m in consumer.consume(100, 1.0):
                if m.error() is None:
                    first.setdefault(m.partition(), m.offset())
            if len(first) == 2:
                break
    finally:
        consumer.close()
    return first


def _cluster_id(port: int) -> str:
    """The Kafka cluster id Metadata through the node at ``port`` answers."""
    return str(AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=30).cluster_id)


def test_a_single_nodes_data_dir_becomes_the_first_node_of_a_cluster(etcd1: EtcdCluster, tmp_path: Path) -> None:
    data = tmp_path / "single"
    with running_walgate(tmp_path / "as-single", data_dir=data) as single:
        _single_node_data(single)
        cluster_id = _cluster_id(single.kafka_port)
    with node(etcd1, tmp_path, 1, "--override", "offsets.topic.num.partitions=50", *ONE_COPY, data_dir=data) as n1:  # its 1
        wait_log(n1, "now the catalog of cluster 'walgate' (its databases and topics on node 1, one replica of each "
                     "vgroup; its group coordinator partitions on node 1)")
        with node(etcd1, tmp_path, 2, *ONE_COPY) as n2, node(etcd1, tmp_path, 3, *ONE_COPY) as n3:
            for server in (n1, n2, n3):
                assert sorted(_read_all(server.kafka_port, TOPIC, 2, 20)) == sorted(VALUES[0] + VALUES[1])
                assert len(_read_all(server.kafka_port, "topic_meters", 2, len(ROWS))) == len(ROWS)
            assert _resumed(n2.kafka_port) == COMMITTED
            assert _cluster_id(n3.kafka_port) == cluster_id, "the single node's Kafka cluster id, kept"
            rows = sql(n2, "SELECT ts, current, tbname FROM power.meters ORDER BY ts")
            assert [(r[2], r[1]) for r in rows] == [(t, v) for _, t, v in ROWS]
            assert "alice" in [r[0] for r in sql(n3, "SHOW USERS")]
            assert sorted(r[0] for r in sql(n3, "SHOW power.TABLES")) == ["d1001", "d1002"]
            other = tmp_path / "other"  # a second single node's data dir, with a database of the same name
            second = Engine.open(other / "data")
            second.execute("CREATE DATABASE power VGROUPS 1")
            second.close()
            before = (other / "data" / "catalog.log").read_bytes()
            refused = serve_fails(other, *cluster_args(etcd1, 4))
            assert refused.returncode == 1, refused.stderr
            assert "holds a single node's catalog (database power)" in refused.stderr, refused.stderr
            assert "only as the first node of a new one" in refused.stderr and "Traceback" not in refused.stderr
            assert (other / "data" / "catalog.log").read_bytes() == before, "nothing changed"
            assert Keys("walgate").node(4) not in registered_nodes(etcd1)
            for server in (n2, n3):
                no_traceback(server)
        no_traceback(n1)


def test_in_a_replicated_cluster_committed_offsets_are_imported_into_consumer_offsets(etcd1: EtcdCluster,
                                                                                        tmp_path: Path) -> None:
    data = tmp_path / "single" / "data"
    with running_walgate(tmp_path / "as-single", data_dir=data) as single:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{single.kafka_port}"})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        produce_to(single.kafka_port, TOPIC, VALUES)
        for group, committed in (("g", COMMITTED), ("h", {0: 2})):
            committer = Consumer({"bootstrap.servers": f"127.0.0.1:{single.kafka_port}", "group.id": group})
            committer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()], asynchronous=False)
            committer.close()
    acls = ("--override", AUTHORIZER[1], "--override", "allow.everyone.if.no.acl.found=false",
            "--override", "super.users=User:ANONYMOUS")  # no ACL: only the clients (and the nodes themselves) may
    with node(etcd1, tmp_path, 1, *acls, data_dir=data) as n1:  # replicated: the default
        wait_log(n1, "now the catalog of cluster 'walgate' (its databases and topics on node 1, one replica of each "
                     "vgroup; its groups coordinated by the leaders of __consumer_offsets)")
        wait_log(n1, "the committed offsets of groups g, h are imported into __consumer_offsets once their "
                     "coordinators answer")
        assert (data / offsets_import.IMPORT_FILE).exists(), "no coordinator yet: one node of the 3 the factor needs"
        with node(etcd1, tmp_path, 2, *acls) as n2, node(etcd1, tmp_path, 3, *acls) as n3:
            wait_log(n1, "committed offsets are imported into __consumer_offsets: 3 partition(s) of 2 group(s)")
            assert not (data / offsets_import.IMPORT_FILE).exists()
            assert _resumed(n2.kafka_port) == COMMITTED, "group g resumes where it committed on the single node"
            assert _committed(n3.kafka_port, "h") == {0: 2, 1: -1001}
            assert sorted(_read_all(n3.kafka_port, TOPIC, 2, 20)) == sorted(VALUES[0] + VALUES[1]), "factor 1, node 1"
            for server in (n2, n3):
                no_traceback(server)
        no_traceback(n1)
    with node(etcd1, tmp_path, 1, *acls, data_dir=data) as again:  # restarted: nothing to import
        wait_log(again, "walgate ready")
        assert "imported into __consumer_offsets" not in again.log()
        no_traceback(again)


def _committed(port: int, group: str) -> dict[int, int]:
    """Group ``group``'s committed offset of each partition of the topic, asked through the node at ``port``."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)],
                                                                     timeout=60)}
    finally:
        consumer.close()
