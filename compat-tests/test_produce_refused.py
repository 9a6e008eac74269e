"""walgate only: a stock producer's bad records into a TDengine topic are refused, answered, and write nothing
(issue 13, item 7).

The issue's records (a key that is not UTF-8, a ``precision`` header that is not UTF-8, a JSON ``tbname`` that is a
number, a bool, a list or an object) used to crash the Produce handler: the connection closed with no answer and
the producer retried until its timeout, and one of them had already committed the batch's rows in other vnodes, so
the good row was stored once per retry. Now every one is INVALID_RECORD in the producer's delivery report, nothing
of its batch is written, the connection stays up, and the good row sent again alone is stored exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from compat_brokers import Walgate, serving_walgate
from confluent_kafka import KafkaError, Producer

DB = "refused"
TOPIC = "refused_in"
GOOD = {"key": b"good", "value": json.dumps({"current": 1.5, "location": "SF"}).encode()}
BAD = {
    "key not UTF-8": {"key": b"\xff\xfe", "value": json.dumps({"current": 2.5}).encode()},
    "tbname a number": {"value": json.dumps({"tbname": 5, "current": 2.5}).encode()},
    "tbname a bool": {"value": json.dumps({"tbname": True, "current": 2.5}).encode()},
    "tbname a list": {"value": json.dumps({"tbname": ["d1"], "current": 2.5}).encode()},
    "tbname an object": {"value": json.dumps({"tbname": {"a": 1}, "current": 2.5}).encode()},
}
LINE = b"meters,location=LA current=3.5 1700000000000"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    with serving_walgate(tmp_path_factory.mktemp("walgate")) as walgate:
        walgate.sql(f"CREATE DATABASE {DB} VGROUPS 4")
        walgate.sql(f"CREATE STABLE {DB}.meters (ts TIMESTAMP, current DOUBLE) TAGS (location VARCHAR(16))")
        walgate.sql(f"CREATE TOPIC {TOPIC} AS STABLE {DB}.meters")
        yield walgate


def send_batch(producer: Producer, records: list[dict]) -> list[KafkaError | None]:
    """``records`` in one batch of partition 0 (one flush): the delivery report of each."""
    reports: list[KafkaError | None] = []
    for r in records:
        producer.produce(TOPIC, partition=0, on_delivery=lambda err, msg: reports.append(err), **r)
    assert producer.flush(30) == 0, "the producer is still waiting for an answer"
    return reports


def count(server: Walgate) -> int:
    return server.sql(f"SELECT * FROM {DB}.meters")["rows"]


@pytest.mark.parametrize("case", list(BAD) + ["precision header not UTF-8"])
def test_a_bad_record_is_invalid_record_and_its_batch_writes_nothing(server: Walgate, case: str) -> None:
    # one batch: the partition's leader is known first (records queued before it is are sent as it becomes known,
    # one by one), then nothing is sent before both records are queued (a long linger; flush sends them)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 60000, "message.timeout.ms": 120000})
    producer.list_topics(TOPIC, timeout=30)
    if case in BAD:
        batch = [GOOD, BAD[case]]
    else:  # line protocol: the good line, then one whose precision header is not UTF-8
        batch = [{"value": LINE, "headers": [("precision", b"ms")]}, {"value": LINE, "headers": [("precision", b"\xff")]}]
    before = count(server)
    reports = send_batch(producer, batch)
    assert [e.code() if e else None for e in reports] == [KafkaError.INVALID_RECORD] * 2, reports
    assert count(server) == before, "a refused batch wrote rows"
    # the connection stayed up and the same producer goes on: the good record alone is stored, once
    assert send_batch(producer, batch[:1]) == [None]
    assert count(server) == before + 1
    log = server.log()
    assert "Traceback" not in log and "closing the connection" not in log, log[-3000:]
