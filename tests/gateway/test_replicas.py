"""The replica manager (:mod:`walgate.gateway.replicas`, docs/plans/replication-wiring.md step 5): three in-process
nodes over a real one-member etcd, each with its own engine, data dir, WalFetch handlers on a real socket and a
manager following the partition states; the followers fetch over their SCRAM-authenticated node links.

What holds: a partition state written in etcd naming node 1 leader and nodes 2 and 3 followers makes the followers'
WALs byte-equal to the leader's; the leader's visible version is the high watermark, which passes a write only once
every ISR member holds it durably (followers stopped: not visible; back: visible), and a follower's is the high
watermark its leader's answers carried; a stopped follower leaves the ISR in etcd after ``replica.lag.time.max.ms``
and rejoins it once fetching again (KIP-497, KIP-903 under its registered broker epoch); a leader deposed in etcd
follows the new leader, answers WalFetch NOT_LEADER_OR_FOLLOWER, and the new leader's epoch is begun at its end.
Produce (raw v9 requests on the leader's socket, a Kafka-native topic): acks=all answered only once both followers
hold the write durably (checked at the moment of the answer), REQUEST_TIMED_OUT while they do not fetch, acks=1 at
once; NOT_ENOUGH_REPLICAS before the append once the ISR in etcd shrank below ``min.insync.replicas``, answered again
once a follower rejoined; a deposed leader answers NOT_LEADER_OR_FOLLOWER, to the write waiting too. A takeover
whose leader epoch the disk refused to record is logged (no traceback) and retried until it leads. A former leader
whose engine was reopened (its HW unknown) truncates the tail it wrote alone and serves only the new leader's HW; an
ISR change etcd could not take is proposed again (one WARNING); a cut left unfinished (the disk refused the epoch
file) is finished when the vnode is then led, or followed anew. A deposed leader whose uncommitted tail holds a DROP
STABLE's meta entry cuts it, catches up and rejoins the ISR (rv4 R1); a database dropped and made again under its
name, its new state applied before the catalog change that lets the old one go, stays led and followed (rv4 R5). A replica's high watermark checkpoint is written
while it runs and at its stop (a write the disk refused logged once, then written again); reopened, it serves from
it (the log start when the file is damaged: reported).

Every wait is bounded (:func:`until`, :func:`bounded`; a test's whole body by :data:`BODY_S`): a hang fails naming
what it waited for, the await it hung in in the traceback, instead of holding the suite (one did, rarely, under load:
a replica manager's stop waited forever for a fetcher whose cancellation Python 3.11's ``asyncio.wait_for`` had
swallowed, test_wal_fetch.py's ``test_a_fetcher_cancelled_in_any_loop_iteration_of_a_fetch_ends``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.etcd_cluster import EtcdCluster, etcd_cluster
from tests.gateway.test_wal_fetch import PARTITION, REQUEST, SESSION_MS, STABLE, WAL, Side, _side
from walgate.cluster.etcd import tx
from walgate.cluster.model import ControlPlaneRefused, ControlPlaneUnavailable
from walgate.cluster.partition_codec import PartitionId, encode_state, partition_key
from walgate.cluster.partition_states import AlterOutcome, PartitionStates
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.server import KafkaServer
from walgate.gateway.metrics import Metrics
from walgate.gateway.replicas import ReplicaManager, monotonic_ms
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState
from walgate.storage import catalog, hw_checkpoint, leader_epochs, led_appends, native_topics
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import request_class
from walgate.wire.serial import fields_of

DB = "rep"
DB_ID = "5e" * 16  # the one id the three catalogs give the database, as the cluster's shared catalog does
TOPIC = "events"
REPLICATED_TOPIC = "rows"  # a TDengine topic over the replicated database (trio(replicated=True))
PRODUCE: Any = request_class(0, 9)
TOPIC_DATA: Any = next(f.entity for f in fields_of(PRODUCE) if f.name == "topic_data")
PARTITION_DATA: Any = next(f.entity for f in fields_of(TOPIC_DATA) if f.name == "partition_data")
WAIT_S = 30.0  # each wait of a test, and each step of its teardown, ends within this or fails naming what it awaited
BODY_S = 4 * WAIT_S  # a test's whole body (its trio's) ends within this or fails, the await it hung in in its traceback
LAG_MS = 1500


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    with etcd_cluster(tmp_path / "etcd", 1) as cluster:
        yield cluster


@asynccontextmanager
async def bounded(what: str, seconds: float = WAIT_S) -> AsyncIterator[None]:
    """The block cancelled after ``seconds``, then AssertionError naming ``what`` (also when the block swallowed that
    cancellation): a hang fails the test, the await it hung in in the traceback chained to the error, instead of
    holding the suite."""
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            yield
    except TimeoutError as e:
        if not deadline.expired():
            raise
        raise AssertionError(f"not done within {seconds:g} s: {what}") from e
    if deadline.expired():
        raise AssertionError(f"not done within {seconds:g} s: {what}")


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait (bounded) for ``check()`` to hold."""
    deadline = time.monotonic() + WAIT_S
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.02)


@dataclass
class Node:
    side: Side
    broker: Broker
    server: KafkaServer
    port: int
    db: str = DB
    manager: ReplicaManager | None = None
    task: asyncio.Task[None] | None = None

    @property
    def id(self) -> int:
        return self.side.member.node_id

    async def wal(self) -> Any:
        return (await self.side.vnode(self.db, 0)).wal

    def led(self) -> dict[Any, Any]:
        return {} if self.manager is None or self.task is None else self.manager.led

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            async with bounded(f"node {self.id}'s replica manager stops (its fetchers, proposers, checkpoints)"):
                await asyncio.wait({self.task})  # (not the task itself: its CancelledError would hide the bound's)
            with contextlib.suppress(asyncio.CancelledError):
                self.task.result()
        self.task = None
        self.broker.led = None


@dataclass
class Trio:
    nodes: dict[int, Node]
    registered: dict[int, int]
    states: PartitionStates

    def start(self, node_id: int) -> None:
        """Start node ``node_id``'s replica manager (again)."""
        node = self.nodes[node_id]
        member = node.side.member
        node.manager = ReplicaManager(
            node_id, self.registered[node_id], node.side.engine, node.side.storage,
            PartitionStates(member.session, member.keys), lambda: self.registered,
            lambda: NodeLinks(member, "PLAINTEXT", None, timeout_s=WAIT_S), lag_max_ms=LAG_MS, fetch_wait_ms=100,
            backoff_s=0.05, checkpoint_s=0.1)
        node.broker.led = node.manager
        node.task = asyncio.create_task(node.manager.run())

    async def stop(self, node_id: int) -> None:
        """Stop node ``node_id``'s replica manager (its fetchers, its views): a follower stopped."""
        await self.nodes[node_id].stop()

    async def write_state(self, state: PartitionState) -> None:
        key = partition_key(self.states.keys, PartitionId(DB_ID, 0))
        await self.states.session.txn([], [tx.Put(key, encode_state(state))])

    async def state(self) -> PartitionState:
        state = await self.states.read(PartitionId(DB_ID, 0))
        assert state is not None
        return state

    async def started(self) -> None:
        """Every node's manager started, then a state naming node 1 leader of (1, 2, 3) written; node 1 leading."""
        for n in (1, 2, 3):
            self.start(n)
        await self.write_state(self.initial())
        await self.leading(1)

    async def leader_alone(self, rows: int = 1) -> None:
        """:meth:`started`, rows 0 .. ``rows - 1`` written (one append each) and copied, then node 1's ISR proposer
        cancelled (the ISR keeps (1, 2, 3) until node 1 is down, so a later election of node 2 is clean) and nodes 2
        and 3 stopped: what node 1 writes next is on node 1 only, and never committed."""
        await self.started()
        for k in range(rows):
            await self.insert(1, k)
        await self.caught_up(2, 3)
        proposer = self.nodes[1].led()[PartitionId(DB_ID, 0)].proposer
        assert proposer is not None
        proposer.cancel()
        for n in (2, 3):
            await self.stop(n)

    async def deposed_with_a_tail(self, while_down: Callable[[], None] = lambda: None) -> None:
        """Node 1 deposed holding a tail W it wrote alone (:meth:`leader_alone`: never passed by the HW), its engine
        closed (then ``while_down()``) and opened again once node 2, elected in epoch 2 without it, wrote X where
        node 1 holds W and node 3 copied it; node 1's replica manager not started again."""
        await self.leader_alone()  # (else W is committed, node 2's election unclean)
        await self.insert(1, 1)  # W
        await self.stop(1)
        node = self.nodes[1]
        await node.side.call(node.side.engine.close)
        while_down()
        await self.node_2_elected_without_1()
        await self.insert(2, 2)  # X, where node 1 holds W
        await self.caught_up(3, leader=2)
        node.side.engine = await node.side.call(Engine.open, node.side.data_dir / "data", listener=node.side.wakeups,
                                                node_id=1)

    async def node_2_elected_without_1(self) -> None:
        """Node 2 elected in the next leader epoch with node 1 out of the ISR (node 1 deposed), nodes 2 and 3's
        replica managers started, until node 2 leads."""
        state = await self.state()
        await self.write_state(replace(state, leader=2, leader_epoch=state.leader_epoch + 1, isr=tuple(
            m for m in state.isr if m.replica != 1)))
        self.start(2)
        self.start(3)
        await self.leading(2)

    async def isr_is(self, ids: set[int]) -> bool:
        return {m.replica for m in (await self.state()).isr} == ids

    async def leading(self, node_id: int) -> None:
        """Wait until node ``node_id`` leads vnode 0 (its epoch begun, its view made)."""
        await until(lambda: _is(PartitionId(DB_ID, 0) in self.nodes[node_id].led()), f"node {node_id} leads")

    def initial(self, leader: int = 1, epoch: int = 1, min_isr: int = 2) -> PartitionState:
        return PartitionState((1, 2, 3), leader, epoch, 0, tuple(IsrMember(n, e) for n, e in sorted(
            self.registered.items())), (), min_isr)

    async def insert(self, node_id: int, k: int) -> None:
        await self.nodes[node_id].side.sql(
            f"INSERT INTO {DB}.d{k} USING {DB}.meters TAGS ('l{k}', {k}) VALUES ({1_700_000_000_000 + k}, 1.0, {k})")

    async def same_wals(self, *node_ids: int) -> bytes:
        """The WAL of vnode 0, equal byte for byte on ``node_ids``."""
        raws = [await self.nodes[n].side.wal_bytes(self.nodes[n].db, 0) for n in node_ids]
        assert raws[0] and all(r == raws[0] for r in raws), [len(r) for r in raws]
        return raws[0]

    async def caught_up(self, *node_ids: int, leader: int = 1) -> None:
        async def check() -> bool:
            ends = {(await self.nodes[n].wal()).next_version for n in (leader, *node_ids)}
            return len(ends) == 1
        await until(check, f"nodes {node_ids} caught up with node {leader}")


@asynccontextmanager
async def trio(etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
               native: bool = False, replicated: bool = False,
               racks: Mapping[int, str] | None = None) -> AsyncIterator[Trio]:
    """Three nodes holding one database of id :data:`DB_ID` (``native``: the Kafka-native topic :data:`TOPIC`'s, its
    WAL fsynced at every append), no partition state yet. ``replicated``: the engines in cluster mode and the
    database made as the cluster's catalog makes it (``REPLICA 3``, its records staged on node 1 and applied on each
    node), with the TDengine topic :data:`REPLICATED_TOPIC` over its supertable. ``racks``: each node's ``broker.rack``."""
    nodes: dict[int, Node] = {}
    try:
        for n in (1, 2, 3):
            side = await _side(etcd, tmp_path / f"n{n}", n)
            broker = Broker(engine=side.engine, storage=side.storage, node_id=n, host="127.0.0.1", port=0,
                            cluster_id="replicas", versions=advertised(),
                            groups=GroupService(side.engine, side.storage), wakeups=side.wakeups,
                            cluster=side.member)
            server = KafkaServer(broker, 1 << 24, metrics=Metrics())
            _, port = await server.start("127.0.0.1", 0)
            nodes[n] = Node(side, broker, server, port)
            await side.member.join((f"PLAINTEXT://127.0.0.1:{port}",), rack=None if racks is None else racks[n])
        registered: dict[int, int] = {}
        for node in nodes.values():
            await node.side.member.refresh()
            assert node.side.member.registration is not None and node.side.member.registration.epoch is not None
            registered[node.id] = node.side.member.registration.epoch
        monkeypatch.setattr(catalog, "new_db_id", lambda: DB_ID)
        monkeypatch.setattr(native_topics, "new_db_id", lambda: DB_ID)
        if replicated:
            await _replicated_database(nodes)
        for node in nodes.values():
            if replicated:
                continue
            if native:
                engine = node.side.engine
                await node.side.call(engine.create_kafka_topic, TOPIC, 1, {"flush.messages": "1"})
                node.db = (await node.side.call(engine.topic, TOPIC)).db
            else:
                await node.side.sql(f"CREATE DATABASE {DB} VGROUPS 1 {WAL}")
                await node.side.sql(STABLE)
        monkeypatch.undo()
        async with bounded("the test's body", BODY_S):
            yield Trio(nodes, registered, PartitionStates(nodes[1].side.member.session, nodes[1].side.member.keys))
    finally:
        for node in nodes.values():
            await node.stop()
        for node in nodes.values():
            async with bounded(f"node {node.id}'s Kafka server stops"):
                await node.server.stop()
            async with bounded(f"node {node.id} leaves the cluster"):
                await node.side.member.leave()
            async with bounded(f"node {node.id}'s engine closes"):
                await node.side.storage.call(node.side.engine.close)
            node.side.storage.shutdown()


async def _replicated_database(nodes: dict[int, Node]) -> None:
    """:data:`DB` with ``REPLICA 3``, its supertable and :data:`REPLICATED_TOPIC` on every node, as the shared catalog
    applies them (:meth:`Engine.apply_shared <walgate.storage.engine.Engine.apply_shared>`)."""
    for node in nodes.values():
        engine = node.side.engine
        await node.side.call(engine.cluster_mode, True)
        await node.side.call(engine.set_dnodes, (), dict.fromkeys(nodes))
    first = nodes[1].side
    seq = 0
    for statement in (f"CREATE DATABASE {DB} VGROUPS 1 REPLICA 3 {WAL}", STABLE,
                      f"CREATE TOPIC {REPLICATED_TOPIC} AS STABLE {DB}.meters"):
        _, records = await first.call(first.engine.staged, first.engine.execute, statement)
        for record in records:
            seq += 1
            for node in nodes.values():
                await node.side.call(node.side.engine.apply_shared, seq, record)


async def test_followers_named_in_etcd_copy_the_leaders_wal_and_the_hw_gates_what_is_visible(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        for k in range(4):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        await t.same_wals(1, 2, 3)
        leader = await t.nodes[1].wal()
        await until(lambda: _is(leader.visible_version == leader.next_version), "the HW reaches the leader's end")
        for n in (2, 3):  # a follower's visible version: the HW its leader's answers carried
            wal = await t.nodes[n].wal()
            await until(lambda w=wal: _is(w.visible_version == leader.next_version), f"node {n} learns the HW")
        assert [e.epoch for e in (await t.nodes[2].side.vnode(DB, 0)).epochs.entries][-1] == 1

        for n in (2, 3):  # no follower fetches: a new write is durable on the leader but not visible
            await t.stop(n)
        before = leader.visible_version
        await t.insert(1, 10)
        await t.nodes[1].manager.after_sync((DB, 0))  # (the leader's own sync counts: not enough alone)
        assert leader.durable_version == leader.next_version > before == leader.visible_version
        assert (await t.nodes[1].side.sql(f"SELECT COUNT(*) FROM {DB}.meters")).rows  # (served: the table path)
        t.start(2)  # one follower back: the ISR (1, 2, 3) still needs node 3's durable end
        await t.caught_up(2)
        assert leader.visible_version == before
        t.start(3)
        await until(lambda: _is(leader.visible_version == leader.next_version), "the HW passes the new write")
        await t.caught_up(2, 3)
        await t.same_wals(1, 2, 3)


async def test_a_stopped_follower_leaves_the_isr_and_rejoins_once_caught_up(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        await t.stop(3)
        await until(lambda: t.isr_is({1, 2}), "node 3 leaves the ISR")
        left = monotonic_ms()  # not before replica.lag.time.max.ms past the last time node 3 was caught up
        assert left - t.nodes[1].led()[PartitionId(DB_ID, 0)].view.followers[3].last_caught_up_ms > LAG_MS
        leader = await t.nodes[1].wal()
        await t.insert(1, 1)  # the ISR (1, 2) has min.insync.replicas 2: the HW passes the write without node 3
        await until(lambda: _is(leader.visible_version == leader.next_version), "the HW passes without node 3")
        assert (await t.nodes[3].wal()).next_version < leader.next_version
        t.start(3)
        await until(lambda: t.isr_is({1, 2, 3}), "node 3 rejoins the ISR")
        assert (await t.state()).member(3) == IsrMember(3, t.registered[3])  # under its registered broker epoch
        await t.same_wals(1, 3)


async def test_a_leader_deposed_in_etcd_follows_the_new_one(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        end = (await t.nodes[2].wal()).next_version
        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        await t.leading(2)
        await until(lambda: _is(not t.nodes[1].led()), "node 1 no longer leads")
        request = REQUEST(replica_id=3, broker_epoch=t.registered[3], max_wait=0, min_bytes=1, max_bytes=1 << 20,
                          partitions=(PARTITION(db_id=uuid.UUID(DB_ID), vgroup=0, current_leader_epoch=1,
                                                fetch_version=end, last_fetched_epoch=1, durable_version=end,
                                                partition_max_bytes=1 << 20),))
        links = NodeLinks(t.nodes[3].side.member, "PLAINTEXT", None, timeout_s=WAIT_S)
        try:
            async with bounded("node 1's WalFetch answer"):
                [answer] = (await links.call(1, request)).partitions
        finally:
            links.close()
        assert answer.error_code == ErrorCode.not_leader_or_follower
        entries = (await t.nodes[2].side.vnode(DB, 0)).epochs.entries
        assert (entries[-1].epoch, entries[-1].start_offset) == (2, end)  # begun at the new leader's end
        await t.insert(2, 1)
        await t.caught_up(1, 3, leader=2)
        await t.same_wals(1, 2, 3)


async def test_a_database_dropped_and_made_again_under_its_name_keeps_the_new_ones_leadership(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rv4 R5: the new database's state applied before the catalog change that lets go of the old one (a DROP and a
    CREATE in one catalog snapshot): the old one's cleanup neither ends the new leadership (node 1's write is
    acknowledged) nor stops a follower's manager (a later state is applied: node 2 leads), and the WALs agree."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        old, new = PartitionId(DB_ID, 0), PartitionId("7a" * 16, 0)
        monkeypatch.setattr(catalog, "new_db_id", lambda: new.db_id)
        for node in t.nodes.values():
            await node.side.sql(f"DROP DATABASE {DB}")
            await node.side.sql(f"CREATE DATABASE {DB} VGROUPS 1 {WAL}")
            await node.side.sql(STABLE)
        monkeypatch.undo()
        key = partition_key(t.states.keys, new)
        await t.states.session.txn([], [tx.Put(key, encode_state(t.initial()))])
        managers = {n: node.manager for n, node in t.nodes.items()}
        assert all(m is not None for m in managers.values())
        await until(lambda: _is(new in t.nodes[1].led() and all(
            new in m.following for n, m in managers.items() if n != 1 and m is not None)), "the new database led")
        for m in managers.values():
            assert m is not None
            m.catalog_changed()
        await until(lambda: _is(all(old not in m.led and old not in m.following for m in managers.values()
                                    if m is not None)), "the dropped database let go everywhere")
        with led_appends.recording() as appended:
            await t.insert(1, 1)
        manager = managers[1]
        assert appended and manager is not None
        assert await manager.writes_acknowledged(appended, WAIT_S) == ErrorCode.none
        state = await t.states.read(new)
        assert state is not None
        await t.states.session.txn([], [tx.Put(key, encode_state(replace(state, leader=2, leader_epoch=2)))])
        await until(lambda: _is(new in t.nodes[2].led()), "node 2 leads the new database")
        await t.insert(2, 2)
        await t.caught_up(1, 3, leader=2)
        await t.same_wals(1, 2, 3)


async def _is(value: bool) -> bool:
    return value


async def produce(t: Trio, to: int, acks: int, timeout_ms: int = 20_000, topic_name: str = TOPIC,
                  record: tuple[bytes, bytes] = (b"k", b"v"), batch: bytes | None = None) -> Any:
    """One ``record`` (key, value) produced to partition 0 of ``topic_name`` on node ``to`` (a raw Produce v9 over
    node 3's links), or the RecordBatch ``batch`` when given; the partition's answer."""
    if batch is None:
        batch = encode_batch(0, [int(time.time() * 1000)], [record[0]], [record[1]])
    request = PRODUCE(transactional_id=None, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms),
                      topic_data=(TOPIC_DATA(name=topic_name, partition_data=(
                          PARTITION_DATA(index=0, records=batch),)),))
    links = NodeLinks(t.nodes[3].side.member, "PLAINTEXT", None, timeout_s=WAIT_S)
    try:
        async with bounded(f"node {to}'s Produce answer"):
            response = await links.call(to, request)
    finally:
        links.close()
    [topic] = response.responses
    [answer] = topic.partition_responses
    return answer


async def test_acks_all_is_answered_once_the_isr_holds_the_write_and_min_isr_refuses_below(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()
        leader = await t.nodes[1].wal()
        for k in range(3):
            answer = await produce(t, 1, -1)
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, k)
            end = leader.next_version  # at the moment of the answer: the HW passed it, both followers hold it
            assert leader.visible_version == end
            for n in (2, 3):
                wal = await t.nodes[n].wal()
                assert wal.next_version == end and wal.durable_version == end
        await t.same_wals(1, 2, 3)

        for n in (2, 3):
            await t.stop(n)
        answer = await produce(t, 1, 1)  # acks=1: answered after the local append
        assert answer.error_code == ErrorCode.none and leader.visible_version < leader.next_version
        answer = await produce(t, 1, -1, timeout_ms=300)  # the ISR still (1, 2, 3): appended, never passed
        assert answer.error_code == ErrorCode.request_timed_out
        assert (await t.nodes[2].wal()).next_version < leader.next_version
        await until(lambda: t.isr_is({1}), "nodes 2 and 3 leave the ISR")
        appended = leader.next_version
        answer = await produce(t, 1, -1)  # below min.insync.replicas: refused before the append
        assert answer.error_code == ErrorCode.not_enough_replicas and leader.next_version == appended
        assert (await produce(t, 1, 1)).error_code == ErrorCode.none  # (acks=1 is not refused, as Kafka)

        t.start(2)  # back under the same broker epoch: caught up, it rejoins (KIP-903), the ISR (1, 2) is enough
        await until(lambda: t.isr_is({1, 2}), "node 2 rejoins the ISR")
        answer = await produce(t, 1, -1)
        assert answer.error_code == ErrorCode.none
        assert (await t.nodes[2].wal()).durable_version == leader.next_version == leader.visible_version
        await t.same_wals(1, 2)


async def test_a_deposed_leader_refuses_produce_and_its_waiting_writes(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch, native=True) as t:
        await t.started()
        assert (await produce(t, 1, -1)).error_code == ErrorCode.none
        await t.stop(3)
        await t.stop(2)
        waiting = asyncio.create_task(produce(t, 1, -1))  # appended, waiting for followers that do not fetch
        manager = t.nodes[1].manager
        assert manager is not None
        await until(lambda: _is(manager.purgatory.waiting((t.nodes[1].db, 0)) == 1), "the write waits")
        await t.write_state(replace(await t.state(), leader=2, leader_epoch=2))
        assert (await waiting).error_code == ErrorCode.not_leader_or_follower
        assert (await produce(t, 1, -1)).error_code == ErrorCode.not_leader_or_follower
        assert (await produce(t, 1, 1)).error_code == ErrorCode.not_leader_or_follower


async def test_a_follower_restarted_under_a_new_broker_epoch_rejoins_the_isr_under_it(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        old = t.registered[3]
        await t.stop(3)  # node 3 restarts: a new registration, a new broker epoch (KIP-903)
        node = t.nodes[3]
        await node.side.member.leave()
        node.side.member = ClusterMember(etcd.spec, "walgate", 3, node.side.data_dir, SESSION_MS)
        await node.side.member.kafka_cluster_id()
        await node.side.member.join((f"PLAINTEXT://127.0.0.1:{node.port}",))
        await node.side.member.refresh()
        assert node.side.member.registration is not None and node.side.member.registration.epoch is not None
        t.registered[3] = new = node.side.member.registration.epoch
        assert new != old
        await t.insert(1, 1)
        t.start(3)

        async def rejoined() -> bool:  # (the old incarnation's entry removed, then the new one admitted)
            return (await t.state()).member(3) == IsrMember(3, new)
        await until(rejoined, "node 3 in the ISR under its new broker epoch")
        await t.caught_up(2, 3)
        await t.same_wals(1, 2, 3)


async def test_a_takeover_whose_epoch_the_disk_refused_is_retried(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        epochs = (await t.nodes[1].side.vnode(DB, 0)).epochs
        refused = []
        replace_file = epochs._replace

        def refuse_once(entries: Any) -> None:
            if not refused:
                refused.append(entries)
                raise OSError(errno.ENOSPC, "No space left on device")
            replace_file(entries)
        monkeypatch.setattr(epochs, "_replace", refuse_once)
        await t.started()  # (leading only once the retry wrote the epoch)
        assert refused and [e.epoch for e in epochs.entries][-1] == 1
        assert "partition state not applied, retried" in caplog.text and "Traceback" not in caplog.text
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        await t.same_wals(1, 2, 3)


async def test_a_restarted_replica_truncates_the_tail_it_wrote_as_leader_and_serves_only_the_new_leaders_hw(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.deposed_with_a_tail()
        node = t.nodes[1]
        reopened = await node.wal()  # (its WAL's HW unknown)
        assert reopened.replication is None and reopened.visible_version == reopened.next_version  # (the whole log)
        t.start(1)  # following node 2: W cut (below the reopened log's end, above its log start), X copied

        async def same() -> bool:
            return (await node.side.wal_bytes(DB, 0)) == (await t.nodes[2].side.wal_bytes(DB, 0))
        await until(same, "node 1's WAL equals node 2's (its divergent tail truncated)")
        leader = await t.nodes[2].wal()
        await until(lambda: _is(reopened.visible_version == leader.visible_version == leader.next_version),
                    "node 1 serves what the new leader's HW passed")


@pytest.mark.parametrize("lost", ["damaged", "missing", "missing, the cut refused once"])
async def test_a_replica_whose_epoch_file_was_lost_cuts_its_unacknowledged_tail_to_its_hw_before_following(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        lost: str) -> None:
    """rv6 F2: a replicated vnode opens with no leader epoch when its epoch file is damaged or missing, so it can name
    none to its leader and the leader cannot find where their logs diverge; as Kafka's fetcher does for a partition
    without epochs (``truncateToHighWatermark``), it first cuts its WAL to its high watermark checkpoint, so the tail
    it wrote as a deposed leader (never acknowledged) goes, and its WAL becomes the new leader's byte for byte (a cut
    the disk refused: logged, no traceback, and done at a later round). Before: it fetched on from its own end,
    keeping that tail (or OFFSET_OUT_OF_RANGE for good)."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        node = t.nodes[1]
        path = (await node.side.vnode(DB, 0)).epochs.path

        def lose() -> None:
            if lost == "damaged":
                path.write_bytes(path.read_bytes()[:-3])
            else:
                path.unlink()
        await t.deposed_with_a_tail(lose)
        assert not (await node.side.vnode(DB, 0)).epochs.entries  # (no epoch known for its entries)
        refused: list[int] = []
        if lost.endswith("refused once"):
            truncate = node.side.engine.truncate_vnode

            def refuse_once(db: str, index: int, version: int, *, high_watermark: int) -> int:
                if not refused:
                    refused.append(version)
                    raise StorageUnavailable("No space left on device (injected)")
                return truncate(db, index, version, high_watermark=high_watermark)
            monkeypatch.setattr(node.side.engine, "truncate_vnode", refuse_once)
        t.start(1)

        async def same() -> bool:
            return (await node.side.wal_bytes(DB, 0)) == (await t.nodes[2].side.wal_bytes(DB, 0))
        await until(same, "node 1's WAL equals node 2's (its tail cut to its HW, then the new leader's copied)")
        await until(lambda: t.isr_is({1, 2, 3}), "node 1 back in the ISR")
        assert len(refused) == lost.endswith("refused once") and "Traceback" not in caplog.text


async def test_a_deposed_leader_whose_tail_holds_a_supertable_drop_cuts_it_and_rejoins_the_isr(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rv4 R1: the leader applies a DROP STABLE (its meta entry in its WAL only, never committed) and is deposed;
    following the new leader, its divergence cut removes the entry (before: refused, the replica fetching never again
    and outside the ISR for good): the subtables are those of the new leader's WAL, its WAL becomes byte for byte
    the new leader's, and it rejoins the ISR. Its catalog keeps the drop (the catalog is the truth)."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.leader_alone()
        await t.nodes[1].side.sql(f"DROP STABLE {DB}.meters")  # its drop_stable entry: on node 1 only
        assert (await t.nodes[1].wal()).next_version > (await t.nodes[2].wal()).next_version
        await t.node_2_elected_without_1()
        await t.insert(2, 1)
        await t.caught_up(1, 3, leader=2)
        await t.same_wals(1, 2, 3)
        await until(lambda: t.isr_is({1, 2, 3}), "node 1 back in the ISR")
        vnode = await t.nodes[1].side.vnode(DB, 0)
        tables = await t.nodes[1].side.call(lambda: sorted((v.name, v.dropped) for v in vnode.tables()))
        assert tables == [("d0", False), ("d1", False)]
        assert (DB, "meters") not in t.nodes[1].side.engine.catalog.stables


async def _leading_with_copies(t: Trio) -> ReplicaManager:
    """Node 1 leading, a row copied to nodes 2 and 3; its replica manager."""
    await t.started()
    await t.insert(1, 0)
    await t.caught_up(2, 3)
    manager = t.nodes[1].manager
    assert manager is not None
    return manager


async def test_an_isr_change_the_control_plane_could_not_take_is_proposed_again(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        manager = await _leading_with_copies(t)
        refused: list[Any] = []
        alter_isr = manager.states.alter_isr

        async def unavailable_thrice(*args: Any) -> Any:
            if len(refused) < 3:
                refused.append(args)
                raise (ControlPlaneRefused if len(refused) == 2 else ControlPlaneUnavailable)("etcd has no leader")
            return await alter_isr(*args)
        monkeypatch.setattr(manager.states, "alter_isr", unavailable_thrice)
        await t.stop(3)
        await until(lambda: t.isr_is({1, 2}), "node 3 leaves the ISR once etcd answers again")
        assert len(refused) == 3 and "Traceback" not in caplog.text
        assert [r.levelname for r in caplog.records if "ISR change not written" in r.message] == ["WARNING"]
        leader = await t.nodes[1].wal()
        await t.insert(1, 1)  # the HW no longer waits on node 3
        await until(lambda: _is(leader.visible_version == leader.next_version), "the HW passes without node 3")


async def test_an_isr_round_that_failed_unexpectedly_is_logged_and_the_next_proposes_again(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A round that raised what no rule expects (a bug) is logged with its traceback, its proposal ends as refused
    and the proposer goes on: gone, it would leave the ISR as it is for as long as node 1 leads."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        manager = await _leading_with_copies(t)
        alter_isr, failed = manager.states.alter_isr, []

        async def fails_once(*args: Any) -> Any:
            if not failed:
                failed.append(args)
                raise RuntimeError("a bug")
            return await alter_isr(*args)
        monkeypatch.setattr(manager.states, "alter_isr", fails_once)
        await t.stop(3)
        await until(lambda: t.isr_is({1, 2}), "node 3 leaves the ISR in a round after the failed one")
        assert len(failed) == 1
        assert [r.exc_info[0] for r in caplog.records if "ISR round failed" in r.message] == [RuntimeError]


async def _fenced_once(t: Trio, monkeypatch: pytest.MonkeyPatch) -> tuple[ReplicaManager, list[Any]]:
    """Node 1's replica manager (:func:`_leading_with_copies`), its next ISR change refused STALE_BROKER_EPOCH as
    while its registration was gone (its lease lapsed under load), and the list that gets the state that change was
    proposed from."""
    manager = await _leading_with_copies(t)
    alter_isr = manager.states.alter_isr
    fenced: list[Any] = []

    async def stale_once(known: Any, *args: Any) -> Any:
        if not fenced:
            fenced.append(known)
            return AlterOutcome(known, ErrorCode.stale_broker_epoch)
        return await alter_isr(known, *args)
    monkeypatch.setattr(manager.states, "alter_isr", stale_once)
    return manager, fenced


async def test_a_leader_an_isr_change_found_fenced_leads_again_while_etcd_still_names_it(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader whose lease lapsed and was made again before the controller read the membership (no controller
    here): its ISR change was refused STALE_BROKER_EPOCH, so it stopped leading, but nobody was elected and the
    state in etcd still names it. It leads again in that epoch once it holds its lease, as after a restart; else
    the partition would stay without a leader (seen by the Jepsen group coordinator tests under load)."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        manager, fenced = await _fenced_once(t, monkeypatch)
        await t.stop(3)  # an ISR change to propose
        await until(lambda: _is(bool(fenced)), "the ISR change refused as fenced")
        await until(lambda: t.isr_is({1, 2}), "node 1 leads again in its epoch and shrinks the ISR")
        assert [led.view.leader_epoch for led in manager.led.values()] == [fenced[0].leader_epoch]
        await t.insert(1, 1)


async def test_a_fenced_leader_whose_watch_lags_never_leads_the_epoch_it_cached(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same, but another node was elected meanwhile and node 1's watch has not delivered it yet (node 1 cut
    off, then healed: the jepsen `test_leader_isolated_from_nodes_and_etcd` case): the state node 1 cached still
    names it leader of the old epoch, etcd does not. It must not lead that epoch again: it waits for the watch and
    follows the new leader."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        manager, fenced = await _fenced_once(t, monkeypatch)
        held: list[tuple[Any, Any]] = []
        seen = manager.states._seen
        monkeypatch.setattr(manager.states, "_seen", lambda event, on_change: held.append((event, on_change)))
        read, reads = manager.states.read, []

        async def counted(pid: PartitionId) -> Any:
            reads.append(await read(pid))
            return reads[-1]
        monkeypatch.setattr(manager.states, "read", counted)
        state = await t.state()
        await t.write_state(replace(state, leader=2, leader_epoch=state.leader_epoch + 1))
        await t.leading(2)  # (node 3 follows node 2: node 1's view proposes to shrink it out)
        await until(lambda: _is(bool(fenced)), "node 1's ISR change refused as fenced")
        await until(lambda: _is(bool(reads) and not manager._releads), "node 1 read the state from etcd")
        assert reads[0] is not None and reads[0].leader == 2
        assert not manager.led and held
        monkeypatch.setattr(manager.states, "_seen", seen)
        for event, on_change in held:
            seen(event, on_change)
        await until(lambda: _is(manager.following.get(PartitionId(DB_ID, 0)) == 2), "node 1 follows node 2")
        await t.insert(2, 1)
        await t.caught_up(1, 3, leader=2)


@pytest.mark.parametrize("then", ["leads", "follows anew"])
async def test_a_cut_left_unfinished_is_finished_when_the_vnode_is_led_or_followed_anew(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        await t.stop(2)
        vnode = await t.nodes[2].side.vnode(DB, 0)
        await t.nodes[2].side.call(vnode.epochs.begin, 5, vnode.wal.next_version)  # node 2 led epoch 5, wrote a tail
        await t.insert(2, 1)
        refusing = [True]
        real = leader_epochs.fileio.replace_file

        def refused_while_refusing(path: Path, *args: Any, **kwargs: Any) -> None:
            if refusing[0] and path == vnode.epochs.path:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            real(path, *args, **kwargs)
        monkeypatch.setattr(leader_epochs.fileio, "replace_file", refused_while_refusing)
        await t.write_state(replace(await t.state(), leader_epoch=6))
        t.start(2)  # follows node 1 in epoch 6: diverges at epoch 5, its WAL cut, the epoch file refused
        await until(lambda: _is(vnode.wal.held is not None), "node 2's cut is left unfinished")
        state = await t.state()
        manager = t.nodes[2].manager
        assert manager is not None
        if then == "leads":
            await t.write_state(replace(state, leader=2, leader_epoch=7))
        else:
            await t.write_state(replace(state, leader_epoch=7))
        pid = PartitionId(DB_ID, 0)
        await until(lambda: _is(manager.following.get(pid) != 1 or any(
            f.fetcher.followed.get((DB, 0)) is not None and f.fetcher.followed[(DB, 0)].leader_epoch == 7
            for f in manager.fetching.values())), f"node 2 {then} (the state applied, or its takeover retried)")
        refusing[0] = False
        if then == "leads":
            await t.leading(2)
            assert vnode.wal.held is None
            await t.insert(2, 2)  # taken: its WAL no longer refuses appends
            await t.caught_up(1, 3, leader=2)
            await t.same_wals(1, 2, 3)
        else:
            await until(lambda: _is(vnode.wal.held is None), "node 2's cut finished")
            await t.insert(1, 2)
            await t.caught_up(2, 3)
            await t.same_wals(1, 2, 3)


@pytest.mark.parametrize("set_up", [False, True], ids=["before-its-set-up", "after-its-set-up"])
async def test_a_manager_stopped_while_it_takes_a_vnode_on_writes_its_hw_checkpoint(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, set_up: bool) -> None:
    """A controlled shutdown moves node 1's leadership away and stops its replica manager while it is still taking
    the vnode on as a follower, its follow's set-up on the lane not run yet or run (the WAL reading the follow's
    high watermark) with the follow stopped before it went on: the manager's close writes the vnode's high
    watermark checkpoint all the same, else a node that ran less than one checkpoint interval keeps none (compat
    test_leader_election's restarted preferred leader, in CI), and it is the high watermark the vnode had, not 0
    (a Jepsen run's follower of 40 entries wrote ``{"hw": 0}`` at its clean stop)."""
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        node, directory = t.nodes[1], (await t.nodes[1].side.vnode(DB, 0)).dir
        manager = node.manager
        assert manager is not None
        wal = await node.wal()
        await until(lambda: _is(hw_checkpoint.read(directory) == wal.next_version), "node 1's checkpoint written")
        manager.checkpoint_s = 3600.0  # as if node 1 had run less than one checkpoint interval: nothing written yet
        await asyncio.sleep(0.5)  # (the periodic write under way, if any, done; the next one an hour away)
        (directory / hw_checkpoint.HW_FILE).unlink()
        manager._checkpointed.clear()
        stalled = asyncio.Event()
        call_on = manager.storage.call_on

        async def stalling(keys: Any, fn: Any) -> Any:  # (the follow never goes on past its set-up on the lane)
            if getattr(getattr(fn, "func", None), "__name__", "") == "_start_following":
                if set_up:
                    await call_on(keys, fn)
                stalled.set()
                await asyncio.Event().wait()
            return await call_on(keys, fn)
        monkeypatch.setattr(manager.storage, "call_on", stalling)
        state = await t.state()
        await t.write_state(replace(state, leader=2, leader_epoch=state.leader_epoch + 1))
        await until(lambda: _is(stalled.is_set()), "node 1 begins to follow node 2")
        await t.stop(1)
        assert hw_checkpoint.read(directory) == wal.visible_version > 0


async def test_a_reopened_replica_starts_from_its_hw_checkpoint_or_its_log_start_when_that_is_damaged(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        for k in range(2):
            await t.insert(1, k)
        await t.caught_up(2, 3)
        node = t.nodes[2]
        wal = await node.wal()
        leader = await t.nodes[1].wal()
        await until(lambda: _is(wal.visible_version == leader.next_version), "node 2 learns the HW")
        hw, directory = wal.visible_version, (await node.side.vnode(DB, 0)).dir
        assert hw > wal.first_version  # (the checkpoint, not the log start, is what the reopened replica serves)
        await until(lambda: _is(hw_checkpoint.read(directory) == hw), "node 2's HW checkpoint written while running")
        await t.stop(2)
        await t.insert(2, 5)  # a tail past its HW (as a deposed leader's), then a restart
        await node.side.call(node.side.engine.close)
        state = replace(await t.state(), leader=NO_LEADER)
        for damaged in (False, True):
            if damaged:
                path = directory / hw_checkpoint.HW_FILE
                path.write_bytes(path.read_bytes()[:-3])
            node.side.engine = await node.side.call(Engine.open, node.side.data_dir / "data",
                                                    listener=node.side.wakeups, node_id=2)
            reopened = await node.wal()
            assert reopened.visible_version == reopened.next_version > hw  # (before any state: the whole log)
            manager = ReplicaManager(2, t.registered[2], node.side.engine, node.side.storage, t.states,
                                     lambda: t.registered, lambda: NodeLinks(node.side.member, "PLAINTEXT", None))
            await manager.apply(PartitionId(DB_ID, 0), state)  # no leader: stopped, at the HW it starts from
            assert reopened.visible_version == (reopened.first_version if damaged else hw)
            reports = [r for r in node.side.engine.damage_log.records if r.file.endswith(hw_checkpoint.HW_FILE)]
            assert len(reports) == damaged
            await node.side.call(node.side.engine.close)
        node.side.engine = await node.side.call(Engine.open, node.side.data_dir / "data",
                                                listener=node.side.wakeups, node_id=2)


async def test_a_refused_hw_checkpoint_write_is_logged_once_and_written_again(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        directory = (await t.nodes[2].side.vnode(DB, 0)).dir
        refused: list[Path] = []
        real = hw_checkpoint.fileio.replace_file

        def refused_thrice(path: Path, *args: Any, **kwargs: Any) -> None:
            if path.parent == directory and len(refused) < 3:
                refused.append(path)
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            real(path, *args, **kwargs)
        monkeypatch.setattr(hw_checkpoint.fileio, "replace_file", refused_thrice)
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        wal, leader = await t.nodes[2].wal(), await t.nodes[1].wal()
        await until(lambda: _is(wal.visible_version == leader.next_version), "node 2 learns the HW")
        await until(lambda: _is(hw_checkpoint.read(directory) == leader.next_version), "written once the disk takes it")
        assert len(refused) == 3 and "Traceback" not in caplog.text
        assert len([r for r in caplog.records if "checkpoint not written" in r.message]) == 1
