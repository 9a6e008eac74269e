"""``walgate cluster up`` (``./run cluster``) as a user runs it: one command starting a 3-member etcd and 3 nodes.

The real command in a subprocess, on loopback addresses of its own (127.X.Y.1-3, chosen at random so that a
parallel run does not meet it) and its default ports: it prints how to reach the cluster; confluent-kafka's
AdminClient creates a topic through the printed bootstrap list, its partitions land on more than one node, its
Producer and an assigned Consumer write and read each of them through the same list; the node the demo's one-vgroup
database is placed on holds its rows, and its TDengine topic is read through the same list. SIGTERM stops it: exit code 0, where the data is printed, and none of the processes it printed (every one its
child while it ran) is left. The same command and data dir start it again with the topic's records kept and 100
more demo rows; SIGINT (Ctrl-C) stops it the same way. Refusals: a non-loopback address is a usage error, an endpoint already in use stops
it before anything starts. :func:`plan`'s fallback (one address, ports counted up) is checked directly.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from serve_support import eventually, poll_until

from coordinator_admin import described_groups
from livewalgate import walgate_env
from walgate.gateway.cli import ApiClient
from walgate.gateway.cluster_up import free_loopback_block, plan

READY_S = 180.0  # three etcd members and three nodes starting on a loaded 2-core machine
STOP_S = 120.0


def cluster_up(tmp_path: Path, *args: str, run: str = "") -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / f"cluster-up{run}.out"
    with out.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "walgate.gateway.cli", "cluster", "up", *args],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=walgate_env())
    return proc, out


def own_address() -> str:
    """127.X.Y.1, with X.Y.1 to X.Y.3 bindable and their usual ports free."""
    return free_loopback_block(3, (9092, 6041, 2379, 2380), random.Random(os.getpid() ^ time.time_ns()))


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def running_cluster(tmp_path: Path, address: str, run: str
                    ) -> Iterator[tuple[subprocess.Popen[bytes], Path, str, dict[str, int]]]:
    """``walgate cluster up`` on ``address`` with its data in ``tmp_path/cluster`` until ready; yields the process,
    its output file, that output, and the PIDs it printed. Whatever the test does, the command and every printed
    PID are stopped by PID at the end."""
    proc, out = cluster_up(tmp_path, "--address", address, "--data-dir", str(tmp_path / "cluster"), "--rows", "100",
                           run=run)
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + READY_S
        while "walgate cluster ready" not in out.read_text():
            if proc.poll() is not None:
                pytest.fail(f"walgate cluster up exited with {proc.returncode}:\n{out.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"not ready within {READY_S:g} s:\n{out.read_text()[-4000:]}")
            time.sleep(0.2)
        text = out.read_text()
        pids = {m[1]: int(m[2]) for m in re.finditer(r"^  (\S+): pid (\d+)$", text, re.M)}
        yield proc, out, text, pids
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def read_back(bootstrap: str, count: int, topic: str = "events", partitions: int = 3) -> dict[int, list[bytes]]:
    """Every record of ``topic``'s partitions from offset 0, by an assigned confluent-kafka consumer (bounded: 120
    polls of at most 1 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-up-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    poll_until(consumer, got, count)
    consumer.close()
    return got


def stopped_by(proc: subprocess.Popen[bytes], out: Path, pids: dict[str, int], sig: signal.Signals,
               data_dir: Path) -> None:
    """``sig`` stops the command: exit code 0, where the data is printed, none of ``pids`` left."""
    proc.send_signal(sig)
    assert proc.wait(STOP_S) == 0
    final = out.read_text()
    assert f"The data is kept in {data_dir}" in final, final[-2000:]
    assert not [name for name, pid in pids.items() if alive(pid)], "every process it started is stopped"


def test_cluster_up_serves_a_client_through_the_printed_bootstrap_list_and_sigterm_stops_everything(
        tmp_path: Path) -> None:
    address, data_dir = own_address(), tmp_path / "cluster"
    values = {p: [f"p{p}-{i}".encode() for i in range(20)] for p in range(3)}
    with running_cluster(tmp_path, address, "1") as (proc, out, text, pids):
        assert sorted(pids) == ["etcd-m1", "etcd-m2", "etcd-m3", "node1", "node2", "node3"], text
        assert all(parent_pid(pid) == proc.pid for pid in pids.values()), "every process is the command's child"
        [bootstrap] = re.findall(r"^bootstrap servers: (\S+)$", text, re.M)
        assert len(set(bootstrap.split(","))) == 3
        http = dict(re.findall(r"^  node (\d+) .*HTTP (http://\S+)", text, re.M))

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("events", 3, 1)])["events"].result(timeout=60)
        meta = admin.list_topics("events", timeout=30)
        # placed by count: the demo's one vgroup counts, so the partitions are on two or three nodes
        leaders = {p.leader for p in meta.topics["events"].partitions.values()}
        assert len(leaders) >= 2 and leaders <= {1, 2, 3} and leaders <= set(meta.brokers), leaders

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 60000})
        errors: list[object] = []
        for p, batch in values.items():
            for v in batch:
                producer.produce("events", v, partition=p, on_delivery=lambda err, msg: err and errors.append(err))
        assert producer.flush(60) == 0 and errors == []
        assert read_back(bootstrap, 60) == values
        coordinators: list[set[int]] = []

        def described() -> bool:  # __consumer_offsets is made by the first lookup, then loaded by its leaders
            answers = described_groups(bootstrap, [f"group-{i}" for i in range(12)], 15)
            if len(answers) < 12 or any(isinstance(a, KafkaException) for a in answers.values()):
                return False  # COORDINATOR_LOAD_IN_PROGRESS meanwhile, which librdkafka's admin does not retry
            coordinators.append({a.coordinator.id for a in answers.values()})
            return True

        eventually("every group described", described)
        assert coordinators[-1] == {1, 2, 3}, "groups spread over the nodes"

        [owner] = re.findall(r"^demo data: database power \(1 vgroup, on node (\d+)\)", text, re.M)
        demo = ApiClient(http[owner])
        assert demo.sql("SELECT COUNT(*) FROM power.meters")["data"] == [[100]], "the demo's rows, on their node"
        [[selected]] = demo.sql("SELECT COUNT(*) FROM power.meters WHERE voltage > 200")["data"]
        assert len(read_back(bootstrap, selected, "topic_meters", 1)[0]) == selected, "its topic, from any bootstrap"
        assert [row[2] for row in ApiClient(http["1"]).sql("SHOW DNODES")["data"]] == ["ready"] * 3
        stopped_by(proc, out, pids, signal.SIGTERM, data_dir)

    # the same command and data dir start the same cluster again; Ctrl-C (SIGINT) stops it like SIGTERM
    with running_cluster(tmp_path, address, "2") as (proc, out, text, pids):
        [again] = re.findall(r"^bootstrap servers: (\S+)$", text, re.M)
        assert again == bootstrap
        assert read_back(bootstrap, 60) == values, "the topic and its records are kept"
        assert demo.sql("SELECT COUNT(*) FROM power.meters")["data"] == [[200]], "100 rows more"
        stopped_by(proc, out, pids, signal.SIGINT, data_dir)
    for log in (data_dir / "logs").glob("*.log"):
        assert "Traceback" not in log.read_text(errors="replace"), log


def test_cluster_up_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    proc, out = cluster_up(tmp_path, "--address", "192.0.2.1", "--data-dir", str(tmp_path / "c"))
    assert proc.wait(60) == 2
    assert "is not a loopback address" in out.read_text()
    assert not (tmp_path / "c").exists()


def test_cluster_up_stops_before_starting_anything_when_an_endpoint_is_in_use(tmp_path: Path) -> None:
    address = own_address()
    with socket.socket() as busy:
        busy.bind((address, 9092))
        busy.listen()
        proc, out = cluster_up(tmp_path, "--address", address, "--data-dir", str(tmp_path / "c"))
        assert proc.wait(60) == 1
    text = out.read_text()
    assert f"already in use: {address}:9092" in text, text
    assert ": pid " not in text and "stopping" not in text and not (tmp_path / "c" / "logs").exists(), \
        "nothing started, nothing to stop"


def test_plan_shares_one_address_with_ports_counted_up_when_only_it_can_be_bound() -> None:
    shared = plan(3, 3, ["127.0.0.1"], kafka_port=9092, http_port=6041, etcd_port=2379)
    distinct = plan(3, 3, ["127.0.0.1", "127.0.0.2", "127.0.0.3"], kafka_port=9092, http_port=6041, etcd_port=2379)
    for layout in (shared, distinct):
        endpoints = layout.endpoints()
        assert len(set(endpoints)) == len(endpoints) == 12, "no two processes bind the same endpoint"
    assert shared.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    assert shared.etcd_spec == "http://127.0.0.1:2379,http://127.0.0.1:2381,http://127.0.0.1:2383"
    assert distinct.bootstrap == "127.0.0.1:9092,127.0.0.2:9092,127.0.0.3:9092"
