"""Group commit in storage (issue 15): a WAL_LEVEL 2 append and a consumer-group commit return before their fsync and
note what they need; one sync covers every write made before it was taken; nothing is visible before it is durable;
a failed sync refuses what it covered (WAL: kept, invisible, rewritten and synced by the next sync; commits: cut
off, never applied, never found by a reopen)."""

from __future__ import annotations

import errno
import os
import threading

from faults import Faults

from walgate.storage import fileio, lines
from walgate.storage.coordinator_log import Committed, CoordinatorLog
from walgate.storage.durability import Unsynced
from walgate.storage.wal import KIND_DATA, Wal, WalOptions

LEVEL2 = WalOptions(level=2, fsync_period_ms=0)


def _entry(i: int) -> list[tuple[int, int, int, bytes]]:
    return [(KIND_DATA, 1, i, b"row %d" % i)]


def _ledger(woken: list[tuple[str, int]] | None = None) -> Unsynced:
    return Unsynced((woken if woken is not None else []).append)


def test_appends_note_their_need_and_one_sync_covers_them_all(tmp_path):
    woken: list[tuple[str, int]] = []
    ledger = _ledger(woken)
    wal = Wal.open(tmp_path / "wal", LEVEL2, unsynced=ledger, owner=("db", 3))
    faults = Faults()
    with faults.active():
        for i in range(5):
            wal.append(_entry(i))
        assert faults.calls["fdatasync"] == 0, "a group-commit append fsynced inline"
        assert ledger.take() == [(wal, 5)] and ledger.take() == []  # the latest need per file, taken once
        assert wal.visible_version == 0 and wal.durable_to == 0
        sync = wal.take_sync()
        assert sync is not None and wal.take_sync() is None  # at most one sync taken and not done
        wal.append(_entry(5))  # written while the sync runs: the next sync's
        sync.run()
        sync.done()
        assert faults.calls["fdatasync"] == 1
    assert (sync.covers, wal.durable_to, wal.visible_version, wal.next_version) == (5, 5, 5, 6)
    assert woken == [("db", 3)]
    follow = wal.take_sync()
    assert follow is not None and follow.covers == 6


def test_a_failed_sync_keeps_the_appends_invisible_until_a_resync_makes_them_durable(tmp_path, caplog):
    wal = Wal.open(tmp_path / "wal", LEVEL2, unsynced=_ledger())
    for i in range(3):
        wal.append(_entry(i))
    sync = wal.take_sync()
    assert sync is not None
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        sync.run()
    sync.done()
    assert sync.error is not None and sync.covers == 3  # the needs up to 3 are refused
    assert "group-commit fdatasync failed" in caplog.text
    assert (wal.durable_to, wal.visible_version) == (0, 0)
    with faults.active():
        again = wal.take_sync()
        assert again is not None
        again.run()
        assert faults.calls["pwrite"] >= 1  # fsyncgate: the pages are re-dirtied before the fdatasync
    again.done()
    assert (wal.durable_to, wal.visible_version) == (3, 3)


def test_an_undo_makes_a_sync_taken_before_prove_nothing(tmp_path):
    ledger = _ledger()
    wal = Wal.open(tmp_path / "wal", LEVEL2, unsynced=ledger)
    wal.append(_entry(0))
    sync = wal.take_sync()
    assert sync is not None
    first = wal.append(_entry(1))
    wal.undo_append(first)
    assert ledger.take() == [(wal, 1)]  # the undone append's need names the end again
    wal.append(_entry(2))  # takes version 1 again, after the sync was taken
    sync.run()
    sync.done()
    assert wal.durable_to == 1  # (the undo's own fdatasync); not 2: the sync could not have covered the new version 1


def test_without_a_ledger_level_2_appends_still_fsync_inline(tmp_path):
    wal = Wal.open(tmp_path / "wal", LEVEL2)
    wal.append(_entry(0))
    assert (wal.durable_to, wal.visible_version) == (1, 1) and wal.take_sync() is None


def test_commits_are_applied_only_once_their_sync_succeeded(tmp_path):
    path = tmp_path / "offsets-0.log"
    ledger = _ledger()
    store = CoordinatorLog.open(path, unsynced=ledger)
    faults = Faults()
    with faults.active():
        store.commit("g", [("t", 0, Committed(5, 0, None, 1))])
        store.commit("g", [("t", 0, Committed(6, 0, None, 2))])
        assert faults.calls["fsync"] == 0
    assert ledger.take() == [(store, 2)]
    assert store.get("g", "t", 0) is None, "a commit is seen before it is durable"
    sync = store.take_sync()
    assert sync is not None and store.take_sync() is None
    with faults.active():
        sync.run()
        assert faults.calls["fsync"] == 1  # one fsync for both commits
    sync.done()
    assert store.durable_to == 2 and store.get("g", "t", 0) == Committed(6, 0, None, 2)
    assert CoordinatorLog.open(path).get("g", "t", 0) == Committed(6, 0, None, 2)


def test_group_committed_offsets_are_written_by_their_sync_and_a_short_write_refuses_them(tmp_path):
    """Under group commit the storage thread only queues a commit: the sync writes it (off that thread), and a
    write the disk cuts short refuses every queued commit and leaves the file as it was."""
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path, unsynced=_ledger())
    store.commit("g", [("t", 0, Committed(1, 0, None, 1))])
    assert not path.exists() or path.stat().st_size == 0  # queued, not written
    ok = store.take_sync()
    assert ok is not None
    ok.run()
    ok.done()
    size = path.stat().st_size
    assert size > 0 and store.get("g", "t", 0) == Committed(1, 0, None, 1)
    store.commit("g", [("t", 0, Committed(2, 0, None, 2)), ("t", 1, Committed(7, 0, None, 2))])
    sync = store.take_sync()
    assert sync is not None
    faults = Faults()
    with faults.active():
        faults.fail("write", short=True)
        sync.run()
    sync.done()
    assert sync.error is not None and path.stat().st_size == size
    assert store.get("g", "t", 0) == Committed(1, 0, None, 1) and store.get("g", "t", 1) is None
    reopened = CoordinatorLog.open(path)
    assert reopened.get("g", "t", 0) == Committed(1, 0, None, 1) and reopened.get("g", "t", 1) is None


def test_a_failed_commits_sync_refuses_every_commit_not_durable_and_cuts_them_off(tmp_path, caplog):
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path, unsynced=_ledger())
    store.commit("g", [("t", 0, Committed(1, 0, None, 1))])
    ok = store.take_sync()
    assert ok is not None
    ok.run()
    ok.done()
    store.commit("g", [("t", 0, Committed(2, 0, None, 2))])
    sync = store.take_sync()
    assert sync is not None
    store.commit("g", [("t", 0, Committed(3, 0, None, 3))])  # written while the sync runs
    faults = Faults()
    with faults.active():
        faults.fail("fsync", error=errno.EIO)
        sync.run()
    sync.done()
    assert sync.error is not None and sync.covers == 3  # both commits not durable are refused
    assert "cut off" in caplog.text
    assert store.get("g", "t", 0) == Committed(1, 0, None, 1) and store.take_sync() is None
    assert CoordinatorLog.open(path).get("g", "t", 0) == Committed(1, 0, None, 1)  # a reopen never finds them
    store.commit("g", [("t", 0, Committed(4, 0, None, 4))])
    after = store.take_sync()
    assert after is not None
    after.run()
    after.done()
    assert store.durable_to == 4 and CoordinatorLog.open(path).get("g", "t", 0) == Committed(4, 0, None, 4)


def test_a_group_record_written_while_a_commits_sync_is_taken_survives_the_syncs_failure(tmp_path):
    """Offsets and group records share the coordinator log: a group record (fsynced on the storage thread) written
    after a sync was taken and before it runs is never cut off by that sync's failure, and the commits it covered are
    refused."""
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path, unsynced=_ledger())
    store.commit("g", [("t", 0, Committed(1, 0, None, 1))])
    sync = store.take_sync()
    assert sync is not None
    store.write_groups([("g", {"generation": 3})])  # durable before it returns, the sync still to run
    faults = Faults()
    with faults.active():
        faults.fail("fsync", error=errno.EIO)
        sync.run()
    sync.done()
    assert sync.error is not None and store.get("g", "t", 0) is None and store.groups() == {"g": {"generation": 3}}
    reopened = CoordinatorLog.open(path)
    assert reopened.get("g", "t", 0) is None and reopened.groups() == {"g": {"generation": 3}}
    store.commit("g", [("t", 0, Committed(2, 0, None, 2))])
    after = store.take_sync()
    assert after is not None
    after.run()
    after.done()
    reopened = CoordinatorLog.open(path)
    assert reopened.get("g", "t", 0) == Committed(2, 0, None, 2) and reopened.groups() == {"g": {"generation": 3}}


class _HeldFsync:
    """Stands in for ``fileio.os``: the first fsync waits until :attr:`release` is set (bounded)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fsyncs = 0

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        if self.fsyncs == 1:
            self.entered.set()
            assert self.release.wait(30), "never released"
        os.fsync(fd)


def test_a_group_record_waits_for_a_running_commits_sync_and_is_appended_after_it(tmp_path, monkeypatch):
    """The sync's write and fsync run on a sync thread while the storage thread may write a group record to the same
    file: the record waits for the sync (never interleaved with its bytes, never cut off by its failure) and is
    durable once ``write_groups`` returns."""
    path = tmp_path / "offsets-0.log"
    store = CoordinatorLog.open(path, unsynced=_ledger())
    store.commit("g", [("t", 0, Committed(1, 0, None, 1))])
    sync = store.take_sync()
    assert sync is not None
    held = _HeldFsync()
    monkeypatch.setattr(fileio, "os", held)
    syncer = threading.Thread(target=sync.run)
    syncer.start()
    assert held.entered.wait(30)  # the sync has written its line and is in its fsync
    writer = threading.Thread(target=store.write_groups, args=([("g", {"generation": 1})],))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive(), "the group record did not wait for the running sync"
    held.release.set()
    syncer.join(30)
    writer.join(30)
    assert not syncer.is_alive() and not writer.is_alive()
    sync.done()
    assert sync.error is None and held.fsyncs == 2
    kinds = ["v" in r for _, _, r in lines.scan(path.read_bytes()).records]
    assert kinds == [False, True]  # the commit's line, then the group record's
    reopened = CoordinatorLog.open(path)
    assert reopened.get("g", "t", 0) == Committed(1, 0, None, 1) and reopened.groups() == {"g": {"generation": 1}}
