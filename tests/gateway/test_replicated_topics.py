"""Producer state on a new leader of a replicated Kafka-native partition (issue 25): three in-process nodes over a
real etcd (:func:`tests.gateway.test_replicas.trio`, the topic's WAL fsynced at every append), node 1 leading, then
node 2 elected in a new leader epoch.

A transaction's markers (:meth:`Engine.write_txn_markers`, as a coordinator writes them here or a node's
WriteTxnMarkers asks) go to a replicated partition's leader only: a follower refuses them (NotLedNow) with nothing
appended, so its copy stays its leader's WAL; on the leader WriteTxnMarkers answers once the in-sync replicas hold
the marker (REQUEST_TIMED_OUT while they do not fetch, and the coordinator sends it again), as Kafka appends markers
with acks=all.

The followers build each producer's sequences and open transactions from the WAL they copy
(:func:`walgate.storage.replicated.append_replicated` replays every batch as a restart would), as Kafka's followers
build producer state while appending. So the new leader answers an idempotent producer's retry of a batch the old
leader appended (and the followers copied) with its original offset and writes nothing, also once five later batches
pushed it out of those the producer's state keeps (it is looked up in the log), takes the producer's next sequence
after it, refuses a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER), and keeps a transaction the old leader opened open:
its last stable offset stops at the transaction's first offset, as on the old leader. While a node takes the lead
on (Metadata names it, its replica manager has not begun the leader epoch), it holds a Produce until it leads instead
of refusing it, so a client's pipelined batches are answered alike (the confluent-kafka duplicate under node kills).
That wait, and DeleteRecords' for the followers' log starts (KIP-107), are woken by the vnode's change (its state
applied, a follower's fetch recorded), not by a timer: their periodic looks are made an hour long here.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import TOPIC, WAIT_S, Trio, bounded, etcd, produce, trio, until
from walgate.cluster.etcd import tx
from walgate.cluster.partition_codec import PartitionId, encode_state, partition_key
from walgate.gateway.kafka import leaders, transactions
from walgate.gateway.kafka.handlers import delete_records as delete_records_handler
from walgate.gateway.kafka.handlers import produce as produce_handler
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.txn_remote import write_markers
from walgate.storage.engine import Engine
from walgate.storage.errors import NotLedNow
from walgate.storage.led_appends import LedAppend, recording
from walgate.storage.show import Dnode
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import request_class
from walgate.wire.serial import fields_of

__all__ = ["etcd"]  # (the fixture, used by name)

IDEMPOTENT, TRANSACTIONAL = 7000, 7001  # producer ids


HOUR_MS = 3_600_000


def batch(producer_id: int, sequence: int, *values: bytes, transactional: bool = False) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(0, [now] * len(values), [None] * len(values), list(values), producer_id=producer_id,
                        producer_epoch=0, base_sequence=sequence, is_transactional=transactional)


async def test_a_new_leader_answers_a_retried_batch_as_a_duplicate_and_keeps_open_transactions(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()
        first = batch(IDEMPOTENT, 0, b"a", b"b")
        answer = await produce(t, 1, -1, batch=first)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
        old = t.nodes[1].side
        transaction = batch(TRANSACTIONAL, 0, b"t", transactional=True)
        opened = await old.call(old.engine.append_batches, TOPIC, 0, [transaction])
        assert opened == 2  # a transaction the old leader opened, never ended
        await t.caught_up(2, 3)

        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        await t.leading(2)
        new = t.nodes[2].side
        producers = new.engine.store.producers[(TOPIC, 0)]
        assert producers.ongoing() == {TRANSACTIONAL: 2}
        wal = await t.nodes[2].wal()
        end = wal.next_version
        answer = await produce(t, 2, -1, batch=first)  # the producer's retry: a duplicate, answered with its offset
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0) and wal.next_version == end
        answer = await produce(t, 2, -1, batch=batch(IDEMPOTENT, 2, b"c"))
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 3)
        answer = await produce(t, 2, -1, batch=batch(IDEMPOTENT, 5, b"gap"))
        assert answer.error_code == ErrorCode.out_of_order_sequence_number
        for k in range(3, 8):  # five batches more: the first one, which node 2 copied, is no longer among those kept
            answer = await produce(t, 2, -1, batch=batch(IDEMPOTENT, k, b"%d" % k))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, k + 1)
        end = wal.next_version
        answer = await produce(t, 2, -1, batch=first)  # looked up in the log (the Java client's endless retry)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0) and wal.next_version == end
        producers = new.engine.store.producers[(TOPIC, 0)]
        assert producers.last_stable(0, 4) == 2  # read_committed stops at the open transaction, as on node 1


async def test_a_node_taking_over_the_lead_answers_pipelined_batches_once_it_leads_not_with_not_leader(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idempotent producer's batches in flight when its partition's leader dies, sent again to the new leader
    while it takes over (Metadata names it, its replica manager has not begun the leader epoch): batch 1, which the
    old leader appended and its followers copied but never acknowledged, and batch 2, new. Answered once the new
    leader leads, batch 1 with its original offset and batch 2 after it, never NOT_LEADER_OR_FOLLOWER: a refused
    batch 1 beside an accepted batch 2 is what made librdkafka take batch 1 as delivered with no offset, or, were
    batch 1 not in the log, answer batch 2 OUT_OF_ORDER_SEQUENCE_NUMBER and bump the producer's epoch, sending
    every batch not acknowledged yet, of every partition, again as new (a record stored twice: the compat run under
    node kills of 2026-11-30). Node 2's takeover is held by refusing its leader-epoch file's write until released;
    the held requests are woken by the takeover applied (their periodic look and their timeout an hour away: answered
    within the bound only so)."""
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        monkeypatch.setattr(produce_handler, "_TAKEOVER_RECHECK_S", 3600.0)  # (after trio's set-up: it undoes its own)
        await t.started()
        for k in (0, 1):
            answer = await produce(t, 1, -1, batch=batch(IDEMPOTENT, k, b"%d" % k))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, k)
        await t.caught_up(2, 3)
        epochs = (await t.nodes[2].side.vnode(t.nodes[2].db, 0)).epochs
        released, refused = threading.Event(), []
        replace_file = epochs._replace

        def refuse_until_released(entries: Any) -> None:
            if not released.is_set():
                refused.append(entries)
                raise OSError(errno.ENOSPC, "No space left on device")
            replace_file(entries)
        monkeypatch.setattr(epochs, "_replace", refuse_until_released)
        waiting: set[asyncio.Task[Any] | None] = set()

        def spied(*args: Any) -> bool:
            found = leaders.taking_over(*args)
            if found:
                waiting.add(asyncio.current_task())
            return found
        monkeypatch.setattr(produce_handler, "taking_over", spied)
        async def held(count: int, sent: asyncio.Task[Any]) -> bool:
            """``count`` requests wait for the takeover, or ``sent`` was answered."""
            return len(waiting) == count or sent.done()

        async def tried() -> bool:
            return bool(refused)

        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        await until(tried, "node 2 tries to take over")
        retried = asyncio.create_task(produce(t, 2, -1, HOUR_MS, batch=batch(IDEMPOTENT, 1, b"1")))
        await until(lambda: held(1, retried), "node 2 holds batch 1 while it takes over")
        assert not retried.done(), retried.result()  # (not answered NOT_LEADER_OR_FOLLOWER meanwhile)
        following = asyncio.create_task(produce(t, 2, -1, HOUR_MS, batch=batch(IDEMPOTENT, 2, b"2")))
        await until(lambda: held(2, following), "node 2 holds batch 2 too")
        assert not following.done(), following.result()
        assert not retried.done(), retried.result()
        released.set()
        answers = [await retried, await following]
        assert [(a.error_code, a.base_offset) for a in answers] == [(ErrorCode.none, 1), (ErrorCode.none, 2)]
        assert (await t.nodes[2].wal()).next_version == 3  # batch 1 stored once


def test_a_marker_is_written_on_a_replicated_partitions_leader_only(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=4)
    e.cluster_mode(True)
    e.set_dnodes(tuple(Dnode(n, f"127.0.0.1:{9090 + n}", "ready") for n in (4, 5, 6)), {4: None, 5: None, 6: None})
    for record in e.staged(e.create_kafka_topic, "t", 1, {}, {}, None, None, 3)[1]:
        assert e.apply_shared(e.catalog.shared_seq + 1, record)
    vnode = e.store.local_vnode(e.catalog.topics["t"].db, 0)  # node 4 holds a replica (3 of 3 nodes)
    wal = vnode.wal
    end = wal.next_version
    [refused] = e.write_txn_markers(TRANSACTIONAL, 0, 0, True, [("t", 0)])
    assert isinstance(refused, NotLedNow) and wal.next_version == end  # a follower's copy is its leader's WAL
    vnode.epochs.begin(0, end)  # (as the replica manager leads a vnode: its epoch begun, then leading)
    wal.leading = True
    with recording() as appended:
        assert e.write_txn_markers(TRANSACTIONAL, 0, 0, True, [("t", 0)]) == [None]
    assert appended == [LedAppend((e.catalog.topics["t"].db, 0), 0, end)] and wal.next_version == end + 1
    e.close()


async def write_marker(t: Trio, to: int) -> int:
    """A commit marker of :data:`TRANSACTIONAL` for partition 0 of :data:`TOPIC` sent to node ``to`` as a transaction
    coordinator on node 3 sends it (WriteTxnMarkers over its node links); the partition's answer."""
    links = NodeLinks(t.nodes[3].side.member, "PLAINTEXT", None, timeout_s=WAIT_S)
    try:
        async with bounded(f"node {to}'s WriteTxnMarkers answer"):
            return (await write_markers(links, to, TRANSACTIONAL, 0, 0, True, [(TOPIC, 0)]))[(TOPIC, 0)]
    finally:
        links.close()


async def test_write_txn_markers_is_answered_once_the_in_sync_replicas_hold_the_marker(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "MARKER_ACK_S", 0.5)
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()
        leader = await t.nodes[1].wal()
        assert await write_marker(t, 1) == ErrorCode.none
        assert leader.visible_version == leader.next_version  # at the answer: the ISR holds it
        for n in (2, 3):
            await t.stop(n)
        assert await write_marker(t, 1) == ErrorCode.request_timed_out  # appended, not held by the ISR
        assert leader.visible_version < leader.next_version


PURGED = "purged"
DELETE_RECORDS: Any = request_class(21, 2)
DELETE_TOPIC: Any = next(f.entity for f in fields_of(DELETE_RECORDS) if f.name == "topics")
DELETE_PARTITION: Any = next(f.entity for f in fields_of(DELETE_TOPIC) if f.name == "partitions")


async def test_delete_records_is_answered_once_the_followers_fetches_report_the_log_start(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeleteRecords on a replicated partition's leader waits until both followers reported the new log start with a
    fetch (KIP-107's low watermark): each fetch recorded wakes it (its periodic look and its timeout an hour away:
    without the wake-up it is not answered within the bound). The topic is made REPLICATION 3 as the cluster's catalog
    makes it (its records staged on node 1 and applied on each node), node 1 leading it."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        monkeypatch.setattr(delete_records_handler, "_RECHECK_S", 3600.0)
        first = t.nodes[1].side
        _, records = await first.call(first.engine.staged, first.engine.create_kafka_topic, PURGED, 1, {}, {}, None,
                                      None, 3)
        seq = await first.call(lambda: first.engine.catalog.shared_seq)
        for k, record in enumerate(records, seq + 1):
            for node in t.nodes.values():
                assert await node.side.call(node.side.engine.apply_shared, k, record)
        db = (await first.call(first.engine.topic, PURGED)).db
        pid = PartitionId(await first.db_id(db), 0)
        for n in (1, 2, 3):
            t.start(n)
        await t.states.session.txn([], [tx.Put(partition_key(t.states.keys, pid), encode_state(t.initial()))])
        await until(lambda: _now(pid in t.nodes[1].led()), "node 1 leads the topic's partition")
        for k in range(4):
            answer = await produce(t, 1, -1, topic_name=PURGED)
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, k)

        async def copied() -> bool:
            return len({(await t.nodes[n].side.vnode(db, 0)).wal.next_version for n in (1, 2, 3)}) == 1
        await until(copied, "nodes 2 and 3 copied the four batches")
        request = DELETE_RECORDS(timeout=datetime.timedelta(hours=1), topics=(DELETE_TOPIC(name=PURGED, partitions=(
            DELETE_PARTITION(partition_index=0, offset=3),)),))
        links = NodeLinks(t.nodes[3].side.member, "PLAINTEXT", None, timeout_s=WAIT_S)
        try:
            async with bounded("node 1's DeleteRecords answer"):
                response = await links.call(1, request)
        finally:
            links.close()
        [topic] = response.topics
        [partition] = topic.partitions
        assert (partition.error_code, partition.low_watermark) == (ErrorCode.none, 3)
        for n in (2, 3):  # (what they reported before the answer)
            side = t.nodes[n].side
            assert (await side.call(side.engine.views.watermarks, PURGED, 0))[0] == 3


async def _now(value: bool) -> bool:
    return value
