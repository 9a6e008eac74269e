"""Share groups through the Kafka port (KIP-932 handlers): ACLs as KafkaApis checks them, a ShareFetch over its byte
quota (its records released; a release the disk refuses leaves them to their lock), and acknowledgements the
disk refuses (share_groups.log) answered with a retriable error, undone, and taken again once the disk is back."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode

from tests.storage.faults import WRITE_FAULTS, Faults

AUTHORIZER = {"authorizer_class_name": "kafka.security.authorizer.AclAuthorizer"}
ME = "User:ANONYMOUS"
TOPIC_RES, GROUP_RES = 2, 3
LITERAL, READ, DESCRIBE, ALLOW = 3, 3, 8, 3
ACCEPT = 1


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def acl(rtype: int, name: str, op: int) -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": LITERAL, "principal": ME,
            "host": "*", "operation": op, "permission_type": ALLOW}


def topic_with_records(conn: KafkaConnection, name: str, count: int) -> uuid.UUID:
    [made] = call(conn, 19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}],
                                "timeout": 10_000}).topics
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(count):
        builder.append(timestamp=None, key=None, value=f"v{i}".encode())
    builder.close()
    if not count:
        return made.topic_id  # type: ignore[no-any-return]
    r = call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": bytes(builder.buffer())}]}]})
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.none
    return made.topic_id  # type: ignore[no-any-return]


def join(conn: KafkaConnection, group: str, topic: str) -> Any:
    return call(conn, 76, 1, {"group_id": group, "member_id": "m1", "member_epoch": 0,
                              "subscribed_topic_names": [topic]})


def share_fetch(conn: KafkaConnection, group: str, epoch: int, topic_id: uuid.UUID,
                acks: list[dict[str, Any]] | None = None) -> Any:
    return call(conn, 78, 2, {"group_id": group, "member_id": "m1", "share_session_epoch": epoch, "max_wait": 0,
                              "min_bytes": 1, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
                              "topics": [{"topic_id": topic_id, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": acks or []}]}]})


def share_ack(conn: KafkaConnection, group: str, epoch: int, topic_id: uuid.UUID, first: int, last: int) -> Any:
    return call(conn, 79, 2, {"group_id": group, "member_id": "m1", "share_session_epoch": epoch, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]}]}]})


def earliest(conn: KafkaConnection, group: str) -> None:
    r = call(conn, 44, 1, {"validate_only": False, "resources": [{"resource_type": 32, "resource_name": group,
                                                                    "configs": [{"name": "share.auto.offset.reset",
                                                                                 "config_operation": 0,
                                                                                 "value": "earliest"}]}]})
    assert r.responses[0].error_code == ErrorCode.none, r


def acquired(response: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def test_share_apis_check_read_on_the_group_and_the_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        open_id = topic_with_records(conn, "open", 2)
        secret_id = topic_with_records(conn, "secret", 2)
        call(conn, 30, 3, {"creations": [acl(GROUP_RES, "g", READ), acl(TOPIC_RES, "open", READ)]})
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert join(conn, "other", "open").error_code == ErrorCode.group_authorization_failed
        refused = join(conn, "g", "secret")
        assert refused.error_code == ErrorCode.topic_authorization_failed and "secret" in refused.error_message
        assert join(conn, "g", "open").error_code == ErrorCode.none
        assert share_fetch(conn, "other", 0, open_id).error_code == ErrorCode.group_authorization_failed
        assert call(conn, 79, 2, {"group_id": "other", "member_id": "m1", "share_session_epoch": 1, "topics": []}
                    ).error_code == ErrorCode.group_authorization_failed
        both = call(conn, 78, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": 0, "max_wait": 0,
                                  "min_bytes": 1, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
                                  "topics": [{"topic_id": t, "partitions": [{"partition_index": 0,
                                                                             "acknowledgement_batches": []}]}
                                             for t in (open_id, secret_id, uuid.uuid4())]})
        assert both.error_code == ErrorCode.none
        errors = {t.topic_id: t.partitions[0].error_code for t in both.responses}
        assert errors == {open_id: ErrorCode.none, secret_id: ErrorCode.topic_authorization_failed,
                          **{t: ErrorCode.unknown_topic_id for t in errors if t not in (open_id, secret_id)}}


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_an_acknowledgement_the_disk_refuses_is_undone_and_taken_again(tmp_path: Path, op: str, kind: str) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        earliest(conn, "g")
        assert join(conn, "g", "q").error_code == ErrorCode.none
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(0, 3, 1)]
        faults = Faults()
        with faults.active():
            faults.fail_kind(op, kind)
            refused = share_ack(conn, "g", 1, topic_id, 0, 1)
        [[code]] = [[p.error_code for p in t.partitions] for t in refused.responses]
        assert code == ErrorCode.kafka_storage_error, refused
        again = share_ack(conn, "g", 2, topic_id, 0, 1)  # the records are still this member's: taken now
        assert [p.error_code for t in again.responses for p in t.partitions] == [ErrorCode.none]
        done = share_fetch(conn, "g", 3, topic_id, [{"first_offset": 2, "last_offset": 3,
                                                     "acknowledge_types": [ACCEPT]}])
        assert [p.acknowledge_error_code for t in done.responses for p in t.partitions] == [ErrorCode.none]
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # a restart keeps them
        assert join(conn, "g", "q").error_code == ErrorCode.none
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == []


def test_a_refused_write_at_a_fetch_answers_every_partition_and_keeps_the_session(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 2)
        earliest(conn, "g")
        join(conn, "g", "q")
        faults = Faults()
        with faults.active():
            faults.fail("write", error=errno.EIO)  # the new share-partition's first record
            failed = share_fetch(conn, "g", 0, topic_id)
        assert [(p.error_code, p.acknowledge_error_code) for t in failed.responses for p in t.partitions] == [
            (ErrorCode.kafka_storage_error, ErrorCode.kafka_storage_error)]
        assert acquired(share_fetch(conn, "g", 1, topic_id)) == [(0, 1, 1)]


def test_a_deleted_topic_answers_unknown_topic_and_logs_no_error(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 2)
        earliest(conn, "g")
        join(conn, "g", "q")
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(0, 1, 1)]
        assert call(conn, 20, 6, {"topics": [{"name": "q"}], "timeout": 10_000}).responses[0].error_code == 0
        with caplog.at_level("ERROR"):
            gone = share_fetch(conn, "g", 1, topic_id, [{"first_offset": 0, "last_offset": 1,
                                                         "acknowledge_types": [ACCEPT]}])
            [p] = [p for t in gone.responses for p in t.partitions]
            assert p.error_code == ErrorCode.unknown_topic_id
            session = call(conn, 78, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": 2,
                                         "max_wait": 0, "min_bytes": 1, "max_records": 10, "batch_size": 10,
                                         "forgotten_topics_data": [], "topics": []})
            assert [p.error_code for t in session.responses for p in t.partitions] == [
                ErrorCode.unknown_topic_or_partition]  # the session's partition of the deleted topic
        assert not [r for r in caplog.records if r.name.startswith("walgate")], caplog.text


def test_max_bytes_bounds_what_is_acquired_in_whole_batches(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 0)
        for _ in range(3):  # one batch of one 1000-byte record each
            builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
            builder.append(timestamp=None, key=None, value=b"x" * 1000)
            builder.close()
            call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
                {"name": "q", "partition_data": [{"index": 0, "records": bytes(builder.buffer())}]}]})
        earliest(conn, "g")
        join(conn, "g", "q")

        def fetch(epoch: int, max_bytes: int) -> list[tuple[int, int, int]]:
            return acquired(call(conn, 78, 2, {
                "group_id": "g", "member_id": "m1", "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
                "max_bytes": max_bytes, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
                "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                                  "acknowledgement_batches": []}]}]}))

        assert fetch(0, 0) == []  # 0 bytes: no records, as Kafka answers librdkafka 0180
        assert fetch(1, 10) == [(0, 0, 1)]  # the first batch, whatever the limit
        assert fetch(2, 1500) == [(1, 1, 1)]
        assert fetch(3, 1 << 20) == [(2, 2, 1)]


def set_group_config(conn: KafkaConnection, group: str, name: str, value: str) -> Any:
    return call(conn, 44, 1, {"validate_only": False, "resources": [{"resource_type": 32, "resource_name": group,
                                                                       "configs": [{"name": name, "config_operation": 0,
                                                                                    "value": value}]}]}).responses[0]


def test_a_groups_lock_duration_is_bounded_by_the_broker_and_answered_to_fetches(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "one") as gw, KafkaConnection(gw.kafka_address) as conn:
        refused = set_group_config(conn, "g", "share.record.lock.duration.ms", "1000")
        assert refused.error_code == ErrorCode.invalid_config and "15000..60000" in refused.error_message
    with gateway_thread(tmp_path / "two", group_share_min_record_lock_duration_ms=1000) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 1)
        assert set_group_config(conn, "g", "share.record.lock.duration.ms", "1000").error_code == ErrorCode.none
        join(conn, "g", "q")
        fetched = share_fetch(conn, "g", 0, topic_id)
        assert fetched.acquisition_lock_timeout.total_seconds() == 1.0


def test_a_renewing_fetch_extends_locks_and_acquires_nothing_new(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", group_share_record_lock_duration_ms=60_000) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 3)
        earliest(conn, "g")
        join(conn, "g", "q")
        first = call(conn, 78, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": 0, "max_wait": 0,
                                   "min_bytes": 1, "max_records": 2, "batch_size": 2, "forgotten_topics_data": [],
                                   "topics": [{"topic_id": topic_id, "partitions": [
                                       {"partition_index": 0, "acknowledgement_batches": []}]}]})
        assert acquired(first) == [(0, 1, 1)]
        renewed = call(conn, 78, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": 1, "max_wait": 0,
                                     "min_bytes": 1, "max_records": 10, "batch_size": 10, "is_renew_ack": True,
                                     "forgotten_topics_data": [], "topics": [{"topic_id": topic_id, "partitions": [
                                         {"partition_index": 0, "acknowledgement_batches": [
                                             {"first_offset": 0, "last_offset": 1, "acknowledge_types": [4]}]}]}]})
        [p] = [p for t in renewed.responses for p in t.partitions]
        assert p.acknowledge_error_code == ErrorCode.none and acquired(renewed) == []  # offset 2 stays available
        assert acquired(share_fetch(conn, "g", 2, topic_id)) == [(2, 2, 1)]


def test_a_damaged_share_log_is_reported_and_costs_redeliveries_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        earliest(conn, "g")
        join(conn, "g", "q")
        share_fetch(conn, "g", 0, topic_id)
        share_ack(conn, "g", 1, topic_id, 0, 1)
        share_ack(conn, "g", 2, topic_id, 2, 3)  # its own line: "s" 4
    path = data / "share_groups.log"
    lines = path.read_bytes().splitlines(keepends=True)
    last = bytearray(lines[-1])
    last[len(last) // 2] ^= 0x01  # the newest state's line fails its checksum
    path.write_bytes(b"".join(lines[:-1]) + bytes(last))
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        quarantine = sql(gw, "SHOW QUARANTINE")["data"]
        assert [row[0] for row in quarantine] == ["share_groups.log"], quarantine
        join(conn, "g", "q")
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(2, 3, 2)]  # the older state: 2, 3 again


def test_share_group_describe_shows_members_sharing_partitions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 1)
        for member in ("m1", "m2"):
            assert call(conn, 76, 1, {"group_id": "g", "member_id": member, "member_epoch": 0,
                                      "subscribed_topic_names": ["q"]}).error_code == ErrorCode.none
        share_fetch(conn, "g", 0, topic_id)
        described = call(conn, 77, 1, {"group_ids": ["g", "nope"], "include_authorized_operations": True}).groups
        g, nope = described
        assert (g.error_code, g.group_state, g.assignor_name, g.group_epoch) == (ErrorCode.none, "Stable", "simple", 2)
        assert g.authorized_operations > 0 and nope.error_code == ErrorCode.group_id_not_found
        assert sorted((m.member_id, m.member_epoch, [(t.topic_id, t.topic_name, list(t.partitions))
                                                     for t in m.assignment.topic_partitions]) for m in g.members) == [
            ("m1", 1, [(topic_id, "q", [0])]), ("m2", 2, [(topic_id, "q", [0])])]
        for member in ("m1", "m2"):
            call(conn, 76, 1, {"group_id": "g", "member_id": member, "member_epoch": -1})
        [empty] = call(conn, 77, 1, {"group_ids": ["g"], "include_authorized_operations": False}).groups
        assert (empty.error_code, empty.group_state, empty.members) == (ErrorCode.none, "Empty", ())
        call(conn, 30, 3, {"creations": [acl(GROUP_RES, "g", READ)]})
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        [hidden] = call(conn, 77, 1, {"group_ids": ["other"], "include_authorized_operations": False}).groups
        assert hidden.error_code == ErrorCode.group_authorization_failed


def fetch_as(conn: KafkaConnection, member: str, epoch: int, topic_id: uuid.UUID, max_wait: int = 0) -> Any:
    return call(conn, 78, 2, {"group_id": "g", "member_id": member, "share_session_epoch": epoch,
                              "max_wait": max_wait, "min_bytes": 1, "max_records": 100, "batch_size": 100,
                              "forgotten_topics_data": [], "topics": [{"topic_id": topic_id, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}]})


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_throttled_share_fetch_releases_its_records_and_a_refused_release_waits_for_the_lock(
        tmp_path: Path, op: str, kind: str) -> None:
    """A ShareFetch over the client id's ``consumer_byte_rate`` answers ``throttle_time_ms`` and no records, and
    releases what it acquired (another member gets it at once, its delivery counted); when the disk refuses that
    release, the answer is the same and the records come back when their lock ends, nothing lost."""
    data = tmp_path / "data"
    with gateway_thread(data, group_share_min_record_lock_duration_ms=1000) as gw, \
            KafkaConnection(gw.kafka_address, client_id="slow") as slow, \
            KafkaConnection(gw.kafka_address, client_id="free") as free:
        topic_id = topic_with_records(slow, "q", 4)
        earliest(slow, "g")
        assert set_group_config(slow, "g", "share.record.lock.duration.ms", "1000").error_code == ErrorCode.none
        r = call(slow, 49, 1, {"validate_only": False, "entries": [  # 1 B/s: one answer of ~100 bytes is over
            {"entity": [{"entity_type": "client-id", "entity_name": "slow"}],
             "ops": [{"key": "consumer_byte_rate", "value": 1.0, "remove": False}]}]})
        assert [e.error_code for e in r.entries] == [ErrorCode.none]
        assert join(slow, "g", "q").error_code == ErrorCode.none
        assert call(free, 76, 1, {"group_id": "g", "member_id": "m2", "member_epoch": 0,
                                  "subscribed_topic_names": ["q"]}).error_code == ErrorCode.none
        throttled = fetch_as(slow, "m1", 0, topic_id)
        assert throttled.throttle_time.total_seconds() > 0 and acquired(throttled) == [], throttled
        assert [p.records for t in throttled.responses for p in t.partitions] == [b""]
        faults = Faults()
        with KafkaConnection(gw.kafka_address, client_id="slow") as slow2, faults.active():
            faults.fail_kind(op, kind)  # the release: acquiring writes nothing
            again = fetch_as(slow2, "m1", 1, topic_id)  # (the first connection is muted while throttled)
            assert faults.injected == 1
        assert again.throttle_time.total_seconds() > 0 and acquired(again) == [], again
        assert [p.error_code for t in again.responses for p in t.partitions] == [ErrorCode.none]
        assert acquired(fetch_as(free, "m2", 0, topic_id)) == []  # still m1's, until the lock ends
        got: list[tuple[int, int, int]] = []
        for epoch in range(1, 20):  # bounded: each waits up to 1 s for the lock's end
            got = acquired(fetch_as(free, "m2", epoch, topic_id, max_wait=1000))
            if got:
                break
        assert got == [(0, 3, 3)]  # m1 twice (both withheld), m2 once
    with gateway_thread(data, group_share_min_record_lock_duration_ms=1000) as gw, \
            KafkaConnection(gw.kafka_address, client_id="free") as free:  # starts again; nothing lost
        assert call(free, 76, 1, {"group_id": "g", "member_id": "m2", "member_epoch": 0,
                                  "subscribed_topic_names": ["q"]}).error_code == ErrorCode.none
        assert [(a, b) for a, b, _ in acquired(fetch_as(free, "m2", 0, topic_id))] == [(0, 3)]
