"""Writes to a replicated vnode are acknowledged at its high watermark, exactly the ones written (issue 25; rv3's F3,
F5, F6, F8): three in-process nodes over a real etcd (:func:`tests.gateway.test_replicas.trio`), node 1 leading vnode 0
of :data:`DB`, SQL through node 1's real HTTP API (:func:`walgate.gateway.http_api.make_app` with its replica
manager), Produce through its Kafka socket.

What holds: a write to a database node 1 leads no replicated vnode of is answered at once while a write to the
replicated vnode waits (its followers stopped); an INSERT while the ISR is below ``min.insync.replicas`` is refused
with 503 before anything is appended (Kafka: NOT_ENOUGH_REPLICAS, ``acks=all`` only); an INSERT appended just
before node 1 is deposed is answered 503, never 200, its outcome unknown (it may be kept) as when its wait timed out; a write to a vnode followed here or with no leader answers 503
(not 400) naming its leader or saying there is none; rows produced with ``acks=all`` to a TDengine topic over the
replicated vnode wait for its high watermark (``acks=1`` does not).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import (
    DB,
    DB_ID,
    Node,
    Trio,
    _is,
    etcd,
    produce,
    trio,
    until,
)
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway import http_api
from walgate.gateway.http_api import make_app
from walgate.gateway.query_workers import QueryWorkers
from walgate.replication.partition import NO_LEADER, IsrMember
from walgate.storage.errors import InvalidValue, NotEnoughReplicas, NotHere, NotLedNow
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.wire.errors import ErrorCode

__all__ = ["etcd"]  # (the fixture, used by name)

ROWS_TOPIC = "meter_rows"
PID = PartitionId(DB_ID, 0)


@asynccontextmanager
async def http(node: Node) -> AsyncIterator[TestClient[Any, Any]]:
    """Node ``node``'s HTTP API (its engine, lanes and replica manager) on a real socket."""
    queries = QueryWorkers(1, 0, 1 << 30)
    app = make_app(node.side.engine, node.side.storage, queries, node.side.engine.damage_log,
                   max_request_bytes=1 << 20, replicas=lambda: node.manager)
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            yield client
    finally:
        await queries.close()


async def insert(client: TestClient[Any, Any], k: int, db: str = DB) -> tuple[int, dict[str, Any]]:
    """An INSERT of one row into table ``d{k}`` of ``db``'s supertable; (HTTP status, body)."""
    response = await client.post("/rest/sql", data=(
        f"INSERT INTO {db}.d{k} USING {db}.meters TAGS ('l{k}', {k}) VALUES ({1_700_000_000_000 + k}, 1.0, {k})"))
    return response.status, await response.json()


async def followers_stopped(t: Trio) -> None:
    for n in (2, 3):
        await t.stop(n)


async def test_a_write_waits_only_for_the_replicated_vnodes_it_appended_to_and_is_refused_below_min_isr(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        node = t.nodes[1]
        await node.side.sql("CREATE DATABASE solo VGROUPS 1")
        await node.side.sql("CREATE STABLE solo.meters (ts TIMESTAMP, current FLOAT, voltage INT) "
                            "TAGS (location VARCHAR(32), g INT)")
        await t.started()
        monkeypatch.setattr(http_api, "ACK_TIMEOUT_S", 0.5)
        async with http(node) as client:
            assert (await insert(client, 0))[0] == 200  # the ISR holds it
            await followers_stopped(t)
            started = time.monotonic()
            status, body = await insert(client, 1)  # appended, never passed by the HW: 503, maybe kept
            assert status == 503 and "not acknowledged" in body["desc"] and time.monotonic() - started >= 0.5
            assert body["outcome"] == "unknown", body  # (rv5 R5-3: a node asking it reports its part so)
            started = time.monotonic()
            assert (await insert(client, 2, "solo"))[0] == 200  # nothing replicated written: no wait for vnode 0
            assert time.monotonic() - started < 0.5

            await t.write_state(replace(await t.state(), isr=(IsrMember(1, t.registered[1]),)))
            wal = await node.wal()
            await until(lambda: _is(wal.acks_all_refused() is not None), "node 1 learns the ISR (1)")
            appended = wal.next_version
            status, body = await insert(client, 3)  # below MIN_INSYNC 2: refused before its append
            assert (status, body["code"]) == (503, NotEnoughReplicas.code), body
            assert "fewer than MIN_INSYNC 2" in body["desc"] and wal.next_version == appended


def queued(node: Node, function: str) -> bool:
    """Whether a call of ``function`` waits on node ``node``'s storage lane (this harness's lane runs one call at a
    time, in the order they came)."""
    return any(function in repr(call.fn) for call in node.side.storage._pending)


async def test_a_write_appended_by_a_leader_deposed_before_its_wait_is_answered_503(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The INSERT's lane call runs after the new state reached node 1 and before its WAL stopped taking writes: it is
    appended under epoch 1, and node 1 no longer leads epoch 1 when it would be acknowledged."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        node = t.nodes[1]
        await t.started()
        async with http(node) as client:
            assert (await insert(client, 0))[0] == 200
            await followers_stopped(t)
            release = threading.Event()
            blocked = asyncio.create_task(node.side.storage.call_on(frozenset([(DB, 0)]), release.wait))
            try:
                await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
                await until(lambda: _is(queued(node, "_placement")), "node 1 applies the state (queued on its lane)")
                write = asyncio.create_task(insert(client, 1))
                await until(lambda: _is(queued(node, "Insert(")), "the INSERT is queued after it")
            finally:
                release.set()
                await blocked
            status, body = await write
            assert status == 503 and "NOT_LEADER_OR_FOLLOWER" in body["desc"] and body["outcome"] == "unknown", body
            await until(lambda: _is(PID not in node.led()), "node 1 no longer leads")


async def test_a_write_to_a_vgroup_led_elsewhere_or_by_nobody_answers_503(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        node = t.nodes[1]
        for n in (1, 2, 3):  # REPLICA 3 on nodes 1, 2, 3, as the cluster's catalog places it
            databases = t.nodes[n].side.engine.catalog.databases
            await t.nodes[n].side.call(databases.__setitem__, DB, replace(databases[DB], replicas=((1, 2, 3),)))
            t.start(n)
        await t.write_state(t.initial(leader=2))
        await t.leading(2)
        wal = await node.wal()
        await until(lambda: _is(wal.replication is not None), "node 1 follows")
        async with http(node) as client:
            status, body = await insert(client, 0)
            assert (status, body["code"]) == (503, NotHere.code), body
            assert "vgroup 0 of database rep is led by node 2 now" in body["desc"]
            await t.write_state(replace(await t.state(), leader=NO_LEADER, leader_epoch=2))
            await until(lambda: _is(node.manager is not None and PID not in node.manager.following), "node 1 stops")
            status, body = await insert(client, 1)
            assert status == 503 and "vgroup 0 of database rep has no leader now" in body["desc"], body


async def produce_rows(t: Trio, acks: int, timeout_ms: int = 20_000) -> Any:
    """One JSON row produced to partition 0 of :data:`ROWS_TOPIC` on node 1; the partition's answer."""
    row = json.dumps({"ts": int(time.time() * 1000), "current": 1.0, "voltage": 1, "location": "x", "g": 0})
    return await produce(t, 1, acks, timeout_ms, ROWS_TOPIC, (b"d9", row.encode()))


async def test_rows_produced_with_acks_all_to_a_tdengine_topic_wait_for_the_high_watermark(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        for node in t.nodes.values():
            await node.side.sql(f"CREATE TOPIC {ROWS_TOPIC} AS STABLE {DB}.meters")
        await t.started()
        leader = await t.nodes[1].wal()
        answer = await produce_rows(t, -1)
        assert answer.error_code == ErrorCode.none
        assert leader.visible_version == leader.next_version  # at the answer: the HW passed it
        await followers_stopped(t)
        answer = await produce_rows(t, -1, timeout_ms=300)  # appended, never passed by the HW
        assert answer.error_code == ErrorCode.request_timed_out
        assert leader.visible_version < leader.next_version
        assert (await produce_rows(t, 1)).error_code == ErrorCode.none  # acks=1: at the append, as Kafka
        await until(lambda: t.isr_is({1}), "nodes 2 and 3 leave the ISR")
        await until(lambda: _is(leader.acks_all_refused() is not None), "node 1 learns the ISR (1)")
        appended = leader.next_version
        answer = await produce_rows(t, -1)  # below min.insync.replicas: refused before the append
        assert answer.error_code == ErrorCode.not_enough_replicas and leader.next_version == appended



async def test_a_part_of_a_merged_select_routed_to_a_node_that_no_longer_leads_its_vgroup_is_refused(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node asked routes each vgroup of a SELECT spread over nodes to its leader as it read it, naming the vgroups
    in the part it sends (:class:`~walgate.gateway.sql_forward.SelectPart`). A node that does not lead one now (its
    leadership moved since) refuses its part, NotLedNow (503, retriable), never answering its other rows alone: the
    merged answer would lack that vgroup's rows, whose new leader was not asked for them."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        select, show = parse("SELECT voltage FROM meters"), parse("SHOW TABLES")
        assert isinstance(select, ast.Select) and isinstance(show, ast.Show)

        def part(n: int, vgroups: tuple[int, ...] | None) -> Any:
            engine = t.nodes[n].side.engine
            return t.nodes[n].side.call(lambda: engine.prepare_select(select, DB, True, vgroups=vgroups).sources)
        assert len(await part(1, (0,))) == 1 and len(await part(1, ())) == 0
        for refused in (part(2, (0,)), t.nodes[2].side.call(t.nodes[2].side.engine.show_tables_here, show, DB, (0,))):
            with pytest.raises(NotLedNow, match="vgroup 0 of database rep is not led by this node \\(2\\) now"):
                await refused
        assert len(await part(2, None)) == 0  # (a node of the version before asks with no vgroups: what it leads)
        with pytest.raises(InvalidValue, match="has no vgroup 1"):
            await part(1, (1,))
