"""WalFetch (internal key 10001) and the replica fetcher (docs/plans/replication-wiring.md, step 4): two in-process
nodes over a real one-member etcd, each with its own engine and data dir; the leader (node 1) serves its handlers on a
real socket, the follower (node 2) fetches over its authenticated node link.

What holds: the follower's WAL equals the leader's byte for byte after SQL rows, CREATE TABLE meta entries and
Kafka-native batches, and after a divergence (the follower's longer tail of an old epoch cut, then equal; an empty
epoch at the follower's end cut though its WAL is not, also when its WAL is empty); every error code of the handler
(a node fetching as another replica refused), the request's ``max_bytes`` kept to by the first vnode too (at least
one batch), and seeded fuzzed fetches of a node (``WALGATE_FUZZ_WAL_FETCH`` requests, 60 in CI); a long poll woken
by an append to a vnode with no topic (a condition: the fetch is seen waiting before the append); a follower's lag
(the leader's high watermark past its WAL end after an answer: a follower out of the ISR fetching one batch at a
time) falls to 0 as it catches up; a vnode with an error left out of the fetcher's requests for its backoff alone,
the others fetched on; a cut whose epoch file the disk refused (the WAL held) finished before the next fetch; a
divergence of a vnode unfollowed before its cut runs cuts nothing; a client's request refused, and the API absent
from ApiVersions; a fetcher cancelled in any event-loop iteration of a fetch ends at once; a catch-up throttled on
the leader's or the follower's side (KIP-73) stays within the rate (the bytes recorded in the quota over time, an
upper bound) and ends with equal WALs; a Kafka-native partition's copy ending below the leader's log start is emptied
and started there (Kafka's ``truncateFullyAndStartAt``; again at a later fetch when the disk refused the first try)
and then equals the leader's log, offsets and producer state, also after a restart; an SQL vgroup's is restored from
the leader's snapshot (VnodeSnapshot) and then holds the leader's tables and entries, or, from a leader that does not
answer VnodeSnapshot, is no longer fetched and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import logging
import os
import random
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.serial import entity_reader

from tests.cluster.etcd_cluster import EtcdCluster, etcd_cluster
from walgate.gateway import replica_fetcher
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.server import KafkaServer
from walgate.gateway.kafka.wakeups import FetchWakeups
from walgate.gateway.metrics import Metrics
from walgate.gateway.replica_fetcher import FollowedVnode, ReplicaFetcher
from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.leader import LeaderView, can_join_isr
from walgate.replication.partition import IsrMember, PartitionState
from walgate.storage import leader_epochs
from walgate.storage.engine import Engine
from walgate.storage.wal_format import FLAG_MORE
from walgate.storage.wal_verbatim import parse
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import encode_request, request_class, response_class
from walgate.wire.serial import fields_of

DB = "rep"
TOPIC = "native"
WAL = "WAL_LEVEL 2 WAL_FSYNC_PERIOD 0"  # every append fsynced: durable ends, so the high watermark, move
REQUESTS: Any = {v: request_class(10001, v) for v in (0, 1)}
PARTITIONS: Any = {v: next(f.entity for f in fields_of(cls) if f.name == "partitions") for v, cls in REQUESTS.items()}
LOG_START: Any = next(f.entity for f in fields_of(PARTITIONS[1]) if f.name == "log_starts")
REQUEST, PARTITION = REQUESTS[0], PARTITIONS[0]
WAIT_S = 30.0
SESSION_MS = 10_000  # the nodes' etcd session (lease TTL): a loaded machine's pauses never expire it
SPINS = 40  # event-loop iterations swept by the cancellation test (an answer's way back takes fewer)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    with etcd_cluster(tmp_path / "etcd", 1) as cluster:
        yield cluster


@dataclass
class Led:
    """The leader's :class:`~walgate.gateway.kafka.led_vnodes.LedVnodes`: its views by (db id, vgroup), and the
    registrations it knows (what step 5's replica manager reads from the partition states and etcd)."""

    views: dict[tuple[str, int], LeaderView] = field(default_factory=dict)
    registered: dict[int, int] = field(default_factory=dict)
    told: Counter[tuple[str, int]] = field(default_factory=Counter)  # fetches recorded, by vnode

    def leader_view(self, db_id: str, vgroup: int) -> LeaderView | None:
        return self.views.get((db_id, vgroup))

    def registered_epoch(self, node_id: int) -> int | None:
        return self.registered.get(node_id)

    def lease_held(self) -> bool:
        return True

    def fetched(self, db_id: str, vgroup: int) -> None:
        self.told[(db_id, vgroup)] += 1


@dataclass
class Side:
    engine: Engine
    storage: StorageThread
    wakeups: FetchWakeups
    member: ClusterMember
    data_dir: Path

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.storage.call(fn, *args, **kwargs)

    async def sql(self, statement: str) -> Any:
        return await self.call(self.engine.execute, statement)

    async def wal_bytes(self, db: str, vgroup: int) -> bytes:
        """Every segment's log of the vnode, in version order (segment boundaries are each WAL's own)."""
        wal = await self.call(lambda: self.engine.store.local_vnode(db, vgroup).wal)
        return b"".join(p.read_bytes() for p in sorted(wal.dir.glob("*.log")))

    async def vnode(self, db: str, vgroup: int) -> Any:
        return await self.call(self.engine.store.local_vnode, db, vgroup)

    async def db_id(self, db: str) -> str:
        return str(await self.call(lambda: self.engine.database(db).id))


@dataclass
class Pair:
    leader: Side
    follower: Side
    broker: Broker
    led: Led
    port: int
    links: NodeLinks
    fetcher: ReplicaFetcher

    async def lead(self, db: str, vgroups: int, epoch: int) -> None:
        """Node 1 leads every vnode of ``db`` in ``epoch`` from its WAL's end, node 2 following it."""
        db_id = await self.leader.db_id(db)
        state = PartitionState((1, 2), 1, epoch, epoch, tuple(IsrMember(n, e) for n, e in sorted(
            self.led.registered.items())), (), 1)
        for i in range(vgroups):
            vnode = await self.leader.vnode(db, i)
            await self.leader.call(vnode.epochs.begin, epoch, vnode.wal.next_version)
            self.led.views[(db_id, i)] = LeaderView(1, self.led.registered[1], state, vnode.wal.next_version,
                                                    0, int(time.monotonic() * 1000), 30_000)
            self.fetcher.follow(FollowedVnode(db, db_id, i, epoch))

    async def caught_up(self) -> None:
        """Fetch until every followed vnode's WAL ends where the leader's does (bounded)."""
        for _ in range(100):
            ends = []
            for v in self.fetcher.followed.values():
                ends.append(((await self.leader.vnode(v.db, v.vgroup)).wal.next_version,
                             (await self.follower.vnode(v.db, v.vgroup)).wal.next_version))
            if all(a == b for a, b in ends):
                return
            assert await asyncio.wait_for(self.fetcher.fetch_once(), WAIT_S), {
                k: v.error for k, v in self.fetcher.followed.items()}
        raise AssertionError("the follower never caught up")

    async def same_wals(self, db: str, vgroups: int) -> None:
        for i in range(vgroups):
            raw = await self.leader.wal_bytes(db, i)
            assert raw and raw == await self.follower.wal_bytes(db, i), i

    async def fetch(self, *partitions: dict[str, Any], max_wait_ms: int = 0, node: NodeLinks | None = None,
                    **fields: Any) -> list[Any]:
        """A WalFetch sent as node 2 (or through ``node``); its partitions' answers."""
        version = 1 if any("log_starts" in p for p in partitions) else 0
        request = REQUESTS[version](**{"replica_id": 2, "broker_epoch": self.led.registered[2], "min_bytes": 1,
                             "max_wait": datetime.timedelta(milliseconds=max_wait_ms), **fields},
                          partitions=tuple(PARTITIONS[version](**{"partition_max_bytes": 1 << 20, **p})
                                           for p in partitions))
        response = await asyncio.wait_for((node or self.links).call(1, request), WAIT_S)
        return list(response.partitions)


async def _side(etcd: EtcdCluster, data_dir: Path, node_id: int) -> Side:
    data_dir.mkdir()
    storage = StorageThread()
    wakeups = FetchWakeups(asyncio.get_running_loop())
    engine = await storage.call(Engine.open, data_dir / "data", listener=wakeups, node_id=node_id)
    member = ClusterMember(etcd.spec, "walgate", node_id, data_dir, SESSION_MS)
    await member.kafka_cluster_id()
    return Side(engine, storage, wakeups, member, data_dir)


@asynccontextmanager
async def pair(etcd: EtcdCluster, tmp_path: Path) -> AsyncIterator[Pair]:
    leader = await _side(etcd, tmp_path / "n1", 1)
    follower = await _side(etcd, tmp_path / "n2", 2)
    led = Led()
    broker = Broker(engine=leader.engine, storage=leader.storage, node_id=1, host="127.0.0.1", port=0,
                    cluster_id="wal-fetch", versions=advertised(), groups=GroupService(leader.engine, leader.storage),
                    wakeups=leader.wakeups, cluster=leader.member, led=led)
    server = KafkaServer(broker, 1 << 24, metrics=Metrics())
    links = NodeLinks(follower.member, "PLAINTEXT", None, timeout_s=WAIT_S)
    try:
        _, port = await server.start("127.0.0.1", 0)
        await leader.member.join((f"PLAINTEXT://127.0.0.1:{port}",))
        await follower.member.join(("PLAINTEXT://127.0.0.1:1",))  # (nobody connects to the follower)
        await follower.member.refresh()
        for side in (leader, follower):
            assert side.member.registration is not None and side.member.registration.epoch is not None
            led.registered[side.member.node_id] = side.member.registration.epoch
        fetcher = ReplicaFetcher(2, led.registered[2], 1, links, follower.storage, follower.engine, max_wait_ms=0,
                                 backoff_s=0.05)
        yield Pair(leader, follower, broker, led, port, links, fetcher)
    finally:
        links.close()
        await server.stop()
        for side in (follower, leader):
            await side.member.leave()
            await side.storage.call(side.engine.close)
            side.storage.shutdown()


async def _both(p: Pair, *statements: str) -> None:
    for statement in statements:
        for side in (p.leader, p.follower):
            await side.sql(statement)


STABLE = f"CREATE STABLE {DB}.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(32), g INT)"


async def _one_row_copied(p: Pair) -> int:
    """One vnode of ``DB`` led by node 1 in epoch 1, a row inserted and copied to node 2; the row's timestamp."""
    await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
    await p.lead(DB, 1, 1)
    ts = 1_700_000_000_000
    await p.leader.sql(f"INSERT INTO {DB}.d0 USING {DB}.meters TAGS ('a', 0) VALUES ({ts}, 1.0, 1)")
    await p.caught_up()
    return ts


async def test_the_followers_wal_equals_the_leaders_byte_for_byte(etcd: EtcdCluster, tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 2 {WAL}", STABLE,
                    f"CREATE TOPIC rows AS SELECT ts, current FROM {DB}.meters")
        for side in (p.leader, p.follower):
            await side.call(side.engine.create_kafka_topic, TOPIC, 1, {})
        native_db = (await p.leader.call(p.leader.engine.topic, TOPIC)).db
        await p.lead(DB, 2, 1)
        await p.lead(native_db, 1, 1)
        ts = 1_700_000_000_000
        await p.leader.sql(f"CREATE TABLE {DB}.d0 USING {DB}.meters TAGS ('a', 0)")
        for k in range(6):  # new subtables (meta entries) and rows in both vnodes
            await p.leader.sql(f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('l{k}', {k}) "
                               f"VALUES ({ts + k}, {k}.5, {200 + k}) ({ts + k + 100}, 1.0, 1)")
        for k in range(3):
            batch = encode_batch(0, [ts + k], [b"k%d" % k], [b"v" * (k + 1)])
            await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [batch])
        await p.caught_up()
        await p.same_wals(DB, 2)
        await p.same_wals(native_db, 1)
        for topic, parts in (("rows", 2), (TOPIC, 1)):  # every topic's offsets derived identically
            for i in range(parts):
                assert await p.follower.call(p.follower.engine.watermarks, topic, i) == \
                    await p.leader.call(p.leader.engine.watermarks, topic, i)
        assert (await p.follower.sql(f"SELECT * FROM {DB}.meters")).rows == \
            (await p.leader.sql(f"SELECT * FROM {DB}.meters")).rows
        await p.fetcher.fetch_once()  # reports the follower's durable end: the high watermark reaches the end
        [answer] = await p.fetch({"db_id": uuid.UUID(await p.leader.db_id(DB)), "vgroup": 0,
                                  "current_leader_epoch": 1, "fetch_version": (await p.leader.vnode(DB, 0)).wal.next_version,
                                  "last_fetched_epoch": 1, "durable_version": 0})
        assert answer.high_watermark == (await p.leader.vnode(DB, 0)).wal.next_version
        assert answer.entries in (None, b"") and answer.error_code == ErrorCode.none
        assert p.led.told[(await p.leader.db_id(DB), 0)] >= 2  # every recorded fetch told, for the manager


async def test_a_longer_tail_of_an_old_epoch_is_cut_then_the_wals_are_equal(etcd: EtcdCluster,
                                                                             tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        ts = await _one_row_copied(p)
        shared = (await p.follower.vnode(DB, 0)).wal.next_version
        for k in range(3):  # the follower's own tail in epoch 1 (as a deposed leader's unreplicated writes)
            await p.follower.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 10 + k}, 9.0, 9)")
        tail = (await p.follower.vnode(DB, 0)).wal.next_version
        assert tail > shared
        p.fetcher.unfollow((DB, 0))
        await p.lead(DB, 1, 2)  # a new leader epoch, from the leader's end
        await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 1}, 2.0, 2) ({ts + 2}, 3.0, 3)")
        [answer] = await p.fetch({"db_id": uuid.UUID(await p.leader.db_id(DB)), "vgroup": 0,
                                  "current_leader_epoch": 2, "fetch_version": tail, "last_fetched_epoch": 1})
        assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_version) == (1, shared)
        assert answer.entries in (None, b"")
        view = p.led.views[(await p.leader.db_id(DB), 0)]
        assert 2 not in view.followers  # a diverging position is not recorded: it would overstate the follower's log
        await p.caught_up()
        await p.same_wals(DB, 1)
        assert [e.epoch for e in (await p.follower.vnode(DB, 0)).epochs.entries][-2:] == [1, 2]
        rows = (await p.follower.sql(f"SELECT current FROM {DB}.meters")).rows
        assert sorted(r[0] for r in rows) == [1.0, 2.0, 3.0]  # the cut tail's rows are gone


async def test_a_divergence_of_a_vnode_unfollowed_before_its_cut_runs_cuts_nothing(etcd: EtcdCluster, tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch
                                                                                    ) -> None:
    async with pair(etcd, tmp_path) as p:
        ts = await _one_row_copied(p)
        for k in range(3):  # the follower's own tail in epoch 1
            await p.follower.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 10 + k}, 9.0, 9)")
        fv = await p.follower.vnode(DB, 0)
        tail, epochs = fv.wal.next_version, fv.epochs.entries
        p.fetcher.unfollow((DB, 0))
        await p.lead(DB, 1, 2)
        loop, unfollowed = asyncio.get_running_loop(), threading.Event()
        point = replica_fetcher._truncation_point

        def unfollowed_meanwhile(*args: Any) -> int:  # (as the replica manager unfollows to take the vnode over)
            to = point(*args)
            loop.call_soon_threadsafe(lambda: (p.fetcher.unfollow((DB, 0)), unfollowed.set()))
            assert unfollowed.wait(WAIT_S)
            return to
        monkeypatch.setattr(replica_fetcher, "_truncation_point", unfollowed_meanwhile)
        await asyncio.wait_for(p.fetcher.fetch_once(), WAIT_S)
        assert unfollowed.is_set() and (fv.wal.next_version, fv.epochs.entries) == (tail, epochs)  # nothing cut


async def test_an_empty_epoch_at_the_followers_end_is_cut_and_the_follower_catches_up(etcd: EtcdCluster,
                                                                                      tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        ts = await _one_row_copied(p)
        await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 1}, 2.0, 2)")  # epoch 1, not fetched yet
        fv = await p.follower.vnode(DB, 0)
        end = fv.wal.next_version
        await p.follower.call(fv.epochs.begin, 2, end)  # node 2 led epoch 2 briefly, wrote nothing, was deposed
        p.fetcher.unfollow((DB, 0))
        await p.lead(DB, 1, 3)  # node 1 leads epoch 3 from its end (it holds more of epoch 1)
        assert await p.fetcher.fetch_once()  # diverges at (1, node 1's end of epoch 1): a cut to node 2's own end
        assert [e.epoch for e in fv.epochs.entries][-1] == 1  # the empty epoch 2 is cut, though the WAL is not
        await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 2}, 3.0, 3)")  # epoch 3
        await p.caught_up()  # (bounded: a follower diverging on every fetch never catches up)
        await p.same_wals(DB, 1)
        assert [e.epoch for e in fv.epochs.entries][-2:] == [1, 3]


async def test_an_empty_epoch_in_an_empty_wal_is_cut_and_the_follower_catches_up(etcd: EtcdCluster,
                                                                                 tmp_path: Path) -> None:
    """The sequence of a lease storm (issue 25): node 2, whose WAL of the vnode is still empty, is elected and
    begins epoch 2 at version 0, writes nothing and is deposed; node 1, holding entries of epoch 1, leads epoch 3.
    The fetch names epoch 2 (the cache's latest, as Kafka's follower names ``log.latestEpoch`` whatever its log
    holds), node 1 answers the divergence, the empty epoch is cut, and entries of epoch 1 are taken (naming no
    epoch for an empty WAL got them refused on every fetch: "older than the latest one here (2)")."""
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
        fv = await p.follower.vnode(DB, 0)
        assert fv.wal.next_version == fv.wal.first_version  # nothing here yet
        await p.lead(DB, 1, 1)
        ts = 1_700_000_000_000
        await p.leader.sql(f"INSERT INTO {DB}.d0 USING {DB}.meters TAGS ('a', 0) VALUES ({ts}, 1.0, 1)")  # epoch 1
        p.fetcher.unfollow((DB, 0))  # deposed before node 2 fetched anything
        await p.follower.call(fv.epochs.begin, 2, fv.wal.next_version)  # node 2 led epoch 2, wrote nothing
        await p.lead(DB, 1, 3)  # node 1 leads epoch 3 from its end
        assert await p.fetcher.fetch_once()  # diverges at (1, node 1's end of epoch 1): the empty epoch 2 is cut
        assert [e.epoch for e in fv.epochs.entries] == []
        await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 1}, 2.0, 2)")  # epoch 3
        await p.caught_up()
        await p.same_wals(DB, 1)
        assert [e.epoch for e in fv.epochs.entries] == [1, 3]
        assert (await p.follower.sql(f"SELECT current FROM {DB}.meters")).rows == \
            (await p.leader.sql(f"SELECT current FROM {DB}.meters")).rows


async def test_the_first_vnode_with_entries_keeps_to_max_bytes_but_gets_one_batch(etcd: EtcdCluster,
                                                                                 tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
        await p.lead(DB, 1, 1)
        for k in range(20):  # 20 batches (a subtable's meta entry and its row each)
            await p.leader.sql(f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('l', {k}) VALUES ({1_700_000_000_000 + k}, 1.0, 1)")
        part = {"db_id": uuid.UUID(await p.leader.db_id(DB)), "vgroup": 0, "current_leader_epoch": 1,
                "fetch_version": 0, "last_fetched_epoch": -1}

        async def batches(max_bytes: int) -> tuple[int, int]:
            """(entry bytes, whole batches) answered for ``max_bytes`` (``partition_max_bytes`` 1 MiB)."""
            [answer] = await p.fetch(part, max_bytes=max_bytes)
            assert answer.error_code == ErrorCode.none
            entries = parse(bytes(answer.entries), 0).entries
            assert not entries[-1].flags & FLAG_MORE
            return len(answer.entries), sum(1 for e in entries if not e.flags & FLAG_MORE)

        whole, count = await batches(1 << 20)
        assert count >= 20
        for max_bytes in (whole * 3 // count, whole // 2):  # about three batches' bytes, half of them
            size, count = await batches(max_bytes)
            assert 1 < count < 20 and size <= max_bytes  # (the request's limit, not only the partition's)
        assert (await batches(0))[1] == 1  # at least one batch whatever the limit

async def test_a_followers_lag_is_the_leaders_high_watermark_past_its_wal_end(etcd: EtcdCluster,
                                                                             tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
        await p.lead(DB, 1, 1)
        view = p.led.views[(await p.leader.db_id(DB), 0)]  # the ISR the leader alone: its HW does not wait for node 2
        view.on_state(replace(view.state, isr=(IsrMember(1, p.led.registered[1]),),
                              partition_epoch=view.state.partition_epoch + 1))
        for k in range(5):  # 5 batches (a subtable's meta entry and its row each)
            await p.leader.sql(f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('l', {k}) VALUES ({1_700_000_000_000 + k}, 1.0, 1)")
        leader_end = (await p.leader.vnode(DB, 0)).wal.next_version
        p.fetcher.partition_max_bytes = 0  # one batch an answer
        [followed] = p.fetcher.followed.values()
        assert await p.fetcher.fetch_once()
        end = (await p.follower.vnode(DB, 0)).wal.next_version
        assert 0 < end < leader_end and followed.lag == leader_end - end  # (Kafka's ConsumerLag: the HW - next offset)
        await p.caught_up()
        assert followed.lag == 0


async def test_a_cut_whose_epoch_file_the_disk_refused_is_finished_and_the_follower_catches_up(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with pair(etcd, tmp_path) as p:
        ts = await _one_row_copied(p)
        fv = await p.follower.vnode(DB, 0)
        await p.follower.call(fv.epochs.begin, 5, fv.wal.next_version)  # node 2 led epoch 5 and wrote a tail
        for k in range(3):
            await p.follower.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 10 + k}, 9.0, 9)")
        p.fetcher.unfollow((DB, 0))
        await p.lead(DB, 1, 6)
        await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({ts + 1}, 2.0, 2)")
        real, refused = leader_epochs.fileio.replace_file, []

        def refuse_once(path: Path, *args: Any, **kwargs: Any) -> None:
            if path.is_relative_to(p.follower.data_dir) and path.name == fv.epochs.path.name and not refused:
                refused.append(path)
                raise OSError(errno.ENOSPC, "No space left on device (injected once)")
            real(path, *args, **kwargs)

        monkeypatch.setattr(leader_epochs.fileio, "replace_file", refuse_once)
        assert not await p.fetcher.fetch_once()  # the cut: the WAL cut, the epoch file refused
        assert refused and fv.wal.held is not None
        followed = p.fetcher.followed[(DB, 0)]
        assert followed.error == ErrorCode.kafka_storage_error and followed.cut_unfinished
        p.fetcher.follow(FollowedVnode(DB, await p.leader.db_id(DB), 0, 6))  # anew (due now): the cut is kept
        await p.caught_up()  # the cut finished first, then fetched as any vnode
        assert fv.wal.held is None and not p.fetcher.followed[(DB, 0)].cut_unfinished
        await p.same_wals(DB, 1)
        assert [e.epoch for e in fv.epochs.entries][-2:] == [1, 6]

async def test_every_error_code(etcd: EtcdCluster, tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 2 {WAL}", STABLE)
        for side in (p.leader, p.follower):
            await side.call(side.engine.create_kafka_topic, TOPIC, 1, {"segment.bytes": str(1 << 20)})
        db_id = uuid.UUID(await p.leader.db_id(DB))
        await p.lead(DB, 1, 3)  # vgroup 1 is not led here
        await p.leader.sql(f"INSERT INTO {DB}.d0 USING {DB}.meters TAGS ('a', 0) VALUES (1700000000000, 1.0, 1)")
        end = (await p.leader.vnode(DB, 0)).wal.next_version

        async def code(**fields: Any) -> int:
            part = {"db_id": db_id, "vgroup": 0, "current_leader_epoch": 3, "fetch_version": 0, **fields}
            [answer] = await p.fetch({k: v for k, v in part.items() if k in _PART_FIELDS},
                                     **{k: v for k, v in fields.items() if k not in _PART_FIELDS})
            return int(answer.error_code)

        assert await code() == ErrorCode.none
        assert await code(db_id=uuid.uuid4()) == ErrorCode.not_leader_or_follower
        assert await code(vgroup=1) == ErrorCode.not_leader_or_follower
        assert await code(current_leader_epoch=2) == ErrorCode.fenced_leader_epoch
        assert await code(current_leader_epoch=4) == ErrorCode.unknown_leader_epoch
        assert await code(fetch_version=end + 1) == ErrorCode.offset_out_of_range
        assert await code(last_fetched_epoch=4) == ErrorCode.offset_out_of_range  # an epoch the leader cannot end
        assert await code(broker_epoch=p.led.registered[2] - 1) == ErrorCode.stale_broker_epoch
        assert await code(broker_epoch=p.led.registered[2] - 1, fetch_version=end + 1,  # checked before divergence
                          last_fetched_epoch=3) == ErrorCode.stale_broker_epoch
        assert await code(replica_id=7) == ErrorCode.cluster_authorization_failed  # node 2 is not node 7
        p.broker.led = None  # a node leading nothing with followers (every node before step 5)
        assert await code() == ErrorCode.not_leader_or_follower
        p.broker.led = p.led
        view = p.led.views[(db_id.hex, 0)]
        view.on_state(PartitionState((1, 2), 2, 4, 9, view.state.isr, (), 1))  # deposed: node 2 leads epoch 4
        assert await code() == ErrorCode.not_leader_or_follower

        native = (await p.leader.call(p.leader.engine.topic, TOPIC)).db  # two 1 MiB segments, the first deleted
        await p.lead(native, 1, 1)
        for k in range(3):
            batch = encode_batch(0, [k], [None], [b"x" * (600 << 10)])
            await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [batch])
        wal = (await p.leader.vnode(native, 0)).wal
        await p.leader.call(wal.delete_oldest, 1)
        assert wal.first_version > 0
        [below] = await p.fetch({"db_id": uuid.UUID(await p.leader.db_id(native)), "vgroup": 0,
                                 "current_leader_epoch": 1, "fetch_version": 0, "partition_max_bytes": 1})
        assert (below.error_code, below.log_start_version) == (ErrorCode.offset_out_of_range, wal.first_version)


async def _replicated_native(p: Pair) -> tuple[str, str]:
    """:data:`TOPIC` (1 MiB segments) replicated on both nodes as a cluster's catalog makes it (its copies start with
    no epoch), led by node 1 in epoch 1: (its database, the database's id)."""
    for side in (p.leader, p.follower):
        await side.call(side.engine.cluster_mode, True)
        await side.call(side.engine.set_dnodes, (), {1: None, 2: None})
    _, records = await p.leader.call(p.leader.engine.staged, p.leader.engine.create_kafka_topic, TOPIC, 1,
                                     {"segment.bytes": str(1 << 20)}, {}, None, None, 2)
    for seq, record in enumerate(records, 1):
        for side in (p.leader, p.follower):
            assert await side.call(side.engine.apply_shared, seq, record)
    native = (await p.leader.call(p.leader.engine.topic, TOPIC)).db
    await p.lead(native, 1, 1)
    (await p.leader.vnode(native, 0)).wal.leading = True
    return native, await p.leader.db_id(native)


async def _native_below_log_start(p: Pair) -> tuple[str, str, int]:
    """:func:`_replicated_native`, its first batch copied to node 2, which then stops fetching it while the leader
    appends three 600 KiB batches (the last an idempotent producer's) and retention deletes its first segment: (its
    database, the database's id, the leader's log start version), node 2's copy ending below it."""
    native, db_id = await _replicated_native(p)
    await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [encode_batch(0, [1], [None], [b"first"])])
    await p.caught_up()
    p.fetcher.unfollow((native, 0))
    for k in range(3):
        producer = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0} if k == 2 else {}
        batch = encode_batch(0, [k], [None], [b"x" * (600 << 10)], **producer)
        await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [batch])
    vnode = await p.leader.vnode(native, 0)
    wal = vnode.wal
    await p.leader.call(wal.delete_oldest, 1)  # (as retention does: Vnode.apply_retention, then the offsets trimmed)
    await p.leader.call(p.leader.engine.views.trim_to_retention, vnode)
    assert wal.first_version > (await p.follower.vnode(native, 0)).wal.next_version
    return native, db_id, wal.first_version


def _offsets(engine: Engine) -> tuple[int, int, list[int], list[int]]:
    idx = engine.store.indexes[(TOPIC, 0)]
    return idx.start_offset, idx.end_offset, list(idx.offsets), list(idx.versions)


async def test_a_copy_below_the_leaders_log_start_is_emptied_and_starts_there(
        etcd: EtcdCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's ``truncateFullyAndStartAt``: a Kafka-native partition's copy that ends below its leader's log start
    (OFFSET_OUT_OF_RANGE with ``log_start_version``) is emptied and starts there; it then holds the leader's log byte
    for byte from that version, the same offsets, the epoch of what it copied from there, the producer state of the
    batches it holds, and a restart opens it so."""
    async with pair(etcd, tmp_path) as p:
        native, db_id, start = await _native_below_log_start(p)
        p.fetcher.follow(FollowedVnode(native, db_id, 0, 1))
        with caplog.at_level(logging.WARNING, "walgate.replication"):
            await p.caught_up()
        assert f"it starts at version {start}" in caplog.text
        copy = await p.follower.vnode(native, 0)
        assert (copy.wal.first_version, [(e.epoch, e.start_offset) for e in copy.epochs.entries]) == (start, [(1, start)])
        await p.same_wals(native, 1)
        assert _offsets(p.follower.engine) == _offsets(p.leader.engine)
        active = [(a.producer_id, a.last_sequence) for a in
                  await p.follower.call(p.follower.engine.native.active_producers, TOPIC, 0)]
        assert active == [(7, 0)]
        assert p.fetcher.followed[(native, 0)].high_watermark >= start

        await p.follower.call(p.follower.engine.close)  # a restart opens the copy where it starts
        p.follower.engine = await p.follower.call(Engine.open, p.follower.data_dir / "data", node_id=2)
        copy = await p.follower.vnode(native, 0)
        assert (copy.wal.first_version, copy.wal.next_version) == (start, (await p.leader.vnode(native, 0)).wal.next_version)
        assert _offsets(p.follower.engine) == _offsets(p.leader.engine)
        assert p.follower.engine.damage_log.records == []


async def test_a_copy_the_disk_refuses_to_start_anew_is_started_at_a_later_fetch(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delete of the old copy refused (EIO): the vnode is left closed, the fetcher keeps its error and starts it
    at a later fetch, once the disk takes it."""
    async with pair(etcd, tmp_path) as p:
        native, db_id, start = await _native_below_log_start(p)
        p.fetcher.follow(FollowedVnode(native, db_id, 0, 1))
        assert await p.fetcher.fetch_once()  # the answer: below the log start
        followed = p.fetcher.followed[(native, 0)]
        assert followed.start_at == start

        def refused(_path: Path, _syncs: Any) -> None:
            raise OSError(errno.EIO, "Input/output error")
        monkeypatch.setattr("walgate.storage.engine.delete_vnode_dir", refused)
        assert not await p.fetcher.fetch_once()
        assert (followed.error, followed.start_at) == (ErrorCode.kafka_storage_error, start)
        monkeypatch.undo()
        followed.retry_at = 0.0
        assert await p.fetcher.fetch_once() and followed.start_at is None
        await p.caught_up()
        await p.same_wals(native, 1)


async def test_a_follower_takes_its_leaders_log_start_and_reports_its_own(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """WalFetch v1 (KIP-107): DeleteRecords on the leader moves the follower's log start with the next answer (at
    most to what it holds, durably: a restart keeps it), and the fetch after reports it, which the leader's view
    takes as the low watermark DeleteRecords waits for; with a leader whose registration advertises no v1 (an older
    release's), v0 is sent and nothing of it is exchanged, nor looked up on either side."""
    async with pair(etcd, tmp_path) as p:
        native, db_id = await _replicated_native(p)
        for k in range(5):
            await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [encode_batch(0, [k], [None], [b"%d" % k])])
        await p.caught_up()
        assert p.links.version(1, 10001) == 1
        view = p.led.views[(db_id, 0)]
        topic_id = (await p.leader.call(p.leader.engine.views.topic_id, TOPIC)).hex
        assert view.low_watermark(topic_id, 0, lambda _: True) == 0
        assert await p.leader.call(p.leader.engine.partitions.delete_records, TOPIC, 0, 3) == 3
        assert await p.fetcher.fetch_once()
        assert p.follower.engine.store.indexes[(TOPIC, 0)].start_offset == 3
        assert await p.fetcher.fetch_once()
        assert view.low_watermark(topic_id, 3, lambda _: True) == 3

        monkeypatch.setattr(p.links, "version", lambda node, api_key: 0)  # a leader of an older release

        def not_asked(db: str, index: int) -> dict[uuid.UUID, int]:
            raise AssertionError(f"log starts of vnode {index} of {db} looked up for WalFetch v0, which has none")
        for side in (p.leader, p.follower):  # (neither side looks its log starts up for v0)
            monkeypatch.setattr(side.engine.views, "log_starts", not_asked)
        assert await p.leader.call(p.leader.engine.partitions.delete_records, TOPIC, 0, 4) == 4
        assert await p.fetcher.fetch_once() and await p.fetcher.fetch_once()
        assert p.follower.engine.store.indexes[(TOPIC, 0)].start_offset == 3
        assert view.followers[2].log_starts is None and view.low_watermark(topic_id, 4, lambda _: True) == 4
        monkeypatch.undo()

        await p.follower.call(p.follower.engine.close)  # the log start it took is durable
        p.follower.engine = await p.follower.call(Engine.open, p.follower.data_dir / "data", node_id=2)
        assert p.follower.engine.store.indexes[(TOPIC, 0)].start_offset == 3


async def _sql_below_log_start(p: Pair) -> tuple[str, Any]:
    """``DB`` (1 MiB segments, ``REPLICA 3`` on nodes 1-3, two of them here, as a cluster's catalog makes it, with a TDengine topic
    ``rows``) led by node 1 in epoch 1, unfollowed while rows and subtables fill its first segment, which is then
    deleted, then a subtable made and one dropped; followed again: (its id, the leader's WAL)."""
    for side in (p.leader, p.follower):
        await side.call(side.engine.cluster_mode, True)
        await side.call(side.engine.set_dnodes, (), {1: None, 2: None, 3: None})
    seq = 0
    for statement in (f"CREATE DATABASE {DB} VGROUPS 1 REPLICA 3 WAL_SEGMENT_SIZE 1 {WAL}", STABLE,
                      f"CREATE TOPIC rows AS SELECT ts, current FROM {DB}.meters WHERE g > 0"):
        _, records = await p.leader.call(p.leader.engine.staged, p.leader.engine.execute, statement)
        for record in records:
            seq += 1
            for side in (p.leader, p.follower):
                assert await side.call(side.engine.apply_shared, seq, record)
    sql_id = await p.leader.db_id(DB)
    await p.lead(DB, 1, 1)
    (await p.leader.vnode(DB, 0)).wal.leading = True
    leader_wal = (await p.leader.vnode(DB, 0)).wal
    p.fetcher.unfollow((DB, 0))
    rng = random.Random(5)
    for k in range(40):  # 1 MiB segments: until the first is sealed
        rows = " ".join(f"({1_700_000_000_000 + k * 5000 + i}, {rng.random()}, {rng.getrandbits(31)})"
                        for i in range(5000))
        await p.leader.sql(f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('a', {k}) VALUES {rows}")
        if len(leader_wal.segments) > 1:
            break
    await p.leader.call((await p.leader.vnode(DB, 0)).checkpoint)
    await p.leader.call(leader_wal.delete_oldest, 1)
    assert leader_wal.first_version > 0
    await p.leader.sql(f"INSERT INTO {DB}.late USING {DB}.meters TAGS ('b', 99) VALUES (1700000000000, 1.0, 1)")
    await p.leader.sql(f"DROP TABLE {DB}.d0")
    p.fetcher.follow(FollowedVnode(DB, sql_id, 0, 1))
    return sql_id, leader_wal


async def test_an_sql_vgroups_copy_below_the_leaders_log_start_is_restored_from_its_snapshot(
        etcd: EtcdCluster, tmp_path: Path) -> None:
    """Its tables and topic offsets below the log start are not in the leader's WAL: the follower pages the leader's
    snapshot (VnodeSnapshot), installs it and fetches from the log start, reporting no durable end until its WAL
    reaches the snapshot's end (never in the ISR meanwhile; a divergence below that end has it restored anew); its
    tables, its topic's log start, end offset and index records are then the leader's, its WAL's entries from the log
    start the leader's, its restoring marker gone."""
    async with pair(etcd, tmp_path) as p:
        sql_id, leader_wal = await _sql_below_log_start(p)
        start = leader_wal.first_version
        p.fetcher.partition_max_bytes = 1  # (one batch a fetch: the restore seen before its end)
        assert await p.fetcher.fetch_once()  # below the log start
        assert await p.fetcher.fetch_once()  # restored, its first batch fetched
        restoring = await p.follower.vnode(DB, 0)
        assert restoring.restoring is not None and restoring.wal.next_version < restoring.restoring[1]
        assert p.fetcher.followed[(DB, 0)].restoring  # (its followed epoch None: serving no consumer)
        view = p.led.views[(sql_id, 0)]
        assert view.followers[2].durable_end == -1 and not can_join_isr(view.followers[2], view.hw, 0)
        followed = p.fetcher.followed[(DB, 0)]  # a divergence below the snapshot's end (a leader that lost it):
        diverging = SimpleNamespace(error_code=0, log_start_version=start,
                                    diverging_epoch=SimpleNamespace(epoch=1, end_version=start + 1))
        position = replica_fetcher._Position(restoring.wal.next_version, 1, restoring.wal.durable_version,
                                             restoring=True)
        assert await p.fetcher._apply(followed, position, diverging, 1) == ErrorCode.none
        assert followed.start_at == start and not followed.cut_unfinished  # nothing cut: restored anew next
        assert (await p.follower.vnode(DB, 0)).wal.next_version == restoring.wal.next_version
        p.fetcher.partition_max_bytes = 1 << 20
        await p.caught_up()
        assert await p.fetcher.fetch_once() and not p.fetcher.followed[(DB, 0)].restoring
        follower, leader = await p.follower.vnode(DB, 0), await p.leader.vnode(DB, 0)
        assert follower is not restoring  # (installed anew after the divergence)
        assert follower.restoring is None and follower.wal.first_version == start
        assert sorted((t.name, t.tags, t.dropped) for t in follower.store.all()) == sorted(
            (t.name, t.tags, t.dropped) for t in leader.store.all())
        assert follower.get("d0").dropped and follower.get("late") is not None  # type: ignore[union-attr]

        def entries(wal: Any) -> list[tuple[int, bytes]]:
            return [(e.version, bytes(e.body)) for e in wal.read_from(start) if e.version >= start]

        assert await p.follower.call(entries, follower.wal) == await p.leader.call(entries, leader_wal)
        assert p.fetcher.followed[(DB, 0)].stopped is None and p.broker.held_snapshots

        def offsets(engine: Engine) -> tuple[int, int, list[tuple[int, int, int]]]:
            idx = engine.store.indexes[("rows", 0)]
            return idx.start_offset, idx.end_offset, [
                (o, v, c) for o, v, c in zip(idx.offsets, idx.versions, idx.counts) if v >= start]

        got, want = await p.follower.call(offsets, p.follower.engine), await p.leader.call(offsets, p.leader.engine)
        assert got[1:] == want[1:] and want[1] > 0 and want[2]
        assert got[0] == want[2][0][0] > 0  # (its log start: the first offset it holds; the leader's index still
        # holds the records of the segment this test deleted under it, which retention would have trimmed)


async def test_an_sql_vgroups_copy_below_the_log_start_of_a_leader_without_snapshots_is_no_longer_fetched(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader of an older release (its registration does not advertise VnodeSnapshot): the copy is left as it is,
    the vnode no longer fetched, and says why."""
    async with pair(etcd, tmp_path) as p:
        real = p.links.version
        monkeypatch.setattr(p.links, "version", lambda node, key: -1 if key == 10002 else real(node, key))
        await _sql_below_log_start(p)
        assert await p.fetcher.fetch_once()
        assert not await p.fetcher.fetch_once()
        assert "does not answer VnodeSnapshot" in (p.fetcher.followed[(DB, 0)].stopped or "")
        assert (await p.follower.vnode(DB, 0)).wal.next_version == 0  # nothing deleted


async def test_a_node_fetches_only_as_itself(etcd: EtcdCluster, tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
        await p.lead(DB, 1, 1)
        await p.leader.sql(f"INSERT INTO {DB}.d0 USING {DB}.meters TAGS ('l', 0) VALUES (1700000000000, 1.0, 1)")
        (tmp_path / "n3").mkdir()
        third = ClusterMember(etcd.spec, "walgate", 3, tmp_path / "n3", SESSION_MS)
        await third.kafka_cluster_id()
        await third.join(("PLAINTEXT://127.0.0.1:1",))
        await third.refresh()
        assert third.registration is not None and third.registration.epoch is not None
        links3 = NodeLinks(third, "PLAINTEXT", None, timeout_s=WAIT_S)
        try:
            db_id = uuid.UUID(await p.leader.db_id(DB))
            end = (await p.leader.vnode(DB, 0)).wal.next_version
            part = {"db_id": db_id, "vgroup": 0, "current_leader_epoch": 1, "fetch_version": end,
                    "last_fetched_epoch": 1, "durable_version": end}
            [posing] = await p.fetch(part, node=links3)  # node 3 says it is replica 2, holding everything durably
            assert posing.error_code == ErrorCode.cluster_authorization_failed
            view = p.led.views[(db_id.hex, 0)]
            assert 2 not in view.followers and view.hw < end  # neither replica 2's position nor the hw moved
            [itself] = await p.fetch(part, node=links3, replica_id=3, broker_epoch=third.registration.epoch)
            assert itself.error_code == ErrorCode.not_leader_or_follower  # as itself: not a replica of the vnode
            [real] = await p.fetch(part)
            assert real.error_code == ErrorCode.none
        finally:
            links3.close()
            await third.leave()

async def _until(condition: Any, what: str) -> None:
    """Poll the async ``condition`` until it holds, for at most ``WAIT_S``."""
    for _ in range(int(WAIT_S * 100)):
        if await condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_vnode_with_an_error_is_delayed_alone_and_the_others_are_fetched_on(etcd: EtcdCluster,
                                                                                    tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 2 {WAL}", STABLE,
                    f"CREATE TABLE {DB}.d0 USING {DB}.meters TAGS ('l', 0)")
        ends = [(await p.leader.vnode(DB, i)).wal.next_version for i in range(2)]
        good = 0 if ends[0] > ends[1] else 1  # the vnode holding d0
        await p.lead(DB, 2, 1)
        await p.caught_up()
        p.fetcher.follow(FollowedVnode(DB, await p.leader.db_id(DB), 1 - good, 2))  # node 1 leads 1: UNKNOWN_LEADER_EPOCH
        p.fetcher.max_wait_ms, p.fetcher.backoff_s = 500, 10 * WAIT_S  # (a whole fetcher backing off: never caught up)
        bad = p.fetcher.followed[(DB, 1 - good)]
        running = asyncio.create_task(p.fetcher.run())
        try:
            async def erred() -> bool:
                return bad.error == ErrorCode.unknown_leader_epoch
            await _until(erred, "the vnode followed in the wrong epoch errs")
            for k in range(3):
                await p.leader.sql(f"INSERT INTO {DB}.d0 VALUES ({1_700_000_000_000 + k}, 1.0, 1)")
            want = (await p.leader.vnode(DB, good)).wal.next_version

            async def copied() -> bool:
                return bool((await p.follower.vnode(DB, good)).wal.next_version >= want)
            await _until(copied, "the healthy vnode's rows copied while the other is delayed")
            assert bad.retry_at > asyncio.get_running_loop().time()  # still left out
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

_PART_FIELDS = frozenset(f.name for f in fields_of(PARTITION))


async def test_a_long_poll_wakes_on_an_append_to_a_vnode_with_no_topic_and_the_fetcher_follows(etcd: EtcdCluster, tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        async def parked(waiting: bool) -> None:
            """Until a fetch is (``waiting``) or is no longer parked on the leader's vnode: a condition, polled."""
            for _ in range(int(WAIT_S * 100)):
                if p.leader.wakeups.waiting_on_vnode(DB, 0) == waiting:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError(f"never {'' if waiting else 'not '}waiting on the vnode")

        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
        await p.lead(DB, 1, 1)
        db_id = uuid.UUID(await p.leader.db_id(DB))
        end = (await p.leader.vnode(DB, 0)).wal.next_version
        began = time.monotonic()
        waiting = asyncio.create_task(p.fetch({"db_id": db_id, "vgroup": 0, "current_leader_epoch": 1,
                                               "fetch_version": end, "last_fetched_epoch": 1},
                                              max_wait_ms=int(WAIT_S * 2000)))
        await parked(True)  # the fetch is parked on the vnode (a condition, not a sleep)
        assert not waiting.done()
        await p.leader.sql(f"CREATE TABLE {DB}.t0 USING {DB}.meters TAGS ('a', 0)")  # a meta entry, no topic
        [answer] = await asyncio.wait_for(waiting, WAIT_S)
        assert answer.error_code == ErrorCode.none and answer.entries and answer.entries_epoch == 1
        assert time.monotonic() - began < WAIT_S  # woken, far below its max wait

        p.fetcher.max_wait_ms = 500  # the fetcher's own loop, long-polling, keeps the follower's copy
        running = asyncio.create_task(p.fetcher.run())
        try:
            await p.leader.sql(f"INSERT INTO {DB}.t0 VALUES (1700000000000, 1.0, 1)")
            for _ in range(int(WAIT_S * 20)):
                if await p.follower.wal_bytes(DB, 0) == await p.leader.wal_bytes(DB, 0):
                    break
                await asyncio.sleep(0.05)
            await p.same_wals(DB, 1)
            assert not running.done()
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

        await parked(False)  # the cancelled loop's last fetch, parked for its 500 ms, is over
        p.fetcher.max_wait_ms = int(WAIT_S * 2000)  # an answer for a vnode followed anew while it was out: dropped
        stale = asyncio.create_task(p.fetcher.fetch_once())
        await parked(True)
        assert not stale.done()
        p.fetcher.follow(FollowedVnode(DB, db_id.hex, 0, 1))
        await p.leader.sql(f"INSERT INTO {DB}.t0 VALUES (1700000000001, 2.0, 2)")
        assert await asyncio.wait_for(stale, WAIT_S)
        assert (await p.follower.vnode(DB, 0)).wal.next_version < (await p.leader.vnode(DB, 0)).wal.next_version
        p.fetcher.max_wait_ms = 0
        await p.caught_up()  # the new follow fetches it
        await p.same_wals(DB, 1)


async def test_a_client_is_refused_and_apiversions_does_not_list_it(etcd: EtcdCluster, tmp_path: Path) -> None:
    assert 10001 not in advertised()
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}")
        await p.lead(DB, 1, 1)
        request = REQUEST(replica_id=2, broker_epoch=p.led.registered[2], max_wait=datetime.timedelta(0),
                          min_bytes=1, partitions=(PARTITION(db_id=uuid.UUID(await p.leader.db_id(DB)), vgroup=0,
                                                             current_leader_epoch=1, fetch_version=0,
                                                             partition_max_bytes=1 << 20),))
        reader, writer = await asyncio.open_connection("127.0.0.1", p.port)  # no SASL: a client, not a node
        try:
            writer.write(encode_request(10001, 0, 5, "walgate-node-2", request))  # (a client id is no credential)
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), WAIT_S))[0]
            frame = await reader.readexactly(size)
        finally:
            writer.close()
        cls: Any = response_class(10001, 0)
        _, start = entity_reader(cls.__header_schema__)(frame, 0)
        [answer] = entity_reader(cls)(frame, start)[0].partitions
        assert answer.error_code == ErrorCode.cluster_authorization_failed and answer.entries is None


ANSWERED = {ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
            ErrorCode.unknown_leader_epoch, ErrorCode.offset_out_of_range, ErrorCode.stale_broker_epoch}
FUZZ_REQUESTS = int(os.environ.get("WALGATE_FUZZ_WAL_FETCH", "60"))  # (more: a longer run)


async def test_fuzzed_fetches_of_a_node_get_whole_batches_or_an_error(etcd: EtcdCluster, tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Seeded: any field values from a node (vnodes known or not, versions inside entries, past the end, epochs
    old and new, byte limits from 0 up, v1's log starts of any topic and offset) are answered with a code of the handler's and, when entries are sent,
    whole batches continuing ``fetch_version`` of one epoch, never past the next epoch's start; no ERROR logged."""
    rng = random.Random(25)
    async with pair(etcd, tmp_path) as p:
        await _both(p, f"CREATE DATABASE {DB} VGROUPS 2 {WAL}", STABLE)
        await p.lead(DB, 2, 1)
        ts = 1_700_000_000_000
        for k in range(4):
            await p.leader.sql(f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('l', {k}) VALUES ({ts + k}, 1.0, 1)")
        await p.lead(DB, 2, 2)
        for k in range(4):
            await p.leader.sql(f"INSERT INTO {DB}.d{k} VALUES ({ts + 10 + k}, 2.0, 2)")
        db_id = uuid.UUID(await p.leader.db_id(DB))
        ends = [(await p.leader.vnode(DB, i)).wal.next_version for i in range(2)]
        seen: Counter[str] = Counter()
        for _ in range(FUZZ_REQUESTS):
            parts = [{"db_id": rng.choice([db_id] * 4 + [uuid.uuid4()]), "vgroup": rng.choice([0, 0, 1, 1, -1, 2]),
                      "current_leader_epoch": rng.choice([2, 2, 2, 1, 3, -1]),
                      "fetch_version": rng.choice([rng.randint(0, max(ends)), -1, max(ends) + 1]),
                      "last_fetched_epoch": rng.randint(-1, 3), "durable_version": rng.randint(-1, max(ends)),
                      "partition_max_bytes": rng.choice([0, 1, 100, 1 << 20])} for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.5:  # v1: log starts reported (any topic id, any offset)
                for part in parts:
                    part["log_starts"] = tuple(LOG_START(topic_id=uuid.uuid4(), start_offset=rng.randint(-5, 1 << 40))
                                               for _ in range(rng.randint(0, 2)))
            answers = await p.fetch(*parts, max_bytes=rng.choice([0, 1, 500, 1 << 20]),
                                    broker_epoch=p.led.registered[2] + rng.choice([0, 0, 0, 1, -1]))
            assert len(answers) == len(parts)
            for part, answer in zip(parts, answers):
                assert answer.error_code in ANSWERED, (part, answer)
                seen[ErrorCode(answer.error_code).name] += 1
                seen["diverging"] += answer.diverging_epoch.epoch != -1 or answer.diverging_epoch.end_version != -1
                if answer.entries:
                    seen["entries"] += 1
                    entries = parse(bytes(answer.entries), part["fetch_version"]).entries
                    vnode = await p.leader.vnode(DB, part["vgroup"])
                    epoch = max(e.epoch for e in vnode.epochs.entries if e.start_offset <= part["fetch_version"])
                    assert answer.entries_epoch == epoch
                    last = entries[-1].version + entries[-1].count
                    assert all(not part["fetch_version"] < e.start_offset < last for e in vnode.epochs.entries)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert min(seen["entries"], seen["diverging"], seen["none"], seen["offset_out_of_range"],
                   seen["not_leader_or_follower"], seen["fenced_leader_epoch"]) > 0, seen


async def test_a_fetcher_cancelled_in_any_loop_iteration_of_a_fetch_ends(etcd: EtcdCluster, tmp_path: Path) -> None:
    """A running fetcher cancelled ``k`` event-loop iterations after the leader read its fetch (``k`` swept over the
    answer's way back, its arrival included; twice) ends at once, cancelled: Python 3.11's
    ``asyncio.wait_for``, which its node link's call was bounded with, returned the answer instead when the cancel
    came in the iteration the answer completed in (cpython gh-86296), so the fetcher fetched on and its replica
    manager's stop waited for it forever (the rare hang of test_replicas.py under load)."""
    async with pair(etcd, tmp_path) as p:
        await _one_row_copied(p)
        for k in [k for _ in range(2) for k in range(SPINS)]:
            told = p.led.told.total()
            running = asyncio.create_task(p.fetcher.run())
            try:
                deadline = time.monotonic() + WAIT_S
                while p.led.told.total() == told:  # (each iteration looked at: the anchor of the sweep)
                    assert time.monotonic() < deadline, "the leader never read a fetch"
                    await asyncio.sleep(0)
                for _ in range(k):
                    await asyncio.sleep(0)
                running.cancel()
                await asyncio.wait({running}, timeout=5.0)
                assert running.cancelled(), f"cancelled {k} loop iterations after the leader read, it fetched on"
            finally:
                running.cancel()  # (again, when it fetched on: bounded, it may swallow this one too)
                await asyncio.wait({running}, timeout=5.0)


@pytest.mark.parametrize("side", ["leader", "follower"])
async def test_a_throttled_catch_up_copies_no_more_than_the_rate_allows(etcd: EtcdCluster, tmp_path: Path,
                                                                        side: str) -> None:
    """KIP-73 over the wire: node 2, outside the ISR, catches up on ~800 kB of a Kafka-native partition whose
    throttled-replica lists name it (leader side: ``0:1``, follower side: ``0:2``) under a 200 kB/s rate on one side.
    Every entry byte answered (leader) or copied (follower) is recorded in that side's quota, the partition is held
    back at least once, and the bytes by any moment stay within the rate over the time since the first plus one
    answer (an upper bound a loaded machine cannot break: it only slows the catch-up); the WALs end equal."""
    rate, answer = 200_000, 64 << 10
    async with pair(etcd, tmp_path) as p:
        configs = {"leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "0:2",
                   "flush.messages": "1"}  # (every append durable: the high watermark is the leader's end)
        node, throttled = (1, p.leader) if side == "leader" else (2, p.follower)
        for s in (p.leader, p.follower):
            await s.call(s.engine.create_kafka_topic, TOPIC, 1, configs)
        await throttled.call(throttled.engine.set_resource_configs, "broker", str(node),
                             {f"{side}.replication.throttled.rate": str(rate)})
        for s in (p.leader, p.follower):
            await s.call(s.engine.publish_topics)
        db = (await p.leader.call(p.leader.engine.topic, TOPIC)).db
        db_id = await p.leader.db_id(db)
        vnode = await p.leader.vnode(db, 0)
        await p.leader.call(vnode.epochs.begin, 1, vnode.wal.next_version)
        alone = PartitionState((1, 2), 1, 1, 1, (IsrMember(1, p.led.registered[1]),), (), 1)  # node 2 outside the ISR
        p.led.views[(db_id, 0)] = LeaderView(1, p.led.registered[1], alone, vnode.wal.next_version, 0,
                                             int(time.monotonic() * 1000), 30_000)
        traffic = {1: ReplicationTraffic(1, p.leader.engine.topics, lambda *_: None),
                   2: ReplicationTraffic(2, p.follower.engine.topics, lambda *_: None)}
        p.broker.replication_traffic, p.fetcher.traffic = traffic[1], traffic[2]
        p.fetcher.partition_max_bytes = answer
        ts = 1_700_000_000_000
        for k in range(50):
            batch = encode_batch(0, [ts + k], [b"k%d" % k], [bytes([k]) * 16_000])
            await p.leader.call(p.leader.engine.append_batches, TOPIC, 0, [batch])
        recorded: list[tuple[float, int]] = []
        held: list[bool] = []
        quota = traffic[node].leader if side == "leader" else traffic[node].follower
        record, exceeded = quota.record, quota.exceeded

        def watched_record(size: int, now: float) -> None:
            recorded.append((now, size))
            record(size, now)

        def watched_exceeded(now: float) -> bool:
            held.append(exceeded(now))
            return held[-1]
        quota.record, quota.exceeded = watched_record, watched_exceeded  # type: ignore[method-assign]
        p.fetcher.follow(FollowedVnode(db, db_id, 0, 1))
        task = asyncio.create_task(p.fetcher.run())
        try:
            deadline = time.monotonic() + 120
            end = (await p.leader.vnode(db, 0)).wal.next_version
            while (await p.follower.vnode(db, 0)).wal.next_version < end or not p.fetcher.followed[(db, 0)].in_sync:
                assert time.monotonic() < deadline, "the throttled follower never caught up"
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await p.same_wals(db, 1)  # (caught up, its last answer counted: in sync from it on)
        copied = sum(size for _, size in recorded)
        assert copied == (traffic[1].counts.replication_out if side == "leader" else traffic[2].counts.replication_in)
        assert copied >= 800_000 and any(held)
        first, total = recorded[0][0], 0
        for now, size in recorded:
            total += size
            assert total <= rate * max(now - first, 1.0) + answer, (now - first, total)
