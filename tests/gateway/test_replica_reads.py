"""Kafka reads of replicated partitions (issue 25, rv3's F7 and F10): three in-process nodes over a real etcd
(tests.gateway.test_replicas' trio), a ``REPLICA 3`` database made as the cluster's catalog makes it and a TDengine
topic over it; requests dispatched to each node's handlers as its server does (test_handlers_hardening.call).

What holds: a node serves Fetch, ListOffsets and OffsetForLeaderEpoch of a replicated partition only while its replica
manager leads it in the leader epoch of the newest state it read (a consumer's Fetch v11+ also while it follows it
in that epoch; :class:`walgate.gateway.kafka.leaders.Reads`);
before its manager read a state (a node that is starting, its reopened WAL visible whole, a tail past the high
watermark included) and while a state names it leader under its previous broker epoch, the three answer
NOT_LEADER_OR_FOLLOWER and Metadata LEADER_NOT_AVAILABLE (leader -1); a replica that does not follow answers
NOT_LEADER_OR_FOLLOWER too, naming the leader with FENCED_LEADER_EPOCH (KIP-951); a follower serves a consumer's Fetch v11+ up to its own high watermark (KIP-392), ListOffsets not. Each
batch served carries the leader epoch its entry was appended under (the vnode's epoch cache; KIP-101), a TDengine
topic's rendered rows and a Kafka-native topic's stored batches alike, so a consumer validating its position after
the second leader change (KIP-320) asks for the epoch its records came from: a real confluent-kafka consumer reads
each row once across two leader changes, also from a leader just elected whose high watermark has not caught up
(OffsetForLeaderEpoch ends an older epoch where the next begins, a fetch above the high watermark and within the log
is answered empty, as Kafka answers both). One Fetch round takes the topics snapshot once, whatever its partitions.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.fetch.v16 import request as fetch_v16
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_for_leader_epoch.v4 import request as epochs_v4

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_handlers_hardening import call, serving
from tests.gateway.test_replicas import DB_ID, REPLICATED_TOPIC, TOPIC, WAIT_S, Node, _is, etcd, produce, trio, until
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.handlers import advertised
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.record_batch import batch_prefix

__all__ = ["etcd"]  # (the fixture, imported)

NOT_LEADER = ErrorCode.not_leader_or_follower


async def fetched(node: Node, topic: str = REPLICATED_TOPIC, epoch: int = -1, *, offset: int = 0, rack: str = "",
                  wait_ms: int = 0, committed: bool = False) -> dict[str, Any]:
    """A consumer's Fetch v16 of ``topic``'s partition 0 from ``offset`` on ``node``, naming current leader epoch
    ``epoch`` and client rack ``rack`` (KIP-392), waiting up to ``wait_ms`` for a byte (``committed``:
    read_committed): the partition's answer."""
    topic_id = await node.side.call(node.side.engine.topic_id, topic)
    request = fetch_v16.FetchRequest(max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, topics=(
        fetch_v16.FetchTopic(topic_id=topic_id, partitions=(fetch_v16.FetchPartition(
            partition=0, fetch_offset=offset, current_leader_epoch=epoch, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id=rack, isolation_level=int(committed))
    [answer] = (await call(node, 1, 16, request))["responses"]
    [part] = answer["partitions"]
    return part


async def listed(node: Node) -> dict[str, Any]:
    """ListOffsets v7 LATEST of partition 0 on ``node``: the partition's answer."""
    request = list_offsets_v7.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        list_offsets_v7.ListOffsetsTopic(name=REPLICATED_TOPIC, partitions=(
            list_offsets_v7.ListOffsetsPartition(partition_index=0, timestamp=-1),)),))
    [answer] = (await call(node, 2, 7, request))["topics"]
    [part] = answer["partitions"]
    return part


async def epoch_end(node: Node, epoch: int, current: int = -1) -> tuple[int, int, int]:
    """OffsetForLeaderEpoch v4 of partition 0 on ``node``: (error, leader epoch, end offset)."""
    request = epochs_v4.OffsetForLeaderEpochRequest(replica_id=-1, topics=(epochs_v4.OffsetForLeaderTopic(
        topic=REPLICATED_TOPIC, partitions=(epochs_v4.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=current, leader_epoch=epoch),)),))
    [answer] = (await call(node, 23, 4, request))["topics"]
    [part] = answer["partitions"]
    return part["error_code"], part["leader_epoch"], part["end_offset"]


async def described(node: Node) -> tuple[int, int, int]:
    """Metadata v12 of partition 0 on ``node``: (error, leader, leader epoch)."""
    request = metadata_v12.MetadataRequest(topics=(metadata_v12.MetadataRequestTopic(
        name=REPLICATED_TOPIC, topic_id=None),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)
    [answer] = (await call(node, 3, 12, request))["topics"]
    [part] = answer["partitions"]
    return part["error_code"], part["leader_id"], part["leader_epoch"]


async def refused(node: Node) -> None:
    """``node`` serves no read of the partition: NOT_LEADER_OR_FOLLOWER, and Metadata names no leader."""
    assert (await fetched(node))["error_code"] == NOT_LEADER
    assert (await listed(node))["error_code"] == NOT_LEADER
    assert (await epoch_end(node, 0))[0] == NOT_LEADER
    error, leader, _ = await described(node)
    assert (error, leader) == (ErrorCode.leader_not_available, -1)


async def learned_hw(node: Node) -> bool:
    """Whether ``node``'s copy of vnode 0 is visible up to its end (its high watermark passed what it holds)."""
    wal = await node.wal()
    return bool(wal.visible_version == wal.next_version)


def epochs_of(part: dict[str, Any]) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of each batch a Fetch answer carries."""
    return [batch_prefix(bytes(batch))[::2] for batch in part["records"]]


async def test_a_replica_serves_reads_only_while_it_leads_and_never_past_the_high_watermark(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        one = t.nodes[1]
        await refused(one)  # no replica manager yet: nothing read of the partition states
        await t.started()  # node 1 leads epoch 1
        for k in range(2):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        leader = await one.wal()
        await until(lambda: _is(leader.visible_version == leader.next_version), "the HW passes both rows")
        part = await fetched(one)
        assert (part["error_code"], part["high_watermark"], len(part["records"])) == (ErrorCode.none, 2, 2)
        assert (await listed(one))["offset"] == 2 and await described(one) == (ErrorCode.none, 1, 1)
        for n in (2, 3):  # a consumer's Fetch v11+ is served by a follower too (KIP-392), up to its high watermark
            await until(functools.partial(learned_hw, t.nodes[n]), f"node {n} learned the HW")
            part = await fetched(t.nodes[n])
            assert (part["error_code"], part["high_watermark"], len(part["records"])) == (ErrorCode.none, 2, 2)
            assert (await listed(t.nodes[n]))["error_code"] == NOT_LEADER  # ListOffsets stays the leader's
            assert await described(t.nodes[n]) == (ErrorCode.none, 1, 1)
        assert one.manager is not None
        one.manager._lease_held = lambda: False  # cut off from etcd past its lease: it may have been replaced
        await refused(one)
        one.manager._lease_held = lambda: True

        for n in (2, 3):
            await t.stop(n)
        assert (await fetched(t.nodes[2]))["error_code"] == NOT_LEADER  # a replica that does not follow now
        await t.insert(1, 10)  # durable on node 1 only: past the HW
        await t.stop(1)  # node 1 restarts: its engine reopened, its WAL's HW unknown (the whole log visible)
        await one.side.call(one.side.engine.close)
        engine = one.side.engine = await one.side.call(Engine.open, one.side.data_dir / "data",
                                                       listener=one.side.wakeups, node_id=1)
        await one.side.call(engine.cluster_mode, True)
        one.broker = Broker(engine=engine, storage=one.side.storage, node_id=1, host="127.0.0.1", port=0,
                            cluster_id="replicas", versions=advertised(), groups=GroupService(engine, one.side.storage),
                            wakeups=one.side.wakeups, cluster=one.side.member)
        reopened = await one.wal()
        assert reopened.visible_version == reopened.next_version  # (the tail a read must not see with it)
        await refused(one)

        t.registered[1] += 1  # its new process's broker epoch: the state names it leader under the old one
        t.start(1)
        assert one.manager is not None
        manager = one.manager
        await until(lambda: _is(manager.state_of(DB_ID, 0) is not None), "node 1 read the state")
        await refused(one)  # (KIP-903: waiting for the next election)

        await t.node_2_elected_without_1()
        await until(lambda: _is(PartitionId(DB_ID, 0) in manager.following), "node 1 follows node 2")
        part = await fetched(one)  # a follower now (KIP-392): never its tail past the high watermark it learned
        assert part["error_code"] == ErrorCode.none and len(part["records"]) == part["high_watermark"] <= 2
        part = await fetched(one, epoch=1)  # a consumer still at epoch 1 is told where epoch 2 is led (KIP-951)
        assert (part["error_code"], part["current_leader"]) == (ErrorCode.fenced_leader_epoch,
                                                                 {"leader_id": 2, "leader_epoch": 2})
        assert await described(one) == (ErrorCode.none, 2, 2)
        new = await t.nodes[2].wal()  # (its HW passes what it holds once node 3 fetched from it)
        await until(lambda: _is(new.visible_version == new.next_version), "the HW passes node 2's end")
        part = await fetched(t.nodes[2])
        assert (part["error_code"], part["high_watermark"]) == (ErrorCode.none, 2)  # node 1's tail is not its


async def test_batches_carry_the_leader_epoch_their_entries_were_appended_under(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()
        for k in range(2):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        await t.leading(2)
        await t.insert(2, 2)
        new = await t.nodes[2].wal()
        await until(lambda: _is(new.visible_version == new.next_version), "the HW passes the new leader's row")
        part = await fetched(t.nodes[2], epoch=2)
        assert part["error_code"] == ErrorCode.none
        assert epochs_of(part) == [(0, 1), (1, 1), (2, 2)]
        # what the Java consumer asks after the next leader change (KIP-320): its position 2 is the end of epoch 1
        assert await epoch_end(t.nodes[2], 1, 2) == (ErrorCode.none, 1, 2)
        assert (await fetched(t.nodes[2], epoch=1))["error_code"] == ErrorCode.fenced_leader_epoch


async def test_a_kafka_native_batch_is_stored_with_the_leader_epoch_it_was_appended_in(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()  # node 1 leads epoch 1
        assert (await produce(t, 1, -1)).error_code == ErrorCode.none
        assert epochs_of(await fetched(t.nodes[1], TOPIC)) == [(0, 1)]
        manager = t.nodes[1].manager
        assert manager is not None
        manager._lease_held = lambda: False  # cut off from etcd past its lease: it writes nothing as a leader
        assert (await produce(t, 1, -1)).error_code == NOT_LEADER


async def test_one_fetch_round_takes_the_topics_snapshot_once_whatever_its_partitions(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as node:
        await node.storage.call(node.engine.create_kafka_topic, "many", 8, {})
        topic_id = await node.storage.call(node.engine.topic_id, "many")
        taken = 0
        snapshot = node.broker.topics

        def counted() -> Any:
            nonlocal taken
            taken += 1
            return snapshot()

        object.__setattr__(node.broker, "topics", counted)

        async def snapshots(partitions: int) -> int:
            nonlocal taken
            taken = 0
            request = fetch_v16.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, topics=(
                fetch_v16.FetchTopic(topic_id=topic_id, partitions=tuple(
                    fetch_v16.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                    for p in range(partitions))),), forgotten_topics_data=())
            answer = await call(node, 1, 16, request)
            assert [p["error_code"] for p in answer["responses"][0]["partitions"]] == [ErrorCode.none] * partitions
            return taken

        assert await snapshots(8) == await snapshots(1) >= 1


async def test_a_consumer_reads_each_row_once_across_two_leader_changes(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka (confluent-kafka) validates its position with OffsetForLeaderEpoch after each leader change
    (KIP-320, librdkafka 2.1+), naming the epoch of the last batch it read: with batches of epoch 0 it would find its
    position past the end of epoch 0 (the start of epoch 1) and report a log truncation, then read again."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        for node in t.nodes.values():
            node.broker.port = node.port  # (Metadata names each node at its listener)
        await t.started()  # node 1 leads epoch 1
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{t.nodes[3].port}", "group.id": "epochs",
                             "enable.auto.commit": False, "auto.offset.reset": "error",
                             "topic.metadata.refresh.interval.ms": 1000, "fetch.wait.max.ms": 100})
        offsets: list[int] = []
        errors: list[str] = []

        async def read(count: int, seconds: float = WAIT_S) -> None:
            deadline = time.monotonic() + seconds
            while len(offsets) < count and time.monotonic() < deadline:
                for m in await asyncio.to_thread(consumer.consume, 100, 0.2):
                    (errors.append(str(m.error())) if m.error() else offsets.append(m.offset()))

        try:
            consumer.assign([TopicPartition(REPLICATED_TOPIC, 0, 0)])
            for epoch in (1, 2, 3):
                if epoch > 1:
                    await t.write_state(replace(await t.state(), leader=epoch, leader_epoch=epoch))
                    await t.leading(epoch)
                for k in range(2):
                    await t.insert(epoch, 10 * epoch + k)
                await read(2 * epoch)
            await read(7, 2.0)  # (nothing more for 2 s: a truncation would make it read again)
        finally:
            await asyncio.to_thread(consumer.close)
        assert not errors, errors
        assert offsets == list(range(6))
