"""ShareFetch and ShareAcknowledge of a replicated partition go by leadership, as Fetch does (issue 25, docs/cluster.md
"Replicas"): three in-process nodes over a real etcd (tests.gateway.test_replicas' trio), a ``REPLICA 3`` database
made as the cluster's catalog makes it, a TDengine topic over it, and each node's share service on a coordinator lane
of its own; requests dispatched to each node's handlers as its server does (test_handlers_hardening.call).

What holds: only the node whose replica manager leads the partition (:class:`walgate.gateway.kafka.leaders.Reads`)
opens it in a share session, acquires its records and takes their acknowledgements; a follower answers
NOT_LEADER_OR_FOLLOWER naming the leader and its leader epoch (KIP-951), also for a partition of a session it opened
while it led, once the leadership moved (neither read nor acquired there again). A member then fetching from the new
leader keeps consuming: the rows written after the move are acquired there. A partition the member names to a node
before that node leads it (its takeover not done) stays in that node's session and is read there once it leads
(rv6 F1: Kafka's client names it as added once only); a share-partition first read on a leader whose high watermark
is below the start of its leader epoch starts only once it reached it, never below its predecessor's (rv6 F3).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.gateway_helpers import build, kio_classes
from tests.gateway.test_handlers_hardening import call
from tests.gateway.test_replicas import DB_ID, REPLICATED_TOPIC, Node, Trio, _is, etcd, trio, until
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.kafka.node_links import NodeUnreachable
from walgate.gateway.kafka.shares import ShareService
from walgate.gateway.storage_thread import StorageThread
from walgate.wire.errors import ErrorCode

__all__ = ["etcd"]  # (the fixture, imported)

GROUP, MEMBER = "g", "m1"
ACCEPT = 1
NOT_LEADER = ErrorCode.not_leader_or_follower


@asynccontextmanager
async def shares(t: Trio) -> AsyncIterator[None]:
    """Each node's share service (share groups on), on a coordinator lane of its own; closed and stopped after."""
    lanes: list[tuple[Node, StorageThread]] = []
    try:
        for node in t.nodes.values():
            lane = StorageThread(name=f"coordinator-{node.id}")
            lanes.append((node, lane))
            service = ShareService(node.side.engine, lane, node.side.storage, lock_ms=30_000, delivery_limit=5,
                                   heartbeat_interval_ms=5_000, session_timeout_ms=45_000,
                                   wake=node.side.wakeups.records_appended)
            await service.open()
            node.broker.shares = service
        yield
    finally:
        for node, lane in lanes:
            if node.broker.shares is not None:
                node.broker.shares.close()
                node.broker.shares = None
            lane.shutdown()


async def joined(node: Node) -> None:
    """:data:`MEMBER` joins :data:`GROUP` on ``node`` (ShareGroupHeartbeat; each node coordinates it here)."""
    answer = await call(node, 76, 1, build(kio_classes(76, 1)[0], {
        "group_id": GROUP, "member_id": MEMBER, "member_epoch": 0, "subscribed_topic_names": [REPLICATED_TOPIC]}))
    assert answer["error_code"] == ErrorCode.none, answer


async def share_fetch(node: Node, epoch: int, topic_id: uuid.UUID | None) -> dict[str, Any]:
    """ShareFetch v2 on ``node`` in session epoch ``epoch``, naming partition 0 of ``topic_id`` (None: no partition,
    as a client's incremental request with nothing to add); the answer's only partition."""
    topics = [] if topic_id is None else [{"topic_id": topic_id, "partitions": [
        {"partition_index": 0, "acknowledgement_batches": []}]}]
    answer = await call(node, 78, 2, build(kio_classes(78, 2)[0], {
        "group_id": GROUP, "member_id": MEMBER, "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
        "max_records": 100, "batch_size": 100, "max_bytes": 1 << 20, "forgotten_topics_data": [], "topics": topics}))
    assert answer["error_code"] == ErrorCode.none, answer
    [topic] = answer["responses"]
    [part] = topic["partitions"]
    return {**part, "node_endpoints": [e["node_id"] for e in answer["node_endpoints"]]}


async def share_ack(node: Node, epoch: int, topic_id: uuid.UUID, first: int, last: int) -> dict[str, Any]:
    """ShareAcknowledge v2 on ``node`` accepting offsets ``first..last`` of partition 0: the partition's answer."""
    answer = await call(node, 79, 2, build(kio_classes(79, 2)[0], {
        "group_id": GROUP, "member_id": MEMBER, "share_session_epoch": epoch, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]}]}]}))
    assert answer["error_code"] == ErrorCode.none, answer
    [topic] = answer["responses"]
    [part] = topic["partitions"]
    return {**part, "node_endpoints": [e["node_id"] for e in answer["node_endpoints"]]}


def acquired(part: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [(a["first_offset"], a["last_offset"], a["delivery_count"]) for a in part["acquired_records"]]


def leader(part: dict[str, Any]) -> tuple[int, int]:
    return part["current_leader"]["leader_id"], part["current_leader"]["leader_epoch"]


async def written(t: Trio, node_id: int, *ks: int) -> None:
    """Rows ``ks`` inserted through node ``node_id`` (the leader), passed by its high watermark."""
    for k in ks:
        await t.insert(node_id, k)
    wal = await t.nodes[node_id].wal()
    await until(lambda: _is(wal.visible_version == wal.next_version), f"node {node_id}'s HW passes the rows")


async def test_share_reads_of_a_replicated_partition_follow_its_leader(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t, shares(t):
        one, two = t.nodes[1], t.nodes[2]
        await t.started()  # node 1 (the placement's first replica) leads epoch 1
        await until(lambda: _is(two.broker.led is not None and two.broker.led.followed_epoch(DB_ID, 0) == 1),
                    "node 2 follows node 1 (the state read: the leader it names)")
        topic_id = await one.side.call(one.side.engine.topic_id, REPLICATED_TOPIC)
        for node in (one, two):
            await joined(node)
        part = await share_fetch(two, 0, topic_id)  # a follower: the leader named, in its epoch
        assert (part["error_code"], leader(part), part["node_endpoints"]) == (NOT_LEADER, (1, 1), [1]), part
        assert (await share_fetch(one, 0, topic_id))["error_code"] == ErrorCode.none  # (starts at the log's end)
        await written(t, 1, 0, 1)
        part = await share_fetch(one, 1, None)
        assert (part["error_code"], acquired(part)) == (ErrorCode.none, [(0, 1, 1)]), part

        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        await t.leading(2)
        await until(lambda: _is(PartitionId(DB_ID, 0) not in one.led()), "node 1 no longer leads")
        part = await share_fetch(one, 2, None)  # its session's partition: not read there any more
        assert (part["error_code"], leader(part), part["node_endpoints"], acquired(part)) == (
            NOT_LEADER, (2, 2), [2], []), part
        part = await share_ack(one, 3, topic_id, 0, 1)
        assert (part["error_code"], leader(part)) == (NOT_LEADER, (2, 2)), part

        assert (await share_fetch(two, 0, topic_id))["error_code"] == ErrorCode.none  # the member moves over
        epoch = await started(two, 1, topic_id)  # (at once, or once node 2's HW reached its epoch's start)
        await written(t, 2, 2)
        part = await share_fetch(two, epoch, None)
        assert (part["error_code"], acquired(part)) == (ErrorCode.none, [(2, 2, 1)]), part
        assert (await share_ack(two, epoch + 1, topic_id, 2, 2))["error_code"] == ErrorCode.none


async def test_a_member_whose_session_opened_on_a_leader_before_it_led_gets_the_partition_once_it_leads(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rv6 F1: Kafka's client names a partition as added to a node's share session once only; node 2, restarting
    (no partition state read), answers it NOT_LEADER_OR_FOLLOWER but keeps it in the session, so the member's
    incremental requests (naming no partition) get its records once node 2 leads. Before: never added there, the
    member spun on an empty session for good."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t, shares(t):
        one, two = t.nodes[1], t.nodes[2]
        await t.started()
        topic_id = await one.side.call(one.side.engine.topic_id, REPLICATED_TOPIC)
        await joined(two)
        await written(t, 1, 0, 1)
        await t.stop(2)  # node 2 restarts: no partition state read yet
        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        part = await share_fetch(two, 0, topic_id)  # the member follows the state to node 2 before it leads
        assert (part["error_code"], leader(part), acquired(part)) == (NOT_LEADER, (-1, -1), []), part
        t.start(2)
        await t.leading(2)
        epoch = await started(two, 1, topic_id)  # incremental requests, as Kafka's client sends them
        await written(t, 2, 2)
        part = await share_fetch(two, epoch, None)
        assert (part["error_code"], acquired(part)) == (ErrorCode.none, [(2, 2, 1)]), part


async def test_a_share_partition_first_read_on_a_leader_whose_hw_lags_its_epoch_start_starts_once_it_reached_it(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rv6 F3: node 2, cut off from its leader right after it copied row 0 (so it never learned the HW that passed
    it), is elected; its HW is below its leader epoch's start, which is where its predecessor's HW was. A share
    partition first read there does not start at "latest" until its HW reached that start (ListOffsets' KIP-207
    check, as Kafka's SharePartition takes its start through it); then at it, so row 0, visible on node 1 before,
    is not delivered again. Before: it started at node 2's lagging HW, 0."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t, shares(t):
        one, two = t.nodes[1], t.nodes[2]
        for n in (1, 2, 3):
            t.start(n)
        await t.write_state(t.initial(min_isr=1))  # (the HW then passes with node 1 alone in the ISR)
        await t.leading(1)
        topic_id = await one.side.call(one.side.engine.topic_id, REPLICATED_TOPIC)
        await t.stop(3)
        await until(lambda: t.isr_is({1, 2}), "node 3 leaves the ISR")
        old = await one.wal()
        end = old.next_version
        manager = two.manager
        assert manager is not None
        fetcher = manager.fetching[1].fetcher
        link = fetcher.link

        class CutOff:  # node 2's link to node 1 cut once it holds more than ``end``: its fetch reporting so fails
            async def call(self, node: int, request: Any) -> Any:
                if any(p.fetch_version > end for p in request.partitions):
                    raise NodeUnreachable(f"node {node}: cut off (injected)")
                return await link.call(node, request)

            def version(self, node: int, api_key: int) -> int:
                return link.version(node, api_key)
        monkeypatch.setattr(fetcher, "link", CutOff())
        await t.insert(1, 0)
        await until(lambda: t.isr_is({1}), "node 2 leaves the ISR (it never reports row 0 durable)")
        await until(lambda: _is(old.visible_version == old.next_version), "node 1's HW passes row 0")
        new = await two.wal()
        assert new.next_version == old.next_version and new.visible_version < new.next_version  # (its HW lags)
        await t.stop(1)
        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2, isr=t.initial().isr))
        await t.leading(2)
        await joined(two)
        part = await share_fetch(two, 0, topic_id)
        assert (part["error_code"], acquired(part)) == (ErrorCode.none, []), part
        service = two.broker.shares
        assert service is not None
        assert await service.run(lambda _, c: c.summary((GROUP, str(topic_id), 0))) is None  # not started below
        t.start(1)
        t.start(3)  # following node 2: its HW passes its epoch's start
        epoch = await started(two, 1, topic_id, 1)
        await written(t, 2, 1)
        part = await share_fetch(two, epoch, None)
        assert (part["error_code"], acquired(part)) == (ErrorCode.none, [(1, 1, 1)]), part


async def started(node: Node, epoch: int, topic_id: uuid.UUID, start: int = 2) -> int:
    """Incremental ShareFetches (naming no partition) from session epoch ``epoch`` on ``node`` until the share
    partition of partition 0 has its start there, each answering it without records; that start is ``start`` (made
    at "latest": never below the high watermark its previous leader made visible, rv6 F3); the session's next
    epoch."""
    service = node.broker.shares
    assert service is not None
    key = (GROUP, str(topic_id), 0)
    next_epoch = epoch

    async def made() -> bool:
        nonlocal next_epoch
        if await service.run(lambda _, coordinator: coordinator.summary(key)) is not None:
            return True
        part = await share_fetch(node, next_epoch, None)
        assert part["error_code"] in (ErrorCode.none, NOT_LEADER) and not acquired(part), part
        next_epoch += 1
        return False
    await until(made, f"node {node.id}'s share partition starts")
    summary = await service.run(lambda _, coordinator: coordinator.summary(key))
    assert summary == (start, 0), summary
    return next_epoch
