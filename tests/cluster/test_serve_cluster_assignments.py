"""Manual replica assignments (CreateTopics' and CreatePartitions' ``assignments``, as ``kafka-topics
--replica-assignment`` sends them) place each partition on the node named: real ``walgate serve --cluster`` nodes over
a real etcd (stopped by PID), driven by the Java Admin client (kafka-clients 4.3.0) and confluent-kafka.

A topic assigned 2, 1, 2 through node 1 and grown by a partition on node 1 is served from those nodes: Metadata
through either node names them as leaders, and confluent-kafka produces to and reads back every partition.
``validate_only`` creates and grows nothing. An assignment naming a node that is not live, one broker twice, another
count of brokers than the topic's other partitions, or not as many partitions as are added is refused with
INVALID_REPLICA_ASSIGNMENT (39) and Kafka's message, and changes nothing. Two brokers for a partition, or a
replication factor of 2, is a valid placement refused with INVALID_REPLICATION_FACTOR (38) until replication is
served (issue 25); a replication factor above the live nodes with Kafka's text. A single node (node id 0) accepts
assignments onto itself only, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import ONE_COPY, eventually, java_events, no_traceback, produce_to, sql, two_nodes
from test_serve_cluster_topics import leaders, placement, read, vnode_dirs

from livewalgate import WalgateServer, running_walgate

NOT_ENABLED = "replication factor 2: this cluster runs without replicas (replication.enable=false on its nodes); use 1"
NO_SUCH_BROKER = ("The manual partition assignment includes broker 3, but no such broker is registered "
                  "(live nodes: 1, 2).")


def refused(server: WalgateServer, method: str, *args: Any) -> KafkaError:
    """The error AdminClient ``method(*args)`` through ``server`` answers for its one topic (it must fail)."""
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    [future] = getattr(client, method)(*args).values()
    try:
        future.result(timeout=60)
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    raise AssertionError(f"{method}{args} was accepted")


def partition_count(server: WalgateServer, topic: str) -> int:
    return len(placement(server, topic))


def test_assignments_place_partitions_on_the_nodes_named_and_bad_ones_are_refused(etcd1: EtcdCluster,
                                                                                   tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path, *ONE_COPY) as (n1, n2, bootstrap1, _):
        eventually("node 1 places over both", lambda: [r[2] for r in sql(n1, "SHOW DNODES")] == ["ready"] * 2)
        events = java_events("ManualAssignment.java", bootstrap1,
                             "create-validate", "v", "2,1",  # validate_only: checked, nothing created
                             "create", "m", "2,1,2",
                             "grow-validate", "m", "5", "2,1",
                             "grow", "m", "4", "1",
                             "create", "dead", "1,3",  # node 3 is not a live node of the cluster
                             "create", "rf2", "1+2",  # two copies: this cluster runs without replicas
                             "grow", "m", "6", "1")  # two partitions added, one assigned
        outcomes = [(e["op"], e["topic"], e["error"], e["message"]) for e in events]
        invalid = "InvalidReplicaAssignmentException"
        assert outcomes == [
            ("create-validate", "v", None, None), ("create", "m", None, None), ("grow-validate", "m", None, None),
            ("grow", "m", None, None),
            ("create", "dead", invalid, NO_SUCH_BROKER),
            ("create", "rf2", "InvalidReplicationFactorException", NOT_ENABLED),
            ("grow", "m", invalid, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were "
                                   "specified.")], outcomes
        placed = {0: 2, 1: 1, 2: 2, 3: 1}
        assert placement(n1, "m") == placed, "each partition on the node named, the added one too"
        eventually("node 2 applied them", lambda: placement(n2, "m") == placed)
        eventually("Metadata through either node names those leaders",
                   lambda: leaders(n1, "m") == leaders(n2, "m") == placed)
        assert len(vnode_dirs(n1)) == 2 and len(vnode_dirs(n2)) == 2, "each node opened the vnodes assigned to it"

        for error in (refused(n2, "create_topics", [NewTopic("dead", 1, replica_assignment=[[3]])]),
                      refused(n2, "create_topics", [NewTopic("twice", 1, replica_assignment=[[2, 2]])]),
                      refused(n2, "create_partitions", [NewPartitions("m", 5, replica_assignment=[[1, 2]])]),
                      refused(n2, "create_partitions", [NewPartitions("m", 5, replica_assignment=[[9]])]),
                      refused(n2, "create_partitions", [NewPartitions("m", 6, replica_assignment=[[1]])])):
            assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, error
        for error, message in (
                (refused(n2, "create_topics", [NewTopic("rf2", 1, replica_assignment=[[1, 2]])]), NOT_ENABLED),
                (refused(n1, "create_topics", [NewTopic("rf2", 2, 2)]), NOT_ENABLED),
                (refused(n2, "create_topics", [NewTopic("rf3", 1, 3)]), "Unable to replicate the partition 3 time(s): "
                                                                        "The target replication factor of 3 cannot "
                                                                        "be reached because only 2 broker(s) are "
                                                                        "registered.")):
            assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR and error.str() == message, error
        twice = refused(n2, "create_topics", [NewTopic("t2", 1, replica_assignment=[[2, 2]])])
        assert twice.str() == "The manual partition assignment includes the broker 2 more than once.", twice
        assert sorted(row[0] for row in sql(n1, "SHOW TOPICS")) == ["m"], "nothing refused or validated was created"
        assert partition_count(n1, "m") == partition_count(n2, "m") == 4

        values = {p: [b"p%d-%d" % (p, i) for i in range(3)] for p in range(4)}
        assert produce_to(n2.kafka_port, "m", values) == {p: [0, 1, 2] for p in range(4)}
        assert read(n1, "m", 4, 12) == values
        for server in (n1, n2):
            no_traceback(server)


def test_a_single_node_takes_assignments_onto_itself_only(tmp_path: Path) -> None:
    with running_walgate(tmp_path / "single") as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        events = java_events("ManualAssignment.java", bootstrap, "create", "s", "0,0", "grow", "s", "3", "0",
                             "create", "other", "1")
        assert [(e["topic"], e["error"]) for e in events] == [
            ("s", None), ("s", None), ("other", "InvalidReplicaAssignmentException")], events
        assert events[-1]["message"] == ("The manual partition assignment includes broker 1, but no such broker is "
                                         "registered (live nodes: 0).")
        assert set(leaders(server, "s").values()) == {0} and len(leaders(server, "s")) == 3
        rf3 = refused(server, "create_topics", [NewTopic("rf3", 1, 3)])
        assert rf3.code() == KafkaError.INVALID_REPLICATION_FACTOR and rf3.str() == (
            "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be reached "
            "because only 1 broker(s) are registered."), rf3
        no_traceback(server)
