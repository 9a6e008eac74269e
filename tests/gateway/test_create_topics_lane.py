"""A CreateTopics makes each topic's files off the storage thread (issue 23): a Produce and a Metadata complete while
one topic's file making is held, and the request then completes.

Deterministic, not timed: a hook on ``walgate.storage.fileio.os`` (as the fault tests use it) holds the first fsync of
a new vnode's WAL directory once armed, on an Event. While it is held, a real client (confluent-kafka, acks=1)
produces to an existing topic and lists the topics; once it is let go, every topic of the request is created and no
directory is left that no topic has. On main that fsync ran in the creation's storage-thread call, so the produce
waited behind it.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.gateway_helpers import gateway_thread
from tests.gateway.held_fsync import HOLD_S, HeldFsync, holding

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from walgate.gateway.kafka.handlers.create_topics import _Files  # noqa: E402
from walgate.storage.engine import Engine  # noqa: E402

NEW_WAL_DIR = re.compile(r"/db/[0-9a-f]{32}/vnode0/wal$")
WAIT_S = 30.0  # the most a client call below waits: bounded, not a timing assertion


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldFsync]:
    with holding(monkeypatch, NEW_WAL_DIR, armed=False) as hook:
        yield hook


def test_a_produce_and_a_metadata_complete_while_a_topics_files_are_made(tmp_path: Path, held: HeldFsync):
    with gateway_thread(tmp_path / "data") as gateway:
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("busy", 1)])["busy"].result(WAIT_S)
        held.armed = True
        names = ["busy", *(f"new{i}" for i in range(5))]  # busy exists: answered so, no directory made for it
        futures = admin.create_topics([NewTopic(n, 3) for n in names], operation_timeout=WAIT_S,
                                      request_timeout=HOLD_S + WAIT_S)
        assert held.reached.wait(WAIT_S)
        assert held.thread and not held.thread.startswith("walgate-storage")  # (main: its worker thread)
        delivered: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
        producer.produce("busy", b"while held", on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(WAIT_S) == 0 and delivered == [None]  # main: waits behind the held fsync
        listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=WAIT_S).topics  # (a connection
        # of its own: one connection's requests are answered in order, after the CreateTopics)
        assert "busy" in listed and not futures["new0"].done()
        held.release.set()
        with pytest.raises(confluent_kafka.KafkaException, match="already exists"):
            futures["busy"].result(WAIT_S)
        for name in names[1:]:
            futures[name].result(WAIT_S)
        topics = admin.list_topics(timeout=WAIT_S).topics
        assert all(len(topics[n].partitions) == 3 for n in names[1:])
        data = tmp_path / "data"
    engine = Engine.open(data)
    try:  # each directory is a database's: none left over
        assert sorted(os.listdir(data / "db")) == sorted(d.id for d in engine.catalog.databases.values())
        assert engine.damage() == []
    finally:
        engine.close()


def test_files_made_for_a_cancelled_request_are_removed_whichever_ends_last(tmp_path: Path):
    """The handler gives up (the node stops) while a topic's files are made: made after, the making removes them;
    made before, the handler removes them; nothing is left either way."""
    engine = Engine.open(tmp_path)
    try:
        late = _Files(2)
        assert late.abandon() is None  # nothing made yet
        assert late.make(engine) is None and _db_dirs(tmp_path) == []  # made after: removed by the making
        early = _Files(2)
        made = early.make(engine)
        assert made is not None and _db_dirs(tmp_path) == [made]
        assert early.abandon() == made  # made before: the handler's to remove
        engine.drop_prepared(made)
        assert _db_dirs(tmp_path) == []
    finally:
        engine.close()


def test_a_stop_while_a_topics_files_are_made_leaves_no_directory(tmp_path: Path, held: HeldFsync):
    data = tmp_path / "data"
    with gateway_thread(data) as gateway:
        port = gateway.kafka_address[1]
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        admin.create_topics([NewTopic("first", 1)])["first"].result(WAIT_S)
        held.armed = True
        admin.create_topics([NewTopic(f"cut{i}", 2) for i in range(3)], request_timeout=HOLD_S + WAIT_S)
        assert held.reached.wait(WAIT_S)

        def release_once_closed() -> None:  # the stop cancels the request's handler first (not timed: either order
            deadline = time.monotonic() + WAIT_S  # leaves no directory; this one exercises the cancelled handler)
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                except OSError:
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            held.release.set()

        releaser = threading.Thread(target=release_once_closed)
        releaser.start()
    releaser.join(WAIT_S)
    engine = Engine.open(data)
    try:
        assert sorted(os.listdir(data / "db")) == sorted(d.id for d in engine.catalog.databases.values())
        assert engine.damage() == [] and "first" in engine.catalog.topics
    finally:
        engine.close()


def _db_dirs(root: Path) -> list[str]:
    return sorted(os.listdir(root / "db")) if (root / "db").exists() else []
