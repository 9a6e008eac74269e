"""A vnode's leader-epoch cache on disk (storage/leader_epochs.py, issue 25): ``epoch -> first WAL version`` in
``leader-epoch-checkpoint``, written before memory when a leader starts an epoch, cut back with the WAL's end at
open, answering OffsetForLeaderEpoch in Kafka offsets (dense offsets of a TDengine topic too); refused writes
(ENOSPC, EIO, short writes, failed fsyncs and renames) change nothing, a kill -9 leaves the old file or the new
one, a damaged file is reported and read as what a single node led (epoch 0 from version 0)."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults

from walgate.replication.epochs import EpochEnd, EpochEntry
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.leader_epochs import EPOCH_FILE, SINGLE_NODE_EPOCHS, LeaderEpochs, encode
from walgate.storage.lines import encode as lines_encode
from walgate.storage.vnode import Vnode
from walgate.wire import encode_batch

UNDEFINED = (-1, -1)
REFUSALS = [("write", k) for k in FAULT_KINDS] + [("fsync", "enospc"), ("fsync", "eio"), ("replace", "eio")]
"""Every way the disk can refuse an atomic replace of the file."""


def _batch(n: int) -> bytes:
    return encode_batch(0, [1_000] * n, [b"k"] * n, [b"v%d" % i for i in range(n)])


def _native(e: Engine, records: int) -> Vnode:
    """Kafka-native topic ``t`` (one partition) holding ``records`` records, one batch each: its vnode."""
    e.create_kafka_topic("t", 1, {})
    for _ in range(records):
        e.append_batches("t", 0, [_batch(1)])
    return e.vnodes[e.catalog.topics["t"].db][0]


def _on_disk(vnode: Vnode) -> bytes:
    return (vnode.dir / EPOCH_FILE).read_bytes()


def test_every_new_vnode_holds_epoch_0_from_version_0_on_disk_and_an_open_does_not_rewrite_it(tmp_path: Path):
    e = Engine.open(tmp_path)
    native = _native(e, 2)  # (made off the storage thread by vnode.prepare)
    e.execute("CREATE DATABASE d VGROUPS 2")  # (made by Vnode.open)
    vnodes = [native, *e.vnodes["d"]]
    assert all(v.epochs.entries == SINGLE_NODE_EPOCHS and _on_disk(v) == encode(SINGLE_NODE_EPOCHS) for v in vnodes)
    inodes = [os.stat(v.dir / EPOCH_FILE).st_ino for v in vnodes]
    e.close()
    e = Engine.open(tmp_path)
    try:
        vnodes = [e.vnodes[e.catalog.topics["t"].db][0], *e.vnodes["d"]]
        assert [os.stat(v.dir / EPOCH_FILE).st_ino for v in vnodes] == inodes  # read, not written again
        assert e.partitions.epoch_end("t", 0, 0) == (0, 2)
        assert e.damage() == []
    finally:
        e.close()


def test_a_vnode_of_an_older_release_without_the_file_reads_as_epoch_0_and_gets_it_at_its_first_epoch(
        tmp_path: Path):
    """No migration: a missing file means epoch 0 from version 0 to a single node, so an upgraded data dir's start
    writes nothing per vnode; the first epoch change writes the whole cache."""
    e = Engine.open(tmp_path)
    vnode = _native(e, 3)
    e.close()
    (vnode.dir / EPOCH_FILE).unlink()
    e = Engine.open(tmp_path)
    try:
        assert not (vnode.dir / EPOCH_FILE).exists() and e.partitions.epoch_end("t", 0, 0) == (0, 3)
        assert e.damage() == []  # not damage: the data dir predates the file
        opened = e.vnodes[e.catalog.topics["t"].db][0]
        opened.epochs.begin(1, 3)
        assert _on_disk(opened) == encode((EpochEntry(0, 0), EpochEntry(1, 3)))
    finally:
        e.close()


def test_a_started_epoch_is_durable_and_offset_for_leader_epoch_answers_where_each_epoch_ends(tmp_path: Path):
    e = Engine.open(tmp_path)
    vnode = _native(e, 5)  # offsets 0..4 in epoch 0
    vnode.epochs.begin(1, vnode.wal.next_version)
    for _ in range(3):
        e.append_batches("t", 0, [_batch(2)])  # offsets 5..10 in epoch 1

    def answers() -> list[tuple[int, int]]:
        return [e.partitions.epoch_end("t", 0, epoch) for epoch in (-1, 0, 1, 2)]

    expected = [UNDEFINED, (0, 5), (1, 11), UNDEFINED]  # Kafka's LeaderEpochFileCache.endOffsetFor
    assert answers() == expected
    e.close()
    reopened = LeaderEpochs.open(vnode.dir, 8)  # (versions 0..4 in epoch 0, 5..7 in epoch 1)
    assert reopened.entries == (EpochEntry(0, 0), EpochEntry(1, 5)) and reopened.end_for(0, 8) == EpochEnd(0, 5)


def test_a_single_node_reports_a_later_epoch_in_its_file_and_answers_as_its_metadata_does(tmp_path: Path):
    """Metadata, batches and the current-epoch check say epoch 0 on a single node: a file holding epoch 1 (a
    restored data dir, a hand edit, a refusal after the rename) is damage, and OffsetForLeaderEpoch answers epoch 0
    to the high watermark, so a Java consumer at epoch 0 sees no truncation that never happened."""
    e = Engine.open(tmp_path)
    vnode = _native(e, 5)
    e.close()
    (vnode.dir / EPOCH_FILE).write_bytes(encode((EpochEntry(0, 0), EpochEntry(1, 3))))
    for _ in range(2):  # (left in place: reported at each start)
        e = Engine.open(tmp_path)
        try:
            (report,) = e.damage()
            assert report.file.endswith(EPOCH_FILE) and "epoch 1" in report.reason and report.kept == ""
            assert [e.partitions.epoch_end("t", 0, epoch) for epoch in (-1, 0, 1)] == [UNDEFINED, (0, 5), UNDEFINED]
        finally:
            e.close()
    assert _on_disk(vnode) == encode((EpochEntry(0, 0), EpochEntry(1, 3)))


def test_a_replicated_vnode_opens_answering_the_epochs_its_leaders_began_and_reports_no_damage(tmp_path: Path):
    """rv5 R5-4: a vnode of a replicated database (``REPLICA 3``) opens answering from its cache, whose later epochs
    its leaders led (no damage record at any start, as a single node's open makes for the same file above), and a
    leader's first epoch after a restart whose write was refused after the rename is answered as the epoch it
    appends under, never as a single node's epoch 0 (the retried takeover finds the epoch in memory, begins nothing)."""
    e = Engine.open(tmp_path)
    vnode = _native(e, 5)
    replicated = replace(vnode.db, replicas=((1, 2, 3),))
    e.close()
    (vnode.dir / EPOCH_FILE).write_bytes(encode((EpochEntry(0, 0), EpochEntry(1, 3))))
    damage = DamageLog(tmp_path)
    for _ in range(2):
        opened = Vnode.open(replicated, 0, vnode.dir, damage)
        try:
            assert damage.records == [] and not opened.epochs.single_node
            assert [opened.epochs.epoch_at(v) for v in (2, 3, 4)] == [0, 1, 1]
            assert opened.epochs.end_for(0, 5) == EpochEnd(0, 3) and opened.epochs.end_for(1, 5) == EpochEnd(1, 5)
        finally:
            opened.wal.close()
    opened = Vnode.open(replicated, 0, vnode.dir, damage)
    try:
        faults = Faults()
        with faults.active():
            faults.fail("fsync", at=2, error=errno.EIO)  # (the directory's fsync: after the rename)
            with pytest.raises(StorageUnavailable):
                opened.epochs.begin(2, 5)
        assert opened.epochs.latest_epoch == 2 and opened.epochs.epoch_at(5) == 2
        assert opened.epochs.end_for(1, 6) == EpochEnd(1, 5)
    finally:
        opened.wal.close()
    assert damage.records == []


def test_a_begin_refused_after_the_rename_leaves_single_node_mode_as_a_written_one_does(tmp_path: Path):
    """A vnode opened as a single node's that a leader of epoch 2 then leads (a database whose replicas the catalog
    learns later): an epoch memory takes from a write refused after its rename is answered as it is appended under."""
    e = Engine.open(tmp_path)
    vnode = _native(e, 3)
    try:
        assert vnode.epochs.single_node
        faults = Faults()
        with faults.active():
            faults.fail("fsync", at=2, error=errno.EIO)
            with pytest.raises(StorageUnavailable):
                vnode.epochs.begin(2, 3)
        assert not vnode.epochs.single_node and vnode.epochs.epoch_at(3) == 2
    finally:
        e.close()


def test_a_tdengine_topic_answers_in_its_dense_offsets(tmp_path: Path):
    """Versions are not offsets in a TDengine vgroup (meta entries, other tables' rows): an epoch's end is the offset
    of the first record at or past the version where the next epoch starts."""
    e = Engine.open(tmp_path)
    try:
        e.execute("CREATE DATABASE d VGROUPS 1")
        e.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (g INT)")
        e.execute("CREATE TOPIC tp AS SELECT ts, v FROM d.m WHERE v > 0")
        e.execute("INSERT INTO d.a USING d.m TAGS (1) VALUES (1000, 1) (2000, -1) (3000, 2)")  # 2 records
        vnode = e.vnodes["d"][0]
        start = vnode.wal.next_version
        assert start > 2  # (the create_table meta entry and the rows took versions)
        vnode.epochs.begin(3, start)
        e.execute("INSERT INTO d.b USING d.m TAGS (2) VALUES (4000, 5) (5000, 6)")  # 2 more, in epoch 3
        assert [e.partitions.epoch_end("tp", 0, k) for k in (0, 2, 3, 4)] == [(0, 2), (0, 2), (3, 4), UNDEFINED]
    finally:
        e.close()


@pytest.mark.parametrize(("op", "kind"), REFUSALS)
def test_a_refused_write_of_a_new_epoch_changes_nothing(tmp_path: Path, op: str, kind: str):
    e = Engine.open(tmp_path)
    vnode = _native(e, 2)
    before = _on_disk(vnode)
    faults = Faults()
    with faults.active():
        faults.fail_kind(op, kind)
        with pytest.raises(StorageUnavailable):
            vnode.epochs.begin(1, 2)
        assert faults.injected == 1
    assert vnode.epochs.entries == SINGLE_NODE_EPOCHS and _on_disk(vnode) == before
    assert not list(vnode.dir.glob("*.tmp"))
    assert e.partitions.epoch_end("t", 0, 1) == UNDEFINED  # an epoch not on disk is never answered
    vnode.epochs.begin(1, 2)  # the disk has room again
    e.append_batches("t", 0, [_batch(1)])  # (an epoch that wrote nothing is cut at the next open, as in Kafka)
    e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.vnodes[e.catalog.topics["t"].db][0].epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 2))
    finally:
        e.close()


def test_a_wal_tail_lost_with_the_machine_cuts_the_epochs_that_started_in_it(tmp_path: Path):
    """WAL_LEVEL 1: a leader took epoch 1 at version v, wrote after it, and the machine lost the unsynced tail back
    to v: the next open drops epoch 1 (KIP-101: an epoch that kept nothing is no epoch of this log) and writes the
    cut; when that rewrite is refused, memory is cut anyway and the next open cuts the file again."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1 WAL_LEVEL 1 WAL_FSYNC_PERIOD 3000")
    e.execute("CREATE TABLE d.t (ts TIMESTAMP, v INT)")
    e.execute("INSERT INTO d.t VALUES (1000, 1)")
    vnode = e.vnodes["d"][0]
    vnode.wal.sync()
    start = vnode.wal.next_version
    segment = vnode.wal.segments[-1].path
    kept = segment.stat().st_size
    vnode.epochs.begin(1, start)
    e.execute("INSERT INTO d.t VALUES (2000, 2) (3000, 3)")
    e.close()
    os.truncate(segment, kept)  # what a power loss leaves of the unsynced tail
    epoch1 = _on_disk(vnode)
    faults = Faults()
    with faults.active():
        faults.fail("write", error=errno.ENOSPC, times=1000)  # every write of the open refused
        e = Engine.open(tmp_path)
        faults.clear()
    try:
        assert e.vnodes["d"][0].epochs.entries == SINGLE_NODE_EPOCHS and _on_disk(vnode) == epoch1
    finally:
        e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.vnodes["d"][0].epochs.entries == SINGLE_NODE_EPOCHS and _on_disk(vnode) == encode(SINGLE_NODE_EPOCHS)
        assert e.execute("SELECT v FROM d.t").rows == [[1]]
    finally:
        e.close()


def test_truncation_from_the_end_is_durable_and_an_epoch_begins_again_after_it(tmp_path: Path):
    """The follower's cut (KIP-101/279) as the replication wiring will call it: epochs starting at or past the
    new end leave memory and disk; the same or a later epoch then begins at the new end."""
    epochs = LeaderEpochs.open(tmp_path, 0)
    for epoch, start in ((0, 0), (2, 10), (5, 20)):
        epochs.begin(epoch, start)
    epochs.truncate_from_end(15)
    assert epochs.entries == (EpochEntry(0, 0), EpochEntry(2, 10)) and epochs.saved
    epochs.begin(6, 15)
    assert LeaderEpochs.open(tmp_path, 16).entries == (EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(6, 15))
    assert LeaderEpochs.open(tmp_path, 15).entries == (EpochEntry(0, 0), EpochEntry(2, 10))  # epoch 6 wrote nothing
    faults = Faults()
    with faults.active():
        faults.fail("fsync", error=errno.EIO)
        epochs.truncate_from_end(5)  # never raises: memory follows the WAL, the file is cut at the next open
    assert epochs.entries == (EpochEntry(0, 0),) and not epochs.saved
    assert LeaderEpochs.open(tmp_path, 5).entries == (EpochEntry(0, 0),)


def _read_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the epoch file raises EIO from now on (a failing sector: fileio has no read to hook)."""
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == EPOCH_FILE:
            raise OSError(errno.EIO, "injected EIO in read")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)


def test_a_refusal_after_the_rename_leaves_memory_holding_what_the_file_holds(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    """The directory's fsync fails after the new file was renamed in place: the epoch may survive a restart, so
    memory takes it as the file holds it (a restart answers as the running vnode did); a file that cannot even be
    read back fails the cache (StorageUnavailable) until a write succeeds."""
    epochs = LeaderEpochs.open(tmp_path, 10)
    epochs.begin(0, 0)
    faults = Faults()
    with faults.active():
        faults.fail("fsync", at=2, error=errno.EIO)  # (the temporary file's fsync, then the directory's)
        with pytest.raises(StorageUnavailable, match="leader epoch 1 could not be recorded"):
            epochs.begin(1, 10)
        assert faults.injected == 1
    assert epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 10)) and not epochs.saved
    assert epochs.end_for(0, 20) == LeaderEpochs.open(tmp_path, 20).end_for(0, 20) == EpochEnd(0, 10)
    epochs.begin(1, 10)  # the disk is back: written again, durably
    assert epochs.saved
    with faults.active():
        faults.fail("fsync", at=2, error=errno.EIO)
        _read_fails(monkeypatch)
        with pytest.raises(StorageUnavailable):
            epochs.begin(2, 20)
        monkeypatch.undo()
    with pytest.raises(StorageUnavailable, match="leader-epoch cache unknown"):
        epochs.end_for(0, 20)
    epochs.begin(3, 20)
    assert epochs.end_for(0, 20) == EpochEnd(0, 10) and LeaderEpochs.open(tmp_path, 21).entries == epochs.entries


def test_a_cut_refused_after_the_rename_is_written_again_by_the_next_begin(tmp_path: Path):
    """The file held epochs 0 and 1 (from 10), the WAL was cut to 5 and the cut's rename done but its directory
    fsync refused; the WAL then grew back in epoch 0 and epoch 1 begins at 10 again: it must reach the file,
    although the entries equal what the file held before the cut."""
    epochs = LeaderEpochs.open(tmp_path, 10)
    epochs.begin(0, 0)
    epochs.begin(1, 10)
    faults = Faults()
    with faults.active():
        faults.fail("fsync", at=2, error=errno.EIO)
        epochs.truncate_from_end(5)
        assert faults.injected == 1
    assert LeaderEpochs.open(tmp_path, 12).entries == (EpochEntry(0, 0),)  # (the cut is in place, not durable)
    epochs.begin(1, 10)
    assert LeaderEpochs.open(tmp_path, 12).entries == epochs.entries == (EpochEntry(0, 0), EpochEntry(1, 10))


def test_an_unreadable_file_is_reported_and_left_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    e = Engine.open(tmp_path)
    vnode = _native(e, 3)
    e.close()
    before = _on_disk(vnode)
    _read_fails(monkeypatch)
    e = Engine.open(tmp_path)
    monkeypatch.undo()
    try:
        (report,) = e.damage()
        assert report.file.endswith(EPOCH_FILE) and "cannot be read" in report.reason and report.kept == ""
        assert e.partitions.epoch_end("t", 0, 0) == (0, 3)  # what a single node led
    finally:
        e.close()
    assert _on_disk(vnode) == before


def _damaged(original: bytes) -> list[bytes]:
    """The file damaged: a bit flipped at a few places, cut at every byte (but its last, its ``\\n``), zeroed,
    and lines that verify but are no cache (epochs out of order, negative, the wrong shape)."""
    flips = []
    for pos in (0, 5, 8, 9, len(original) // 2, len(original) - 2, len(original) - 1):
        data = bytearray(original)
        data[pos] ^= 0x10
        flips.append(bytes(data))
    cuts = [original[:k] for k in range(len(original) - 1)]
    verified = [lines_encode({"epochs": [[2, 4], [1, 9]]}), lines_encode({"epochs": [[0, 5], [1, 4]]}),
                lines_encode({"epochs": [[0, 5], [1, 5]]}),  # (equal starts: the cache would drop epoch 0 unsaid)
             lines_encode({"epochs": [[-1, 0]]}), lines_encode({"epochs": [[0]]}), lines_encode({"log_start": 3}),
             lines_encode([1, 2])]
    return flips + cuts + [bytes(len(original))] + verified


def test_a_damaged_file_is_reported_kept_and_rewritten_as_what_a_single_node_led(tmp_path: Path):
    original = encode((EpochEntry(0, 0), EpochEntry(2, 4)))
    for i, data in enumerate(_damaged(original)):
        directory = tmp_path / f"vnode{i}"
        directory.mkdir()
        (directory / EPOCH_FILE).write_bytes(data)
        damage = DamageLog(tmp_path / f"root{i}")
        epochs = LeaderEpochs.open(directory, 10, damage=damage)
        assert [(d.action, d.end) for d in damage.records] == [("reset", len(data))], (i, data)
        assert epochs.entries == ()  # epochs it cannot read are unknown, never guessed
        epochs.lead_single_node(new=False)  # (a damaged file is written again whatever the WAL holds)
        assert (directory / EPOCH_FILE).read_bytes() == encode(SINGLE_NODE_EPOCHS), (i, data)


def test_a_damaged_file_leaves_a_served_partition_answering_epoch_0(tmp_path: Path):
    e = Engine.open(tmp_path)
    vnode = _native(e, 4)
    vnode.epochs.begin(2, 4)
    e.close()
    path = vnode.dir / EPOCH_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    try:
        (report,) = e.damage()
        assert report.file.endswith(EPOCH_FILE) and (tmp_path / report.kept).is_file()
        assert e.partitions.epoch_end("t", 0, 0) == (0, 4) and e.partitions.epoch_end("t", 0, 2) == UNDEFINED
    finally:
        e.close()
    assert path.read_bytes() == encode(SINGLE_NODE_EPOCHS)


_CHILD = """
import sys
from pathlib import Path
from walgate.storage.lines import encode as lines_encode
from walgate.storage.leader_epochs import LeaderEpochs
epochs = LeaderEpochs.open(Path(sys.argv[1]), 1 << 40)
epoch = epochs.latest_epoch
print("ready", flush=True)
while True:
    epoch += 1
    epochs.begin(epoch, epoch * 10)
    print(epoch, flush=True)
"""


def test_kill_9_while_epochs_begin_leaves_the_old_file_or_the_new_one(tmp_path: Path):
    """A real SIGKILL at whatever point a process starting epoch after epoch reached: the next open reads every
    epoch the process said was recorded, reports no damage and leaves no temporary file."""
    rng = random.Random(25)
    recorded = []
    for attempt in range(3):
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        first = int(child.stdout.readline())  # (killed amid the writes, never before the first: on a loaded machine
        time.sleep(rng.uniform(0.01, 0.2))  # the first begin's fsyncs outlasted the sleep, CI of 2026-12-02)
        child.send_signal(signal.SIGKILL)
        out = child.stdout.read().split()
        child.wait(30)
        said = int(out[-1]) if out else first
        recorded.append(said)
        damage = DamageLog(tmp_path / f"damage{attempt}")
        epochs = LeaderEpochs.open(tmp_path, 1 << 40, damage=damage)
        assert damage.records == [] and not list(tmp_path.glob("*.tmp")), attempt
        assert epochs.latest_epoch >= said, (attempt, said, epochs.entries)
        assert [e.epoch for e in epochs.entries] == list(range(epochs.latest_epoch + 1)), attempt
    assert recorded == sorted(recorded) and recorded[-1] >= 3, recorded  # (each attempt went on from the last)
