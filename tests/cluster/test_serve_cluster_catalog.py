"""One catalog of users, ACLs, quotas and configs for the cluster: real ``walgate serve`` nodes over a real etcd,
changed through real clients (confluent-kafka's AdminClient and Producer) and SQL over HTTP.

A change made on any node (the controller, or another that proposes it) is visible on that node once answered and
on every other node soon after, and enforced there (a user made on node 2 authenticates with SCRAM on node 1, an
ACL made on node 2 refuses a producer on node 1); a node that was stopped catches up when it starts; after kill -9
of the controller the next one takes changes; with etcd's majority lost a change is refused with a clear error while
produce and fetch of the node's topics go on.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from etcd_cluster import EtcdCluster, free_port
from serve_support import eventually, no_traceback, node, sql, two_nodes, wait_log

from coordinator_admin import described_groups
from livewalgate import WalgateServer, walgate_env

AUTHORIZER = ["--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "--override", "allow.everyone.if.no.acl.found=true"]
EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


def admin(port: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})


def acls(port: int) -> set[str]:
    client = admin(port)  # held until the answer came: a client destroyed first fails its futures
    return {str(b) for b in client.describe_acls(EVERY_ACL).result(timeout=30)}


def deny_write(topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)


def users(server: WalgateServer) -> list[str]:
    return sorted(row[0] for row in sql(server, "SHOW USERS"))


def produce(port: int, topic: str, value: bytes) -> str | None:
    """The delivery error of one message (None: delivered)."""
    errors: list[str | None] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": 20000})
    producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err.name() if err else None))
    producer.flush(30)
    assert errors, "no delivery report within 30 s"
    return errors[0]


def session_timeout(port: int, group: str) -> tuple[str, str]:
    """(value, source) of group ``group``'s ``consumer.session.timeout.ms`` as node ``port`` describes it."""
    client = admin(port)
    [future] = client.describe_configs([ConfigResource("GROUP", group)], request_timeout=30).values()
    entry = future.result(30)["consumer.session.timeout.ms"]
    return entry.value, ConfigSource(entry.source).name


def create_topic(port: int, name: str) -> None:
    client = admin(port)
    client.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)


def topic_ddl(port: int, topic: str) -> Callable[[], list[tuple[str, KafkaError]]]:
    """CreateTopics, CreatePartitions, a topic's IncrementalAlterConfigs and DeleteTopics of ``topic`` sent at once
    through the node at ``port`` (each its own client); the returned call waits for their answers: (what, error)."""
    clients = [admin(port) for _ in range(4)]  # held until answered: a client destroyed first fails its futures
    retention = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    futures = {"CreateTopics": clients[0].create_topics([NewTopic("more", 1, 1)], request_timeout=120)["more"],
               "CreatePartitions": clients[1].create_partitions([NewPartitions(topic, 2)], request_timeout=120)[topic],
               "IncrementalAlterConfigs": clients[2].incremental_alter_configs([retention],
                                                                               request_timeout=120)[retention],
               "DeleteTopics": clients[3].delete_topics([topic], request_timeout=120)[topic]}

    def answers() -> list[tuple[str, KafkaError]]:
        out = []
        for what, future in futures.items():
            try:
                future.result(timeout=150)
                raise AssertionError(f"{what} without an etcd majority was accepted")
            except KafkaException as e:
                out.append((what, e.args[0]))
        assert clients
        return out

    return answers


def test_users_and_group_configs_made_on_any_node_are_on_every_node(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        sql(n2, "CREATE USER alice PASS 'Secret-123'")  # node 2 is not the controller: proposed to node 1
        assert users(n2) == ["alice"], "visible on the node asked once answered"
        eventually("alice on node 1", lambda: users(n1) == ["alice"])
        sql(n1, "CREATE USER bob PASS 'Secret-123'")  # on the controller itself
        assert users(n1) == ["alice", "bob"]
        eventually("bob on node 2", lambda: users(n2) == ["alice", "bob"])
        group = ConfigResource("GROUP", "g1", incremental_configs=[  # a group's config, set through node 2
            ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
        client = admin(n2.kafka_port)
        for f in client.incremental_alter_configs([group], request_timeout=30).values():
            f.result(30)
        eventually("node 1 has the group's config", lambda: session_timeout(n1.kafka_port, "g1")
                   == ("50000", "GROUP_CONFIG"))
        for server in (n1, n2):
            no_traceback(server)


def test_a_user_made_on_one_node_authenticates_on_the_other(etcd1: EtcdCluster, tmp_path: Path) -> None:
    root = ("root", "Root-pass-1")
    env = walgate_env() | {"WALGATE_ROOT_PASSWORD": root[1]}  # root made through the cluster by node 1 only
    ports = {i: free_port() for i in (1, 2)}

    def sasl_node(i: int) -> AbstractContextManager[WalgateServer]:
        return node(etcd1, tmp_path, i, "--override", f"listeners=SASL_PLAINTEXT://127.0.0.1:{ports[i]}", env=env,
                    kafka_port=ports[i])

    def scram(user: str, password: str) -> dict[str, str]:
        return {"bootstrap.servers": f"127.0.0.1:{ports[1]}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}

    with sasl_node(1) as n1:
        wait_log(n1, "node 1: controller")
        with sasl_node(2) as n2:
            sql(n2, "CREATE USER alice PASS 'Secret-123'", auth=root)
            eventually("alice on node 1", lambda: "alice" in [r[0] for r in sql(n1, "SHOW USERS", auth=root)])
            client = AdminClient(scram(*root))
            client.create_topics([NewTopic("t", 1, 1)])["t"].result(timeout=30)
            delivered: list[str | None] = []
            producer = Producer(scram("alice", "Secret-123") | {"message.timeout.ms": 20000})
            producer.produce("t", b"v", on_delivery=lambda err, _m: delivered.append(err.name() if err else None))
            producer.flush(30)
            assert delivered == [None], "alice, made on node 2, authenticated on node 1"
            refused = AdminClient(scram("alice", "wrong") | {"socket.timeout.ms": 10000})
            try:
                refused.list_topics(timeout=10)
                raise AssertionError("a wrong password was accepted")
            except KafkaException:
                pass
            assert "created user root" in n1.log() and "created user root" not in n2.log()
            for server in (n1, n2):
                no_traceback(server)


def test_acls_made_on_one_node_are_enforced_on_the_other(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path, *AUTHORIZER) as (n1, n2, _, _):
        create_topic(n1.kafka_port, "secret")  # a topic of node 1 (topics are each node's own for now)
        assert produce(n1.kafka_port, "secret", b"before") is None
        client = admin(n2.kafka_port)
        for f in client.create_acls([deny_write("secret")]).values():
            f.result(timeout=30)
        assert acls(n2.kafka_port) == {str(deny_write("secret"))}
        eventually("the ACL on node 1", lambda: acls(n1.kafka_port) == {str(deny_write("secret"))})
        assert produce(n1.kafka_port, "secret", b"after") == "TOPIC_AUTHORIZATION_FAILED", "enforced on node 1"
        client = admin(n1.kafka_port)
        for f in client.delete_acls([EVERY_ACL]).values():
            f.result(timeout=30)
        eventually("the ACL gone from node 2", lambda: acls(n2.kafka_port) == set())
        for server in (n1, n2):
            no_traceback(server)


def test_a_restarted_node_catches_up_and_a_new_controller_takes_changes(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1) as n1:
        eventually("node 1 is the controller", lambda: "node 1: controller" in n1.log())
        with node(etcd1, tmp_path, 2) as n2:
            sql(n2, "CREATE USER alice PASS 'Secret-123'")
            data_dir = n2.data_dir
        sql(n1, "CREATE USER bob PASS 'Secret-123'")  # while node 2 is down
        sql(n1, "DROP USER alice")
        with node(etcd1, tmp_path, 2, data_dir=data_dir) as n2:
            assert users(n2) == ["bob"], "caught up before it was ready"
            n1.proc.send_signal(signal.SIGKILL)
            n1.proc.wait(timeout=30)
            eventually("node 2 is the controller", lambda: [r[3] for r in sql(n2, "SHOW DNODES") if r[0] == 2]
                       == ["controller"])
            sql(n2, "CREATE USER carol PASS 'Secret-123'")
            assert users(n2) == ["bob", "carol"]
            no_traceback(n2)


def test_without_an_etcd_majority_changes_are_refused_and_data_goes_on(etcd3: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd3, tmp_path, 1, *AUTHORIZER, "--override", "super.users=User:ANONYMOUS",
              "--override", "offsets.topic.replication.factor=1") as n1:  # __consumer_offsets on the one node
        eventually("node 1 is the controller", lambda: "node 1: controller" in n1.log())
        create_topic(n1.kafka_port, "data")
        assert produce(n1.kafka_port, "data", b"one") is None
        described: list[str] = []  # a first group lookup places the group coordinators: it needs etcd once

        def answered() -> bool:  # (COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets, made now, is first loaded)
            answer = described_groups(f"127.0.0.1:{n1.kafka_port}", ["g"], 30).get("g")
            if answer is None or isinstance(answer, KafkaException):
                if answer is not None and answer.args[0].code() != KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
                    raise answer
                return False
            described.append(answer.group_id)
            return True

        eventually("group g described", answered)
        assert described == ["g"]
        etcd3.members[0].kill()
        etcd3.members[1].kill()
        topic_changes = topic_ddl(n1.kafka_port, "data")  # under way while the changes below wait too
        request = urllib.request.Request(n1.http_url + "/rest/sql", data=b"CREATE USER dave PASS 'Secret-123'",
                                         method="POST")
        try:
            urllib.request.urlopen(request, timeout=120)
            raise AssertionError("a change without an etcd majority was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 503
            desc = json.load(e)["desc"]
        assert "The cluster's catalog did not take the change" in desc, desc
        client = admin(n1.kafka_port)
        try:
            for f in client.create_acls([deny_write("data")]).values():
                f.result(timeout=120)
            raise AssertionError("an ACL without an etcd majority was accepted")
        except KafkaException as e:
            assert e.args[0].name() == "REQUEST_TIMED_OUT", e
            assert "The cluster's catalog did not take the change" in e.args[0].str(), e
        for what, error in topic_changes():
            assert error.name() == "REQUEST_TIMED_OUT", (what, error)
            if what != "DeleteTopics":  # the version librdkafka sends has no error message
                assert "The cluster's catalog did not take the change" in error.str(), (what, error)
        client = admin(n1.kafka_port)
        assert set(client.list_topics(timeout=30).topics) == {"data", "__consumer_offsets"}, "no topic made or deleted"
        assert len(client.list_topics("data", timeout=30).topics["data"].partitions) == 1
        assert produce(n1.kafka_port, "data", b"two") is None
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{n1.kafka_port}", "group.id": "g",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["data"])
            got: list[bytes] = []
            for _ in range(300):  # bounded: 300 polls of at most 1 s
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
                if len(got) == 2:
                    break
            assert got == [b"one", b"two"]
        except KafkaException as e:
            raise AssertionError(f"consuming without an etcd majority failed: {e}") from e
        finally:
            consumer.close()
        assert users(n1) == [], "nothing changed"
        no_traceback(n1)
