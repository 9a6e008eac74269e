"""Kafka-native topics are the cluster's: real ``walgate serve --cluster`` nodes over a real etcd (stopped by PID),
changed and used through real clients (confluent-kafka's AdminClient, Producer and Consumer; the Java client).

A topic created through one node (CreateTopics, proposed to the controller through the record stream) is placed
over both live nodes and known to both once the stream delivered it; confluent-kafka and the Java client
bootstrapped on the other node produce to and read back every partition, each served by the node it is placed on.
Metadata's auto-creation, CreatePartitions, a topic's AlterConfigs and DeleteTopics through either node hold on
both (a dropped topic's vnodes leave both data dirs). A CreateTopics proposed just after kill -9 of the controller
is appended once, by the next one. A node stopped meanwhile catches up when it starts again: it knows the topics created
while it was down and deletes the vnodes of one deleted meanwhile.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import eventually, java_events, no_traceback, node, poll_until, produce_to, sql, two_nodes, wait_log

from livewalgate import WalgateServer


def admin(server: WalgateServer) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})


def done(server: WalgateServer, method: str, *args: Any) -> None:
    """AdminClient ``method(*args)`` through ``server``, every future answered without an error."""
    client = admin(server)  # held until answered: a client destroyed first fails its futures
    for future in getattr(client, method)(*args).values():
        future.result(timeout=60)


def placement(server: WalgateServer, topic: str) -> dict[int, int]:
    """Partition -> node of ``topic`` as ``server``'s catalog places it (``SHOW VGROUPS`` of its database, over
    HTTP: that node's own answer)."""
    return {row[0]: row[3] for row in sql(server, f"SHOW kafka_{topic}.VGROUPS")}


def leaders(server: WalgateServer, topic: str) -> dict[int, int]:
    """Partition -> leader of ``topic`` in the Metadata a client bootstrapped on ``server`` reads ({} while it does not
    know the topic); the client may ask any node it learnt of."""
    client = admin(server)
    found = client.list_topics(topic, timeout=30).topics[topic]
    return {} if found.error is not None else {p.id: p.leader for p in found.partitions.values()}


def brokers(server: WalgateServer) -> set[int]:
    return set(admin(server).list_topics(timeout=30).brokers)


def produce(server: WalgateServer, topic: str, values: dict[int, list[bytes]]) -> dict[int, list[int]]:
    return produce_to(server.kafka_port, topic, values)


def read(server: WalgateServer, topic: str, partitions: int, count: int) -> dict[int, list[bytes]]:
    """``count`` records of ``topic``'s partitions read from offset 0 by a consumer bootstrapped on ``server``."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "reader",
                         "enable.auto.commit": False})
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        poll_until(consumer, got, count)
    finally:
        consumer.close()
    return got


def vnode_dirs(server: WalgateServer) -> list[str]:
    return sorted(str(p.relative_to(server.data_dir)) for p in (server.data_dir / "db").glob("*/vnode*"))


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_a_topic_created_on_one_node_is_placed_over_both_and_served_through_the_other(etcd1: EtcdCluster,
                                                                                       tmp_path: Path) -> None:
    auto_create = ("--override", "auto.create.topics.enable=true", "--override", "num.partitions=2")
    with two_nodes(etcd1, tmp_path, *auto_create) as (n1, n2, _, bootstrap2):
        eventually("node 2 places over both", lambda: [r[2] for r in sql(n2, "SHOW DNODES")] == ["ready"] * 2)
        done(n2, "create_topics", [NewTopic("t", 4, 1)])  # proposed to node 1
        placed = placement(n2, "t")
        assert placed == {0: 1, 1: 2, 2: 1, 3: 2}, f"placed over both live nodes, known once answered: {placed}"
        eventually("node 1 applied it", lambda: placement(n1, "t") == placed)
        eventually("Metadata through either node", lambda: leaders(n1, "t") == leaders(n2, "t") == placed)
        assert len(vnode_dirs(n1)) == 2 and len(vnode_dirs(n2)) == 2, "each node opened the vnodes placed on it"
        assert brokers(n2) == {1, 2}
        values = {p: [b"p%d-%d" % (p, i) for i in range(5)] for p in range(4)}
        assert produce(n2, "t", values) == {p: list(range(5)) for p in range(4)}
        assert read(n2, "t", 4, 20) == values
        produced = java_events("Producer.java", bootstrap2, "t", "none", "8", "--first", "100", "--partitions", "4")
        assert produced[-1]["delivered"] == 8 and produced[-1]["errors"] == [], produced[-1]
        java_read = java_events("Assign.java", bootstrap2, "t", "--start", "beginning")
        assert java_read[-1]["event"] == "summary" and java_read[-1]["records"] == 28, java_read[-1]
        assert produce(n1, "auto", {0: [b"a"], 1: [b"b"]}) == {0: [0], 1: [0]}  # created by Metadata, via the stream
        assert placement(n1, "auto") == {0: 1, 1: 2}
        eventually("node 2 applied it", lambda: placement(n2, "auto") == {0: 1, 1: 2})

        done(n1, "create_partitions", [NewPartitions("t", 6)])
        assert placement(n1, "t") == {0: 1, 1: 2, 2: 1, 3: 2, 4: 1, 5: 2}
        eventually("node 2 has the new partitions", lambda: placement(n2, "t") == placement(n1, "t"))
        assert produce(n2, "t", {4: [b"x"], 5: [b"y"]}) == {4: [0], 5: [0]}
        assert len(vnode_dirs(n1)) == 3 + 1 and len(vnode_dirs(n2)) == 3 + 1  # and one of "auto" on each

        resource = ConfigResource("TOPIC", "t", set_config={"retention.ms": "3600000"})
        done(n2, "alter_configs", [resource])  # AlterConfigs (deprecated, still Kafka's): replaces the topic's

        def retention(server: WalgateServer) -> str:
            client = admin(server)  # held until answered: a client destroyed first fails its futures
            [future] = client.describe_configs([ConfigResource("TOPIC", "t")]).values()
            return str(future.result(timeout=30)["retention.ms"].value)

        eventually("node 1 describes the new retention", lambda: retention(n1) == "3600000")

        assert sorted(row[0] for row in sql(n2, "SHOW TOPICS")) == ["auto", "t"]
        done(n1, "delete_topics", ["t", "auto"])  # one request: the two records in one append
        eventually("node 2 dropped them", lambda: sql(n2, "SHOW TOPICS") == [])  # not Metadata: it would create
        eventually("its vnodes left both data dirs", lambda: vnode_dirs(n1) == [] and vnode_dirs(n2) == [])
        for server in (n1, n2):
            no_traceback(server)


def test_a_restarted_node_opens_what_was_placed_and_drops_what_was_deleted_while_it_was_down(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2) as n2:
            eventually("node 1 sees node 2", lambda: len(sql(n1, "SHOW DNODES")) == 2)
            done(n1, "create_topics", [NewTopic("old", 2, 1)])
            assert placement(n1, "old") == {0: 1, 1: 2}
            eventually("node 2 opened its partition", lambda: len(vnode_dirs(n2)) == 1)
            data_dir, port = n2.data_dir, n2.kafka_port
        done(n1, "delete_topics", ["old"])  # while node 2 is down
        done(n1, "create_topics", [NewTopic("new", 2, 1)])  # node 1 may see node 2 live for a moment yet
        with node(etcd1, tmp_path, 2, data_dir=data_dir, kafka_port=port) as n2:
            assert leaders(n2, "old") == {}, "caught up before it was ready"
            placed = placement(n2, "new")
            assert set(placed) == {0, 1} and set(placed.values()) <= {1, 2}
            assert len(vnode_dirs(n2)) == list(placed.values()).count(2), \
                "the deleted topic's vnode left node 2's data dir; those of the new one placed on it were made"
            assert produce(n2, "new", {0: [b"a"], 1: [b"b"]}) == {0: [0], 1: [0]}
            no_traceback(n2)
        no_traceback(n1)


def test_a_topic_proposed_while_the_controller_is_killed_is_created_once_by_the_next_one(etcd1: EtcdCluster,
                                                                                          tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2) as n2:
            eventually("node 2 sees node 1", lambda: [r[2] for r in sql(n2, "SHOW DNODES")] == ["ready"] * 2)
            data_dir, port = n1.data_dir, n1.kafka_port
            n1.proc.send_signal(signal.SIGKILL)  # the controller, before the proposal below reaches it
            n1.proc.wait(timeout=30)
            done(n2, "create_topics", [NewTopic("t", 4, 1)])  # appended once node 2 is elected: its own proposal
            assert "node 2: controller" in n2.log()
            eventually("node 2's membership without node 1", lambda: set(leaders(n2, "t").values()) <= {-1, 2})
            placed = placement(n2, "t")  # some on node 1, seen live when staged: they have no leader now
            assert set(placed) == {0, 1, 2, 3}
            on_node_1 = [p for p, owner in placed.items() if owner == 1]
            assert leaders(n2, "t") == {p: -1 if p in on_node_1 else 2 for p in placed}
            assert produce(n2, "t", {p: [b"v"] for p in placed if p not in on_node_1}) == {
                p: [0] for p in placed if p not in on_node_1}
            client = admin(n2)
            again = client.create_topics([NewTopic("t", 4, 1)])["t"]
            with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
                again.result(timeout=60)
            with node(etcd1, tmp_path, 1, data_dir=data_dir, kafka_port=port) as n1:
                assert len(vnode_dirs(n1)) == len(on_node_1), "node 1 opened what was placed on it while it was down"
                eventually("both nodes name node 1 again", lambda: leaders(n1, "t") == leaders(n2, "t") == placed)
                assert produce(n1, "t", {p: [b"w"] for p in on_node_1}) == {p: [0] for p in on_node_1}
                no_traceback(n1)
            no_traceback(n2)
