"""``walgate topic|group|consume|produce`` as users run them: real subprocesses of the CLI against one real
``walgate serve`` (shared by the module), checked against what a real Kafka client (confluent-kafka) produced,
committed and reads back; and a second server with SSL listeners (one requiring client certificates) reached with
``--command-config`` (a Kafka tools client properties file, Java names) and kcat-style ``-X`` settings."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from livewalgate import WALGATE, WalgateServer, free_port, running_walgate, walgate_env
from testcerts import Certs, make_certs
from walgate.admin.client_properties import ClientPropertiesError, client_properties
from walgate.admin.commands import datetime_ms, key_value, topic_partitions

CLI_TIMEOUT = 60.0
ASSIGN_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    with running_walgate(tmp_path_factory.mktemp("admin-cli"), "--group-initial-rebalance-delay-ms", "0") as server:
        yield server
        assert "Traceback" not in server.log(), server.log()


def bootstrap(server: WalgateServer) -> str:
    return f"127.0.0.1:{server.kafka_port}"


def walgate(server: WalgateServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one ``walgate`` admin command against ``server`` to completion (bounded)."""
    return subprocess.run(
        [*WALGATE, *args, "--bootstrap-server", bootstrap(server)],
        check=False, input=stdin, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=walgate_env(),
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def as_json(result: subprocess.CompletedProcess[str]) -> object:
    return json.loads(ok(result))


def fails(result: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    """Exit ``code`` with one ``walgate: ...`` line naming ``message`` on stderr, no traceback."""
    assert result.returncode == code, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("walgate: ") and message in lines[0], result.stderr


def bad_usage(result: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 2 with argparse's usage and ``message`` as its last line, no traceback."""
    assert result.returncode == 2, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1], result.stderr


def create_topic(server: WalgateServer, topic: str, partitions: int) -> None:
    ok(walgate(server, "topic", "create", topic, "--partitions", str(partitions)))


def produce(server: WalgateServer, topic: str, records: list[tuple[int, int]]) -> None:
    """Produce ``(partition, timestamp ms)`` records with a real client; values ``"<partition>-<n>"``."""
    producer = Producer({"bootstrap.servers": bootstrap(server)})
    for n, (partition, timestamp) in enumerate(records):
        producer.produce(topic, f"{partition}-{n}".encode(), partition=partition, timestamp=timestamp)
    assert producer.flush(30) == 0


def committed(server: WalgateServer, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets as a real client reads them (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap(server), "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)]
    finally:
        consumer.close()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------------- topics


def test_topic_create_list_describe_alter_config_and_delete(server: WalgateServer) -> None:
    ok(walgate(server, "topic", "create", "orders", "-p", "3", "-c", "retention.ms=3600000"))
    assert {"topic": "orders", "partitions": 3, "replication_factor": 1} in as_json(walgate(server, "topic", "list", "--json"))
    assert "orders" in ok(walgate(server, "topic", "list"))

    produce(server, "orders", [(1, 1_000), (1, 2_000)])
    (described,) = as_json(walgate(server, "topic", "describe", "orders", "--json"))
    assert [(p["partition"], p["leader"], p["log_start_offset"], p["log_end_offset"]) for p in described["partitions"]] == [
        (0, 0, 0, 0), (1, 0, 0, 2), (2, 0, 0, 0)]
    assert described["configs"]["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG", "default": False}
    table = ok(walgate(server, "topic", "describe", "orders"))
    assert "LOG-END-OFFSET" in table and "retention.ms" in table and "3600000" in table

    ok(walgate(server, "topic", "alter-config", "orders", "--set", "flush.ms=1000", "--delete", "retention.ms"))
    configs = as_json(walgate(server, "topic", "describe", "orders", "--json"))[0]["configs"]
    assert configs["flush.ms"]["value"] == "1000"
    assert configs["retention.ms"] == {"value": "604800000", "source": "DEFAULT_CONFIG", "default": True}
    fails(walgate(server, "topic", "alter-config", "orders", "--set", "retention.ms=soon"), 1, "INVALID_CONFIG")

    fails(walgate(server, "topic", "create", "orders"), 1, "TOPIC_ALREADY_EXISTS")
    ok(walgate(server, "topic", "delete", "orders"))
    assert "orders" not in [t["topic"] for t in as_json(walgate(server, "topic", "list", "--json"))]
    fails(walgate(server, "topic", "describe", "orders"), 1, "unknown topic 'orders'")


# ------------------------------------------------------------ produce / consume


def test_produce_lines_with_keys_and_headers_then_consume_them_back(server: WalgateServer, tmp_path: Path) -> None:
    create_topic(server, "lines", 2)
    produced = as_json(walgate(server, "produce", "lines", "-K", ":", "-H", "src=cli", "-H", "n=1", "--partition", "1",
                               "--json", stdin="k1:first\nk2:second value\nk3:\n"))
    assert produced == {"topic": "lines", "records": 3,
                        "partitions": [{"partition": 1, "records": 3, "first_offset": 0, "last_offset": 2}]}
    lines = tmp_path / "more.txt"
    lines.write_text("third\n")
    assert "1 record(s) produced to lines" in ok(walgate(server, "produce", "lines", str(lines), "-p", "0", "-z", "gzip"))

    records = [json.loads(line) for line in ok(walgate(server, "consume", "lines", "--from-beginning", "-n", "4", "--json")).splitlines()]
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in records) == [
        (0, 0, None, "third"), (1, 0, "k1", "first"), (1, 1, "k2", "second value"), (1, 2, "k3", "")]
    by_key = {r["key"]: r for r in records}
    assert by_key["k1"]["headers"] == [{"key": "src", "value": "cli"}, {"key": "n", "value": "1"}]
    assert by_key[None]["headers"] == []
    assert all(r["timestamp_type"] == "CreateTime" and r["timestamp"] > 0 for r in records)

    text = walgate(server, "consume", "lines", "--partition", "1", "--offset", "1", "-e", "-f", r"%p/%o %k=%v [%h]")
    assert ok(text) == "1/1 k2=second value [src=cli,n=1]\n1/2 k3= [src=cli,n=1]\n"
    assert "Processed a total of 2 messages" in text.stderr
    assert ok(walgate(server, "consume", "lines", "--partition", "0", "--from-beginning", "-e", "-f", "%k")) == "null\n"


def test_consume_from_timestamp_and_with_a_group_that_commits(server: WalgateServer) -> None:
    create_topic(server, "timed", 1)
    base = int(time.time() * 1000) - 60_000
    produce(server, "timed", [(0, base + i * 1_000) for i in range(5)])
    out = ok(walgate(server, "consume", "timed", "--from-timestamp", iso(base + 2_500), "-e", "-f", "%o %T"))
    assert out.splitlines() == [f"{i} {base + i * 1_000}" for i in (3, 4)]

    ok(walgate(server, "consume", "timed", "--group", "reader", "--from-beginning", "-n", "2"))
    assert committed(server, "reader", "timed", 1) == [2]  # the two records it printed


# ---------------------------------------------------------------------- groups


def test_group_describe_shows_lag_per_partition_and_reset_offsets_plans_then_executes(server: WalgateServer) -> None:
    create_topic(server, "lagged", 3)
    base = int(time.time() * 1000) - 60_000
    produce(server, "lagged", [(0, base + i * 1_000) for i in range(5)] + [(1, base + i * 1_000) for i in range(3)])
    consumer = Consumer({"bootstrap.servers": bootstrap(server), "group.id": "lag", "client.id": "lag-client",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["lagged"])
        deadline = time.monotonic() + ASSIGN_TIMEOUT
        while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 3
        consumer.commit(offsets=[TopicPartition("lagged", 0, 2), TopicPartition("lagged", 1, 3)], asynchronous=False)

        (group,) = as_json(walgate(server, "group", "describe", "lag", "--json"))
        assert group["state"] == "Stable" and len(group["members"]) == 1
        rows = [(p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["client_id"]) for p in group["partitions"]]
        assert rows == [(0, 2, 5, 3, "lag-client"), (1, 3, 3, 0, "lag-client"), (2, None, 0, None, "lag-client")]
        table = ok(walgate(server, "group", "describe", "lag"))
        assert "LAG" in table and "lag-client" in table and group["members"][0]["member_id"] in table

        fails(walgate(server, "group", "reset-offsets", "lag", "--all-topics", "--to-earliest"), 1, "inactive")
        fails(walgate(server, "group", "delete", "lag"), 1, "NON_EMPTY_GROUP")
    finally:
        consumer.close()

    dry = walgate(server, "group", "reset-offsets", "lag", "--topic", "lagged", "--to-earliest", "--json")
    assert as_json(dry) == {"executed": False, "partitions": [
        {"group": "lag", "topic": "lagged", "partition": p, "current_offset": current, "new_offset": 0}
        for p, current in ((0, 2), (1, 3), (2, None))]}
    assert "Dry run" in dry.stderr
    assert committed(server, "lag", "lagged", 3) == [2, 3, -1001]

    ok(walgate(server, "group", "reset-offsets", "lag", "--topic", "lagged:0,1", "--to-earliest", "--execute"))
    assert committed(server, "lag", "lagged", 3) == [0, 0, -1001]
    ok(walgate(server, "group", "reset-offsets", "lag", "--all-topics", "--shift-by", "4", "--execute"))
    assert committed(server, "lag", "lagged", 3) == [4, 3, -1001]  # partition 1 kept within its log end
    ok(walgate(server, "group", "reset-offsets", "lag", "--topic", "lagged", "--to-offset", "1", "--execute"))
    assert committed(server, "lag", "lagged", 3) == [1, 1, 0]  # partition 2 is empty: its log end is 0

    # the first record at or after base + 1.5 s: offset 2 on both; partition 2 has none, so its log end
    plan = as_json(walgate(server, "group", "reset-offsets", "lag", "--all-topics", "--to-datetime", iso(base + 1_500), "--json"))
    assert [p["new_offset"] for p in plan["partitions"]] == [2, 2, 0]
    ok(walgate(server, "group", "reset-offsets", "lag", "--all-topics", "--to-datetime", iso(base + 4_000), "--execute"))
    assert committed(server, "lag", "lagged", 3) == [4, 3, 0]

    assert {"group": "lag", "state": "Empty", "type": "Classic"} in as_json(walgate(server, "group", "list", "--json"))
    ok(walgate(server, "group", "delete", "lag"))
    assert "lag" not in [g["group"] for g in as_json(walgate(server, "group", "list", "--json"))]
    fails(walgate(server, "group", "describe", "lag"), 1, "consumer group 'lag' does not exist")


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("args", [
    ("topic", "describe", "nosuch"),
    ("topic", "delete", "nosuch"),
    ("consume", "nosuch", "-n", "1"),
    ("produce", "nosuch"),
    ("group", "reset-offsets", "g", "--topic", "nosuch", "--to-latest"),
])
def test_an_unknown_topic_is_a_one_line_error(server: WalgateServer, args: tuple[str, ...]) -> None:
    fails(walgate(server, *args, stdin="x\n"), 1, "unknown topic 'nosuch'")


def test_usage_errors_exit_2(server: WalgateServer) -> None:
    create_topic(server, "usage", 1)
    fails(walgate(server, "consume", "usage", "-f", "%x"), 2, "unknown '%x' in --format")
    fails(walgate(server, "consume", "usage", "--group", "g", "--offset", "3"), 2, "not with --group")
    fails(walgate(server, "group", "reset-offsets", "g", "--to-latest"), 2, "--topic")
    bad_usage(walgate(server, "group", "reset-offsets", "g", "--topic", "usage", "--to-datetime", "yesterday"), "ISO 8601")
    bad_usage(walgate(server, "group", "reset-offsets", "g", "--topic", "usage:x", "--to-latest"), "TOPIC:P1,P2")
    bad_usage(walgate(server, "topic", "create", "t", "--config", "retention.ms"), "expected KEY=VALUE")
    fails(walgate(server, "produce", "usage", "-K", ":", stdin="no separator\n"), 2, "line 1 has no key separator ':'")


def test_cluster_elect_on_a_single_node_finds_every_leader_preferred(server: WalgateServer) -> None:
    """``walgate cluster elect`` (ElectLeaders): a single node leads every partition it holds, so a named partition
    is ELECTION_NOT_NEEDED (not a failure: exit 0) and every partition lists none; a partition the topic lacks, or
    --partition without --topic, is refused. (Elections that move leaders: compat-tests/test_leader_election.py.)"""
    create_topic(server, "elect", 2)
    rows = as_json(walgate(server, "cluster", "elect", "--topic", "elect", "--json"))
    assert rows == [{"topic": "elect", "partition": p, "result": "ELECTION_NOT_NEEDED", "leader": 0,
                     "message": rows[p]["message"]} for p in (0, 1)]  # type: ignore[index]
    table = ok(walgate(server, "cluster", "elect", "--unclean", "--topic", "elect", "--partition", "1"))
    assert "TOPIC" in table and "ELECTION_NOT_NEEDED" in table and "│         0 │" not in table  # (partition 1 only)
    assert as_json(walgate(server, "cluster", "elect", "--json")) == []
    fails(walgate(server, "cluster", "elect", "--topic", "elect", "--partition", "2"), 1,
          "topic 'elect' has no partition 2")
    fails(walgate(server, "cluster", "elect", "--partition", "0"), 2, "--partition needs --topic")


def test_argument_types() -> None:
    assert datetime_ms("2026-01-31T12:00:00.250Z") == 1_769_860_800_250
    assert datetime_ms("2026-01-31T14:00:00.250+02:00") == 1_769_860_800_250
    assert datetime_ms("2026-01-31T12:00:00") == int(datetime(2026, 1, 31, 12).timestamp() * 1000)  # local time
    assert topic_partitions("t") == ("t", None)
    assert topic_partitions("t:2,0,2") == ("t", [0, 2])
    assert key_value("a=b=c") == ("a", "b=c")


def test_an_unreachable_bootstrap_server_is_a_one_line_error() -> None:
    result = subprocess.run([*WALGATE, "topic", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"],
                            check=False, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=walgate_env())
    fails(result, 1, "Connection refused")


# ------------------------------------------------------------------ TLS listeners


@dataclass
class TlsNode:
    certs: Certs
    ssl: str  # bootstrap of the SSL listener (ssl.client.auth=none)
    mtls: str  # SSL with ssl.client.auth=required


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsNode]:
    work = tmp_path_factory.mktemp("admin-cli-tls")
    certs = make_certs(work / "certs")
    secure, mtls = free_port(), free_port()
    config = work / "server.properties"
    config.write_text(
        f"listeners=SSL://127.0.0.1:{secure},MTLS://127.0.0.1:{mtls}\n"
        f"advertised.listeners=SSL://localhost:{secure},MTLS://localhost:{mtls}\n"
        "listener.security.protocol.map=SSL:SSL,MTLS:SSL\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={certs.server}\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
        "listener.name.mtls.ssl.client.auth=required\n"
    )
    with running_walgate(work / "walgate", "--config", str(config)) as server:
        yield TlsNode(certs, f"localhost:{secure}", f"localhost:{mtls}")
        assert "Traceback" not in server.log(), server.log()


def test_cluster_reassign_on_a_single_node_refuses_one_copy_partitions(server: WalgateServer) -> None:
    """``walgate cluster reassign`` (AlterPartitionReassignments, ListPartitionReassignments): a single node's
    partitions have one copy each, so a move is refused with its reason and exit 1, a cancellation finds none, and
    nothing is listed; malformed ``-p`` and ``-p`` without replicas (but for ``--cancel``) are usage errors.
    (Moves that happen: tests/cluster/test_serve_cluster_reassignments.py.)"""
    create_topic(server, "moves", 1)
    refused = walgate(server, "cluster", "reassign", "-p", "moves/0:0", "-p", "moves/3:0", "--json")
    assert refused.returncode == 1 and "the reassignment was refused for 2 partition(s)" in refused.stderr
    assert [(r["topic"], r["partition"], r["result"]) for r in json.loads(refused.stdout)] == [
        ("moves", 0, "INVALID_REPLICA_ASSIGNMENT"), ("moves", 3, "UNKNOWN_TOPIC_OR_PARTITION")]
    cancel = walgate(server, "cluster", "reassign", "--cancel", "-p", "moves/0")
    assert cancel.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in cancel.stdout
    assert as_json(walgate(server, "cluster", "reassign", "--list", "--json")) == []
    table = ok(walgate(server, "cluster", "reassign", "--list", "--topic", "moves"))
    assert all(column in table for column in ("TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"))
    fails(walgate(server, "cluster", "reassign", "-p", "moves/0"), 2, "-p takes TOPIC/PARTITION:R1,R2,...")
    fails(walgate(server, "cluster", "reassign"), 2, "name the partitions to move")
    bad_usage(walgate(server, "cluster", "reassign", "-p", "moves:1,2"), "expected TOPIC/PARTITION:R1,R2,...")


def test_cluster_decommission_and_rebalance_on_a_single_node_are_refused(server: WalgateServer) -> None:
    """``walgate cluster decommission N`` and ``rebalance [--leaders]`` (DROP DNODE, BALANCE VGROUP [LEADER] through
    the node's HTTP API): a single node is not a cluster, refused with exit 1 and the node's reason; a node id that
    is not a number is a usage error. (Moves that happen: tests/cluster/test_serve_cluster_rebalance.py.)"""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*WALGATE, "cluster", *args, "--url", server.http_url], check=False, capture_output=True,
                              text=True, timeout=CLI_TIMEOUT, env=walgate_env())

    fails(run("decommission", "0", "--wait"), 1, "DROP DNODE 0 refused: DROP DNODE 0 moves replicas between the "
          "nodes of a cluster: this node is a single node")
    fails(run("rebalance", "--json"), 1, "BALANCE VGROUP refused:")
    fails(run("rebalance", "--leaders"), 1, "BALANCE VGROUP LEADER refused: BALANCE VGROUP moves replicas")
    bad_usage(run("decommission", "n1"), "invalid int value: 'n1'")


def walgate_at(bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WALGATE, *args, "--bootstrap-server", bootstrap, "--timeout", "10"], check=False,
                          input=stdin, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=walgate_env())


def test_a_kafka_tools_command_config_reaches_an_ssl_listener(tls_node: TlsNode, tmp_path: Path) -> None:
    java = tmp_path / "client.properties"  # what kafka-topics.sh --command-config takes
    java.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tls_node.certs.ca}\n")
    ok(walgate_at(tls_node.ssl, "topic", "create", "tls-topic", "-p", "2", "--command-config", str(java)))
    ok(walgate_at(tls_node.ssl, "produce", "tls-topic", "-K", ":", "-p", "1", "--command-config", str(java),
                  stdin="k:over tls\n"))
    out = ok(walgate_at(tls_node.ssl, "consume", "tls-topic", "--from-beginning", "-e", "-f", "%p %k=%v",
                        "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={tls_node.certs.ca}"))  # kcat's way
    assert out == "1 k=over tls\n"


def test_a_client_certificate_from_a_pem_keystore_passes_ssl_client_auth_required(tls_node: TlsNode,
                                                                                  tmp_path: Path) -> None:
    java = tmp_path / "mtls.properties"
    java.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tls_node.certs.ca}\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={tls_node.certs.client}\n")
    assert isinstance(as_json(walgate_at(tls_node.mtls, "topic", "list", "--json", "--command-config", str(java))), list)
    without = walgate_at(tls_node.mtls, "topic", "list", "-X", "security.protocol=SSL",
                         "-X", f"ssl.ca.location={tls_node.certs.ca}")
    fails(without, 1, "alert certificate required")


def test_an_untrusted_server_certificate_fails_at_once_in_one_line(tls_node: TlsNode) -> None:
    result = walgate_at(tls_node.ssl, "topic", "list", "-X", "security.protocol=SSL",
                        "-X", f"ssl.ca.location={tls_node.certs.other_ca}")
    fails(result, 1, "certificate verify failed")
    plain = walgate_at(tls_node.ssl, "topic", "list")  # PLAINTEXT to a TLS listener
    fails(plain, 1, "the server closed the connection (a TLS or SASL listener needs --command-config")


def test_bad_client_settings_are_usage_errors_naming_the_setting_never_its_value(tls_node: TlsNode,
                                                                                tmp_path: Path) -> None:
    jks = tmp_path / "jks.properties"
    jks.write_text("security.protocol=SSL\nssl.truststore.location=/etc/truststore.jks\nssl.truststore.password=s3cret\n")
    result = walgate_at(tls_node.ssl, "topic", "list", "--command-config", str(jks))
    fails(result, 2, "ssl.truststore.password cannot be used")
    assert "s3cret" not in result.stderr
    fails(walgate_at(tls_node.ssl, "topic", "list", "-X", "ssl.no.such=1"), 2, 'No such configuration property: "ssl.no.such"')
    fails(walgate_at(tls_node.ssl, "topic", "list", "--command-config", str(tmp_path / "missing")), 2,
          "cannot read --command-config")
    bad_usage(walgate_at(tls_node.ssl, "topic", "list", "-X", "security.protocol"), "expected KEY=VALUE")


def test_java_client_names_map_to_librdkafka_ones() -> None:
    assert client_properties(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="p\\\\"w=d;";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\n"
        "ssl.keystore.type=PEM\nssl.keystore.location=/client.pem\nssl.key.password=kp\n"
        "ssl.endpoint.identification.algorithm=\n",
        [("client.id", "me")],
    ) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": 'p"w=d;', "ssl.ca.location": "/ca.pem", "ssl.key.location": "/client.pem",
        "ssl.certificate.location": "/client.pem", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none", "client.id": "me",
    }
    assert client_properties("ssl.keystore.type=PKCS12\nssl.keystore.location=/k.p12\nssl.keystore.password=x\n", []) == {
        "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "x"}
    assert client_properties("ssl.truststore.certificates=-----BEGIN CERTIFICATE-----\n", [("security.protocol", "SSL")]) == {
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----", "security.protocol": "SSL"}
    assert client_properties(None, [("a", "1"), ("a", "2")]) == {"a": "2"}  # the last -X wins
    for text, message in [
        ("ssl.truststore.location=/ts.jks\n", "ssl.truststore.type JKS cannot be read"),
        ("ssl.keystore.type=JKS\nssl.keystore.location=/ks.jks\n", "ssl.keystore.type JKS cannot be read"),
        ("ssl.enabled.protocols=TLSv1.3\n", "ssl.enabled.protocols cannot be used"),
        ("ssl.truststore.type=PEM\nssl.truststore.location=/a\nssl.ca.location=/b\n", "ssl.ca.location is given twice"),
        ('sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required secret="t0k";\n',
         "only PlainLoginModule and ScramLoginModule"),
        ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password="pw";\n',
         "username"),
    ]:
        with pytest.raises(ClientPropertiesError, match=message) as caught:
            client_properties(text, [])
        assert "t0k" not in str(caught.value) and "pw" not in str(caught.value).replace("password", "")


# ---------------------------------------------------------------------- share groups


def share_worker_drains(server: WalgateServer, group: str, topic: str, want: int) -> list[tuple[int, int]]:
    """(partition, offset) of the records a confluent-kafka ShareConsumer of ``group`` accepts until ``want``."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap(server), "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + ASSIGN_TIMEOUT
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5) or []:
            assert m.error() is None, m.error()
            consumer.acknowledge(m)
            got.append((m.partition(), m.offset()))
        consumer.commit_sync(30)
    consumer.close()
    return sorted(got)


def test_share_group_list_describe_reset_offsets_and_delete(server: WalgateServer) -> None:
    create_topic(server, "sq", 2)
    produce(server, "sq", [(i % 2, 1_700_000_000_000 + i) for i in range(6)])  # offsets 0..2 in each partition
    fails(walgate(server, "share-group", "describe", "sg"), 1, "share group 'sg' does not exist")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "sg", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    assert len(share_worker_drains(server, "sg", "sq", 6)) == 6
    assert as_json(walgate(server, "share-group", "list", "--json")) == [{"group": "sg", "state": "Empty"}]
    assert as_json(walgate(server, "share-group", "describe", "sg", "--json")) == [
        {"group": "sg", "state": "Empty", "topic": "sq", "partition": p, "start_offset": 3, "lag": 0} for p in (0, 1)]
    assert "GROUP" in ok(walgate(server, "share-group", "describe", "sg"))
    plan = walgate(server, "share-group", "reset-offsets", "sg", "--topic", "sq:0", "--to-offset", "1", "--json")
    assert as_json(plan) == {"executed": False, "partitions": [
        {"group": "sg", "topic": "sq", "partition": 0, "current_offset": 3, "new_offset": 1}]}
    assert "Dry run" in plan.stderr
    ok(walgate(server, "share-group", "reset-offsets", "sg", "--topic", "sq:0", "--to-offset", "1", "--execute"))
    assert [(r["partition"], r["start_offset"], r["lag"]) for r in as_json(
        walgate(server, "share-group", "describe", "sg", "--json"))] == [(0, 1, 2), (1, 3, 0)]
    assert share_worker_drains(server, "sg", "sq", 2) == [(0, 1), (0, 2)]  # delivered again from offset 1
    ok(walgate(server, "share-group", "reset-offsets", "sg", "--all-topics", "--to-earliest", "--execute"))
    assert [r["start_offset"] for r in as_json(walgate(server, "share-group", "describe", "sg", "--json"))] == [0, 0]
    assert "Deleted share group 'sg'." in walgate(server, "share-group", "delete", "sg").stderr
    assert as_json(walgate(server, "share-group", "list", "--json")) == []
    assert len(share_worker_drains(server, "sg", "sq", 6)) == 6  # earliest: every record again
    ok(walgate(server, "share-group", "delete", "sg", "--topic", "sq"))
    fails(walgate(server, "share-group", "describe", "sg"), 1, "share group 'sg' does not exist")  # no state left
    fails(walgate(server, "share-group", "delete", "sg"), 1, "GROUP_ID_NOT_FOUND")


def test_share_group_commands_refuse_a_group_with_members(server: WalgateServer) -> None:
    from confluent_kafka import ShareConsumer

    create_topic(server, "busy-q", 1)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap(server), "group.id": "busy-sg"})
    consumer.subscribe(["busy-q"])
    try:
        deadline = time.monotonic() + ASSIGN_TIMEOUT
        members: object = []
        while not members and time.monotonic() < deadline:
            consumer.poll(0.3)
            members = as_json(walgate(server, "share-group", "describe", "busy-sg", "--members", "--json")) \
                if "busy-sg" in ok(walgate(server, "share-group", "list")) else []
        assert isinstance(members, list) and [m["assignment"] for m in members] == [["busy-q:0"]]
        fails(walgate(server, "share-group", "reset-offsets", "busy-sg", "--all-topics", "--to-earliest"), 1,
              "can only be reset while it is empty")
        fails(walgate(server, "share-group", "delete", "busy-sg"), 1, "NON_EMPTY_GROUP")
    finally:
        consumer.close()


def test_share_group_commands_reach_an_ssl_listener(tls_node: TlsNode, tmp_path: Path) -> None:
    java = tmp_path / "client.properties"
    java.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tls_node.certs.ca}\n")
    assert as_json(walgate_at(tls_node.ssl, "share-group", "list", "--json", "--command-config", str(java))) == []
    fails(walgate_at(tls_node.ssl, "share-group", "list", "-X", "security.protocol=SASL_SSL"), 2,
          "do not support SASL listeners")
