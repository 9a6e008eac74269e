"""Requests between cluster nodes on clusters without a PLAINTEXT listener (docs/cluster.md "Transaction
coordinators", kafka/node_auth.py): real ``walgate serve --cluster`` nodes over a real etcd (stopped by PID), each
with one SASL_PLAINTEXT listener, as docker/compose.cluster.yaml runs them, or one SSL listener (the test CA's
certificate, verified by the other node with its truststore).

* Nodes authenticate to each other with SCRAM-SHA-256 and the credential derived from the cluster's node token:
  confluent-kafka's transactional producer (records on partition 0, node 1, and partition 1, node 2: the transaction
  spans both nodes whichever coordinates it) commits and aborts, and a read_committed consumer through either node
  reads exactly the committed records.
* SASL_PLAINTEXT: a forger authenticated as root (a superuser) and sending node 1's exact client id (``walgate-node-1/<its data
  dir's incarnation>``, what nodes sent before) is refused WriteTxnMarkers, AddPartitionsToTxn v5, a replica's
  Fetch and the share-group state RPCs, and nothing is written; a login as ``walgate-node-1`` with a password is
  refused.
* Neither the node token nor a node's password is in a log; no traceback.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import scramp
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster, free_port
from serve_support import ONE_COPY, no_traceback, node, node_token, wait_log

from livewalgate import WalgateServer, walgate_env
from testcerts import Certs, make_certs
from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.cluster.incarnation import load_or_create
from walgate.security.node_token import node_password
from walgate.wire.errors import ErrorCode

TOPIC = "payments"
ROOT = ("root", "Root-pass-1")


def _client(port: int, certs: Certs | None = None) -> dict[str, Any]:
    """A confluent-kafka client's settings: SCRAM as root, or with ``certs`` TLS trusting their CA."""
    if certs is not None:
        return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ROOT[0], "sasl.password": ROOT[1]}


@contextmanager
def _nodes(etcd: EtcdCluster, tmp_path: Path, certs: Certs | None
           ) -> Iterator[tuple[WalgateServer, WalgateServer]]:
    """Nodes 1 and 2, each with one SASL_PLAINTEXT listener, or with ``certs`` one SSL listener."""
    env = walgate_env() | {"WALGATE_ROOT_PASSWORD": ROOT[1]}
    ports = {i: free_port() for i in (1, 2)}
    tls = [] if certs is None else ["--override", f"ssl.keystore.location={certs.server}",
                                    "--override", f"ssl.truststore.location={certs.ca}"]

    def sasl_node(i: int) -> Any:
        protocol = "SASL_PLAINTEXT" if certs is None else "SSL"
        return node(etcd, tmp_path, i, *ONE_COPY, "--override", f"listeners={protocol}://127.0.0.1:{ports[i]}", *tls, env=env,
                    kafka_port=ports[i])

    with sasl_node(1) as n1:
        wait_log(n1, "node 1: controller")
        with sasl_node(2) as n2:
            wait_log(n1, "nodes 1,2")
            yield n1, n2


def _authenticated(port: int, client_id: str, user: str, password: str) -> KafkaConnection:
    """A connection to ``port`` authenticated with SCRAM-SHA-256 (scramp's client), sending ``client_id``."""
    conn = KafkaConnection(("127.0.0.1", port), client_id=client_id)
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    assert _call(conn, 17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.none
    first = _call(conn, 36, 2, {"auth_bytes": client.get_client_first().encode()})
    assert first.error_code == ErrorCode.none, first
    client.set_server_first(first.auth_bytes.decode())
    final = _call(conn, 36, 2, {"auth_bytes": client.get_client_final().encode()})
    assert final.error_code == ErrorCode.none, final
    return conn


def _call(conn: KafkaConnection, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], fields))


def _read_committed(port: int, certs: Certs | None) -> list[str]:
    """Every value of both partitions of ``TOPIC`` a read_committed consumer through ``port`` reads up to the last
    stable offsets, partition 0's first."""
    consumer = Consumer(_client(port, certs) | {"group.id": f"reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
        values: dict[int, list[str]] = {0: [], 1: []}
        eof: set[int] = set()
        for _ in range(240):  # 0.5 s polls: at most 2 minutes
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != -191:  # _PARTITION_EOF
                    raise KafkaException(msg.error())
                eof.add(msg.partition())
                if eof == {0, 1}:
                    return values[0] + values[1]
                continue
            values[msg.partition()].append(msg.value().decode())
        raise AssertionError(f"read_committed did not reach the end of both partitions: {values}")
    finally:
        consumer.close()


def _forgers_refused(n1: WalgateServer, n2: WalgateServer) -> None:
    forged = f"walgate-node-1/{load_or_create(n1.data_dir)}"  # node 1's exact client id of before
    with _authenticated(n2.kafka_port, forged, *ROOT) as conn:
        markers = _call(conn, 27, 1, {"markers": [{
            "producer_id": 5, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
            "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}]})
        assert [p.error_code for m in markers.markers for t in m.topics for p in t.partitions] == [
            ErrorCode.cluster_authorization_failed] * 2
        added = _call(conn, 24, 5, {"transactions": [{
            "transactional_id": "someone", "producer_id": 5, "producer_epoch": 0, "verify_only": False,
            "topics": [{"name": TOPIC, "partitions": [1]}]}]})
        assert added.error_code == ErrorCode.cluster_authorization_failed
        fetched = _call(conn, 1, 12, {"replica_id": 1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                      "isolation_level": 0, "topics": [{"topic": TOPIC, "partitions": [
                                          {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        assert [p.error_code for t in fetched.responses for p in t.partitions] == [
            ErrorCode.topic_authorization_failed]
        tid = _call(conn, 3, 12, {"topics": [{"name": TOPIC}]}).topics[0].topic_id
        summary = _call(conn, 87, 1, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 1, "leader_epoch": 0}]}]})
        deleted = _call(conn, 86, 0, {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 1}]}]})
        assert [p.error_code for answer in (summary, deleted) for t in answer.results for p in t.partitions] == [
            ErrorCode.cluster_authorization_failed] * 2, "the share-group state RPCs: cluster nodes only"
    conn = KafkaConnection(("127.0.0.1", n2.kafka_port), client_id=forged)
    with conn:
        client = scramp.ScramClient(["SCRAM-SHA-256"], "walgate-node-1", ROOT[1])
        assert _call(conn, 17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.none
        first = _call(conn, 36, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first.auth_bytes.decode())
        assert _call(conn, 36, 2, {"auth_bytes": client.get_client_final().encode()}).error_code == (
            ErrorCode.sasl_authentication_failed)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SSL"])
def test_a_cluster_without_plaintext_ends_transactions_across_nodes_and_refuses_forgers(
        etcd1: EtcdCluster, tmp_path: Path, protocol: str) -> None:
    certs = None if protocol == "SASL_PLAINTEXT" else make_certs(tmp_path / "certs")
    with _nodes(etcd1, tmp_path, certs) as (n1, n2):
        admin = AdminClient(_client(n1.kafka_port, certs))
        admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
        if certs is None:  # the forger's SCRAM login (on SSL it has no way to authenticate at all)
            _forgers_refused(n1, n2)
        producer = Producer(_client(n1.kafka_port, certs) | {"transactional.id": "tx-sasl", "message.timeout.ms": 30000})
        producer.init_transactions(60)
        for values, commit in ((("commit-0", "commit-1"), True), (("abort-0", "abort-1"), False),
                               (("again-0", "again-1"), True)):
            producer.begin_transaction()
            for partition, value in enumerate(values):  # partition 0 on node 1, partition 1 on node 2
                producer.produce(TOPIC, value.encode(), partition=partition)
            producer.flush(30)
            if commit:
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
        producer.flush(10)
        committed = ["commit-0", "again-0", "commit-1", "again-1"]
        assert _read_committed(n1.kafka_port, certs) == _read_committed(n2.kafka_port, certs) == committed
        token = node_token(etcd1)
        for server in (n1, n2):
            log = server.log()
            assert token not in log and node_password(token, "walgate-node-1") not in log
            assert node_password(token, "walgate-node-2") not in log
            no_traceback(server)
