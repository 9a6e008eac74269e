"""Share groups on ``GET /metrics`` (issue 27): members, share-partitions, records in flight and acquired, records
archived and redelivered, per share group, each value known from what the members did."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode
from test_kafka_share_groups import acquired, call, earliest, topic_with_records
from test_metrics import scrape, value

ACCEPT, RELEASE, REJECT = 1, 2, 3


def fetch(conn: KafkaConnection, member: str, topic_id: uuid.UUID, epoch: int) -> Any:
    return call(conn, 78, 2, {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait": 0,
                              "min_bytes": 1, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
                              "topics": [{"topic_id": topic_id, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}]})


def ack(conn: KafkaConnection, member: str, topic_id: uuid.UUID, epoch: int,
        batches: list[tuple[int, int, int]]) -> None:
    r = call(conn, 79, 2, {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": [t]} for f, last, t in batches]}]}]})
    assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none], r


def test_a_share_groups_members_and_records_are_on_metrics(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        topic_id = topic_with_records(conn, "q", 5)
        earliest(conn, "g")
        r = call(conn, 44, 1, {"validate_only": False, "resources": [{"resource_type": 32, "resource_name": "g",
                                                                       "configs": [{"name": "share.delivery.count.limit",
                                                                                    "config_operation": 0,
                                                                                    "value": "2"}]}]})
        assert r.responses[0].error_code == ErrorCode.none, r
        for member in ("m1", "m2"):
            call(conn, 76, 1, {"group_id": "g", "member_id": member, "member_epoch": 0,
                               "subscribed_topic_names": ["q"]})
        assert acquired(fetch(conn, "m1", topic_id, 0)) == [(0, 4, 1)]
        ack(conn, "m1", topic_id, 1, [(0, 0, ACCEPT), (1, 1, REJECT), (2, 2, RELEASE)])  # 1 archived
        assert acquired(fetch(conn, "m2", topic_id, 0)) == [(2, 2, 2)]  # a redelivery
        ack(conn, "m2", topic_id, 1, [(2, 2, RELEASE)])  # at the delivery limit: archived
        host, port = gw.http_address
        _, samples = scrape(f"http://{host}:{port}")
    got = {name: value(samples, name, sharegroup="g") for name in (
        "walgate_sharegroup_members", "walgate_sharegroup_partitions", "walgate_sharegroup_records_in_flight",
        "walgate_sharegroup_records_acquired", "walgate_sharegroup_records_archived_total",
        "walgate_sharegroup_redeliveries_total")}
    assert got == {"walgate_sharegroup_members": 2, "walgate_sharegroup_partitions": 1,
                   "walgate_sharegroup_records_in_flight": 2,  # 3 and 4: 0..2 are done, the start moved to 3
                   "walgate_sharegroup_records_acquired": 2, "walgate_sharegroup_records_archived_total": 2,
                   "walgate_sharegroup_redeliveries_total": 1}
