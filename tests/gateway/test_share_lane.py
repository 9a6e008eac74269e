"""Issue 23: the share coordinator runs on the coordinator lane, so a slow storage call does not delay a share
group's membership or its acknowledgements.

A member joins a share group on an in-process gateway and acquires two records; then a storage-lane call that blocks
on an Event the test holds occupies the storage thread, and the member heartbeats (ShareGroupHeartbeat), describes
its group (ShareGroupDescribe) and acknowledges the records (ShareAcknowledge), each answered while the Event is still
held (order, not speed: on a node where the share coordinator runs on the storage thread they wait behind the blocked
call). The acknowledgement is durable: once the storage lane is free, the next ShareFetch acquires nothing more, and
neither does one after a restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode
from test_coordinator_lane import answered_while_the_storage_thread_is_busy, lane_config
from test_kafka_share_groups import acquired, call, earliest, join, share_ack, share_fetch, topic_with_records

from walgate.gateway.server import Gateway


def heartbeat(conn: KafkaConnection, group: str, epoch: int) -> Any:
    return call(conn, 76, 1, {"group_id": group, "member_id": "m1", "member_epoch": epoch,
                              "subscribed_topic_names": None})


def describe(conn: KafkaConnection, group: str) -> Any:
    return call(conn, 77, 1, {"group_ids": [group], "include_authorized_operations": False})


async def test_share_membership_and_acknowledgements_are_answered_while_the_storage_thread_is_busy(
        tmp_path: Path) -> None:
    config = lane_config(tmp_path)
    async with Gateway(config) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            topic_id = await asyncio.to_thread(topic_with_records, conn, "work", 2)
            await asyncio.to_thread(earliest, conn, "workers")
            joined = await asyncio.to_thread(join, conn, "workers", "work")
            assert joined.error_code == ErrorCode.none
            assert acquired(await asyncio.to_thread(share_fetch, conn, "workers", 0, topic_id)) == [(0, 1, 1)]

            def member_calls() -> tuple[Any, Any, Any]:
                return (heartbeat(conn, "workers", joined.member_epoch), describe(conn, "workers"),
                        share_ack(conn, "workers", 1, topic_id, 0, 1))

            held, (beat, described, acked) = await answered_while_the_storage_thread_is_busy(gateway, member_calls)
            assert held, "a share group's heartbeat, describe or acknowledgement waited behind the storage thread"
            assert beat.error_code == ErrorCode.none
            assert [(g.error_code, [m.member_id for m in g.members]) for g in described.groups] == [
                (ErrorCode.none, ["m1"])]
            assert acked.error_code == ErrorCode.none
            assert [p.error_code for t in acked.responses for p in t.partitions] == [ErrorCode.none]
            assert acquired(await asyncio.to_thread(share_fetch, conn, "workers", 2, topic_id)) == []
    with gateway_thread(config.data_dir) as gw, KafkaConnection(gw.kafka_address) as conn:  # durable: a restart
        assert join(conn, "workers", "work").error_code == ErrorCode.none
        assert acquired(share_fetch(conn, "workers", 0, topic_id)) == []
