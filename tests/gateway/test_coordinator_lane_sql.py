"""Issue 23: the SQL statements about consumer groups (SHOW CONSUMERS, SHOW SUBSCRIPTIONS, DROP CONSUMER GROUP) are
asked of the coordinator lane by the gateway, so the storage lane never waits for the coordinator lane for them.

The test holds the coordinator lane with a call that blocks on an Event, sends one of those statements (it waits
for the lane: the test sees it queued there), then ``SHOW DATABASES``, which only the storage lane answers: it is
answered while the Event is still held (order, not speed). On a node where such a statement ran on the storage lane
and waited there for the coordinator lane, ``SHOW DATABASES`` waited behind it. Once the lane is free the statement
answers what the coordinator knows.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from gateway_helpers import KafkaConnection, sql
from test_coordinator_lane import BOUND_S, join, lane_config, request

from walgate.gateway.server import Gateway

QUEUED_POLLS = 1000
"""Bound on the polls (10 ms apart) waiting for the statement to be queued on the held coordinator lane."""


@pytest.mark.parametrize("statement", ["SHOW CONSUMERS", "SHOW SUBSCRIPTIONS",
                                       "DROP CONSUMER GROUP IF EXISTS `gone` ON lane_sql"])
async def test_show_databases_is_answered_while_a_group_statement_waits_for_the_coordinator_lane(
        tmp_path: Path, statement: str) -> None:
    async with Gateway(lane_config(tmp_path)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            made = await asyncio.to_thread(request, conn, 19, 7, {
                "topics": [{"name": "lane_sql", "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})
            assert made.topics[0].error_code == 0
            joined = await asyncio.to_thread(join, conn, "lane-sql")  # a member for SHOW CONSUMERS to list
        coordinator = gateway._coordinator
        release = threading.Event()
        busy = asyncio.create_task(coordinator.call(release.wait, 120))
        try:
            await asyncio.sleep(0)  # the blocking call is submitted
            for _ in range(QUEUED_POLLS):  # and runs
                if coordinator.queued == 0:
                    break
                await asyncio.sleep(0.01)
            before = coordinator.queued
            grouped = asyncio.create_task(asyncio.to_thread(sql, gateway, statement))
            for _ in range(QUEUED_POLLS):  # the statement waits for the coordinator lane
                if coordinator.queued > before:
                    break
                await asyncio.sleep(0.01)
            assert coordinator.queued > before and not grouped.done()
            databases = asyncio.create_task(asyncio.to_thread(sql, gateway, "SHOW DATABASES"))
            done, _ = await asyncio.wait({databases}, timeout=BOUND_S)
            held = databases in done and not release.is_set()
        finally:
            release.set()
            await busy
        assert held, f"SHOW DATABASES waited behind {statement} waiting for the coordinator lane"
        assert (await databases)["code"] == 0
        answer = await grouped
        assert answer["code"] == 0, answer
        if statement == "SHOW CONSUMERS":
            assert [(row[0], row[1]) for row in answer["data"]] == [(joined.member_id, "lane-sql")]
