"""walgate only: client quotas (KIP-546) with real clients, and browser-style cross-origin requests refused.

The Java Admin (kafka-clients 4.3 and 3.9, what ``kafka-configs --entity-type users|clients`` calls) sets, filters and
removes quotas with ``alterClientQuotas`` / ``describeClientQuotas``; a confluent-kafka (librdkafka) producer whose
client id has a low ``producer_byte_rate``, and a consumer with a low ``consumer_byte_rate``, are answered with
``throttle_time_ms`` and report it through ``throttle_cb``, while other client ids are not throttled. Every change
is in the server's audit log. A POST with the headers a browser sends from a foreign page (a "simple request", no
preflight) is refused and runs nothing; the same statement without them (curl, taosrest) runs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import pytest
from compat_brokers import Walgate
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def steps(run) -> dict[str, dict]:
    return {d["step"]: d for d in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_admin_alters_describes_and_removes_client_quotas(walgate: Walgate, java, clients: str) -> None:
    run = java("ClientQuotas.java", walgate.bootstrap, "round-trip", timeout=120, clients=clients, check=False)
    got = steps(run)
    assert "error" not in got and run.returncode == 0, run.describe()
    alice = {"client-id=app,user=alice": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0}}
    default_user = {"user=<default>": {"request_percentage": 200.0}}
    assert got["altered"]["entities"] == alice | default_user, run.describe()
    assert got["alice"]["entities"] == alice, run.describe()  # contains user=alice (and any client id)
    assert got["default_user_only"]["entities"] == default_user, run.describe()
    assert got["validated_only"]["entities"] == {}, run.describe()  # validateOnly changed nothing
    assert got["refused"]["error"] == "InvalidRequestException", run.describe()
    assert got["removed"]["entities"] == {}, run.describe()
    log = walgate.log()
    assert "AlterClientQuotas client-id app, user alice (producer_byte_rate=1.04858e+06, consumer_byte_rate=" in log
    assert "AlterClientQuotas user carol (producer_byte_rate=-1): failed: INVALID_REQUEST" in log


def produce(bootstrap: str, topic: str, client_id: str) -> list[float]:
    """11 records of 1000 bytes in one batch; the throttle times (ms) librdkafka reported."""
    throttled: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 200,
                         "throttle_cb": lambda event: throttled.append(event.throttle_time * 1000)})
    for i in range(11):
        producer.produce(topic, key=b"%d" % i, value=b"x" * 1000)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 10
    while not throttled and time.monotonic() < deadline:  # the callback comes from poll(): bounded wait
        producer.poll(0.2)
    return throttled


def consume(bootstrap: str, topic: str, client_id: str, want: int) -> tuple[int, list[float]]:
    """(records read, throttle times in ms) of a consumer of partition 0 until it is throttled or has read ``want``
    records (at most 20 s)."""
    throttled: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttled.append(event.throttle_time * 1000)})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records, deadline = 0, time.monotonic() + 20
    try:
        while not throttled and records < want and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                records += 1
    finally:
        consumer.close()
    return records, throttled


def test_confluent_clients_over_their_byte_rates_are_throttled_and_other_clients_are_not(walgate: Walgate,
                                                                                         java) -> None:
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    run = java("ClientQuotas.java", walgate.bootstrap, "set-clients", "throttled:producer_byte_rate=1024",
               "slow-reader:consumer_byte_rate=2048", timeout=120)
    assert steps(run)["set"]["entities"] == {"client-id=throttled": {"producer_byte_rate": 1024.0},
                                             "client-id=slow-reader": {"consumer_byte_rate": 2048.0}}, run.describe()
    # 11 kB over Kafka's 10 s minimum window: about 1.1 kB/s > 1024 B/s, a throttle of about a second
    throttled = produce(walgate.bootstrap, topic, "throttled")
    assert throttled and throttled[0] > 0, throttled
    for _ in range(2):
        assert produce(walgate.bootstrap, topic, "free") == []  # no quota for this client id
    # three batches of 11 kB: the first answer (at most 20 kB, what 2048 B/s allows over 10 s) passes, the
    # next would make 2.2 kB/s: answered empty with throttle_time_ms
    records, throttled = consume(walgate.bootstrap, topic, "slow-reader", 33)
    assert records >= 11 and throttled and throttled[0] > 0, (records, throttled)
    records, throttled = consume(walgate.bootstrap, topic, "fast-reader", 33)
    assert records == 33 and throttled == [], (records, throttled)


def post_sql(walgate: Walgate, statement: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"{walgate.http_url}/rest/sql", data=statement.encode(), method="POST",
                                     headers={"Content-Type": "text/plain;charset=UTF-8", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_browser_style_cross_origin_post_is_refused_and_runs_nothing(walgate: Walgate) -> None:
    walgate.sql("CREATE DATABASE origin_check VGROUPS 1")
    browser = {"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
               "Sec-Fetch-Dest": "empty", "User-Agent": "Mozilla/5.0"}
    assert post_sql(walgate, "DROP DATABASE origin_check", browser) == 403
    assert ["origin_check"] in [row[:1] for row in walgate.sql("SHOW DATABASES")["data"]]
    assert post_sql(walgate, "DROP DATABASE origin_check", {}) == 200  # no browser headers: curl, taosrest
