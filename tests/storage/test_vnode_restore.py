"""A follower's copy of an SQL vgroup restored from its leader's snapshot (docs/plans/vnode-snapshot.md, step 2;
``Staging``, ``Engine.install_vnode_snapshot``, the restoring append path of walgate.storage.replicated): the
leader's vgroup has a TDengine topic, tables made below and above its log start S0 (retention deleted the first),
a DROP TABLE and a re-creation with other tags after it. Paged in pieces into the staging directory and installed,
the copy's WAL starts empty at S0 with the tables and topic offsets of the snapshot's end L; the leader's entries of
``[S0, L)`` appended derive nothing, those after L derive as ever and remove the restoring marker: the tables, the
topic's index records and end offset and the WAL's bytes then equal the leader's, also after a restart in the middle
of the restore. A staged file flipped or cut is refused (the staging removed, the old copy served as it was); the
disk refusing a staged write or the marker leaves the old copy served. A crash at each step opens what the disk
holds: staging half written (removed, the old copy), staged with the old copy deleted (removed, an empty copy that
fetches again), renamed (restoring), a damaged marker (the copy deleted, empty); a kill -9 of a process restoring
it, at each step (staging, marker written, old copy deleted, renamed, appending ``[S0, L)``, marker removed, done),
opens what the disk holds and the restore then finishes with the leader's tables, offsets and entries. A restoring
copy refuses to lead."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from faults import Faults
from old_release import killed_when_paused

from walgate.gateway.replica_fetcher import _position
from walgate.gateway.replicas import _take_over
from walgate.replication.partition import IsrMember, PartitionState
from walgate.storage import lines, replicated
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable, Unsupported
from walgate.storage.fileio import SyncLatency
from walgate.storage.moved_vnodes import delete_vnode_dir
from walgate.storage.vnode import Vnode
from walgate.storage.vnode_snapshot import RESTORING, Manifest, Staging, prepare_install, read, verify
from walgate.storage.wal import WalOptions

DDL = ("CREATE DATABASE old VGROUPS 1 WAL_RETENTION_PERIOD 0",
       "CREATE STABLE old.st (ts TIMESTAMP, v INT) TAGS (site INT)",
       "CREATE TOPIC tp AS SELECT ts, v FROM old.st WHERE site > 0")


def _pair(path: Path) -> tuple[Engine, Vnode, int, Engine]:
    """The leader (its data dir ``path / "l"``) and a follower (``path / "f"``) of one database, its supertable and
    topic (the same ids: the follower's data dir a copy of the leader's once they were made, as a cluster's catalog
    makes them on both); then on the leader alone subtables t0..t2 whose segments retention deleted, the topic's
    rows, tables made above the log start, a DROP TABLE and a re-creation with other tags (test_vnode_snapshot's);
    (leader, its vnode, its log start S0, follower)."""
    e = Engine.open(path / "l")
    for statement in DDL:
        e.execute(statement)
    e.close()
    shutil.copytree(path / "l", path / "f")
    leader = Engine.open(path / "l")
    vnode = leader.vnodes["old"][0]
    vnode.wal.options = WalOptions(**{**vnode.wal.options.__dict__, "segment_bytes": 64})  # a segment an append
    for i in range(3):
        leader.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (1000, {i})")
    assert vnode.apply_retention(time.time() + 10) and vnode.wal.first_version > 0
    start = vnode.wal.first_version
    for i in range(3, 6):
        leader.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (2000, {i}) (3000, {i})")
    leader.execute("INSERT INTO old.t1 VALUES (4000, 11)")
    leader.execute("DROP TABLE old.t4")
    leader.execute("DROP TABLE old.t0")
    leader.execute("INSERT INTO old.t0 USING old.st TAGS (7) VALUES (5000, 70)")
    return leader, vnode, start, Engine.open(path / "f")


def _staged(leader: Engine, follower: Engine, page: int = 333) -> Manifest:
    """The leader's snapshot paged into the follower's staging directory."""
    directory, m = leader.snapshot_vnode("old", 0, "s1")
    staging = Staging(follower.staging_dir("old", 0), m.total_bytes, SyncLatency())
    while not staging.done:
        staging.take(staging.position, read(directory, m, staging.position, page))
    return m


def _copy(leader: Vnode, follower: Engine, upto: int) -> None:
    """The leader's entries from the follower's WAL end up to ``upto``, appended as the replica fetcher does."""
    for _ in range(upto + 1):
        vnode = follower.vnodes["old"][0]
        at = vnode.wal.next_version
        if at >= upto:
            return
        region = leader.wal.batches_from(at, 1 << 30, upto)
        assert region is not None
        replicated.append_replicated(follower.store, follower.views, vnode, region.read(), at, 0)


def _tables(vnode: Vnode) -> list[tuple[object, ...]]:
    return sorted((t.name, t.stable, t.tags, t.version, t.dropped) for t in vnode.store.all())


def _offsets(e: Engine, start: int) -> tuple[int, list[tuple[int, int, int]]]:
    idx = e.store.indexes[("tp", 0)]
    return idx.end_offset, [(o, v, c) for o, v, c in zip(idx.offsets, idx.versions, idx.counts) if v >= start]


def _wal(vnode: Vnode, start: int) -> list[tuple[int, int, bytes]]:
    return [(e.version, e.kind, bytes(e.body)) for e in vnode.wal.read_from(start) if e.version >= start]


def test_a_copy_restored_from_the_snapshot_equals_the_leaders_also_across_a_restart(tmp_path: Path) -> None:
    leader, lv, start, follower = _pair(tmp_path)
    try:
        assert follower.vnodes["old"][0].wal.next_version < start
        m = _staged(leader, follower)
        end = m.end_version
        leader.execute("INSERT INTO old.t7 USING old.st TAGS (7) VALUES (7000, 7)")  # after L
        leader.execute("DROP TABLE old.t3")
        installed = follower.install_vnode_snapshot("old", 0)
        assert (installed.wal.first_version, installed.wal.next_version, installed.restoring) == (start, start,
                                                                                                 (start, end))
        assert not follower.staging_dir("old", 0).exists() and (installed.dir / RESTORING).exists()
        assert installed.store.covered == end and installed.get("t0").tags == {"site": 7}  # type: ignore[union-attr]
        snapshot_end_offset = _offsets(follower, start)[0]
        _copy(lv, follower, start + (end - start) // 2)  # half of [S0, L): nothing derived from it
        assert follower.vnodes["old"][0].store.covered == end and _offsets(follower, start)[0] == snapshot_end_offset
        follower.close()
        follower = Engine.open(tmp_path / "f")  # a restart in the middle of the restore
        again = follower.vnodes["old"][0]
        assert again.restoring == (start, end) and again.store.covered == end
        assert _offsets(follower, start)[0] == snapshot_end_offset
        _copy(lv, follower, lv.wal.next_version)  # the rest of [S0, L) then past L: derived as ever
        restored = follower.vnodes["old"][0]
        assert restored.restoring is None and not (restored.dir / RESTORING).exists()
        assert _tables(restored) == _tables(lv) and restored.get("t7") is not None
        assert _offsets(follower, start) == _offsets(leader, start)
        assert _wal(restored, start) == _wal(lv, start) != []
        (restored.dir / RESTORING).write_bytes(lines.encode({"start": start, "end": end}))  # (a crash before it went)
        follower.close()
        follower = Engine.open(tmp_path / "f")
        assert _tables(follower.vnodes["old"][0]) == _tables(lv)
        assert _offsets(follower, start) == _offsets(leader, start)
        assert follower.vnodes["old"][0].restoring == (start, end)
        assert not _position(follower, "old", 0, False).restoring and not (restored.dir / RESTORING).exists()
    finally:
        follower.close()
        leader.close()


def _old_copy(e: Engine) -> tuple[int, list[tuple[object, ...]]]:
    vnode = e.vnodes["old"][0]
    return vnode.wal.next_version, _tables(vnode)


@pytest.mark.parametrize("damage", ["flip", "cut", "missing"])
def test_a_damaged_staged_file_is_refused_and_the_old_copy_served(tmp_path: Path, damage: str) -> None:
    leader, _, _, follower = _pair(tmp_path)
    try:
        follower.execute("INSERT INTO old.f0 USING old.st TAGS (1) VALUES (1000, 1)")
        before = _old_copy(follower)
        m = _staged(leader, follower)
        for f in (*m.files, None):
            path = follower.staging_dir("old", 0) / (f.name if f is not None else "manifest")
            data = path.read_bytes()
            if damage == "flip" and data:
                path.write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x10]) + data[len(data) // 2 + 1:])
            elif damage == "cut" and data:
                path.write_bytes(data[:-1])
            elif damage == "missing":
                path.unlink()
            else:
                continue
            with pytest.raises(ValueError):
                follower.install_vnode_snapshot("old", 0)
            assert not follower.staging_dir("old", 0).exists() and _old_copy(follower) == before
            m = _staged(leader, follower)
        assert verify(follower.staging_dir("old", 0)) == m
    finally:
        follower.close()
        leader.close()


@pytest.mark.parametrize("error", ["enospc", "eio"])
def test_a_refused_staged_write_or_marker_leaves_the_old_copy_served(tmp_path: Path, error: str) -> None:
    leader, _, _, follower = _pair(tmp_path)
    try:
        before = _old_copy(follower)
        directory, m = leader.snapshot_vnode("old", 0, "s1")
        faults = Faults()
        with faults.active():
            staging = Staging(follower.staging_dir("old", 0), m.total_bytes, SyncLatency())
            faults.fail_kind("pwrite", error, at=2)
            with pytest.raises(StorageUnavailable):
                while not staging.done:
                    staging.take(staging.position, read(directory, m, staging.position, 200))
            faults.clear()
            _staged(leader, follower)
            for op in ("write", "fsync"):
                faults.fail_kind(op, error, at=1)
                with pytest.raises(StorageUnavailable):
                    follower.install_vnode_snapshot("old", 0)
                faults.clear()
                assert not follower.staging_dir("old", 0).exists() and _old_copy(follower) == before
                _staged(leader, follower)
        assert follower.install_vnode_snapshot("old", 0).restoring == (m.start_version, m.end_version)
    finally:
        follower.close()
        leader.close()


@pytest.mark.parametrize("step", ["staging", "old deleted", "renamed", "marker damaged"])
def test_a_crash_at_each_step_of_the_install_opens_what_the_disk_holds(tmp_path: Path, step: str) -> None:
    leader, _, _, follower = _pair(tmp_path)
    try:
        follower.execute("INSERT INTO old.f0 USING old.st TAGS (1) VALUES (1000, 1)")
        before = _old_copy(follower)
        directory, m = leader.snapshot_vnode("old", 0, "s1")
        staging_dir = follower.staging_dir("old", 0)
        vnode_dir = follower.vnodes["old"][0].dir
        staging = Staging(staging_dir, m.total_bytes, SyncLatency())
        staging.take(0, read(directory, m, 0, m.total_bytes // 2))
        follower.close()  # (the vnode's files as a kill leaves them: the WAL and store durable, its own doing)
        if step != "staging":
            staging = Staging(staging_dir, m.total_bytes, SyncLatency())
            staging.take(0, read(directory, m, 0, m.total_bytes))
            prepare_install(staging_dir, verify(staging_dir), SyncLatency())
            delete_vnode_dir(vnode_dir, SyncLatency())
        if step in ("renamed", "marker damaged"):
            staging_dir.rename(vnode_dir)
        if step == "marker damaged":
            raw = (vnode_dir / RESTORING).read_bytes()
            (vnode_dir / RESTORING).write_bytes(raw[:5] + bytes([raw[5] ^ 0x01]) + raw[6:])
        follower = Engine.open(tmp_path / "f")
        vnode = follower.vnodes["old"][0]
        assert not staging_dir.exists()
        if step == "staging":
            assert _old_copy(follower) == before and vnode.restoring is None
        elif step == "renamed":
            assert vnode.restoring == (m.start_version, m.end_version) and vnode.store.covered == m.end_version
            assert vnode.wal.first_version == vnode.wal.next_version == m.start_version
            assert vnode.get("t0").tags == {"site": 7}  # type: ignore[union-attr]
        else:  # an empty copy, fetched again from 0: below the log start, a snapshot again
            assert (vnode.wal.next_version, vnode.restoring, vnode.live_count) == (0, None, 0)
    finally:
        follower.close()
        leader.close()


def test_a_copy_restoring_from_a_snapshot_refuses_to_lead(tmp_path: Path) -> None:
    """An election of it (an unclean one: it never joins the ISR) finds its takeover refused, nothing begun."""
    leader, _, _, follower = _pair(tmp_path)
    try:
        _staged(leader, follower)
        restoring = follower.install_vnode_snapshot("old", 0)
        state = PartitionState((1, 2), 2, 3, 3, (IsrMember(2, 1),), (), 1)
        with pytest.raises(Unsupported, match="cannot lead"):
            _take_over(follower, ("old", 0), state, 2, 1, 0, 30_000)
        assert restoring.epochs.latest_epoch < 3 and not restoring.wal.leading
    finally:
        follower.close()
        leader.close()


KILLED = r"""
import sys, time
from pathlib import Path
from walgate.storage import engine as engine_module, fileio, replicated
from walgate.storage.engine import Engine
from walgate.storage.fileio import SyncLatency
from walgate.storage.vnode import Vnode
from walgate.storage.vnode_snapshot import Staging, read
root, point = Path(sys.argv[1]), sys.argv[2]

def pause(at):
    if point == at:
        print("paused", flush=True)
        time.sleep(600)

def after(owner, name, at):
    real = getattr(owner, name)
    def paused(*args, **kwargs):
        out = real(*args, **kwargs)
        pause(at)
        return out
    setattr(owner, name, paused)

after(engine_module, "prepare_install", "marker")
after(engine_module, "delete_vnode_dir", "deleted")
after(fileio, "rename", "renamed")
after(Vnode, "restored", "restored")
leader, follower = Engine.open(root / "l"), Engine.open(root / "f")
directory, m = leader.snapshot_vnode("old", 0, "k")
staging = Staging(follower.staging_dir("old", 0), m.total_bytes, SyncLatency())
while not staging.done:
    staging.take(staging.position, read(directory, m, staging.position, 97))
    if staging.position > m.total_bytes // 2:
        pause("staging")
follower.install_vnode_snapshot("old", 0)
lv = leader.vnodes["old"][0]
while follower.vnodes["old"][0].wal.next_version < lv.wal.next_version:
    vnode = follower.vnodes["old"][0]
    at = vnode.wal.next_version
    region = lv.wal.batches_from(at, 1, lv.wal.next_version)  # (one batch at a time)
    replicated.append_replicated(follower.store, follower.views, vnode, region.read(), at, 0)
    pause("appending")
pause("done")
"""
"""A child restoring the follower's copy (``argv``: the root of test_vnode_restore's pair, the point to pause at),
paused at the point: its parent kills it there (SIGKILL)."""


@pytest.mark.parametrize("point", ["staging", "marker", "deleted", "renamed", "appending", "restored", "done"])
def test_a_kill_9_at_each_step_of_a_restore_opens_what_the_disk_holds_and_the_restore_finishes(
        tmp_path: Path, point: str) -> None:
    leader, lv, start, follower = _pair(tmp_path)
    follower.execute("INSERT INTO old.f0 USING old.st TAGS (1) VALUES (1000, 1)")
    before = _old_copy(follower)
    leader.close()
    follower.close()
    killed_when_paused(KILLED, str(tmp_path), point)
    leader, follower = Engine.open(tmp_path / "l"), Engine.open(tmp_path / "f")
    try:
        lv = leader.vnodes["old"][0]
        vnode = follower.vnodes["old"][0]
        assert not follower.staging_dir("old", 0).exists()
        if point in ("staging", "marker"):  # the old copy, as it was
            assert _old_copy(follower) == before and vnode.restoring is None
        elif point == "deleted":  # none: an empty copy, fetched again from 0 (below the log start: restored again)
            assert (vnode.wal.next_version, vnode.restoring, vnode.live_count) == (0, None, 0)
        elif point in ("renamed", "appending"):
            assert vnode.restoring is not None and vnode.restoring[0] == start
        else:
            assert vnode.restoring is None and vnode.wal.next_version == lv.wal.next_version
        if vnode.restoring is None and vnode.wal.next_version < lv.wal.first_version:
            _staged(leader, follower)
            follower.install_vnode_snapshot("old", 0)
        _copy(lv, follower, lv.wal.next_version)
        restored = follower.vnodes["old"][0]
        assert restored.restoring is None and _tables(restored) == _tables(lv)
        assert _offsets(follower, start) == _offsets(leader, start)
        assert _wal(restored, start) == _wal(lv, start) != []
    finally:
        follower.close()
        leader.close()
