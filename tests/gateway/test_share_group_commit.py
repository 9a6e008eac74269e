"""Share acknowledgements under the node's group commit (issue 27): ``share_groups.log``'s fsync runs off the storage
thread, one fsync answers every acknowledgement queued while the previous one ran, an acknowledgement is answered
only once durable, and a failed fsync refuses (and undoes) exactly the acknowledgements not yet durable.

The log's fsyncs are held at a gate (``walgate.storage.fileio``'s ``os``, as ``test_group_commit.py`` does): every
assertion is about the order of events, never about time.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode
from test_group_commit import WAIT, Gate, newest
from test_kafka_share_groups import acquired, call, earliest, topic_with_records

from walgate.gateway.server import Gateway
from walgate.storage import fileio

MEMBERS = ("m1", "m2", "m3")


class ShareLogGate(Gate):
    """:class:`Gate` holding the fsyncs of ``share_groups.log`` (and counting them) instead."""

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._gate(fd, "/share_groups.log")
        os.fsync(fd)


@pytest.fixture()
def gate(monkeypatch: pytest.MonkeyPatch) -> ShareLogGate:
    gate = ShareLogGate()
    monkeypatch.setattr(fileio, "os", gate)
    return gate


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture()
def node(data: Path) -> Iterator[tuple[Gateway, uuid.UUID]]:
    """A gateway whose topic q holds 6 records, each member of share group g holding two of them."""
    with gateway_thread(data) as gateway, KafkaConnection(gateway.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 6)
        earliest(conn, "g")
        for i, member in enumerate(MEMBERS):
            assert join(conn, member).error_code == ErrorCode.none
            got = call(conn, 78, 2, fetch_body(member, topic_id, max_records=2))
            assert acquired(got) == [(2 * i, 2 * i + 1, 1)], got
        yield gateway, topic_id


def join(conn: KafkaConnection, member: str) -> Any:
    return call(conn, 76, 1, {"group_id": "g", "member_id": member, "member_epoch": 0,
                              "subscribed_topic_names": ["q"]})


def fetch_body(member: str, topic_id: uuid.UUID, epoch: int = 0, max_records: int = 100) -> dict[str, Any]:
    return {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
            "max_records": max_records, "batch_size": max_records, "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}


def ack(node: Gateway, topic_id: uuid.UUID, member: str, epoch: int) -> int:
    """``member`` accepts the two records it holds (ShareAcknowledge); the partition's error code."""
    first = 2 * MEMBERS.index(member)
    with KafkaConnection(node.kafka_address) as conn:
        r = call(conn, 79, 2, {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": first, "last_offset": first + 1, "acknowledge_types": [1]}]}]}]})
    [[code]] = [[p.error_code for p in t.partitions] for t in r.responses]
    return int(code)


class Acking(threading.Thread):
    def __init__(self, node: Gateway, topic_id: uuid.UUID, member: str, epoch: int = 1) -> None:
        super().__init__(daemon=True)
        self.args, self.error = (node, topic_id, member, epoch), -1
        self.start()

    def run(self) -> None:
        self.error = ack(*self.args)

    def result(self) -> int:
        self.join(WAIT)
        assert not self.is_alive(), f"ShareAcknowledge of {self.args[2]} was never answered"
        return self.error


def queued(node: Gateway, writes: int) -> None:
    """Wait until ``writes`` writes of share_groups.log were queued (the acknowledgements reached the storage
    thread and were applied in memory)."""
    assert node._kafka is not None and node._kafka.broker.shares is not None
    slog = node._kafka.broker.shares._log
    assert slog is not None
    for _ in range(int(WAIT * 100)):
        if slog._written >= writes:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"fewer than {writes} share log writes were ever queued")


def metadata_answered(node: Gateway) -> bool:
    """Whether a Metadata request (a storage-thread call) is answered within WAIT."""
    answered: list[int] = []

    def request() -> None:
        with KafkaConnection(node.kafka_address) as conn:
            answered.append(conn.request(newest(3, {"topics": [{"name": "q"}]})).topics[0].error_code)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    thread.join(WAIT)
    return answered == [ErrorCode.none]


def test_an_acknowledgement_waits_for_its_fsync_which_does_not_hold_the_storage_thread(
        node: tuple[Gateway, uuid.UUID], gate: ShareLogGate) -> None:
    gateway, topic_id = node
    gate.hold()
    held = Acking(gateway, topic_id, "m1")
    gate.started()  # its fsync runs, held
    served = metadata_answered(gateway)
    assert held.is_alive(), "the acknowledgement was answered before its fsync ran"
    gate.release()
    assert held.result() == ErrorCode.none
    assert served, "a Metadata request waited for a share log fsync (the storage thread ran it)"


def test_one_fsync_answers_every_acknowledgement_queued_while_the_previous_ran(
        node: tuple[Gateway, uuid.UUID], gate: ShareLogGate) -> None:
    gateway, topic_id = node
    before = len(gate.synced)
    gate.hold()
    first = Acking(gateway, topic_id, "m1")
    gate.started()
    others = [Acking(gateway, topic_id, m) for m in ("m2", "m3")]
    queued(gateway, 4)  # the fetches' writes (one: the new partition), then the three acknowledgements
    gate.release()
    assert [a.result() for a in (first, *others)] == [ErrorCode.none] * 3
    assert len(gate.synced) == before + 2, f"{len(gate.synced) - before} fsyncs for 3 acknowledgements"


def test_a_failed_fsync_refuses_and_undoes_every_acknowledgement_not_yet_durable(
        node: tuple[Gateway, uuid.UUID], gate: ShareLogGate) -> None:
    gateway, topic_id = node
    gate.hold()
    covered = Acking(gateway, topic_id, "m1")
    gate.started()  # its fsync covers m1's acknowledgement only
    later = Acking(gateway, topic_id, "m2")
    queued(gateway, 3)
    gate.release(fail=True)
    assert covered.result() == ErrorCode.kafka_storage_error
    assert later.result() == ErrorCode.kafka_storage_error, "an acknowledgement queued behind a failed fsync " \
                                                            "was answered"
    # undone: the records are still their members', who acknowledge them again (the next epochs)
    assert ack(gateway, topic_id, "m1", 2) == ErrorCode.none
    assert ack(gateway, topic_id, "m3", 1) == ErrorCode.none
    assert ack(gateway, topic_id, "m2", 2) == ErrorCode.none


def test_acknowledgements_answered_survive_a_restart_and_refused_ones_are_delivered_again(
        data: Path, gate: ShareLogGate) -> None:
    with gateway_thread(data) as gateway, KafkaConnection(gateway.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 6)
        earliest(conn, "g")
        for i, member in enumerate(MEMBERS):
            join(conn, member)
            assert acquired(call(conn, 78, 2, fetch_body(member, topic_id, max_records=2))) == [(2 * i, 2 * i + 1, 1)]
        assert ack(gateway, topic_id, "m1", 1) == ErrorCode.none
        gate.hold()
        refused = Acking(gateway, topic_id, "m2")
        gate.started()
        gate.release(fail=True)
        assert refused.result() == ErrorCode.kafka_storage_error
    with gateway_thread(data) as gateway, KafkaConnection(gateway.kafka_address) as conn:
        join(conn, "m4")
        got = acquired(call(conn, 78, 2, fetch_body("m4", topic_id)))
        assert got == [(2, 5, 2)], got  # m1's acknowledged records never again; m2's refused ones and m3's again
