"""The leader's vnode snapshot (docs/plans/vnode-snapshot.md, step 1; walgate.storage.vnode_snapshot): taken at the
WAL's end of a vgroup whose retention deleted the segments creating its first tables, with a TDengine topic, tables
made below and above the log start, a DROP TABLE after it and a table made below it re-created with other tags: its
meta store copy covers the end and holds the leader's tables, each topic's index records are the leader's of
``[S0, L)`` with the log start and end offsets; the stream paged in pieces of any size is the manifest then the
files, each verified by the manifest. A snapshot taken, then more writes, then another: the first's stream is
unchanged. 5000 subtables page whole. A write the disk refuses (ENOSPC, EIO) at any file leaves no snapshot and the
vnode serving. A manifest with a flipped byte, or naming a file out of the snapshot's directory, is refused."""

from __future__ import annotations

import uuid
from pathlib import Path

import crc32c
import pytest
from faults import Faults

from tests.storage.test_truncate import _retained
from walgate.storage import lines
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE, MetaStore, OpenStores
from walgate.storage.offsets import pack_record
from walgate.storage.vnode import Vnode
from walgate.storage.vnode_snapshot import SNAPSHOTS, Manifest, read, remove_all


def _made(path: Path) -> tuple[Engine, Vnode, int]:
    """A vgroup of ``old`` whose first tables' segments retention deleted (S0 past them), a topic over it, then
    tables above S0, a DROP TABLE and a re-creation with other tags; the log start S0."""
    e, vnode = _retained(path)
    start = vnode.wal.first_version
    e.execute("CREATE TOPIC tp AS SELECT ts, v FROM old.st WHERE site > 0")
    for i in range(3, 6):
        e.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (2000, {i}) (3000, {i})")
    e.execute("INSERT INTO old.t1 VALUES (4000, 11)")
    e.execute("DROP TABLE old.t4")
    e.execute("DROP TABLE old.t0")  # (below S0) re-created with other tags
    e.execute("INSERT INTO old.t0 USING old.st TAGS (7) VALUES (5000, 70)")
    return e, vnode, start


def _snapshot(e: Engine, sid: str) -> tuple[Path, Manifest]:
    return e.snapshot_vnode("old", 0, sid)


def _rows(store: MetaStore) -> list[tuple[object, ...]]:
    return sorted((t.name, t.stable, t.tags, t.version, t.dropped) for t in store.all())


def _paged(directory: Path, manifest: Manifest, page: int) -> bytes:
    out, offset = bytearray(), 0
    for _ in range(manifest.total_bytes + 2):  # (bounded: at least one byte a page)
        chunk = read(directory, manifest, offset, page)
        if not chunk:
            break
        out += chunk
        offset += len(chunk)
    return bytes(out)


def test_a_snapshot_holds_the_tables_and_topic_offsets_at_the_wal_end(tmp_path: Path) -> None:
    e, vnode, start = _made(tmp_path / "d")
    try:
        directory, m = _snapshot(e, uuid.uuid4().hex)
        end = vnode.wal.next_version
        assert (m.start_version, m.end_version) == (start, end) and directory.parent.name == SNAPSHOTS
        assert vnode.store.covered == end and vnode.wal.durable_version == end
        copy = MetaStore.open(directory / META_STORE, OpenStores())
        try:
            assert copy.covered == end and copy.live == vnode.live_count
            assert _rows(copy) == _rows(vnode.store)
            t0 = copy.get("t0")
            assert t0 is not None and t0.tags == {"site": 7} and copy.get("t4").dropped  # type: ignore[union-attr]
        finally:
            copy.close()
        idx = e.store.indexes[("tp", 0)]
        [topic] = m.topics
        assert topic.topic_id == e.catalog.topics["tp"].topic_id and (topic.log_start, topic.end_offset) == (  # type: ignore[union-attr]
            idx.start_offset, idx.end_offset) and idx.end_offset > 0
        want = b"".join(pack_record(o, v, c, r) for o, v, c, r in zip(idx.offsets, idx.versions, idx.counts,
                                                                        idx.running_max) if start <= v < end)
        assert (directory / f"topics/{topic.topic_id}.oidx").read_bytes() == want and want
        stream = m.encode() + b"".join((directory / f.name).read_bytes() for f in m.files)
        assert len(stream) == m.total_bytes
        for f in m.files:
            data = (directory / f.name).read_bytes()
            assert (len(data), crc32c.crc32c(data)) == (f.size, f.crc)
        for page in (1, 7, 4096, m.total_bytes, 1 << 30):
            assert _paged(directory, m, page) == stream
        assert read(directory, m, m.total_bytes, 100) == b""
        assert Manifest.decode(m.encode()[:-1]) == m
    finally:
        e.close()


def test_a_snapshot_is_unchanged_by_writes_after_it_and_a_later_one_takes_them(tmp_path: Path) -> None:
    e, vnode, _ = _made(tmp_path / "d")
    try:
        first, m1 = _snapshot(e, "a1")
        before = _paged(first, m1, 1000)
        e.execute("INSERT INTO old.t9 USING old.st TAGS (9) VALUES (6000, 9)")
        e.execute("DROP TABLE old.t5")
        assert _paged(first, m1, 333) == before
        second, m2 = _snapshot(e, "a2")
        assert m2.end_version == vnode.wal.next_version > m1.end_version
        copy = MetaStore.open(second / META_STORE, OpenStores())
        try:
            assert copy.get("t9") is not None and copy.get("t5").dropped  # type: ignore[union-attr]
        finally:
            copy.close()
        old = MetaStore.open(first / META_STORE, OpenStores())
        try:
            assert old.get("t9") is None and old.covered == m1.end_version
        finally:
            old.close()
        remove_all(e.store.db_dir(vnode.db))
        assert not (first.exists() or second.exists())
    finally:
        e.close()


@pytest.mark.parametrize("error", ["enospc", "eio"])
def test_a_refused_write_leaves_no_snapshot_and_the_vnode_serving(tmp_path: Path, error: str) -> None:
    e, vnode, _ = _made(tmp_path / "d")
    try:
        faults = Faults()
        with faults.active():
            _snapshot(e, "clean")  # (the WAL synced, the store checkpointed: what follows writes only the snapshot)
            writes = faults.calls["write"]
            _snapshot(e, "count")
            writes = faults.calls["write"] - writes
            assert writes >= 2  # the topic's records, the manifest
            for k in range(1, writes + 1):
                faults.fail_kind("write", error, at=k)
                with pytest.raises(StorageUnavailable):
                    _snapshot(e, f"x{k}")
                faults.clear()
                assert not (e.store.db_dir(vnode.db) / SNAPSHOTS / f"x{k}").exists()
        e.execute("INSERT INTO old.t1 VALUES (9000, 1)")
        directory, m = _snapshot(e, "after")
        assert m.end_version == vnode.wal.next_version and (directory / "manifest").exists()
    finally:
        e.close()


def test_a_damaged_manifest_or_one_naming_a_file_out_of_the_snapshot_is_refused(tmp_path: Path) -> None:
    e, _, _ = _made(tmp_path / "d")
    try:
        _, m = _snapshot(e, "m")
    finally:
        e.close()
    line = m.encode()[:-1]
    for i in range(len(line)):
        flipped = bytearray(line)
        flipped[i] ^= 0x04
        with pytest.raises(ValueError):
            Manifest.decode(bytes(flipped))
    for name in ("../meta.db", "topics/../../x.oidx", "/etc/passwd", "wal/0.log", "topics/a/b.oidx"):
        bad = {"id": "m", "start": 0, "end": 1, "files": [[name, 1, 0]], "topics": []}
        with pytest.raises(ValueError, match="manifest file"):
            Manifest.decode(lines.encode(bad)[:-1])
    for start, end in ((2, 1), (-1, 1)):
        with pytest.raises(ValueError):
            Manifest.decode(lines.encode({"id": "m", "start": start, "end": end, "files": [], "topics": []})[:-1])


def test_a_snapshot_of_many_subtables_pages_whole(tmp_path: Path) -> None:
    e, vnode, _ = _made(tmp_path / "d")
    try:
        n = 5000
        e.execute("INSERT INTO " + " ".join(f"old.m{i} USING old.st TAGS ({i}) VALUES (1000, {i})" for i in range(n)))
        directory, m = _snapshot(e, "many")
        stream = _paged(directory, m, 64 << 10)
        assert len(stream) == m.total_bytes > 100 * n
        copy = MetaStore.open(directory / META_STORE, OpenStores())
        try:
            assert sum(1 for t in copy.all() if t.name.startswith("m")) == n and copy.live == vnode.live_count
        finally:
            copy.close()
    finally:
        e.close()
