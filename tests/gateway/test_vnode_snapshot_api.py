"""VnodeSnapshot (internal key 10002; docs/plans/vnode-snapshot.md): the leader of an SQL vgroup whose retention
deleted the segments creating its first tables, over a real socket and the follower's authenticated node link (the
pair of tests/gateway/test_wal_fetch.py). A begin takes a snapshot at the leader's WAL end and answers its id, the log
start, the end and the size with a first page; the pages after it, of any size, give the manifest and files the
manifest verifies, the tables those of the leader. Every error code: a node asking as another replica refused, a database
or vgroup not led, leader epochs fenced or unknown, a stale broker epoch, a snapshot not held (an unknown id,
one displaced by the follower's next begin, whose directory is then removed, one of an older leader epoch), a
position past the end; seeded fuzzed requests of a node answered with one of those codes or a page. The API is not
in ApiVersions. The leader's held snapshots expire when no page asks for them and are bounded in number."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest

from tests.cluster.etcd_cluster import EtcdCluster, etcd_cluster
from tests.gateway.test_wal_fetch import DB, STABLE, WAIT_S, WAL, Pair, _both, pair
from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.kafka.handlers.vnode_snapshot import PAGE_MAX
from walgate.gateway.kafka.held_snapshots import Held, HeldSnapshots
from walgate.replication.partition import PartitionState
from walgate.storage.meta_store import META_STORE, MetaStore, OpenStores
from walgate.storage.vnode_snapshot import Manifest
from walgate.storage.wal import WalOptions
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import request_class

REQUEST: Any = request_class(10002, 0)
ZERO = uuid.UUID(int=0)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    with etcd_cluster(tmp_path / "etcd", 1) as cluster:
        yield cluster


async def _trimmed(p: Pair) -> tuple[uuid.UUID, int]:
    """``DB`` (one vgroup on both nodes) led by node 1 in epoch 1, subtables made, the segments making the first
    ones deleted on the leader, more made after: (the database's id, the leader's log start)."""
    await _both(p, f"CREATE DATABASE {DB} VGROUPS 1 {WAL}", STABLE)
    await p.lead(DB, 1, 1)
    vnode = await p.leader.vnode(DB, 0)
    vnode.wal.options = WalOptions(**{**vnode.wal.options.__dict__, "segment_bytes": 64})  # a segment an append
    for i in range(4):
        await p.leader.sql(f"INSERT INTO {DB}.d{i} USING {DB}.meters TAGS ('a', {i}) VALUES (1700000000000, 1.0, 1)")
    await p.leader.call(vnode.checkpoint)
    await p.leader.call(vnode.wal.delete_oldest, 2)
    for i in range(4, 6):
        await p.leader.sql(f"INSERT INTO {DB}.d{i} USING {DB}.meters TAGS ('b', {i}) VALUES (1700000000000, 1.0, 1)")
    await p.leader.sql(f"DROP TABLE {DB}.d1")
    assert vnode.wal.first_version > 0
    return uuid.UUID(await p.leader.db_id(DB)), vnode.wal.first_version


async def _call(p: Pair, **fields: Any) -> Any:
    request = REQUEST(**{"replica_id": 2, "broker_epoch": p.led.registered[2], "vgroup": 0,
                         "current_leader_epoch": 1, "snapshot_id": ZERO, "position": 0, "max_bytes": 1 << 20,
                         **fields})
    return await asyncio.wait_for(p.links.call(1, request), WAIT_S)


async def test_a_follower_pages_the_leaders_snapshot_at_its_wal_end(etcd: EtcdCluster, tmp_path: Path) -> None:
    async with pair(etcd, tmp_path) as p:
        db_id, start = await _trimmed(p)
        leader = await p.leader.vnode(DB, 0)
        begun = await _call(p, db_id=db_id, max_bytes=100)
        assert begun.error_code == ErrorCode.none and begun.leader_epoch == 1
        assert (begun.start_version, begun.end_version) == (start, leader.wal.next_version)
        assert begun.position == 0 and len(begun.data) == 100 < begun.size
        stream = bytearray(begun.data)
        for _ in range(begun.size):  # (bounded: each page is at least a byte)
            if len(stream) >= begun.size:
                break
            page = await _call(p, db_id=db_id, snapshot_id=begun.snapshot_id, position=len(stream),
                               max_bytes=4096)
            assert page.error_code == ErrorCode.none and page.position == len(stream) and page.data
            stream += page.data
        assert len(stream) == begun.size
        end = await _call(p, db_id=db_id, snapshot_id=begun.snapshot_id, position=begun.size)
        assert end.error_code == ErrorCode.none and end.data == b""
        line, _, rest = bytes(stream).partition(b"\n")
        manifest = Manifest.decode(line)
        assert (manifest.snapshot_id, manifest.end_version) == (begun.snapshot_id.hex, begun.end_version)
        out = tmp_path / "got"
        out.mkdir()
        for f in manifest.files:
            data, rest = rest[:f.size], rest[f.size:]
            assert (len(data), crc32c.crc32c(data)) == (f.size, f.crc), f.name
            (out / f.name).parent.mkdir(parents=True, exist_ok=True)
            (out / f.name).write_bytes(data)
        assert rest == b""
        copy = MetaStore.open(out / META_STORE, OpenStores())
        try:
            assert copy.covered == begun.end_version
            got = sorted((t.name, t.tags, t.dropped) for t in copy.all())
            assert got == sorted((t.name, t.tags, t.dropped) for t in leader.store.all())
            assert ("d0", {"location": "a", "g": 0}, False) in got and ("d1", {"location": "a", "g": 1}, True) in got
        finally:
            copy.close()


async def test_every_error_code(etcd: EtcdCluster, tmp_path: Path) -> None:
    assert 10002 not in advertised()
    async with pair(etcd, tmp_path) as p:
        db_id, _ = await _trimmed(p)

        async def code(**fields: Any) -> int:
            return int((await _call(p, **{"db_id": db_id, **fields})).error_code)

        assert await code(db_id=uuid.uuid4()) == ErrorCode.not_leader_or_follower
        assert await code(vgroup=1) == ErrorCode.not_leader_or_follower
        assert await code(current_leader_epoch=0) == ErrorCode.fenced_leader_epoch
        assert await code(current_leader_epoch=2) == ErrorCode.unknown_leader_epoch
        assert await code(broker_epoch=p.led.registered[2] - 1) == ErrorCode.stale_broker_epoch
        assert await code(replica_id=7) == ErrorCode.cluster_authorization_failed  # node 2 is not node 7
        assert await code(snapshot_id=uuid.uuid4()) == ErrorCode.snapshot_not_found
        first = await _call(p, db_id=db_id)
        assert first.error_code == ErrorCode.none
        assert await code(snapshot_id=first.snapshot_id, position=first.size + 1) == ErrorCode.position_out_of_range
        assert await code(snapshot_id=first.snapshot_id, position=-1) == ErrorCode.position_out_of_range
        now_ms = int(time.monotonic() * 1000)  # (the handler's clock)
        directory = p.broker.held_snapshots.page(first.snapshot_id.hex, db_id.hex, 0, 2, 1, now_ms)
        assert directory is not None and directory.directory.is_dir()
        second = await _call(p, db_id=db_id)  # the follower begins again: its first snapshot is let go
        assert second.error_code == ErrorCode.none and second.snapshot_id != first.snapshot_id
        assert await code(snapshot_id=first.snapshot_id) == ErrorCode.snapshot_not_found
        assert not directory.directory.exists() and len(p.broker.held_snapshots) == 1
        view = p.led.views[(db_id.hex, 0)]
        view.on_state(PartitionState((1, 2), 1, 2, 2, view.state.isr, (), 1))  # node 1 leads epoch 2 now
        assert await code(snapshot_id=second.snapshot_id, current_leader_epoch=2) == ErrorCode.snapshot_not_found
        p.broker.led = None
        assert await code() == ErrorCode.not_leader_or_follower


ANSWERED = {ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
            ErrorCode.unknown_leader_epoch, ErrorCode.stale_broker_epoch, ErrorCode.snapshot_not_found,
            ErrorCode.position_out_of_range, ErrorCode.cluster_authorization_failed}
FUZZ_REQUESTS = int(os.environ.get("WALGATE_FUZZ_VNODE_SNAPSHOT", "60"))  # (more: a longer run)


async def test_fuzzed_snapshot_requests_of_a_node_get_a_page_or_an_error(etcd: EtcdCluster, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Seeded: any field values from a node (databases and vgroups known or not, replicas other than itself, epochs
    old and new, snapshot ids held, displaced or unknown, positions negative, inside, past the end, byte limits
    negative to the largest) are answered with a code of the handler's; a page holds at most the bytes asked (at
    least 1, at most ``PAGE_MAX``) from the position asked, the same bytes each time it is asked; no ERROR logged."""
    rng = random.Random(26)
    async with pair(etcd, tmp_path) as p:
        db_id, _ = await _trimmed(p)
        held: list[uuid.UUID] = []
        pages: dict[tuple[uuid.UUID, int, int], bytes] = {}
        seen: Counter[str] = Counter()
        for _ in range(FUZZ_REQUESTS):
            fields: dict[str, Any] = {
                "db_id": rng.choice([db_id] * 4 + [uuid.uuid4()]), "vgroup": rng.choice([0, 0, 0, 1, -1]),
                "replica_id": rng.choice([2, 2, 2, 2, 1, 3]), "current_leader_epoch": rng.choice([1, 1, 1, 0, 2, -1]),
                "broker_epoch": p.led.registered[2] + rng.choice([0, 0, 0, 1, -1]),
                "snapshot_id": rng.choice([ZERO, uuid.uuid4(), *held[-2:], *held[-2:]]),
                "position": rng.choice([0, rng.randint(0, 1 << 16), -1, 1 << 40]),
                "max_bytes": rng.choice([-1, 0, 1, 100, 1 << 20, (1 << 31) - 1])}
            answer = await _call(p, **fields)
            assert answer.error_code in ANSWERED, (fields, answer)
            seen[ErrorCode(answer.error_code).name] += 1
            if answer.error_code != ErrorCode.none:
                assert not answer.data, (fields, answer)
                continue
            begun = fields["snapshot_id"] == ZERO
            if begun:
                held.append(answer.snapshot_id)
            assert answer.position == (0 if begun else fields["position"])
            assert len(answer.data) <= min(max(1, fields["max_bytes"]), PAGE_MAX)
            page = (answer.snapshot_id, answer.position, len(answer.data))
            assert pages.setdefault(page, bytes(answer.data)) == bytes(answer.data), "a page asked again differs"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert min(seen["none"], seen["snapshot_not_found"], seen["cluster_authorization_failed"],
                   seen["not_leader_or_follower"]) > 0, seen


def _held(sid: str, replica: int, vgroup: int = 0) -> Held:
    return Held("db", vgroup, replica, 1, Path(sid), Manifest(sid, 0, 1, (), ()), 0)


def test_held_snapshots_expire_unpaged_and_are_bounded() -> None:
    held = HeldSnapshots(idle_ms=100, limit=3)
    assert held.add(_held("a", 2), 0) == []
    assert held.page("a", "db", 0, 2, 1, 50) is not None  # paged: held until 150
    assert held.page("a", "db", 0, 3, 1, 50) is None and held.page("a", "db", 0, 2, 2, 50) is None
    assert held.expire(120) == [] and [h.manifest.snapshot_id for h in held.expire(150)] == ["a"]
    for i, sid in enumerate("bcd"):
        assert held.add(_held(sid, 2 + i), 200) == []
    assert [h.manifest.snapshot_id for h in held.add(_held("e", 9), 200)] == ["b"]  # the oldest past the limit
    assert [h.manifest.snapshot_id for h in held.add(_held("f", 3), 200)] == ["c"]  # replica 3's earlier one
    assert len(held) == 3 and held.page("f", "db", 0, 3, 1, 200) is not None
