"""The meta store's undo journal (:mod:`walgate.storage.meta_store`, ``Vnode.truncate_to``): a vnode whose WAL
retention cut at its start is cut back to any version at or above what its journal keeps (the high watermark it was
given), its tables then those it had there (drops undone, re-created tables back to their earlier definition, new
tables gone), without reading the WAL below the cut, also after a reopen; entries flushed one by one or many in one
store write. The journal is trimmed as the high watermark passes (a cut below it is refused as before, nothing
cut). A journal write the disk refuses (SQLITE_FULL, SQLITE_IOERR) writes nothing of its store write, which is
taken later; a refused cut cuts nothing. A journal line damaged (a flipped byte, a cut line, a changed version)
serves no cut: refused when retention deleted versions, rebuilt from the WAL when it is whole. A kill -9 at any point
of a cut reopens with the tables of the WAL as it is, cut or not, and a cut after it succeeds. Creating subtables
while the journal is empty runs no statement on it (the write path does no more work than before the journal).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from old_release import killed_when_paused

from tests.storage.test_meta_store_format import PAUSING, refusing
from tests.storage.test_truncate import _retained
from walgate.storage import hw_checkpoint, meta_store
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.fileio import SyncLatency
from walgate.storage.meta_store import META_STORE
from walgate.storage.vnode import Vnode

COLUMNS = [["ts", "TIMESTAMP", None], ["v", "INT", None]]
TAIL: list[dict[str, Any]] = [  # after the mark: every kind of change a cut must undo
    {"op": "drop_table", "name": "t1"},
    {"op": "create_table", "name": "t3", "stable": "st", "tags": {"site": 3}},  # new
    {"op": "drop_stable", "stable": "st"},  # t0, t2, t3 (t1 was dropped before)
    {"op": "create_table", "name": "t0", "stable": "st", "tags": {"site": 9}},  # re-created
    {"op": "create_table", "name": "n", "columns": COLUMNS},
    {"op": "drop_table", "name": "t0"},  # the re-created one
    {"op": "drop_stable", "stable": "st"},  # nothing live of it
    {"op": "create_table", "name": "t1", "stable": "st", "tags": {"site": 8}},  # re-created, dropped at the mark
]


def retained(path: Path) -> tuple[Engine, Vnode]:
    """An engine whose database ``old`` has subtables t0..t2 of ``st``, the segments creating them deleted by
    retention (:func:`tests.storage.test_truncate._retained`), its WAL's high watermark its end: given
    (:attr:`Wal.replication`) and checkpointed, as a replica manager does (so that it is a replica's also when
    opened again)."""
    e, vnode = _retained(path)
    given_hw(vnode, vnode.wal.next_version)
    hw_checkpoint.write(vnode.dir, vnode.wal.next_version, syncs=SyncLatency())
    return e, vnode


def given_hw(vnode: Vnode, hw: int) -> None:
    vnode.wal.replication = lambda _end, _durable: hw


def append(e: Engine, metas: list[dict[str, Any]], flush_each: bool) -> list[int]:
    """Each of ``metas`` committed to vnode 0 of ``old`` (its store written after each when ``flush_each``, else
    at each DROP STABLE alone); the WAL version of each, then the WAL's end."""
    db, vnode = e.catalog.database("old"), e.vnodes["old"][0]
    versions = []
    for meta in metas:
        versions.append(vnode.wal.next_version)
        e.commits.commit(db, {0: e.commits.with_meta(db, meta)})
        if flush_each:
            vnode.end_write()
    return [*versions, vnode.wal.next_version]


def state(vnode: Vnode) -> tuple[list[Any], int]:
    return [(t.name, t.stable, t.tags, t.columns, t.version, t.created_ts, t.dropped) for t in vnode.tables()], \
        vnode.live_count


def journal(path: Path) -> list[int]:
    """The versions of the undo journal's lines in the store of database ``old``'s vnode 0 under ``path``."""
    [store] = path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    try:
        return [v for (v,) in conn.execute("SELECT version FROM undo ORDER BY id")]
    finally:
        conn.close()


def no_rebuild(vnode: Vnode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vnode, "_rebuild_after_cut", lambda: pytest.fail("rebuilt from the WAL"))


def with_tail(path: Path, flush_each: bool = True) -> tuple[Engine, Vnode, list[int], list[tuple[list[Any], int]]]:
    """:func:`retained` then :data:`TAIL` appended (:func:`append`): the engine, its vnode, the version before each
    entry and the WAL's end, and the vnode's tables at each."""
    e, vnode = retained(path)
    versions, snaps = [vnode.wal.next_version], [state(vnode)]
    for meta in TAIL:
        versions.append(append(e, [meta], flush_each)[-1])
        snaps.append(state(vnode))
    return e, vnode, versions, snaps


@pytest.mark.parametrize("flush_each", [True, False])
@pytest.mark.parametrize("k", range(len(TAIL) + 1))
def test_a_cut_after_retention_takes_the_tables_back_to_the_cut_by_the_journal(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             flush_each: bool, k: int):
    e, vnode, versions, snaps = with_tail(tmp_path, flush_each)
    no_rebuild(vnode, monkeypatch)
    assert e.truncate_vnode("old", 0, versions[k], high_watermark=versions[0]) == versions[k]
    assert state(vnode) == snaps[k] and vnode.store.covered == vnode.meta_version == versions[k]
    assert all(v < versions[k] for v in journal(tmp_path))
    e.close()
    e = Engine.open(tmp_path)
    again = e.vnodes["old"][0]
    assert state(again) == snaps[k] and e.damage() == []
    e.execute("INSERT INTO old.t5 USING old.st TAGS (5) VALUES (2000, 5)")  # (st dropped at k > 2: a new one)
    assert again.live("t5") is not None
    e.close()


def test_cuts_one_after_another_each_take_the_tables_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    e, vnode, versions, snaps = with_tail(tmp_path)
    no_rebuild(vnode, monkeypatch)
    for k in reversed(range(len(TAIL))):
        e.truncate_vnode("old", 0, versions[k], high_watermark=versions[0])
        assert state(vnode) == snaps[k], k
    assert journal(tmp_path) == []
    e.close()


def test_the_journal_is_trimmed_as_the_high_watermark_passes_and_a_cut_below_it_is_refused(tmp_path: Path):
    e, vnode, versions, snaps = with_tail(tmp_path)
    assert journal(tmp_path) and vnode.store.undo_from == versions[0]
    given_hw(vnode, versions[3])
    vnode.checkpoint()
    assert journal(tmp_path) and min(journal(tmp_path)) >= versions[3] and vnode.store.undo_from == versions[3]
    e.truncate_vnode("old", 0, versions[3], high_watermark=versions[3])
    assert state(vnode) == snaps[3]
    with pytest.raises(StorageError, match="undo journal does not keep"):
        vnode.truncate_to(versions[0])  # (below its high watermark: the journal trimmed what it would need)
    assert state(vnode) == snaps[3] and vnode.wal.next_version == versions[3]
    given_hw(vnode, versions[3] + 1)
    append(e, [{"op": "drop_table", "name": "t0"}], True)
    vnode.wal.sync()  # (the high watermark is what the WAL holds durably, at most)
    vnode.checkpoint()
    assert journal(tmp_path) == [] and vnode.store.undo_from == vnode.store.covered
    e.close()


def test_a_replicas_journal_keeps_what_a_restart_from_its_checkpointed_high_watermark_may_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A replica's journal is trimmed at its high watermark only up to the one it last checkpointed: killed with its
    high watermark past its checkpoint and restarted (starting from the checkpoint), it cuts an entry between the two
    by the journal, after retention (fails when the journal is trimmed at the high watermark alone: checked,
    "undo journal does not keep")."""
    e, _ = retained(tmp_path)
    e.close()
    e = Engine.open(tmp_path)  # (its checkpoint on disk: a replica's vnode from now on)
    vnode = e.vnodes["old"][0]
    checkpointed = vnode.wal.next_version
    given_hw(vnode, checkpointed)
    vnode.write_hw_checkpoint(checkpointed)
    versions, snaps = [checkpointed], [state(vnode)]
    for meta in TAIL[:4]:
        versions.append(append(e, [meta], True)[-1])
        snaps.append(state(vnode))
    given_hw(vnode, versions[3])  # the high watermark passes three entries; the checkpoint is not written again
    vnode.wal.sync()  # (the high watermark is what the WAL holds durably, at most)
    assert vnode.wal.visible_version == versions[3]
    vnode.checkpoint()
    assert vnode.store.undo_from == checkpointed and min(journal(tmp_path)) == checkpointed
    e.close()  # (as a kill: nothing more written)
    e = Engine.open(tmp_path)
    again = e.vnodes["old"][0]
    assert hw_checkpoint.read(again.dir) == checkpointed
    no_rebuild(again, monkeypatch)
    assert e.truncate_vnode("old", 0, versions[1], high_watermark=checkpointed) == versions[1]
    assert state(again) == snaps[1]
    given_hw(again, versions[1] + 1)
    append(e, [{"op": "drop_table", "name": "t2"}], True)
    again.wal.sync()
    again.write_hw_checkpoint(versions[1] + 1)
    again.checkpoint()
    assert again.store.undo_from == versions[1] + 1 and journal(tmp_path) == []  # (trimmed once checkpointed)
    e.close()


def test_a_store_written_before_the_journal_gets_one_at_its_open(tmp_path: Path):
    e, vnode = retained(tmp_path)
    e.close()
    [store] = tmp_path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    conn.execute("DROP TABLE undo")
    conn.commit()
    conn.close()
    e = Engine.open(tmp_path)
    vnode = e.vnodes["old"][0]
    given_hw(vnode, vnode.wal.next_version)
    assert vnode.store.journaled and vnode.store.undo_from == vnode.store.covered and e.damage() == []
    mark = vnode.wal.next_version
    before = state(vnode)
    append(e, TAIL[:3], True)
    e.truncate_vnode("old", 0, mark, high_watermark=mark)
    assert state(vnode) == before
    e.close()


MESSAGES = {sqlite3.SQLITE_FULL: "database or disk is full", sqlite3.SQLITE_IOERR: "disk I/O error"}


def refuse(monkeypatch: pytest.MonkeyPatch, vnode: Vnode, prefix: str, code: int) -> None:
    """``vnode``'s store's statements starting with ``prefix`` refused with ``code`` from now on (``prefix`` "":
    none refused any more)."""
    vnode.store.park()  # (connected again through the patched module)
    monkeypatch.setattr(meta_store, "sqlite3", refusing(prefix, code, MESSAGES[code]) if prefix else sqlite3)


def stored(path: Path) -> tuple[Any, ...]:
    """The store's rows, covered line and journal as on disk (another connection)."""
    [store] = path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    try:
        return tuple(conn.execute(sql).fetchall() for sql in (
            "SELECT name, def FROM tables ORDER BY name", "SELECT line FROM covered", "SELECT * FROM undo"))
    finally:
        conn.close()


@pytest.mark.parametrize("code", [sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR])
def test_a_refused_journal_write_writes_nothing_of_its_store_write_and_is_taken_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int):
    e, vnode = retained(tmp_path)
    mark = vnode.wal.next_version
    before, on_disk = state(vnode), stored(tmp_path)
    refuse(monkeypatch, vnode, "INSERT INTO undo", code)
    append(e, [{"op": "drop_table", "name": "t1"}], True)  # (the store write refused: logged, kept in memory)
    assert stored(tmp_path) == on_disk and vnode.live("t1") is None
    with pytest.raises(StorageUnavailable, match=MESSAGES[code]):
        vnode.checkpoint()
    assert stored(tmp_path) == on_disk
    refuse(monkeypatch, vnode, "", code)
    vnode.checkpoint()
    assert journal(tmp_path) == [mark] and vnode.store.covered == vnode.wal.next_version
    e.truncate_vnode("old", 0, mark, high_watermark=mark)
    assert state(vnode) == before
    e.close()


@pytest.mark.parametrize("code", [sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR])
def test_a_cut_whose_store_write_is_refused_cuts_nothing_and_a_retry_cuts(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch, code: int):
    e, vnode, versions, snaps = with_tail(tmp_path)
    on_disk = stored(tmp_path)
    refuse(monkeypatch, vnode, "DELETE FROM undo WHERE version >=", code)
    with pytest.raises(StorageUnavailable):
        e.truncate_vnode("old", 0, versions[0], high_watermark=versions[0])
    assert stored(tmp_path) == on_disk and state(vnode) == snaps[-1] and vnode.wal.next_version == versions[-1]
    refuse(monkeypatch, vnode, "", code)
    e.truncate_vnode("old", 0, versions[0], high_watermark=versions[0])
    assert state(vnode) == snaps[0] and vnode.wal.next_version == versions[0]
    e.close()


def damage(path: Path, how: str) -> None:
    """The journal's newest line damaged ``how``."""
    [store] = path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    row_id, version, line = conn.execute("SELECT id, version, line FROM undo ORDER BY id DESC LIMIT 1").fetchone()
    if how == "flipped":
        at = len(line) // 2
        conn.execute("UPDATE undo SET line = ? WHERE id = ?", (line[:at] + bytes([line[at] ^ 0x10]) + line[at + 1:],
                                                               row_id))
    elif how == "cut":
        conn.execute("UPDATE undo SET line = ? WHERE id = ?", (line[:len(line) // 2], row_id))
    else:
        conn.execute("UPDATE undo SET version = ? WHERE id = ?", (version + 1, row_id))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("how", ["flipped", "cut", "version"])
def test_a_damaged_journal_serves_no_cut_refused_after_retention_nothing_cut(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture,
                                                                           how: str):
    e, vnode, versions, snaps = with_tail(tmp_path)
    e.close()
    damage(tmp_path, how)
    e = Engine.open(tmp_path)
    vnode = e.vnodes["old"][0]
    given_hw(vnode, versions[0])
    with pytest.raises(StorageError, match="undo journal does not keep"):
        e.truncate_vnode("old", 0, versions[0], high_watermark=versions[0])
    assert "cannot be cut back to version" in caplog.text and "undo journal's line" in caplog.text
    assert state(vnode) == snaps[-1] and vnode.wal.next_version == versions[-1]
    e.close()


@pytest.mark.parametrize("how", ["flipped", "cut", "version"])
def test_a_damaged_journal_of_a_whole_wal_is_passed_over_by_a_rebuild(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture, how: str):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE old VGROUPS 1")
    e.execute("CREATE STABLE old.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    for i in range(3):
        e.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (1000, {i})")
    vnode = e.vnodes["old"][0]
    mark = vnode.wal.next_version
    given_hw(vnode, mark)
    before = state(vnode)
    append(e, TAIL, True)
    e.close()
    damage(tmp_path, how)
    e = Engine.open(tmp_path)
    vnode = e.vnodes["old"][0]
    given_hw(vnode, mark)
    e.truncate_vnode("old", 0, mark, high_watermark=mark)
    assert state(vnode) == before and "undo journal's line" in caplog.text
    e.close()


KILLED = PAUSING + r"""
from walgate.storage.wal import Wal
point, mark = sys.argv[3], int(sys.argv[4])
cut = Wal.truncate_to
def pausing_cut(wal, version):
    if point == "wal":
        pause()  # (the store cut and fsynced, the WAL not yet)
    cut(wal, version)
    if point == "derived":
        pause()  # (the WAL cut, the offset indexes and epochs not yet)
Wal.truncate_to = pausing_cut
from walgate.storage.engine import Engine
e = Engine.open(Path(sys.argv[1]))
e.vnodes["old"][0].wal.replication = lambda _end, _durable: mark
e.truncate_vnode("old", 0, mark, high_watermark=mark)
pause()
"""
"""A child cutting database ``old``'s vnode 0 to ``mark`` (argv: the data dir, ``prefix:n`` as :data:`PAUSING`'s, the
point to pause at besides, the mark), paused at the point."""


@pytest.mark.parametrize("point", ["store", "wal", "derived", "done"])
def test_a_kill_at_any_point_of_a_cut_reopens_with_the_tables_of_the_wal_and_cuts_again(tmp_path: Path, point: str):
    e, vnode, versions, snaps = with_tail(tmp_path)
    e.close()
    pausing = "DELETE FROM undo WHERE version >=:1" if point == "store" else "never:1"  # (inside the store's cut)
    killed_when_paused(KILLED, str(tmp_path), pausing, point, str(versions[0]))
    e = Engine.open(tmp_path)
    vnode = e.vnodes["old"][0]
    cut = vnode.wal.next_version == versions[0]
    assert cut == (point in ("derived", "done")) and state(vnode) == snaps[0 if cut else -1]
    given_hw(vnode, versions[0])
    e.truncate_vnode("old", 0, versions[0], high_watermark=versions[0])
    assert state(vnode) == snaps[0] and e.damage() == []
    e.close()
    e = Engine.open(tmp_path)
    assert state(e.vnodes["old"][0]) == snaps[0]
    e.close()


def test_new_subtables_and_a_passing_high_watermark_run_no_statement_on_an_empty_journal(tmp_path: Path):
    e, vnode = retained(tmp_path)
    conn = vnode.store._conn
    assert conn is not None
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    for i in range(3, 6):
        given_hw(vnode, vnode.wal.next_version)
        e.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (1000, {i})")
        vnode.end_write()
    assert any("INSERT OR REPLACE INTO tables" in s for s in seen) and not any("undo" in s for s in seen)
    conn.set_trace_callback(None)
    e.close()
