"""What the ``walgate serve --cluster`` tests share: nodes as real ``walgate serve`` processes over a real etcd
(stopped by PID), bounded waits, the Java Admin's describeCluster, SQL over HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster

from livewalgate import WalgateServer, running_walgate
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import Keys

sys.path.insert(0, str(Path(__file__).parents[2] / "compat-tests"))
import setup_clients  # noqa: E402

__all__ = ["WAIT_S", "ONE_COPY", "all_ready", "cluster_args", "node", "two_nodes", "sql", "readyz", "eventually", "wait_log",
           "describe_cluster", "java_events", "registered_nodes", "node_token", "no_traceback", "produce_to"]

JAVA_DIR = Path(__file__).parents[2] / "compat-tests" / "java"
WAIT_S = 60.0
SESSION_MS = "2000"  # broker.session.timeout.ms: a killed node's lease expires within 2 s
ONE_COPY = ("--override", "replication.enable=false")
"""Issue 24's cluster, without replicas: every vgroup one copy, the group coordinators' partitions placed over the
nodes (``coordinator_placement``), a dead node's partitions and groups unavailable until it is back."""


def cluster_args(etcd: EtcdCluster, node_id: int) -> list[str]:
    return ["--cluster", f"etcd={etcd.spec}", "--node-id", str(node_id),
            "--override", f"broker.session.timeout.ms={SESSION_MS}"]


@contextmanager
def node(etcd: EtcdCluster, tmp_path: Path, node_id: int, *args: str, data_dir: Path | None = None,
         env: dict[str, str] | None = None, kafka_port: int | None = None) -> Iterator[WalgateServer]:
    """Node ``node_id`` (``args``: more flags) in ``tmp_path/node<id>``, its data dir there unless given."""
    with running_walgate(tmp_path / f"node{node_id}", *cluster_args(etcd, node_id), *args, data_dir=data_dir,
                         env=env, kafka_port=kafka_port) as server:
        yield server


@contextmanager
def two_nodes(etcd: EtcdCluster, tmp_path: Path, *args: str
              ) -> Iterator[tuple[WalgateServer, WalgateServer, str, str]]:
    """Nodes 1 (the controller: elected before node 2 starts) and 2 (``args``: more flags of both), and their
    Kafka endpoints."""
    with node(etcd, tmp_path, 1, *args) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd, tmp_path, 2, *args) as n2:
            yield n1, n2, f"127.0.0.1:{n1.kafka_port}", f"127.0.0.1:{n2.kafka_port}"


def sql(server: WalgateServer, statement: str, auth: tuple[str, str] | None = None) -> list[list[Any]]:
    """The rows of ``statement`` run through ``server``'s HTTP API (``auth``: HTTP Basic user and password)."""
    request = urllib.request.Request(server.http_url + "/rest/sql", data=statement.encode(), method="POST")
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as r:
        return list(json.load(r)["data"])


def readyz(server: WalgateServer) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(server.http_url + "/readyz", timeout=30) as r:
            return dict(json.load(r))
    except urllib.error.HTTPError as e:
        return dict(json.load(e))


def eventually(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.1)


def all_ready(nodes: list[WalgateServer]) -> None:
    """Until every node of ``nodes`` lists them all ``ready`` in SHOW DNODES, each in its own view (the one a request
    reaches). Listed is not enough: a node listed but not yet registered is ``offline``, and placing ``REPLICA n``
    then answers 400 "Out of dnodes" (a full CI run of 2026-12-01 failed so)."""
    eventually(f"{len(nodes)} ready nodes", lambda: all(
        [r[2] for r in sql(n, "SHOW DNODES")] == ["ready"] * len(nodes) for n in nodes))


def create_topics(servers: str, *topics: NewTopic) -> None:
    """``topics`` made through ``servers`` (one there already counts), CreateTopics asked again while it answers
    INVALID_REPLICATION_FACTOR: on a loaded machine a node's short lease (:data:`SESSION_MS`) may lapse and be made
    again with no fault injected, so for a moment fewer nodes are registered than the factor needs."""
    admin = AdminClient({"bootstrap.servers": servers})  # (kept while its answers are waited for)

    def made() -> bool:
        for future in admin.create_topics(list(topics), request_timeout=30).values():
            try:
                future.result(30)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR:
                    return False
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        return True

    eventually(f"topics {', '.join(t.topic for t in topics)} made", made)


def wait_log(server: WalgateServer, text: str) -> None:
    eventually(f"{text!r} in the log of {server.http_url}:\n{server.log()[-3000:]}", lambda: text in server.log())


JARS = "kafka-clients-4.3.0"
"""The Java client the cluster tests drive (compat-tests/setup_clients.py's jar set)."""


def leaderships(servers: list[WalgateServer], db: str, vnode: int) -> list[tuple[int, WalgateServer]]:
    """Each (leader epoch, node) in which a node of ``servers`` logged leading ``vnode`` of database ``db``, by epoch.
    (A partition state starts at the etcd revision the controller made it at, not 0: its epochs are read, not
    assumed.)"""
    pattern = re.compile(rf"vnode {vnode} of database {re.escape(db)}: leading epoch (\d+) ")
    return sorted(((int(m.group(1)), s) for s in servers for m in pattern.finditer(s.log())), key=lambda p: p[0])


def leader_of(servers: list[WalgateServer], db: str, vnode: int, above: int = -1) -> tuple[int, WalgateServer] | None:
    """The latest (leader epoch, node) of :func:`leaderships` in an epoch above ``above``; None: none logged yet."""
    led = [p for p in leaderships(servers, db, vnode) if p[0] > above]
    return led[-1] if led else None


def java_events(program: str, *args: str) -> list[dict[str, Any]]:
    """The JSON lines compat-tests/java/``program`` prints, run on the real kafka-clients 4.3.0; it must exit 0."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is not installed (.ci/run installs it)")
    failed = setup_clients.setup(JARS)  # installs them on a clean machine (the compat session does too, later)
    if failed is not None:
        pytest.fail(failed)
    run = subprocess.run([java, "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
                          *setup_clients.java_program(JARS, JAVA_DIR / program), *args],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def describe_cluster(server: WalgateServer) -> dict[str, Any]:
    """The Java Admin's describeCluster through ``server``'s Kafka listener."""
    return java_events("DescribeClusterNodes.java", f"127.0.0.1:{server.kafka_port}")[-1]


def registered_nodes(etcd: EtcdCluster) -> list[bytes]:
    async def read() -> list[bytes]:
        session = EtcdSession(etcd.endpoints)
        try:
            _, kvs = await session.get_prefix(Keys("walgate").nodes)
            return [kv.key for kv in kvs]
        finally:
            await session.close()

    return asyncio.run(read())


def node_token(etcd: EtcdCluster) -> str:
    """The cluster's node token (the first node made it), read from etcd as a node reads it."""
    async def read() -> str:
        session = EtcdSession(etcd.endpoints)
        try:
            answer = await session.get(Keys("walgate").node_token)
            assert answer is not None, "the first node made the token"
            return bytes(answer.value).decode()
        finally:
            await session.close()

    return asyncio.run(read())


def no_traceback(server: WalgateServer) -> None:
    assert "Traceback" not in server.log(), server.log()[-3000:]


def produce_to(port: int, topic: str, values: dict[int, list[bytes]]) -> dict[int, list[int]]:
    """``values`` produced (acks=all, idempotent) to their partitions of ``topic`` through a confluent-kafka producer
    bootstrapped on the node at ``port``; the offsets acknowledged, per partition. Every one must be delivered."""
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True,
                         "message.timeout.ms": 30000})
    acked: dict[int, list[int]] = {p: [] for p in values}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()].append(msg.offset())

    for partition, batch in values.items():
        for value in batch:
            producer.produce(topic, value, partition=partition, on_delivery=report)
    assert producer.flush(60) == 0, "every message answered"
    assert errors == []
    return acked


def poll_until(consumer: Consumer, got: dict[int, list[bytes]], count: int) -> None:
    """Append each record ``consumer`` polls to ``got[partition]`` until ``got`` holds ``count`` (bounded: 120 polls
    of at most 1 s)."""
    for _ in range(120):
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got[msg.partition()].append(msg.value())
        if sum(map(len, got.values())) == count:
            return
