"""The web console (``/ui``) in a real browser: what a person sees while clients work against the node.

An in-process walgate serves the page; Debian's chromium, driven headless by playwright, looks at it while
unmodified Kafka clients (confluent-kafka) create topics, produce and commit, and the SQL box runs statements.
Every wait is one of playwright's auto-waiting expectations with a bounded timeout: the page polls once a second,
so each expectation holds within a few polls or the test fails. The JSON API's parameter checks are tested
without a browser. Skipped only when /usr/bin/chromium is absent (``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from playwright.async_api import Page, async_playwright, expect

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
TIMEOUT_MS = 15_000  # an expectation's bound: a few of the page's 1 s polls, plus a group join
HOSTILE = '<img src=x onerror="window.__pwned = 1">'

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")


@dataclass
class Console:
    page: Page
    http: str
    bootstrap: str


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, group_initial_rebalance_delay_ms=0)
    async with Gateway(config) as gateway, async_playwright() as pw:
        host, port = gateway.http_address
        origin = f"http://{host}:{port}"
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            requested: list[str] = []
            page.on("request", lambda request: requested.append(request.url))
            await page.goto(f"{origin}/ui")
            await expect(page.locator("#status")).to_have_text(re.compile("^live"), timeout=TIMEOUT_MS)
            yield Console(page, origin, f"127.0.0.1:{gateway.kafka_address[1]}")
            assert [url for url in requested if not url.startswith(f"{origin}/")] == []  # nothing from elsewhere
            assert f"{origin}/ui/static/console.js" in requested
        finally:
            await browser.close()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the future resolves (dropping it cancels it)
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition, headers=[("origin", b"test")])
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, want: int, commit: int) -> Consumer:
    """A classic-group member that reads ``want`` records of partition 0, then commits offset ``commit``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "console-test",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    assert got >= want, f"read {got} of {want} records"
    consumer.commit(offsets=[TopicPartition(topic, 0, commit)], asynchronous=False)
    return consumer


def commit(consumer: Consumer, topic: str, offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)


async def test_a_new_topic_appears_and_its_offsets_throughput_and_tail_follow_produced_records(console: Console) -> None:
    page = console.page
    row = page.locator('#topic-rows tr[data-topic="events"]')
    await expect(page.locator("#no-topics")).to_be_visible()
    await asyncio.to_thread(create_topic, console.bootstrap, "events", 2)
    await expect(row).to_be_visible(timeout=TIMEOUT_MS)  # created after the page loaded
    await expect(row.locator("td").nth(1)).to_have_text("Kafka")
    await expect(row.locator("td").nth(3)).to_have_text("2")
    await row.click()
    await expect(page.locator("#topic-title")).to_have_text("Topic events")
    await expect(page.locator("#partition-rows tr")).to_have_count(2)

    records = [(b"user-%d" % i, b"hello %d" % i) for i in range(50)] + [(b"mallory", HOSTILE.encode())]
    await asyncio.to_thread(produce, console.bootstrap, "events", records)

    partition0 = page.locator("#partition-rows tr").nth(0).locator("td")
    await expect(partition0.nth(2)).to_have_text("51", timeout=TIMEOUT_MS)  # high watermark
    await expect(partition0.nth(3)).to_have_text("51")  # records
    await expect(row.locator("td").nth(4)).to_have_text("51")
    # 51 records within one or two 1 s polls: the chart's peak is at least some 20 records/s
    await expect(page.locator("#topic-chart text.ymax")).to_have_text(re.compile(r"^[1-9]\d(\.\d)?$"), timeout=TIMEOUT_MS)
    await expect(page.locator("#topic-chart polyline")).to_have_count(1)

    tail = page.locator("#tail-rows")
    newest = tail.locator('tr[data-offset="49"]')
    await expect(newest).to_be_visible(timeout=TIMEOUT_MS)
    await expect(newest.locator("td")).to_have_text(["49", re.compile(r"^\d{4}-\d\d-\d\dT"), "user-49", "hello 49",
                                                     "origin=test"])
    hostile = tail.locator('tr[data-offset="50"] code')
    await expect(hostile).to_have_text(HOSTILE)  # shown as text ...
    await expect(tail.locator("img")).to_have_count(0)  # ... no element made of it
    assert await page.evaluate("window.__pwned") is None


async def test_a_groups_lag_per_partition_drops_after_the_consumer_commits(console: Console) -> None:
    page = console.page
    await asyncio.to_thread(create_topic, console.bootstrap, "orders", 1)
    await asyncio.to_thread(produce, console.bootstrap, "orders", [(b"k", b"order %d" % i) for i in range(20)])
    consumer = await asyncio.to_thread(consume_and_commit, console.bootstrap, "billing", "orders", 20, 5)
    try:
        await page.locator('nav a[data-tab="groups"]').click()
        group = page.locator('#group-rows tr[data-group="billing"]')
        await expect(group.locator("td")).to_have_text(["billing", "Stable", "classic", "1", "15", ""], timeout=TIMEOUT_MS)
        await group.click()
        lag = page.locator('#lag-rows tr[data-topic="orders"][data-partition="0"] td')
        await expect(lag).to_have_text(["orders", "0", "5", "20", "15"])
        await expect(page.locator("#member-rows td").nth(1)).to_have_text("console-test")
        await expect(page.locator("#member-rows td").nth(4)).to_have_text("orders: 0")

        await asyncio.to_thread(commit, consumer, "orders", 20)
        await expect(lag).to_have_text(["orders", "0", "20", "20", "0"], timeout=TIMEOUT_MS)
        await expect(group.locator("td").nth(4)).to_have_text("0")
        await expect(page.locator("#group-chart text.ymax")).to_have_text("15")  # the lag chart keeps the history
    finally:
        await asyncio.to_thread(consumer.close)


async def test_the_sql_box_runs_statements_and_the_databases_and_tdengine_topics_show_them(console: Console) -> None:
    page = console.page
    await page.locator('nav a[data-tab="sql"]').click()
    status, result = page.locator("#sql-status"), page.locator("#sql-result")

    async def run(sql: str) -> None:
        await page.locator("#sql-text").fill(sql)
        await page.locator("#sql-form button").click()

    for sql in ("CREATE DATABASE power VGROUPS 1 PRECISION 'ms'",
                "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(64))",
                "CREATE TOPIC meters_topic AS SELECT ts, current, voltage, location FROM power.meters",
                ("INSERT INTO power.d1001 USING power.meters TAGS ('SF') VALUES (1700000000000, 10.3, 219)"
                 " power.d1002 USING power.meters TAGS ('LA') VALUES (1700000000001, 11.5, 221)")):
        await run(sql)
        await expect(status).to_have_text(re.compile(r"^1 row in \d+ ms$"))
        await expect(result.locator("th")).to_have_text(["affected_rows"])
    await run("SHOW DATABASES")
    await expect(result.locator("tbody tr td:first-child")).to_have_text(["power"])
    await run("SELECT * FROM power.meters")
    await expect(status).to_have_text(re.compile(r"^2 rows in "))
    await expect(result.locator("th")).to_have_text(["ts", "current", "voltage", "location"])
    await expect(result.locator("tbody tr").nth(0).locator("td").nth(2)).to_have_text("219")
    await run("SELEKT 1")
    await expect(status).to_have_class("error")
    await expect(status).not_to_be_empty()
    await expect(result.locator("tr")).to_have_count(0)

    await page.locator('nav a[data-tab="databases"]').click()
    power = page.locator('#database-list details[data-db="power"]')
    await expect(power.locator("summary")).to_have_text("power · 1 vgroups · precision ms · 1 supertables · 2 tables")
    await power.locator("summary").click()
    await expect(power.locator("tbody").nth(0).locator("td")).to_have_text(["meters", "3", "1"])
    await expect(power.locator("tbody").nth(1).locator("tr td:first-child")).to_have_text(["d1001", "d1002"])

    await page.locator('nav a[data-tab="topics"]').click()
    topic = page.locator('#topic-rows tr[data-topic="meters_topic"]')
    await expect(topic.locator("td").nth(1)).to_have_text("TDengine (select)")
    await topic.click()
    value = page.locator('#tail-rows tr[data-offset="0"] td').nth(3)
    await expect(value).to_have_text(json.dumps({"ts": "2023-11-14T22:13:20.000Z", "current": 10.3, "voltage": 219,
                                                 "location": "SF"}, separators=(",", ":")), timeout=TIMEOUT_MS)


async def test_a_single_node_shows_no_cluster_tab_and_says_it_is_one_node(console: Console) -> None:
    page = console.page
    await page.goto(f"{console.http}/ui#cluster")  # (the cluster page's URL, as a cluster node's is)
    await expect(page.locator("#cluster-single")).to_be_visible()
    await expect(page.locator("#cluster-view")).to_be_hidden()
    await expect(page.locator("#cluster-link")).to_be_hidden()
    await expect(page.locator("nav a:visible")).to_have_text(["Topics", "Consumer groups", "Databases", "SQL"])


async def test_the_api_answers_bad_parameters_with_400_json(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)
    async with Gateway(config) as gateway, aiohttp.ClientSession() as session:
        host, port = gateway.http_address
        await asyncio.to_thread(create_topic, f"127.0.0.1:{gateway.kafka_address[1]}", "t", 1)

        async def get(query: str) -> tuple[int, dict[str, object]]:
            async with session.get(f"http://{host}:{port}/ui/api/tail?{query}") as response:
                return response.status, await response.json()

        bad = ["partition=0", "topic=&partition=0", f"topic={'x' * 250}&partition=0", "topic=t", "topic=t&partition=-1",
               "topic=t&partition=x", "topic=t&partition=" + "9" * 5000, "topic=t&partition=%D9%A3",
               "topic=t&partition=0&limit=0", "topic=t&partition=0&limit=501", "topic=t&partition=1", "topic=u&partition=0"]
        for query in bad:
            status, body = await get(query)
            assert status == 400 and isinstance(body["code"], int) and body["desc"], (query, status, body)
        assert await get("topic=t&partition=0&limit=500") == (200, {"topic": "t", "partition": 0, "log_start": 0,
                                                                   "high_watermark": 0, "records": []})
        async with session.get(f"http://{host}:{port}/ui/static/../api.py") as response:
            assert response.status == 404
        async with session.get(f"http://{host}:{port}/ui") as response:
            assert response.status == 200 and "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def share_worker(bootstrap: str, group: str, topic: str, want: int, reject: bytes) -> ShareConsumer:
    """A share-group member (confluent-kafka's ShareConsumer, from the earliest record) that reads ``want``
    records, accepting each but ``reject``, which it rejects (archived)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "share-test",
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5) or []:
            assert m.error() is None, m.error()
            consumer.acknowledge(m, AcknowledgeType.REJECT if m.value() == reject else AcknowledgeType.ACCEPT)
            got += 1
        consumer.commit_sync(30)
    assert got >= want, f"read {got} of {want} records"
    return consumer


async def test_a_share_group_shows_its_member_offsets_and_record_counts(console: Console) -> None:
    page = console.page
    await asyncio.to_thread(create_topic, console.bootstrap, "jobs", 1)
    await asyncio.to_thread(produce, console.bootstrap, "jobs", [(b"k", b"job %d" % i) for i in range(10)])
    consumer = await asyncio.to_thread(share_worker, console.bootstrap, "workers", "jobs", 10, b"job 3")
    try:
        await page.locator('nav a[data-tab="groups"]').click()
        group = page.locator('#group-rows tr[data-group="workers"]')
        await expect(group.locator("td")).to_have_text(["workers", "Stable", "share", "1", "0", ""],
                                                       timeout=TIMEOUT_MS)
        await group.click()
        await expect(page.locator("#group-title")).to_have_text(
            "Group workers · Stable · 0 in flight · 0 acquired · 1 archived · 0 redelivered")
        # the share-partition's start offset is past every record: all acknowledged or archived
        await expect(page.locator('#lag-rows tr[data-topic="jobs"][data-partition="0"] td')).to_have_text(
            ["jobs", "0", "10", "10", "0"])
        await expect(page.locator("#member-rows td").nth(1)).to_have_text("share-test")
        await expect(page.locator("#member-rows td").nth(4)).to_have_text("jobs: 0")
    finally:
        await asyncio.to_thread(consumer.close)
