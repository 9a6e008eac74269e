"""Share groups' administration through the Kafka port: DescribeShareGroupOffsets / AlterShareGroupOffsets /
DeleteShareGroupOffsets (90-92) and share groups in ListGroups / DeleteGroups, with Kafka's error codes and ACLs,
their changes durable across a restart and undone whole when the disk refuses them."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode
from test_kafka_share_groups import (
    AUTHORIZER,
    GROUP_RES,
    ME,
    READ,
    TOPIC_RES,
    acl,
    acquired,
    call,
    earliest,
    join,
    share_ack,
    share_fetch,
    topic_with_records,
)

from tests.storage.faults import WRITE_FAULTS, Faults

DESCRIBE, DELETE = 8, 6


def leave(conn: KafkaConnection, group: str) -> None:
    assert call(conn, 76, 1, {"group_id": group, "member_id": "m1", "member_epoch": -1}).error_code == 0


def offsets(conn: KafkaConnection, group: str, topics: list[tuple[str, list[int]]] | None = None) -> Any:
    [g] = call(conn, 90, 1, {"groups": [{"group_id": group, "topics": None if topics is None else [
        {"topic_name": t, "partitions": ps} for t, ps in topics]}]}).groups
    return g


def starts(group: Any) -> list[tuple[str, int, int, int]]:
    return [(t.topic_name, p.partition_index, p.start_offset, p.lag) for t in group.topics for p in t.partitions]


def alter(conn: KafkaConnection, group: str, topic: str, partition: int, start: int) -> Any:
    return call(conn, 91, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": partition, "start_offset": start}]}]})


def delete_offsets(conn: KafkaConnection, group: str, *topics: str) -> Any:
    return call(conn, 92, 0, {"group_id": group, "topics": [{"topic_name": t} for t in topics]})


def consumed(conn: KafkaConnection, group: str, topic_id: uuid.UUID, upto: int) -> None:
    """Group ``group`` consumes a 4-record topic and acknowledges offsets 0..upto, then its member leaves."""
    earliest(conn, group)
    assert join(conn, group, "q").error_code == ErrorCode.none
    assert acquired(share_fetch(conn, group, 0, topic_id)) == [(0, 3, 1)]
    share_ack(conn, group, 1, topic_id, 0, upto)
    call(conn, 79, 2, {"group_id": group, "member_id": "m1", "share_session_epoch": -1, "topics": []})
    leave(conn, group)


def test_offsets_are_described_altered_and_deleted_as_kafka_answers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        topic_with_records(conn, "other", 0)
        earliest(conn, "g")
        assert join(conn, "g", "q").error_code == ErrorCode.none
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(0, 3, 1)]
        share_ack(conn, "g", 1, topic_id, 0, 0)
        # described while consuming: start 1, lag 3 (records 1..3 not done)
        assert starts(offsets(conn, "g")) == [("q", 0, 1, 3)]
        assert starts(offsets(conn, "g", [("q", [0, 1]), ("nope", [0]), ("other", [0])])) == [
            ("q", 0, 1, 3), ("q", 1, -1, -1), ("nope", 0, -1, -1), ("other", 0, -1, -1)]
        busy = alter(conn, "g", "q", 0, 0)
        assert (busy.error_code, busy.responses) == (ErrorCode.non_empty_group, ())
        assert delete_offsets(conn, "g", "q").error_code == ErrorCode.non_empty_group
        assert alter(conn, "nope", "q", 0, 0).error_code == ErrorCode.group_id_not_found
        assert delete_offsets(conn, "nope", "q").error_code == ErrorCode.group_id_not_found
        call(conn, 79, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": -1, "topics": []})
        leave(conn, "g")
        done = alter(conn, "g", "q", 0, 2)
        assert done.error_code == ErrorCode.none
        assert [(t.topic_name, t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in done.responses] == [("q", topic_id, [(0, ErrorCode.none)])]
        partly = call(conn, 91, 0, {"group_id": "g", "topics": [
            {"topic_name": "q", "partitions": [{"partition_index": 5, "start_offset": 0},
                                               {"partition_index": 0, "start_offset": -3}]},
            {"topic_name": "nope", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        assert [(t.topic_name, [p.error_code for p in t.partitions]) for t in partly.responses] == [
            ("q", [ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request]),
            ("nope", [ErrorCode.unknown_topic_or_partition])]
        assert starts(offsets(conn, "g")) == [("q", 0, 2, 2)]
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # the alter is durable
        assert starts(offsets(conn, "g")) == [("q", 0, 2, 2)]
        assert join(conn, "g", "q").error_code == ErrorCode.none
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(2, 3, 1)]
        call(conn, 79, 2, {"group_id": "g", "member_id": "m1", "share_session_epoch": -1, "topics": []})
        leave(conn, "g")
        gone = delete_offsets(conn, "g", "q", "other", "nope")
        assert gone.error_code == ErrorCode.none
        assert [(t.topic_name, t.error_code) for t in gone.responses] == [
            ("q", ErrorCode.none), ("other", ErrorCode.unknown_topic_or_partition),
            ("nope", ErrorCode.unknown_topic_or_partition)]
        assert starts(offsets(conn, "g")) == []
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # the delete is durable
        assert starts(offsets(conn, "g", [("q", [0])])) == [("q", 0, -1, -1)]
        assert join(conn, "g", "q").error_code == ErrorCode.none  # earliest again: every record delivered again
        assert acquired(share_fetch(conn, "g", 0, topic_id)) == [(0, 3, 1)]  # a fresh state: first deliveries


def test_share_groups_are_listed_and_deleted_beside_consumer_groups(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        consumed(conn, "idle", topic_id, 1)
        assert join(conn, "busy", "q").error_code == ErrorCode.none
        listed = call(conn, 16, 5, {"states_filter": [], "types_filter": []}).groups
        assert sorted((g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed) == [
            ("busy", "share", "Stable", "share"), ("idle", "share", "Empty", "share")]
        assert [g.group_id for g in call(conn, 16, 5, {"states_filter": ["empty"], "types_filter": ["Share"]}
                                         ).groups] == ["idle"]
        assert call(conn, 16, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups == ()
        [described] = call(conn, 15, 5, {"groups": ["busy"], "include_authorized_operations": False}).groups
        assert (described.error_code, described.group_state, described.members) == (ErrorCode.none, "Dead", ())
        deleted = call(conn, 42, 2, {"groups_names": ["busy", "idle", "nope"]}).results
        assert sorted((r.group_id, r.error_code) for r in deleted) == [
            ("busy", ErrorCode.non_empty_group), ("idle", ErrorCode.none), ("nope", ErrorCode.group_id_not_found)]
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # its state went with it
        assert sorted(g.group_id for g in call(conn, 16, 5, {"states_filter": [], "types_filter": []}).groups) == []
        assert starts(offsets(conn, "idle", [("q", [0])])) == [("q", 0, -1, -1)]


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_an_alter_or_delete_the_disk_refuses_changes_nothing(tmp_path: Path, op: str, kind: str) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        consumed(conn, "g", topic_id, 1)
        assert starts(offsets(conn, "g")) == [("q", 0, 2, 2)]
        faults = Faults()
        for refused in (lambda: alter(conn, "g", "q", 0, 0), lambda: delete_offsets(conn, "g", "q"),
                        lambda: call(conn, 42, 2, {"groups_names": ["g"]}).results[0]):
            with faults.active():
                faults.fail_kind(op, kind)
                answer = refused()
            assert answer.error_code == ErrorCode.not_coordinator, answer
            assert starts(offsets(conn, "g")) == [("q", 0, 2, 2)]
        assert alter(conn, "g", "q", 0, 3).error_code == ErrorCode.none  # the disk is back: taken
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert starts(offsets(conn, "g")) == [("q", 0, 3, 1)]


def test_share_admin_apis_check_kafkas_acls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        topic_with_records(conn, "secret", 1)
        consumed(conn, "g", topic_id, 1)
        call(conn, 30, 3, {"creations": [acl(GROUP_RES, "g", DESCRIBE), acl(TOPIC_RES, "q", DESCRIBE)]})
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        g = offsets(conn, "g", [("q", [0]), ("secret", [0])])
        assert [(t.topic_name, [(p.start_offset, p.error_code) for p in t.partitions]) for t in g.topics] == [
            ("q", [(2, ErrorCode.none)]), ("secret", [(-1, ErrorCode.topic_authorization_failed)])]
        assert offsets(conn, "other").error_code == ErrorCode.group_authorization_failed
        assert alter(conn, "g", "q", 0, 0).error_code == ErrorCode.group_authorization_failed  # Read needed
        assert delete_offsets(conn, "g", "q").error_code == ErrorCode.group_authorization_failed  # Delete needed
        assert [g.group_id for g in call(conn, 16, 5, {"states_filter": [], "types_filter": []}).groups] == ["g"]
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        call(conn, 30, 3, {"creations": [acl(GROUP_RES, "g", READ), acl(GROUP_RES, "g", DELETE)]})
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        denied = alter(conn, "g", "secret", 0, 0)
        assert [(t.topic_name, [p.error_code for p in t.partitions]) for t in denied.responses] == [
            ("secret", [ErrorCode.topic_authorization_failed])]
        assert [(t.topic_name, t.error_code) for t in delete_offsets(conn, "g", "secret").responses] == [
            ("secret", ErrorCode.topic_authorization_failed)]


def test_describe_configs_of_a_group_answers_its_share_configs(tmp_path: Path) -> None:
    overrides = {"group_share_record_lock_duration_ms": 20_000}
    with gateway_thread(tmp_path / "data", **overrides) as gw, KafkaConnection(gw.kafka_address) as conn:
        earliest(conn, "g")
        described = {}
        for group in ("g", "other"):
            [r] = call(conn, 32, 4, {"resources": [{"resource_type": 32, "resource_name": group,
                                                    "configuration_keys": None}],
                                     "include_synonyms": False, "include_documentation": False}).results
            assert r.error_code == ErrorCode.none
            described[group] = {c.name: (c.value, c.config_source) for c in r.configs if c.name.startswith("share.")}
        assert described == {
            "g": {"share.auto.offset.reset": ("earliest", 8), "share.isolation.level": ("read_uncommitted", 5),
                  "share.record.lock.duration.ms": ("20000", 5), "share.delivery.count.limit": ("5", 5)},
            "other": {"share.auto.offset.reset": ("latest", 5), "share.isolation.level": ("read_uncommitted", 5),
                      "share.record.lock.duration.ms": ("20000", 5), "share.delivery.count.limit": ("5", 5)}}


def test_share_and_consumer_groups_share_one_group_id_space(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_with_records(conn, "q", 1)
        assert join(conn, "s", "q").error_code == ErrorCode.none
        consumer = {"member_id": "c" * 22, "member_epoch": 0, "rebalance_timeout": 30_000,
                    "subscribed_topic_names": ["q"], "topic_partitions": []}
        assert call(conn, 68, 1, {"group_id": "c", **consumer}).error_code == ErrorCode.none
        refused = call(conn, 68, 1, {"group_id": "s", **consumer})
        assert (refused.error_code, refused.error_message) == (ErrorCode.group_id_not_found,
                                                               "Group s is not a consumer group.")
        classic = call(conn, 11, 9, {"group_id": "s", "session_timeout": 30_000, "rebalance_timeout": 30_000,
                                     "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                                     "protocols": [{"name": "range", "metadata": b""}], "reason": None})
        assert (classic.error_code, classic.member_id) == (ErrorCode.inconsistent_group_protocol, "")
        shared = join(conn, "c", "q")
        assert (shared.error_code, shared.error_message) == (ErrorCode.group_id_not_found,
                                                             "Group c is not a share group.")
        # Kafka's ShareGroup refuses the offset APIs (validateOffsetCommit / validateOffsetFetch / validateOffsetDelete)
        not_found = ErrorCode.group_id_not_found
        partitions = [{"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                       "committed_metadata": ""}]
        committed = call(conn, 8, 9, {"group_id": "s", "generation_id_or_member_epoch": -1, "member_id": "",
                                      "topics": [{"name": "q", "partitions": partitions}]})
        assert [p.error_code for t in committed.topics for p in t.partitions] == [not_found]
        txn = call(conn, 28, 3, {"transactional_id": "t", "group_id": "s", "producer_id": 1, "producer_epoch": 0,
                                 "generation_id": -1, "member_id": "", "group_instance_id": None,
                                 "topics": [{"name": "q", "partitions": partitions}]})
        assert [p.error_code for t in txn.topics for p in t.partitions] == [not_found]
        fetched = call(conn, 9, 8, {"groups": [{"group_id": "s", "topics": None}], "require_stable": False})
        assert [g.error_code for g in fetched.groups] == [not_found]
        fetched = call(conn, 9, 1, {"group_id": "s", "topics": [{"name": "q", "partition_indexes": [0]}]})
        assert [p.error_code for t in fetched.topics for p in t.partitions] == [not_found]
        deleted = call(conn, 47, 0, {"group_id": "s", "topics": [{"name": "q", "partitions": [
            {"partition_index": 0}]}]})
        assert deleted.error_code == not_found
        assert call(conn, 9, 8, {"groups": [{"group_id": "c", "topics": None}],
                                 "require_stable": False}).groups[0].error_code == ErrorCode.none


def test_an_alter_and_a_delete_survive_a_kill(tmp_path: Path) -> None:
    from livewalgate import running_walgate

    data = tmp_path / "data"
    with running_walgate(tmp_path / "first", data_dir=data) as server, \
            KafkaConnection(("127.0.0.1", server.kafka_port)) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        for group in ("altered", "deleted"):
            consumed(conn, group, topic_id, 1)
        assert alter(conn, "altered", "q", 0, 3).error_code == ErrorCode.none
        assert delete_offsets(conn, "deleted", "q").error_code == ErrorCode.none
        server.proc.kill()  # SIGKILL right after the answers
        server.proc.wait(30)
    with running_walgate(tmp_path / "second", data_dir=data) as server, \
            KafkaConnection(("127.0.0.1", server.kafka_port)) as conn:
        assert starts(offsets(conn, "altered")) == [("q", 0, 3, 1)]
        assert starts(offsets(conn, "deleted", [("q", [0])])) == [("q", 0, -1, -1)]
        assert "Traceback" not in server.log()


def test_the_share_state_rpcs_are_refused_from_a_client_and_change_nothing(tmp_path: Path) -> None:
    """InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
    ReadShareGroupStateSummary (83-87) are for cluster nodes only (ClusterAction): a client gets CLUSTER_AUTHORIZATION_FAILED for every partition, and the group's state
    is neither read nor changed; so is FindCoordinator of a share-partition (key type 2, v6; INVALID_REQUEST before
    v6, as Kafka answers)."""
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 4)
        consumed(conn, "g", topic_id, 1)
        before = starts(offsets(conn, "g"))
        assert before == [("q", 0, 2, 2)]
        requests = {
            83: {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "state_epoch": 0, "start_offset": 0}, {"partition": 1, "state_epoch": 0,
                                                                         "start_offset": 0}]}]},
            84: {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "leader_epoch": 0}]}]},
            85: {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 9, "state_batches": []}]}]},
            86: {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0}]}]},
            87: {"group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "leader_epoch": 0}]}]},
        }
        for api, request in requests.items():
            answer = call(conn, api, 0, request)
            assert [(p.partition, p.error_code) for t in answer.results for p in t.partitions] == [
                (p["partition"], ErrorCode.cluster_authorization_failed) for p in request["topics"][0]["partitions"]]
        assert starts(offsets(conn, "g")) == before
        key = f"g:{base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}:0"
        for version, code in ((6, ErrorCode.cluster_authorization_failed), (5, ErrorCode.invalid_request),
                              (4, ErrorCode.invalid_request)):
            found = call(conn, 10, version, {"key_type": 2, "coordinator_keys": [key, "not-a-key"]})
            assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [
                (key, code, -1), ("not-a-key", code, -1)]
        found = call(conn, 10, 3, {"key_type": 2, "key": key})
        assert (found.error_code, found.node_id) == (ErrorCode.invalid_request, -1)
