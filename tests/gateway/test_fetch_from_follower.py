"""Fetch from follower (KIP-392): three in-process nodes over a real etcd (tests.gateway.test_replicas' trio) holding a
``REPLICA 3`` database and a TDengine topic over it, requests dispatched to each node's handlers as its server does.

What holds: a follower serves a consumer's Fetch v11+ of the partition it follows up to its own high watermark (a
record it copied that the high watermark has not passed is not served; between its high watermark and its log end
the answer is empty, past its log end OFFSET_OUT_OF_RANGE, as Kafka's ``LocalLog.read``), with the leader epoch
checks the leader makes (KIP-320); a node that is not a replica answers NOT_LEADER_OR_FOLLOWER naming the leader
(KIP-951); under read_committed it serves what is below its own last stable offset (the open transactions it built
from the batches it copied). The leader with the rack-aware selector answers a consumer naming a rack with ``preferred_read_replica``:
the in-sync follower of that rack, at once and with no records; itself (-1, records) when it is in that rack, when
nobody is, when no rack is named or when that rack's replica left the ISR; a follower never prefers another, and
its long polls are woken as its high watermark rises.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replica_reads import fetched, learned_hw, listed
from tests.gateway.test_replicas import DB_ID, TOPIC, _is, etcd, produce, trio, until
from tests.gateway.test_replicated_topics import TRANSACTIONAL, batch
from walgate.cluster.partition_codec import PartitionId
from walgate.replication.partition import NO_LEADER
from walgate.replication.read_replica import NO_PREFERENCE, RACK_AWARE_SELECTOR
from walgate.wire.errors import ErrorCode

__all__ = ["etcd"]  # (the fixture, imported)

RACKS = {1: "r1", 2: "r2", 3: "r3"}


async def test_a_follower_serves_consumers_up_to_its_own_high_watermark_with_the_leaders_epoch_checks(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()  # node 1 leads epoch 1
        for k in range(2):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        two = t.nodes[2]
        await until(functools.partial(learned_hw, two), "node 2 learned the HW")
        part = await fetched(two)
        assert (part["error_code"], part["high_watermark"], len(part["records"])) == (ErrorCode.none, 2, 2)
        assert part["preferred_read_replica"] == NO_PREFERENCE
        assert (await fetched(two, epoch=1))["error_code"] == ErrorCode.none
        part = await fetched(two, epoch=0)  # KIP-320, naming the leader (KIP-951)
        assert (part["error_code"], part["current_leader"]) == (ErrorCode.fenced_leader_epoch,
                                                                 {"leader_id": 1, "leader_epoch": 1})
        assert (await fetched(two, epoch=2))["error_code"] == ErrorCode.unknown_leader_epoch
        assert (await listed(two))["error_code"] == ErrorCode.not_leader_or_follower  # ListOffsets: the leader's

        proposer = t.nodes[1].led()[PartitionId(DB_ID, 0)].proposer
        assert proposer is not None
        proposer.cancel()  # the ISR stays (1, 2, 3): with node 3 stopped, the HW stays where it is
        await t.stop(3)
        await t.insert(1, 2)
        await t.caught_up(2)  # node 2 holds the third row, its HW does not pass it
        part = await fetched(two)
        assert (part["error_code"], part["high_watermark"], len(part["records"])) == (ErrorCode.none, 2, 2)
        part = await fetched(two, offset=2)  # between its HW and its log end: nothing yet, not out of range
        assert (part["error_code"], part["records"]) == (ErrorCode.none, b"")
        started = time.monotonic()
        part = await fetched(two, offset=2, wait_ms=300)  # a long poll there waits its time, answered empty
        assert (part["error_code"], part["records"]) == (ErrorCode.none, b"")
        assert time.monotonic() - started >= 0.25
        assert (await fetched(two, offset=4))["error_code"] == ErrorCode.offset_out_of_range  # past its log end

        state = await t.state()  # node 3 no longer a replica
        await t.write_state(replace(state, replicas=(1, 2), partition_epoch=state.partition_epoch + 1,
                                    isr=tuple(m for m in state.isr if m.replica != 3)))
        t.start(3)
        three = t.nodes[3]
        assert three.manager is not None
        manager = three.manager
        await until(lambda: _is(getattr(manager.state_of(DB_ID, 0), "replicas", None) == (1, 2)),
                    "node 3 read the state")
        part = await fetched(three)
        assert (part["error_code"], part["current_leader"]) == (ErrorCode.not_leader_or_follower,
                                                                 {"leader_id": 1, "leader_epoch": 1})


async def test_the_rack_aware_leader_sends_a_consumer_to_the_in_sync_follower_of_its_rack(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True, racks=RACKS) as t:
        for node in t.nodes.values():
            node.broker.replica_selector = RACK_AWARE_SELECTOR
        await t.started()
        for k in range(2):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        one = t.nodes[1]
        await until(functools.partial(learned_hw, one), "node 1's HW passed both rows")  # (the followers' next fetch)

        async def prefers(rack: str, node: int) -> bool:
            return bool((await fetched(one, rack=rack))["preferred_read_replica"] == node)
        await until(functools.partial(prefers, "r2", 2), "node 1 prefers node 2 for rack r2")
        started = time.monotonic()
        part = await fetched(one, rack="r2", wait_ms=5_000)  # answered at once, nothing read
        assert time.monotonic() - started < 2.5
        assert (part["error_code"], part["preferred_read_replica"], part["records"]) == (ErrorCode.none, 2, b"")
        assert part["high_watermark"] == 2
        await until(functools.partial(prefers, "r3", 3), "node 1 prefers node 3 for rack r3")
        for rack in ("r1", "r9", ""):  # the leader's own rack, a rack of no replica, none: the leader serves
            part = await fetched(one, rack=rack)
            assert (part["preferred_read_replica"], len(part["records"])) == (NO_PREFERENCE, 2), rack
        await until(functools.partial(learned_hw, t.nodes[2]), "node 2 learned the HW")
        part = await fetched(t.nodes[2], rack="r3")  # a follower serves, never prefers
        assert (part["error_code"], part["preferred_read_replica"], len(part["records"])) == (
            ErrorCode.none, NO_PREFERENCE, 2)

        led = one.led()[PartitionId(DB_ID, 0)]
        assert led.proposer is not None
        led.proposer.cancel()  # (it would admit node 3 again)
        state = await t.state()  # node 3 leaves the ISR: no longer preferred
        assert state.leader != NO_LEADER
        narrowed = replace(state, partition_epoch=state.partition_epoch + 1,
                           isr=tuple(m for m in state.isr if m.replica != 3))
        await t.write_state(narrowed)
        await until(lambda: _is(led.view.state == narrowed), "node 1's view has the ISR (1, 2)")
        part = await fetched(one, rack="r3")
        assert (part["preferred_read_replica"], len(part["records"])) == (NO_PREFERENCE, 2)

        polling = asyncio.create_task(fetched(t.nodes[2], offset=2, wait_ms=20_000))  # a long poll on the follower
        started = time.monotonic()
        await t.insert(1, 2)
        part = await polling  # woken as its high watermark passes the new row, long before its wait ends
        assert (part["error_code"], len(part["records"])) == (ErrorCode.none, 1)
        assert time.monotonic() - started < 10


async def test_a_follower_serves_read_committed_below_its_own_last_stable_offset(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()
        assert (await produce(t, 1, -1)).error_code == ErrorCode.none  # offset 0
        leader = t.nodes[1].side
        opened = await leader.call(leader.engine.append_batches, TOPIC, 0, [batch(TRANSACTIONAL, 0, b"t",
                                                                                   transactional=True)])
        assert opened == 1  # a transaction left open at offset 1
        assert (await produce(t, 1, -1)).error_code == ErrorCode.none  # offset 2, acks=all: the HW passes it
        await t.caught_up(2, 3)
        two = t.nodes[2]
        await until(functools.partial(learned_hw, two), "node 2 learned the HW")
        part = await fetched(two, TOPIC, committed=True)
        assert (part["error_code"], part["high_watermark"], part["last_stable_offset"], len(part["records"]),
                part["aborted_transactions"]) == (ErrorCode.none, 3, 1, 1, [])
        part = await fetched(two, TOPIC)
        assert (part["last_stable_offset"], len(part["records"]), part["aborted_transactions"]) == (1, 3, None)
