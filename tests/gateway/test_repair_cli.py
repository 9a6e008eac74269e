"""``walgate repair`` against real servers and a stock Kafka client (issue 22, item 4).

One data dir is made by a live ``walgate serve``: a database with a supertable, rows and an ``AS STABLE`` topic
over HTTP, and a Kafka-native topic confluent-kafka produces to and commits a group offset on. Each case copies
it, damages ``catalog.log`` with the server stopped, starts a server (the damaged records' database and topic are
out of service, and the server says how to get them back), runs ``walgate repair`` as an operator would, starts a
server again and reads everything back: the rows with SQL, both topics with confluent-kafka, the group's offset.
The record kinds one by one, in-process: tests/storage/test_repair.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from livewalgate import WALGATE, running_walgate, walgate_env  # noqa: E402
from tests.gateway.test_corrupt_restart import Http, fill_meters  # noqa: E402

TOPIC = "repair.events"
RECORDS = 50
ROWS = 30
COMMITTED = 20


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("repair")
    with running_walgate(work / "run") as server:
        web = Http(server.http_url)
        fill_meters(web, ROWS)
        web.sql("CREATE TOPIC t_st AS STABLE d.st")
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for seq in range(RECORDS):
            producer.produce(TOPIC, value=b"value-%d" % seq, partition=0)
        assert producer.flush(60) == 0
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
        group.commit(offsets=[TopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
        group.close()
        refused = walgate("repair", "--data-dir", str(server.data_dir))  # never while a server holds the data dir
        assert refused.returncode == 1 and "in use by another process" in refused.stderr, refused
        data = server.data_dir
    return data


def walgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WALGATE, *args], capture_output=True, text=True, env=walgate_env(), timeout=120)


def damage(data: Path, op: str, *, wipe: bool = False) -> None:
    """Flip one byte in the middle of the first ``op`` record of catalog.log (``wipe``: zero its whole JSON)."""
    path = data / "catalog.log"
    raw = bytearray(path.read_bytes())
    start = 0
    for line in bytes(raw).split(b"\n"):
        if orjson.loads(line[9:])["op"] == op:
            if wipe:
                raw[start + 9 : start + len(line)] = b"\0" * (len(line) - 9)
            else:
                raw[start + len(line) // 2] ^= 0x04
            path.write_bytes(bytes(raw))
            return
        start += len(line) + 1
    raise AssertionError(f"no {op} record")


def read_all(port: int, topic: str, partition: int = 0) -> list[bytes]:
    """Every value of a partition of ``topic``, read by a stock consumer from the beginning to the high watermark."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader", "enable.auto.commit": False})
    tp = TopicPartition(topic, partition, 0)
    try:
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        seen: dict[int, bytes] = {}
        for _ in range(200):  # bounded: 200 polls of at most 0.5 s
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen[msg.offset()] = msg.value()
            if len(seen) >= high:
                break
        return [seen[o] for o in sorted(seen)]
    finally:
        consumer.close()


def committed(port: int, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def topics(port: int) -> set[str]:
    return set(AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10).topics)


def test_one_flipped_byte_repaired_serves_the_database_and_topics_again(template: Path, tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(template, data)
    damage(data, "create_db")
    damage(data, "create_kafka_topic")
    with running_walgate(tmp_path / "hurt", data_dir=data) as server:
        assert TOPIC not in topics(server.kafka_port) and "t_st" not in topics(server.kafka_port)
        reasons = [row[3] for row in Http(server.http_url).sql("SHOW QUARANTINE")["data"]]
        assert reasons and all("walgate repair --data-dir" in r for r in reasons)
    listed = walgate("repair", "--data-dir", str(data), "--list")
    assert listed.returncode == 0 and "nothing written (--list)" in listed.stdout, listed
    done = walgate("repair", "--data-dir", str(data))
    assert done.returncode == 0 and "restored: catalog.log rewritten" in done.stdout, done
    with running_walgate(tmp_path / "repaired", data_dir=data) as server:
        assert read_all(server.kafka_port, TOPIC) == [b"value-%d" % n for n in range(RECORDS)]
        assert committed(server.kafka_port, TOPIC) == COMMITTED
        assert Http(server.http_url).sql("SELECT COUNT(*) FROM d.st")["data"] == [[ROWS]]
        rows = read_all(server.kafka_port, "t_st") + read_all(server.kafka_port, "t_st", 1)
        assert sorted(orjson.loads(v)["v"] for v in rows) == list(range(ROWS))
        assert "Traceback" not in server.log()
    again = walgate("repair", "--data-dir", str(data))
    assert again.returncode == 0 and "restored" not in again.stdout, again  # idempotent


def test_a_wiped_kafka_topic_record_is_attached_from_its_directory_under_a_new_name(template: Path, tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(template, data)
    damage(data, "create_kafka_topic", wipe=True)
    with running_walgate(tmp_path / "hurt", data_dir=data) as server:
        assert TOPIC not in topics(server.kafka_port)
    listed = walgate("repair", "--data-dir", str(data), "--list", "--json")
    assert listed.returncode == 0, listed
    orphan = next(f for f in map(orjson.loads, listed.stdout.splitlines()) if f["state"] == "attach")
    assert orphan["what"] == "a Kafka-native topic of 1 partition(s)"
    done = walgate("repair", "--data-dir", str(data), "--only", orphan["source"], "--as", "repair.back")
    assert done.returncode == 0, done
    with running_walgate(tmp_path / "repaired", data_dir=data) as server:
        assert read_all(server.kafka_port, "repair.back") == [b"value-%d" % n for n in range(RECORDS)]
        assert "Traceback" not in server.log()
