"""Share groups (KIP-932, issue 27): confluent-kafka 2.16's ``ShareConsumer`` (librdkafka 2.15) against walgate.

A walgate with ``group.share.record.lock.duration.ms=2000`` and ``group.share.delivery.count.limit=3`` (broker
settings, by ``--override``); each test's group reads from the earliest offset (``share.auto.offset.reset``, set
with IncrementalAlterConfigs on the GROUP resource, as Kafka's tools do):

* three workers on a two-partition topic (two of them share a partition): each gets records, and together they
  process every record exactly once when all accept;
* a record a worker releases goes at once, and records it holds without acknowledging go after their lock ends, to
  another worker, with the delivery count the client reports one higher;
* a poison record released at every delivery is delivered ``share.delivery.count.limit`` times, then archived;
* a walgate killed with SIGKILL and started again keeps every acknowledgement: a new worker gets exactly the
  records never acknowledged;
* a TDengine ``CREATE TOPIC ... AS SELECT ... WHERE`` topic is a work queue like any other: the workers get exactly
  its filtered rows, also a Java ``KafkaShareConsumer`` (kafka-clients 4.3) and a confluent-kafka worker at once;
* the Java worker reports the delivery counts of a poison record until it is archived;
* the Java Admin's ``describeShareGroups`` shows two members sharing one partition.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from livewalgate import WalgateServer, free_port, running_walgate

LOCK_MS = 2000
LIMIT = 3
OVERRIDES = ("--override", f"group.share.record.lock.duration.ms={LOCK_MS}",
             "--override", f"group.share.delivery.count.limit={LIMIT}")
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    """One walgate for the module's tests (each has its own topics, groups and client ids)."""
    with running_walgate(tmp_path_factory.mktemp("share-groups"), *OVERRIDES) as s:
        yield s


def bootstrap(server: WalgateServer) -> str:
    return f"127.0.0.1:{server.kafka_port}"


def create_topic(server: WalgateServer, name: str, partitions: int, records: int) -> None:
    """A Kafka-native topic with ``records`` values ``v<i>``, round robin over its partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap(server)})
    for i in range(records):
        producer.produce(name, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def from_earliest(server: WalgateServer, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def worker(server: WalgateServer, group: str, topic: str, **conf: Any) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap(server), "group.id": group, **conf})
    consumer.subscribe([topic])
    return consumer


def polled(consumer: ShareConsumer, timeout: float = 0.5) -> list[Message]:
    out = []
    for m in consumer.poll(timeout) or []:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def drain(consumer: ShareConsumer, want: int, seconds: float = DEADLINE_S) -> list[Message]:
    """Poll (explicit mode: accepting each record) until ``want`` records or ``seconds``."""
    got: list[Message] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        for m in polled(consumer):
            consumer.acknowledge(m)
            got.append(m)
        consumer.commit_sync(30)
    return got


def test_workers_on_fewer_partitions_process_every_record_once(server: WalgateServer) -> None:
    create_topic(server, "work", 2, 0)
    from_earliest(server, "workers")
    total = 120
    seen: list[tuple[int, int, int]] = []  # (worker, partition, offset)
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            consumer = worker(server, "workers", "work", **{"max.poll.records": 4})
            deadline = time.monotonic() + DEADLINE_S
            while not done.is_set() and time.monotonic() < deadline:
                for m in polled(consumer):  # implicit mode: accepted at the next poll
                    time.sleep(0.01)  # the work
                    with lock:
                        seen.append((index, m.partition(), m.offset()))
                        if len(seen) >= total:
                            done.set()
            consumer.commit_sync(30)
            consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    producer = Producer({"bootstrap.servers": bootstrap(server)})
    for burst in range(12):  # records keep coming while the workers run
        for i in range(10):
            producer.produce("work", value=f"v{burst}-{i}".encode(), partition=(burst * 10 + i) % 2)
        producer.flush(30)
        time.sleep(0.2)
    for t in threads:
        t.join(DEADLINE_S + 30)
    assert not errors, errors
    records = sorted((p, o) for _, p, o in seen)
    assert records == sorted((p, o) for p in (0, 1) for o in range(total // 2)), "every record exactly once"
    per_worker = {w: sum(1 for x, _, _ in seen if x == w) for w in range(3)}
    assert all(per_worker.values()), per_worker
    shared = {p for p in (0, 1) if len({w for w, q, _ in seen if q == p}) > 1}
    assert shared, "two workers took records of one partition"
    # nothing is left in flight: a new worker gets nothing
    late = worker(server, "workers", "work")
    end = time.monotonic() + 3
    while time.monotonic() < end:
        assert polled(late) == []
    late.close()


def test_released_and_unacknowledged_records_go_to_another_worker(server: WalgateServer) -> None:
    create_topic(server, "jobs", 1, 6)
    from_earliest(server, "redo")
    first = worker(server, "redo", "jobs", **{"share.acknowledgement.mode": "explicit"})
    held: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(held) < 6 and time.monotonic() < deadline:
        held += polled(first)
    assert [m.offset() for m in held] == list(range(6)) and {m.delivery_count() for m in held} == {1}
    for m in held[:2]:
        first.acknowledge(m, AcknowledgeType.ACCEPT)
    first.acknowledge(held[2], AcknowledgeType.RELEASE)
    first.commit_sync(30)  # 3..5 stay acquired, never acknowledged
    second = worker(server, "redo", "jobs", **{"share.acknowledgement.mode": "explicit"})
    started = time.monotonic()
    redelivered = drain(second, 4)
    assert sorted((m.offset(), m.delivery_count()) for m in redelivered) == [(2, 2), (3, 2), (4, 2), (5, 2)]
    assert time.monotonic() - started < DEADLINE_S
    second.close()
    first.close()


def test_a_poison_record_is_archived_after_the_delivery_limit(server: WalgateServer) -> None:
    create_topic(server, "poison", 1, 3)
    from_earliest(server, "careful")
    consumer = worker(server, "careful", "poison", **{"share.acknowledgement.mode": "explicit"})
    deliveries: list[tuple[int, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and len(deliveries) < 2 + LIMIT:
        for m in polled(consumer):
            deliveries.append((m.offset(), m.delivery_count()))
            consumer.acknowledge(m, AcknowledgeType.RELEASE if m.value() == b"v1" else AcknowledgeType.ACCEPT)
        consumer.commit_sync(30)
    end = time.monotonic() + 3  # archived: never delivered again
    while time.monotonic() < end:
        deliveries += [(m.offset(), m.delivery_count()) for m in polled(consumer)]
    consumer.close()
    assert sorted(deliveries) == [(0, 1), *((1, n) for n in range(1, LIMIT + 1)), (2, 1)]


def test_a_killed_walgate_keeps_every_acknowledgement(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    with running_walgate(tmp_path / "one", *OVERRIDES, data_dir=data_dir, kafka_port=port) as server:
        create_topic(server, "durable", 2, 40)
        from_earliest(server, "keep")
        consumer = worker(server, "keep", "durable", **{"share.acknowledgement.mode": "explicit",
                                                         "max.poll.records": 5})
        acked: set[tuple[int, int]] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(acked) < 16 and time.monotonic() < deadline:
            for m in polled(consumer):
                if len(acked) < 16:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    acked.add((m.partition(), m.offset()))
            consumer.commit_sync(30)  # the acknowledgements are durable when this returns
        assert len(acked) == 16
        server.proc.kill()  # SIGKILL: records acquired but not acknowledged were in flight
        server.proc.wait(30)
        consumer.close()
    with running_walgate(tmp_path / "two", *OVERRIDES, data_dir=data_dir, kafka_port=port) as server:
        again = worker(server, "keep", "durable", **{"share.acknowledgement.mode": "explicit"})
        rest = drain(again, 40 - len(acked))
        end = time.monotonic() + 3
        while time.monotonic() < end:
            rest += polled(again)
        again.close()
        got = sorted((m.partition(), m.offset()) for m in rest)
        assert got == sorted({(p, o) for p in (0, 1) for o in range(20)} - acked)
        assert "Traceback" not in server.log()


def sql(server: WalgateServer, statement: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{server.http_url}/rest/sql", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_a_tdengine_as_select_topic_is_a_work_queue(server: WalgateServer) -> None:
    sql(server, "CREATE DATABASE power VGROUPS 2 PRECISION 'ms'")
    sql(server, "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(64))")
    rows = [(f"d{i % 4}", 1_700_000_000_000 + i, 200 + 5 * i) for i in range(20)]
    for table, ts, voltage in rows:
        sql(server, f"INSERT INTO power.{table} USING power.meters TAGS ('loc') VALUES ({ts}, 1.5, {voltage})")
    sql(server, "CREATE TOPIC alarms AS SELECT ts, voltage FROM power.meters WHERE voltage > 250")
    from_earliest(server, "alarm-workers")
    workers = [worker(server, "alarm-workers", "alarms", **{"share.acknowledgement.mode": "explicit"})
               for _ in range(3)]
    want = sorted(v for _, _, v in rows if v > 250)
    got: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < len(want) and time.monotonic() < deadline:
        for consumer in workers:
            for m in polled(consumer, 0.2):
                consumer.acknowledge(m)
                got.append(json.loads(m.value())["voltage"])
            consumer.commit_sync(30)
    for consumer in workers:
        consumer.close()
    assert sorted(got) == want


def records_of(bg: Any) -> list[dict[str, Any]]:
    out = []
    for line in list(bg.out):
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "record":
                out.append(event)
    return out


def test_java_poison_record_delivery_counts_and_archive(server: WalgateServer, java: Any) -> None:
    create_topic(server, "jpoison", 1, 3)
    from_earliest(server, "jcareful")
    run = java("ShareWorker.java", bootstrap(server), "jpoison", "jcareful", "--release-value", "v1",
               "--max-records", str(2 + LIMIT + 1), "--idle", "4", "--timeout", "60", check=False)
    deliveries = sorted((e["offset"], e["delivery_count"]) for e in run.json_lines() if e.get("event") == "record")
    assert run.returncode == 0 or deliveries, run.describe()
    assert deliveries == [(0, 1), *((1, n) for n in range(1, LIMIT + 1)), (2, 1)], run.describe()


def test_java_and_confluent_workers_share_a_tdengine_topic(server: WalgateServer, java_argv: Any,
                                                           background: Any) -> None:
    sql(server, "CREATE DATABASE grid VGROUPS 1 PRECISION 'ms'")
    sql(server, "CREATE STABLE grid.meters (ts TIMESTAMP, voltage INT) TAGS (location VARCHAR(64))")
    sql(server, "CREATE TOPIC surges AS SELECT ts, voltage FROM grid.meters WHERE voltage > 250")
    group = "mixed"
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    jworker = background(java_argv("ShareWorker.java", bootstrap(server), "surges", group, "--idle", "6",
                                   "--timeout", "90", "--set", "max.poll.records=3"))
    ck = worker(server, group, "surges", **{"share.acknowledgement.mode": "explicit", "max.poll.records": 3})
    ck_got: list[int] = []  # voltages (repeating: the multiset is compared, each row once)
    want: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    burst = 0
    while burst < 10 or not (ck_got and records_of(jworker)):  # rows keep coming until both workers have some
        assert time.monotonic() < deadline, ("a worker got nothing", len(ck_got), jworker.describe())
        burst += 1
        for i in range(4):
            voltage = 240 + (burst * 4 + i) % 30
            ts = 1_700_000_000_000 + burst * 4 + i
            sql(server, f"INSERT INTO grid.m{i} USING grid.meters TAGS ('x') VALUES ({ts}, {voltage})")
            if voltage > 250:
                want.append(voltage)
        for m in polled(ck, 0.3):
            ck_got.append(json.loads(m.value())["voltage"])
            time.sleep(0.05)  # the work
            ck.acknowledge(m)
        ck.commit_sync(30)
    while time.monotonic() < deadline and len(ck_got) + len(records_of(jworker)) < len(want):
        for m in polled(ck, 0.3):
            ck_got.append(json.loads(m.value())["voltage"])
            ck.acknowledge(m)
        ck.commit_sync(30)
    ck.close()
    jworker.wait_for(lambda bg: any('"closed"' in line for line in bg.out), 30, "the Java worker finishing")
    java_got = [json.loads(e["value"])["voltage"] for e in records_of(jworker)]
    assert java_got and ck_got, (len(java_got), len(ck_got), jworker.describe())
    assert sorted(java_got + ck_got) == sorted(want), jworker.describe()


def test_java_admin_describes_a_share_group_whose_members_share_a_partition(server: WalgateServer, java: Any) -> None:
    create_topic(server, "shared", 1, 0)
    workers = [worker(server, "described", "shared", **{"client.id": f"w{i}"}) for i in range(2)]
    try:
        deadline = time.monotonic() + DEADLINE_S
        groups: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            for w in workers:
                polled(w, 0.2)  # joins the group
            run = java("ShareGroupsAdmin.java", bootstrap(server), "described", check=False)
            groups = [e for e in run.json_lines() if "group" in e]
            if groups and len(groups[0]["members"]) == 2:
                break
        [group] = groups
        assert group["state"] == "Stable", group
        assert sorted((m["client"], m["partitions"]) for m in group["members"]) == [
            ("w0", ["shared:0"]), ("w1", ["shared:0"])], group
    finally:
        for w in workers:
            w.close()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_read_committed_share_groups_never_deliver_aborted_records(server: WalgateServer, isolation: str) -> None:
    topic = f"txns-{isolation}"
    create_topic(server, topic, 1, 0)
    producer = Producer({"bootstrap.servers": bootstrap(server), "transactional.id": f"tx-share-{isolation}"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{outcome}-{i}".encode())
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)
    group = f"iso-{isolation}"
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.isolation.level", isolation, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    consumer = worker(server, group, topic, **{"share.acknowledgement.mode": "explicit"})
    want = 10 if isolation == "read_committed" else 15
    got = [m.value() for m in drain(consumer, want)]
    end = time.monotonic() + 3
    while time.monotonic() < end:
        got += [m.value() for m in polled(consumer)]
    consumer.close()
    assert len(got) == want and all(v.startswith(b"commit") for v in got) == (isolation == "read_committed"), got


def throttled_worker(server: WalgateServer, group: str, topic: str, client_id: str,
                     throttled: list[float]) -> ShareConsumer:
    """A worker (explicit acknowledgement) whose ``throttle_cb`` appends librdkafka's throttle times (ms)."""
    return worker(server, group, topic, **{"client.id": client_id, "share.acknowledgement.mode": "explicit",
                                           "throttle_cb": lambda event: throttled.append(event.throttle_time * 1000)})


def test_share_fetch_bytes_count_against_the_consumer_byte_rate(server: WalgateServer, java: Any) -> None:
    """A ShareFetch answer's record bytes count against the client id's ``consumer_byte_rate`` as a Fetch's do
    (Kafka's ``handleShareFetchRequest``): the answer that would go over carries no records and ``throttle_time_ms``,
    and its records are released, so another worker gets them; a client id without a quota is not throttled."""
    topic, group = "share-quota", "share-quota"
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap(server), "linger.ms": 200})
    for batch in range(3):  # three batches of 11 records of 1000 bytes (~11 kB each)
        for i in range(11):
            producer.produce(topic, value=b"%02d" % (batch * 11 + i) + b"x" * 998)
        assert producer.flush(30) == 0
    from_earliest(server, group)
    run = java("ClientQuotas.java", bootstrap(server), "set-clients", "slow-share:consumer_byte_rate=2048")
    assert "slow-share" in run.stdout, run.describe()
    # at most 20 kB per answer (2048 B/s over 10 s): the first answer is one 11 kB batch (1.1 kB/s), the next would
    # make 2.2 kB/s: answered with throttle_time_ms and no records
    throttled: list[float] = []
    slow = throttled_worker(server, group, topic, "slow-share", throttled)
    got: list[Message] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not throttled and time.monotonic() < deadline:
            for m in polled(slow):
                slow.acknowledge(m)
                got.append(m)
    finally:
        slow.close()
    assert throttled and throttled[0] > 0 and len(got) == 11, (throttled, len(got))
    free: list[float] = []
    fast = throttled_worker(server, group, topic, "fast-share", free)
    try:
        rest = drain(fast, 22)
    finally:
        fast.close()
    assert sorted(m.value()[:2] for m in got + rest) == [b"%02d" % i for i in range(33)], len(rest)
    assert free == []


def test_an_idle_share_consumer_is_not_throttled_by_request_percentage(server: WalgateServer, java: Any) -> None:
    """ShareFetch long-polls: its wait is no work, as a Fetch's (walgate.gateway.quotas), so a share consumer
    polling an empty topic under a small ``request_percentage`` gets no ``throttle_time_ms``."""
    topic, group = "share-idle", "share-idle"
    admin = AdminClient({"bootstrap.servers": bootstrap(server)})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    run = java("ClientQuotas.java", bootstrap(server), "set-clients", "idle-share:request_percentage=5")
    assert "idle-share" in run.stdout, run.describe()
    throttled: list[float] = []
    idle = throttled_worker(server, group, topic, "idle-share", throttled)
    try:
        for _ in range(12):  # ~6 s of 500 ms long polls (fetch.wait.max.ms): 100% of wall time waiting
            assert polled(idle) == []
    finally:
        idle.close()
    assert throttled == []
