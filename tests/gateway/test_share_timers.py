"""Share groups' timer (issue 27): records a worker stops holding reach a worker that is long-polling, without it
sending anything new: a release wakes it, and so does the end of a killed worker's session, found by the share
coordinator's timer rather than by the next request.

The waiting worker's long poll has a max_wait of 120 s and the locks last 60 s: its answer, expected at once,
must come within WAIT (30 s), long before either, or it was not woken (a poll that times out acquires once more
before answering, so only when it answers tells a wake-up from a time-out).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode
from test_kafka_share_groups import acquired, call, earliest, topic_with_records

from walgate.gateway.server import Gateway

WAIT = 30.0  # seconds a step may take before the test fails instead of hanging
POLL_MS = 120_000  # the waiting worker's max_wait
SETTINGS = {"group_share_record_lock_duration_ms": 60_000}


def join(conn: KafkaConnection, member: str) -> Any:
    r = call(conn, 76, 1, {"group_id": "g", "member_id": member, "member_epoch": 0, "subscribed_topic_names": ["q"]})
    assert r.error_code == ErrorCode.none, r
    return r


def fetch(conn: KafkaConnection, member: str, topic_id: uuid.UUID, max_wait_ms: int = 0,
          epoch: int = 0) -> Any:
    return call(conn, 78, 2, {"group_id": "g", "member_id": member, "share_session_epoch": epoch,
                              "max_wait": max_wait_ms, "min_bytes": 1, "max_records": 100, "batch_size": 100,
                              "forgotten_topics_data": [], "topics": [{"topic_id": topic_id, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}]})


class Polling(threading.Thread):
    """Worker ``member`` long-polls (a new share session) for up to :data:`POLL_MS`."""

    def __init__(self, gateway: Gateway, member: str, topic_id: uuid.UUID) -> None:
        super().__init__(daemon=True)
        self.gateway, self.member, self.topic_id = gateway, member, topic_id
        self.got: list[tuple[int, int, int]] | None = None
        self.start()

    def run(self) -> None:
        with KafkaConnection(self.gateway.kafka_address, timeout=WAIT + POLL_MS / 1000) as conn:
            self.got = acquired(fetch(conn, self.member, self.topic_id, POLL_MS))

    def result(self) -> list[tuple[int, int, int]] | None:
        self.join(WAIT)
        assert not self.is_alive(), "the long poll was not woken (answered at its max_wait at best)"
        return self.got


def parked(gateway: Gateway) -> None:
    """Wait until a long-poll ShareFetch waits on q-0 (it found nothing to acquire)."""
    assert gateway._kafka is not None
    wakeups = gateway._kafka.broker.wakeups
    for _ in range(int(WAIT * 100)):
        if wakeups.waiting("q", 0):
            return
        threading.Event().wait(0.01)
    raise AssertionError("no ShareFetch ever waited on q-0")


def test_a_released_record_wakes_a_worker_that_waits(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", **SETTINGS) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 2)
        earliest(conn, "g")
        join(conn, "a")
        join(conn, "b")
        assert acquired(fetch(conn, "a", topic_id)) == [(0, 1, 1)]
        waiting = Polling(gw, "b", topic_id)
        parked(gw)
        r = call(conn, 79, 2, {"group_id": "g", "member_id": "a", "share_session_epoch": 1, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 1, "acknowledge_types": [2]}]}]}]})  # RELEASE
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        assert waiting.result() == [(0, 1, 2)], "the released records did not reach the waiting worker"


def test_a_killed_workers_records_reach_a_waiting_worker_when_its_session_ends(tmp_path: Path) -> None:
    """The killed worker's session (2 s) ends long before its locks (60 s)."""
    settings = {**SETTINGS, "group_share_session_timeout_ms": 2_000, "group_share_heartbeat_interval_ms": 500}
    with gateway_thread(tmp_path / "data", **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 3)
        earliest(conn, "g")
        with KafkaConnection(gw.kafka_address) as killed:
            join(killed, "a")
            assert acquired(fetch(killed, "a", topic_id)) == [(0, 2, 1)]
        # worker a is gone: no heartbeat, no acknowledgement, no close. b waits, heartbeating meanwhile.
        epoch = join(conn, "b").member_epoch
        waiting = Polling(gw, "b", topic_id)
        for _ in range(int(WAIT * 2)):
            epoch = call(conn, 76, 1, {"group_id": "g", "member_id": "b", "member_epoch": epoch}).member_epoch
            waiting.join(0.5)
            if not waiting.is_alive():
                break
        assert waiting.result() == [(0, 2, 2)], "the killed worker's records did not reach the waiting worker"
