"""Producer state on a new leader of a replicated Kafka-native partition (issue 25): three in-process nodes over a
real etcd (:func:`tests.gateway.test_replicas.trio`, the topic's WAL fsynced at every append), node 1 leading, then
node 2 elected in a new leader epoch.

The followers build each producer's sequences and open transactions from the WAL they copy
(:func:`walgate.storage.replicated.append_replicated` replays every batch as a restart would), as Kafka's followers
build producer state while appending. So the new leader answers an idempotent producer's retry of a batch the old
leader appended (and the followers copied) with its original offset and writes nothing, takes the producer's next
sequence after it, refuses a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER), and keeps a transaction the old leader
opened open: its last stable offset stops at the transaction's first offset, as on the old leader.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import TOPIC, etcd, produce, trio
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode

__all__ = ["etcd"]  # (the fixture, used by name)

IDEMPOTENT, TRANSACTIONAL = 7000, 7001  # producer ids


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
        producers = new.engine.store.producers[(TOPIC, 0)]
        assert producers.last_stable(0, 4) == 2  # read_committed stops at the open transaction, as on node 1
