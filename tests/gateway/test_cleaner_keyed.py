"""A log cleaner pass's steps hold only the vnode of the partition being cleaned (issue 23): a Produce to another
partition completes while a step is held, and the pass then finishes.

Deterministic, not timed: a hook on ``walgate.storage.fileio.os`` (the one attribute storage's file operations go
through, as the fault tests use it) holds the first write of the cleaner's rewritten log (``<first>.log.tmp``),
which a step makes on the storage lane, on an Event. While it is held, a real client (confluent-kafka, acks=1)
produces to another topic and reads it back. On main every step was an exclusive call of the storage lane, so that
produce waited until the step went on.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import gateway_thread
from tests.gateway.test_cleaner_lane import consume
from walgate.storage import fileio

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

STAGED_LOG = re.compile(r"/\d{20}\.log\.tmp$")  # a WAL segment's rewritten log, staged by the cleaner
HOLD_S = 60.0  # the hook lets the write go by itself after this (a node that never goes on still stops)


class HeldWrite:
    """``os`` for fileio, except that once :attr:`armed`, the first write to a file whose path matches
    :data:`STAGED_LOG` waits until :attr:`release`."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: Any) -> int:
        if self.armed and not self.reached.is_set() and STAGED_LOG.search(os.readlink(f"/proc/self/fd/{fd}")):
            self.reached.set()
            self.release.wait(HOLD_S)
        return os.write(fd, data)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldWrite]:
    hook = HeldWrite()
    monkeypatch.setattr(fileio, "os", hook)
    try:
        yield hook
    finally:
        hook.release.set()


def test_a_produce_to_another_partition_completes_while_a_cleaner_step_is_held(tmp_path: Path,
                                                                                held: HeldWrite) -> None:
    with gateway_thread(tmp_path / "data", log_cleaner_backoff_ms=10) as gateway:
        try:
            bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
            configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", "segment.ms": "1"}
            admin = AdminClient({"bootstrap.servers": bootstrap})
            futures = admin.create_topics([NewTopic("c", 1, config=configs), NewTopic("other", 1)])
            for future in futures.values():
                future.result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
            other = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
            other.produce("other", b"before", partition=0)  # (its connection and metadata, before the hold)
            assert other.flush(30) == 0
            held.armed = True
            for i in range(12):  # k0..k2 four times each, one batch a segment (segment.ms=1): each delivered before
                # the next is sent (12 records sent at once may make one batch, in the active segment, never
                # cleaned: CI of 9bb58ad), until a cleaner step holds c: a produce to c then waits for it
                producer.produce("c", b"v%d" % i, key=b"k%d" % (i % 3), partition=0)
                deadline = time.monotonic() + 30
                while producer.flush(0.1) and not held.reached.is_set() and time.monotonic() < deadline:
                    pass
                time.sleep(0.01)
            assert held.reached.wait(60), "the cleaner never wrote a rewritten segment"
            for i in range(3):  # while the cleaner's step is held on the storage lane
                other.produce("other", b"o%d" % i, partition=0)
            assert other.flush(20) == 0, "the produce waited behind the cleaner's step"
            assert [v for _, _, v in consume(bootstrap, "other", 3)] == [b"before", b"o0", b"o1", b"o2"]
            assert not held.release.is_set()  # all of that while the step was still held
        finally:
            held.release.set()
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60  # the pass goes on: the old versions of k0..k2 go
        while len(got := consume(bootstrap, "c", 11)) == 12 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert {k: v for _, k, v in got} == {b"k0": b"v9", b"k1": b"v10", b"k2": b"v11"}
        assert len(got) < 12  # compacted
