"""A node's start does not wait for its meta stores' whole-file checks (issue 23: with 10 million subtables they
were 91 of the 104 s a restart took): they run on a thread of their own once the node serves.

Deterministic, not timed: the check is held on an Event (a hook on ``MetaCheck.run``) while the node starts on a
data dir whose store has a row whose definition is not its name's (only a whole read finds it); the node is ready
and answers SQL and a Kafka produce meanwhile; once the check goes on, the store is reported, rebuilt from the WAL,
and every table is served.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import gateway_thread, sql
from walgate.storage import meta_checks
from walgate.storage.engine import Engine
from walgate.storage.meta_store import META_STORE

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def test_the_node_serves_while_its_meta_stores_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="walgate")
    data = tmp_path / "data"
    e = Engine.open(data)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    for i in range(6):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i})")
    e.close()
    [path] = data.glob(f"db/*/vnode0/{META_STORE}")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tables SET def = CAST('00000000 {}' AS BLOB) WHERE name = 't3'")
    reached, release = threading.Event(), threading.Event()
    real = meta_checks.MetaCheck.run

    def held(self: meta_checks.MetaCheck, *args: Any) -> str | None:
        reached.set()
        release.wait(60)
        return real(self, *args)

    monkeypatch.setattr(meta_checks.MetaCheck, "run", held)
    with gateway_thread(data) as gateway:
        try:
            assert reached.wait(60), "the start never checked the store"
            assert sql(gateway, "INSERT INTO db.t9 USING db.st TAGS (9) VALUES (1009, 9)")["data"] == [[1]]
            assert sql(gateway, "SELECT v FROM db.t1")["data"] == [[1]]
            bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("k", 1)])["k"].result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
            producer.produce("k", b"v", partition=0)
            assert producer.flush(30) == 0
            assert not release.is_set()  # all of that while the check was held
        finally:
            release.set()
        for _ in range(1200):  # the check's result is applied on the storage thread (bounded wait)
            if any("meta stores checked: 1" in r.getMessage() for r in caplog.records):
                break
            reached.wait(0.05)
        assert gateway._engine is not None
        [d] = gateway._engine.damage()
        assert d.file.endswith(META_STORE) and d.action == "rebuilt"
        got = sorted(sql(gateway, "SELECT tbname, site, v FROM db.st")["data"])
        assert got == sorted([[f"t{i}", i, i] for i in (*range(6), 9)])
