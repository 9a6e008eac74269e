"""A vnode cut back to a WAL version (replication's follower truncation, issue 25 step 6): its WAL and every state
derived from it equal those of a vnode that only ever had the entries below the cut, also after a reopen and after
the next append; the cut is all or nothing when the disk refuses a step or the process is killed mid-way."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from clocks import ManualClock
from faults import FAULT_KINDS, Faults, flipped_in_line
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from walgate.storage import fileio, lines
from walgate.storage.batch_cache import BatchCache
from walgate.storage.cleaner import CHECKPOINT as CLEANER_CHECKPOINT
from walgate.storage.cleaner import Cleaner
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.wal import KIND_DATA, KIND_META, Wal, WalOptions
from walgate.storage.wal_format import HEADER_SIZE
from walgate.storage.wal_truncate import INTENT
from walgate.wire import encode_batch

SMALL_SEGMENTS = 300  # bytes: the appends roll segments, so cuts fall in sealed ones too

# ------------------------------------------------------------------ a history of appends, and the state it derives

Op = tuple[Any, ...]

OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 3), st.integers(0, 9)),  # the first into a table creates it (meta)
    st.tuples(st.just("drop"), st.integers(0, 3)),  # a meta entry (when the table is there)
    st.tuples(st.just("produce"), st.integers(1, 2), st.integers(1, 3)),  # an idempotent batch
    st.tuples(st.just("txn"), st.integers(1, 3)),  # a transactional batch of producer 3
    st.tuples(st.just("marker"), st.booleans()),  # its transaction ended: commit or abort
), min_size=1, max_size=14)


def engine(path: Path) -> Engine:
    """An engine with a TDengine database (two topics over it, one WITH META) and a Kafka-native topic, each of one
    vnode with small segments."""
    fresh = not path.exists()
    e = Engine.open(path, clock=ManualClock())
    if fresh:
        e.execute("CREATE DATABASE db VGROUPS 1")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        e.execute("CREATE TOPIC tp AS SELECT ts, v FROM db.st WHERE v > 2")
        e.execute("CREATE TOPIC tm WITH META AS DATABASE db")
        e.create_kafka_topic("k", 1, {})
    for vnode in (e.vnodes["db"][0], kafka_vnode(e)):
        vnode.wal.options = vnode.wal.options.__class__(**{**vnode.wal.options.__dict__,
                                                           "segment_bytes": SMALL_SEGMENTS})
    return e


def kafka_vnode(e: Engine) -> Any:
    return e.vnodes[e.catalog.topics["k"].db][0]


def apply(e: Engine, ops: list[Op], sequences: dict[int, int] | None = None) -> None:
    """Run ``ops`` in order (``sequences``: each producer's next sequence, carried on; the same history gives the same
    sequences, so two engines given one history append the same entries)."""
    seqs = {} if sequences is None else sequences
    for op in ops:
        if op[0] == "insert":
            e.execute(f"INSERT INTO db.t{op[1]} USING db.st TAGS ({op[1]}) VALUES ({1_000 + op[2]}, {op[2]})")
        elif op[0] == "drop":
            if any(t.name == f"t{op[1]}" and not t.dropped for t in e.vnodes["db"][0].tables()):
                e.execute(f"DROP TABLE db.t{op[1]}")
        elif op[0] in ("produce", "txn"):
            pid = op[1] if op[0] == "produce" else 3
            n = op[2] if op[0] == "produce" else op[1]
            seq = seqs.get(pid, 0)
            e.append_batches("k", 0, [encode_batch(0, [2_000 + seq] * n, [None] * n, [b"v%d" % seq] * n,
                                                   producer_id=pid, producer_epoch=0, base_sequence=seq,
                                                   is_transactional=op[0] == "txn")])
            seqs[pid] = seq + n
        else:
            e.native.write_markers(3, 0, 0, op[1], [("k", 0)], 5_000)


def ends(e: Engine) -> tuple[int, int]:
    return e.vnodes["db"][0].wal.next_version, kafka_vnode(e).wal.next_version


def state(e: Engine) -> dict[str, Any]:
    """Everything the two vnodes derive from their WALs, as values."""
    db, kv = e.vnodes["db"][0], kafka_vnode(e)
    out: dict[str, Any] = {
        "tables": [(t.name, t.stable, t.tags, t.columns, t.version, t.created_ts, t.dropped) for t in db.tables()],
        "live": db.live_count,  # (not meta_version: a lower bound, which an open raises to the WAL end)
        "ends": ends(e), "epochs": (db.epochs.entries, kv.epochs.entries),
        "rows": sorted(map(tuple, e.execute("SELECT tbname, ts, v FROM db.st").rows)),
    }
    for topic in ("tp", "tm", "k"):
        idx = e.indexes[(topic, 0)]
        out[topic] = (list(idx.offsets), list(idx.versions), list(idx.counts), list(idx.running_max),  # (not the
                      idx.end_offset, idx.start_offset, e.watermarks(topic, 0))  # indexed_to cursor: an open lowers it)
        out[topic + " records"] = [(o, v, c, e.kafka_rows(topic, 0, v).__dict__ if topic != "k" else
                                    e.kafka_batch("k", 0, v)) for o, v, c in e.index_entries(topic, 0, 0)]
    out["producers"] = (e.native.active_producers("k", 0), e.store.producers[("k", 0)].ongoing(),
                        e.native.last_stable_offset("k", 0), e.native.aborted_transactions("k", 0, 0, 1 << 40))
    return out


@fuzz_settings(12)
@given(ops=OPS, data=st.data())
def test_a_cut_vnode_derives_what_one_that_only_had_the_prefix_does(tmp_path_factory: pytest.TempPathFactory,
                                                                      ops: list[Op], data: st.DataObject) -> None:
    base = tmp_path_factory.mktemp("cut")
    cut, fresh = engine(base / "cut"), engine(base / "fresh")
    marks, seqs = [ends(cut)], {}
    for op in ops:
        apply(cut, [op], seqs)
        marks.append(ends(cut))
    k = data.draw(st.integers(0, len(ops)), label="cut after ops")
    prefix_seqs: dict[int, int] = {}
    apply(fresh, ops[:k], prefix_seqs)
    db_version, kafka_version = marks[k]
    cut.truncate_vnode("db", 0, db_version, high_watermark=db_version)
    cut.truncate_vnode(cut.catalog.topics["k"].db, 0, kafka_version, high_watermark=kafka_version)
    assert state(cut) == state(fresh)
    cut.close()
    cut = engine(base / "cut")
    assert state(cut) == state(fresh)
    nxt = ops[k:k + 1] or [("insert", 0, 5)]  # the next append numbers as on the replica that never had the cut
    apply(cut, nxt, dict(prefix_seqs))
    apply(fresh, nxt, prefix_seqs)
    assert state(cut) == state(fresh)
    cut.close()
    fresh.close()


# ------------------------------------------------------------------ the WAL's cut: all or nothing

OPTIONS = WalOptions(level=1, fsync_period_ms=60_000, segment_bytes=SMALL_SEGMENTS)  # (the cut syncs itself)
BODIES = [bytes([65 + i]) * (40 + 17 * i) for i in range(14)]  # several segments
CUT = 4  # entries kept: the cut falls in a sealed segment, later segments go


def filled(directory: Path) -> tuple[Wal, list[tuple[int, bytes]]]:
    """A WAL of BODIES, one entry an append (one version each), and its entries as (version, body)."""
    wal = Wal.open(directory, OPTIONS)
    for body in BODIES:
        wal.append([(KIND_DATA, 1, 1_000, body)])
    assert len(wal.segments) > 3 and wal.segments[-1].first > CUT
    return wal, entries(wal)


def entries(wal: Wal) -> list[tuple[int, bytes]]:
    return [(e.version, e.body) for e in wal.read_from(0)]


def test_a_cut_wal_reopens_cut_and_appends_take_the_cut_versions(tmp_path: Path):
    wal, before = filled(tmp_path)
    wal.truncate_to(CUT)
    assert entries(wal) == before[:CUT] and wal.next_version == CUT and not (tmp_path / INTENT).exists()
    assert wal.append([(KIND_DATA, 1, 1_000, b"new")]) == CUT
    wal.close()
    again = Wal.open(tmp_path, OPTIONS)
    assert entries(again) == [*before[:CUT], (CUT, b"new")]
    with pytest.raises(ValueError):
        again.truncate_to(CUT + 7)  # past the end
    again.truncate_to(0)
    assert entries(again) == [] and again.append([(KIND_DATA, 1, 1_000, b"x")]) == 0


def test_a_cut_inside_an_entry_cuts_from_the_entry_holding_it(tmp_path: Path):
    wal = Wal.open(tmp_path, OPTIONS)  # (Kafka's LogSegment.truncateTo cuts at the batch holding the offset)
    wal.append([(KIND_DATA, 2, 1_000, b"two rows")])
    wal.append([(KIND_DATA, 3, 1_000, b"three rows")])
    assert wal.entry_start(3) == 2 and wal.entry_start(5) == 5
    wal.truncate_to(3)
    assert entries(wal) == [(0, b"two rows")] and wal.next_version == 2
    with pytest.raises(ValueError, match="no entry holds version 3"):
        wal.truncate_to(3)  # past the end now


def _fault_points(tmp_path: Path) -> list[tuple[str, int]]:
    """(operation, n): the n-th call of each file operation a cut makes."""
    wal, _ = filled(tmp_path / "probe")
    faults = Faults()
    with faults.active():
        wal.truncate_to(CUT)
    return [(op, n) for op, count in sorted(faults.calls.items()) for n in range(1, count + 1)]


def test_a_refused_step_of_a_cut_leaves_the_wal_before_or_after_it_and_it_reopens_so(tmp_path: Path):
    points = _fault_points(tmp_path)
    assert {op for op, _ in points} >= {"write", "fsync", "fdatasync", "ftruncate", "unlink", "replace"}
    for k, (op, n) in enumerate(points):
        for kind in FAULT_KINDS if op in ("write", "pwrite") else ("eio",):
            directory = tmp_path / f"{k}-{kind}"
            wal, before = filled(directory)
            faults = Faults()
            with faults.active():
                faults.fail_kind(op, kind, at=n)
                try:
                    wal.truncate_to(CUT)
                    cut = True  # memory is cut; the disk follows, or the WAL is fenced until it does
                except StorageUnavailable:
                    cut = False  # the intent was refused: nothing was cut
                assert faults.injected == 1, (op, n)
                assert entries(wal) == (before[:CUT] if cut else before), (op, n, kind)
                if wal.fenced:  # appends first finish the cut: refused while the disk refuses it
                    faults.fail("fdatasync", error=errno.EIO, times=100)
                    faults.fail("fsync", error=errno.EIO, times=100)
                    with pytest.raises(StorageUnavailable):
                        wal.append([(KIND_DATA, 1, 1_000, b"refused")])
                    faults.clear()
                    assert wal.append([(KIND_DATA, 1, 1_000, b"taken")]) == CUT and not wal.fenced
                    wal.truncate_to(CUT)
            assert entries(_reopened(wal, directory)) == (before[:CUT] if cut else before), (op, n, kind)


def _reopened(wal: Wal, directory: Path) -> Wal:
    """``wal`` dropped without closing it (as a crash would), then opened again; then an append and a reopen."""
    for seg in wal.segments:
        seg.forget_files(wal.files)
    again = Wal.open(directory, OPTIONS)
    assert not (directory / INTENT).exists()
    end = again.next_version
    assert again.append([(KIND_DATA, 1, 1_000, b"after")]) == end
    again.close()
    again = Wal.open(directory, OPTIONS)
    assert list(entries(again))[-1] == (end, b"after")
    again.truncate_to(end)
    return again


KILLER = """
import os, signal, sys
from pathlib import Path
from walgate.storage import fileio
from walgate.storage.wal import KIND_DATA, KIND_META, Wal, WalOptions
from walgate.storage.wal_format import HEADER_SIZE
wal = Wal.open(Path(sys.argv[1]), WalOptions(level=1, fsync_period_ms=60_000, segment_bytes=int(sys.argv[4])))
real, left = fileio.os, int(sys.argv[3])
class Killing:
    def __getattr__(self, name):
        attr = getattr(real, name)
        if name not in ("write", "fsync", "fdatasync", "ftruncate", "replace", "unlink", "open"):
            return attr
        def call(*args, **kwargs):
            global left
            left -= 1
            if left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            return attr(*args, **kwargs)
        return call
fileio.os = Killing()
wal.truncate_to(int(sys.argv[2]))
print("done")
"""


def _cut_steps(tmp_path: Path) -> list[str]:
    """The file operations a cut makes, in order (those KILLER counts)."""
    wal, _ = filled(tmp_path / "probe")
    real, seen = fileio.os, []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name not in ("write", "fsync", "fdatasync", "ftruncate", "replace", "unlink", "open"):
                return attr
            return lambda *args, **kwargs: (seen.append(name), attr(*args, **kwargs))[1]

    fileio.os = Recording()  # type: ignore[assignment]
    try:
        wal.truncate_to(CUT)
    finally:
        fileio.os = real
    return seen


def test_a_kill_mid_cut_reopens_before_or_after_it_never_between(tmp_path: Path):
    steps = _cut_steps(tmp_path)
    replaced, first_unlink = steps.index("replace") + 1, steps.index("unlink") + 1
    last_unlink = len(steps) - steps[::-1].index("unlink")
    # killed before anything, at the fsync after the intent's rename, at the first segment deleted, at the log's
    # cut, at the intent's removal, and not at all
    kills = sorted({1, replaced + 1, first_unlink, steps.index("ftruncate") + 1, last_unlink, len(steps) + 1})
    outcomes = set()
    for k in kills:
        directory = tmp_path / f"kill{k}"
        wal, before = filled(directory)
        wal.close()
        run = subprocess.run([sys.executable, "-c", KILLER, str(directory), str(CUT), str(k), str(SMALL_SEGMENTS)],
                             capture_output=True, timeout=60)
        assert run.returncode == (0 if k > len(steps) else -signal.SIGKILL), run.stderr
        after = entries(_reopened(Wal.open(directory, OPTIONS), directory))
        assert after in (before, before[:CUT]), (k, steps)
        outcomes.add(after == before)
    assert outcomes == {True, False}  # kills before the intent was in place, and after


def test_a_damaged_intent_is_reported_and_the_wal_opens_as_the_disk_holds_it(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture):
    probe, _ = filled(tmp_path / "probe")
    held = next(seg for seg in reversed(probe.segments) if seg.first <= CUT)
    whole = lines.encode({"version": CUT, "segment": held.first, "position": held.positions[CUT - held.first]})
    intent = tmp_path / "intent"
    intent.write_bytes(whole)
    damaged = [whole[:n] for n in (0, 1, len(whole) // 2, len(whole) - 2, len(whole) - 1, len(whole))]
    damaged += flipped_in_line(intent, 0)
    for k, raw in enumerate(damaged):
        wal, before = filled(tmp_path / str(k))
        wal.close()
        (tmp_path / str(k) / INTENT).write_bytes(raw)
        caplog.clear()
        intact = raw.rstrip(b"\n") == whole.rstrip(b"\n")  # (a cut short by its newline only still verifies)
        again = Wal.open(tmp_path / str(k), OPTIONS)
        assert entries(again) == (before[:CUT] if intact else before) and not (tmp_path / str(k) / INTENT).exists(), raw
        assert intact or "WAL truncation intent" in caplog.text
        again.close()


# ------------------------------------------------------------------ the derived files, when a cut is interrupted

HISTORY: list[Op] = [("insert", 0, 4), ("produce", 1, 2), ("txn", 2), ("insert", 1, 5), ("marker", False),
                     ("txn", 1), ("insert", 2, 6), ("drop", 0), ("produce", 2, 3), ("insert", 0, 7)]
KEEP = 3  # ops below the cut: it undoes tables 1, 2 and the new t0, the drop, an abort and an open transaction


def _history(tmp_path: Path) -> tuple[Engine, Engine, tuple[int, int]]:
    """(an engine of HISTORY, an engine of its first KEEP ops, the WAL ends after those)."""
    cut, fresh = engine(tmp_path / "cut"), engine(tmp_path / "fresh")
    seqs: dict[int, int] = {}
    apply(cut, HISTORY[:KEEP], seqs)
    mark = ends(cut)
    apply(cut, HISTORY[KEEP:], seqs)
    apply(fresh, HISTORY[:KEEP], {})
    return cut, fresh, mark


def _crashed(e: Engine, path: Path, reopen: Any = engine) -> Engine:
    """``e`` dropped without closing (as by a kill), and its data dir opened again (by ``reopen``)."""
    for vnodes in e.vnodes.values():
        for vnode in vnodes:
            for seg in vnode.wal.segments:
                seg.forget_files(vnode.wal.files)
    return reopen(path)


def test_a_crash_after_the_wal_is_cut_and_before_its_derived_files_follow_reopens_consistent(tmp_path: Path):
    cut, fresh, (db_version, kafka_version) = _history(tmp_path)
    cut.vnodes["db"][0].store.write({}, (), 10**6, 0, True)  # (a store covering past the cut, as a flush leaves)
    cut.vnodes["db"][0].wal.truncate_to(db_version)  # the WALs alone: the offset indexes, epochs, meta store
    kafka_vnode(cut).wal.truncate_to(kafka_version)  # and producer state are those of the whole history on disk
    assert state(_crashed(cut, tmp_path / "cut")) == state(fresh)


def test_a_refused_meta_store_rebuild_after_the_cut_reopens_consistent(tmp_path: Path):
    cut, fresh, (db_version, _) = _history(tmp_path)
    faults = Faults()
    with faults.active():
        faults.fail("unlink", error=errno.EIO, times=10)  # the store's replacement: its old file stays
        with pytest.raises(StorageUnavailable):
            cut.truncate_vnode("db", 0, db_version, high_watermark=db_version)
    assert cut.vnodes["db"][0].wal.next_version == db_version  # the WAL is cut: the vnode is opened again,
    assert cut.indexes[("tp", 0)].indexed_to == db_version  # the offset indexes followed it already
    after = state(_crashed(cut, tmp_path / "cut"))
    assert {k: v for k, v in after.items() if "k" not in k and k != "producers" and k != "ends"} == {
        k: v for k, v in state(fresh).items() if "k" not in k and k != "producers" and k != "ends"}


def test_a_refused_store_write_before_a_cut_without_meta_entries_cuts_nothing(tmp_path: Path):
    e = engine(tmp_path / "e")
    apply(e, [("insert", 0, 1)], {})
    mark = ends(e)[0]
    apply(e, [("insert", 0, 2), ("insert", 0, 3)], {})
    vnode = e.vnodes["db"][0]
    vnode.checkpoint()  # the store covers past the cut
    before = state(e)
    faults = Faults()
    with faults.active():
        faults.fail("fsync", error=errno.EIO, times=100)
        faults.fail("fdatasync", error=errno.EIO, times=100)
        with pytest.raises(StorageUnavailable):
            e.truncate_vnode("db", 0, mark, high_watermark=mark)
    assert state(e) == before
    e.truncate_vnode("db", 0, mark, high_watermark=mark)
    assert vnode.store.covered == mark and vnode.wal.next_version == mark


def _retained(tmp_path: Path) -> tuple[Engine, Any]:
    """An engine whose database ``old`` has tables t0..t2, the segments creating them deleted by retention."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE old VGROUPS 1 WAL_RETENTION_PERIOD 0")
    e.execute("CREATE STABLE old.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    vnode = e.vnodes["old"][0]
    vnode.wal.options = WalOptions(**{**vnode.wal.options.__dict__, "segment_bytes": 64})  # a segment an append
    for i in range(3):
        e.execute(f"INSERT INTO old.t{i} USING old.st TAGS ({i}) VALUES (1000, {i})")
    assert vnode.apply_retention(time.time() + 10) and vnode.wal.first_version > 0
    return e, vnode


def test_a_cut_of_created_tables_after_retention_forgets_them_without_a_rebuild(tmp_path: Path):
    e, vnode = _retained(tmp_path)
    mark = vnode.wal.next_version
    e.execute("INSERT INTO old.t3 USING old.st TAGS (3) VALUES (1000, 3)")
    e.execute("INSERT INTO old.t4 USING old.st TAGS (4) VALUES (1000, 4) (2000, 5)")
    e.truncate_vnode("old", 0, mark, high_watermark=mark)
    names = ["t0", "t1", "t2"]
    assert [t.name for t in vnode.tables()] == names and vnode.live_count == 3 and vnode.get("t3") is None
    assert vnode.store.covered == mark and vnode.meta_version == mark
    e.close()
    e = Engine.open(tmp_path)
    again = e.vnodes["old"][0]
    assert [t.name for t in again.tables()] == names and again.live_count == 3
    e.execute("INSERT INTO old.t3 USING old.st TAGS (3) VALUES (1000, 7)")
    assert ("t3", 7) in map(tuple, e.execute("SELECT tbname, v FROM old.st").rows)  # (retention took t0's, t1's)
    e.close()


def test_a_cut_that_would_undo_a_drop_retention_cannot_rebuild_is_refused(tmp_path: Path):
    e, vnode = _retained(tmp_path)
    mark = vnode.wal.next_version
    e.execute("DROP TABLE old.t1")
    with pytest.raises(StorageError, match="retention deleted"):
        e.truncate_vnode("old", 0, mark, high_watermark=mark)
    assert vnode.wal.next_version > mark and vnode.live("t1") is None


def test_the_batches_rendered_from_cut_versions_are_forgotten():
    cache = BatchCache(1 << 20)
    a, b = uuid.uuid4(), uuid.uuid4()
    for key in [(a, 0, 5), (a, 0, 9), (a, 1, 9), (b, 0, 9)]:
        cache.put(key, b"batch")
    cache.forget_from({a}, 0, 6)
    assert [cache.get(k) for k in [(a, 0, 5), (a, 0, 9), (a, 1, 9), (b, 0, 9)]] == [b"batch", None, b"batch", b"batch"]
    assert cache.size == 3 * len(b"batch")


def test_the_cleaners_dirty_point_moves_back_to_the_cut(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.create_kafka_topic("c", 1, {"cleanup.policy": "compact"})
    vnode = e.vnodes[e.catalog.topics["c"].db][0]
    e.append_batches("c", 0, [encode_batch(0, [1], [b"k"], [b"a"])])
    mark = vnode.wal.next_version
    e.append_batches("c", 0, [encode_batch(0, [2], [b"k"], [b"b"])])
    (vnode.dir / CLEANER_CHECKPOINT).write_bytes(lines.encode({"dirty_from": vnode.wal.next_version}))
    assert e.cleaner.dirty_from(vnode) == vnode.wal.next_version  # (as a finished pass leaves it)
    e.truncate_vnode(vnode.db.name, 0, mark, high_watermark=mark)
    assert e.cleaner.dirty_from(vnode) == mark and Cleaner(e.store).dirty_from(vnode) == mark


# ------------------------------------------------------------------ the reviewer's findings (r25t)

def _kafka(tmp_path: Path) -> tuple[Engine, Any]:
    e = Engine.open(tmp_path, clock=ManualClock())
    e.create_kafka_topic("k", 1, {})
    return e, kafka_vnode(e)


def _produce(e: Engine, n: int) -> None:
    for _ in range(n):
        e.append_batches("k", 0, [encode_batch(0, [1], [b"k"], [b"a"])])


def _end(end: Any) -> tuple[int, int]:
    return end.epoch, end.end_offset


def test_a_cut_keeps_a_replicated_vnodes_epochs_answering_from_its_cache(tmp_path: Path):
    e, v = _kafka(tmp_path)
    _produce(e, 3)
    v.epochs.begin(3, v.wal.next_version)
    _produce(e, 3)
    v.epochs.begin(5, v.wal.next_version)
    _produce(e, 3)
    assert [(x.epoch, x.start_offset) for x in v.epochs.entries] == [(0, 0), (3, 3), (5, 6)]
    e.truncate_vnode(v.db.name, 0, 8, high_watermark=0)
    assert _end(v.epochs.end_for(3, v.wal.next_version)) == (3, 6)
    assert _end(v.epochs.end_for(5, v.wal.next_version)) == (5, 8)
    e.truncate_vnode(v.db.name, 0, 0, high_watermark=0)  # emptied: no epoch until the next leader begins one
    assert v.epochs.entries == () and _end(v.epochs.end_for(0, 0)) == (-1, -1)
    e.close()


def test_a_single_nodes_vnode_cut_to_its_start_leads_epoch_0_again(tmp_path: Path):
    e, v = _kafka(tmp_path)
    _produce(e, 2)
    e.truncate_vnode(v.db.name, 0, 0, high_watermark=0)
    assert [(x.epoch, x.start_offset) for x in v.epochs.entries] == [(0, 0)] and _end(v.epochs.end_for(0, 0)) == (0, 0)
    e.close()


def _one_table(tmp_path: Path) -> tuple[Engine, Any, int]:
    """An engine whose database ``db`` holds table t0 of supertable st; its vnode and WAL end."""
    e = Engine.open(tmp_path, clock=ManualClock())
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("INSERT INTO db.t0 USING db.st TAGS (0) VALUES (1000, 1)")
    v = e.vnodes["db"][0]
    return e, v, v.wal.next_version


def test_a_cut_of_supertable_changes_takes_the_tables_below_it_and_leaves_the_catalog(tmp_path: Path):
    """A follower's cut of its former leader's ALTER and DROP STABLE entries (rv4 R1): the subtables the drop
    dropped are alive again (as in the WAL below the cut, the new leader's), the catalog keeps its change."""
    e, v, mark = _one_table(tmp_path)
    e.execute("ALTER STABLE db.st ADD COLUMN w INT")
    e.execute("DROP STABLE db.st")
    assert v.wal.next_version > mark + 1 and [(t.name, t.dropped) for t in v.tables()] == [("t0", True)]
    assert e.truncate_vnode("db", 0, mark, high_watermark=0) == mark
    assert v.wal.next_version == mark and [(t.name, t.dropped) for t in v.tables()] == [("t0", False)]
    assert ("db", "st") not in e.catalog.stables
    e.close()
    e = Engine.open(tmp_path, clock=ManualClock())
    assert [(t.name, t.dropped) for t in e.vnodes["db"][0].tables()] == [("t0", False)]
    e.close()


def test_a_cut_of_an_alter_stable_alone_rebuilds_no_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    e, v, mark = _one_table(tmp_path)
    e.execute("ALTER STABLE db.st ADD COLUMN w INT")
    monkeypatch.setattr(v, "_rebuild_after_cut", lambda: pytest.fail("rebuilt"))
    assert e.truncate_vnode("db", 0, mark, high_watermark=0) == mark
    assert [(t.name, t.dropped) for t in v.tables()] == [("t0", False)] and v.meta_version == mark
    assert [c.name for c in e.catalog.stables[("db", "st")].columns][-1] == "w"
    e.close()


def test_a_cut_to_the_end_rebuilds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    e, v = _kafka(tmp_path)
    _produce(e, 2)
    rebuilt: list[str] = []
    monkeypatch.setattr(e.native, "rebuild_producers", lambda topic, vnode: rebuilt.append(topic.name))
    e.truncate_vnode(v.db.name, 0, v.wal.next_version, high_watermark=0)
    assert rebuilt == []
    e.truncate_vnode(v.db.name, 0, 1, high_watermark=0)
    assert rebuilt == ["k"]
    e.close()


def test_a_cut_below_the_high_watermark_is_refused(tmp_path: Path):
    e, v = _kafka(tmp_path)
    _produce(e, 3)
    with pytest.raises(StorageError, match="below the high watermark"):
        e.truncate_vnode(v.db.name, 0, 1, high_watermark=2)
    assert v.wal.next_version == 3
    e.truncate_vnode(v.db.name, 0, 2, high_watermark=2)
    assert v.wal.next_version == 2
    e.close()


def _refuse_rewrite(path: Path) -> Path:
    """Make the disk refuse :func:`fileio.replace_file` of ``path`` (its temporary file's name taken by a
    directory); the directory to remove to accept it again."""
    blocker = path.with_name(path.name + ".tmp")
    blocker.mkdir()
    return blocker


@pytest.mark.parametrize("derived", ["offset index", "epoch cache"])
def test_a_refused_rewrite_of_derived_state_fails_the_cut_and_holds_appends_until_a_retry(tmp_path: Path,
                                                                                           derived: str):
    e, v = _kafka(tmp_path / "e")
    _produce(e, 3)
    if derived == "epoch cache":
        v.epochs.begin(3, 2)  # (a replicated vnode's: its file rewritten by the cut)
    idx = e.indexes[("k", 0)]
    blocker = _refuse_rewrite(idx.path if derived == "offset index" else v.dir / "leader-epoch-checkpoint")
    with pytest.raises(StorageUnavailable):
        e.truncate_vnode(v.db.name, 0, 1, high_watermark=0)
    assert v.wal.next_version == 1 and idx.end_offset == 1  # cut, in memory
    with pytest.raises(StorageUnavailable, match="truncation to version 1 is unfinished"):
        _produce(e, 1)  # new entries would follow records of cut ones in the file
    blocker.rmdir()
    e.truncate_vnode(v.db.name, 0, 1, high_watermark=0)
    _produce(e, 2)
    again = _crashed(e, tmp_path / "e", lambda p: Engine.open(p, clock=ManualClock()))
    assert e.watermarks("k", 0) == again.watermarks("k", 0) == (0, 3)
    assert [x[:2] for x in again.index_entries("k", 0, 0)] == [(0, 0), (1, 1), (2, 2)]
    assert [(x.epoch, x.start_offset) for x in kafka_vnode(again).epochs.entries][:1] == [(0, 0)]
    again.close()


def test_a_cut_waits_for_a_sync_that_rewrites_the_segment(tmp_path: Path):
    wal = Wal.open(tmp_path, OPTIONS)
    for body in (b"a", b"b", b"c"):
        wal.append([(KIND_DATA, 1, 1_000, body)])
    faults = Faults()
    failed = wal.take_sync()
    assert failed is not None
    with faults.active():
        faults.fail("fdatasync", error=errno.EIO)
        failed.run()
    failed.done()
    rewriting = wal.take_sync()
    assert rewriting is not None and rewriting.rewrite_from is not None
    with pytest.raises(StorageUnavailable, match="sync rewriting"):
        wal.truncate_to(1)
    assert wal.next_version == 3
    rewriting.run()
    rewriting.done()
    wal.truncate_to(1)
    assert entries(wal) == [(0, b"a")]
    wal.close()


def test_a_cut_tail_with_an_unreadable_entry_rebuilds_the_tables(tmp_path: Path):
    e, v, mark = _one_table(tmp_path)
    e.execute("INSERT INTO db.t1 USING db.st TAGS (1) VALUES (1000, 2)")
    meta = next(x for x in v.wal.read_from(mark) if x.kind == KIND_META)
    seg = next(s for s in v.wal.segments if meta.version in s.versions)
    with open(seg.path, "r+b") as f:  # its body's last byte flipped: read_from skips it (its kind unknown)
        at = seg.positions[seg.versions.index(meta.version)] + HEADER_SIZE + len(meta.body) - 1
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    e.truncate_vnode("db", 0, mark, high_watermark=mark)
    assert [t.name for t in v.tables()] == ["t0"] and v.live_count == 1
    e.close()


def test_a_refused_wal_cut_after_created_tables_were_forgotten_keeps_them(tmp_path: Path):
    e, vnode = _retained(tmp_path)
    mark = vnode.wal.next_version
    e.execute("INSERT INTO old.t3 USING old.st TAGS (3) VALUES (1000, 3)")
    tables = [(t.name, t.dropped) for t in vnode.tables()]
    faults = Faults()
    with faults.active():
        faults.fail("replace", error=errno.EIO)  # the WAL's intent, after the store forgot t3
        with pytest.raises(StorageUnavailable, match="nothing was cut"):
            e.truncate_vnode("old", 0, mark, high_watermark=mark)
        assert faults.injected == 1
    assert [(t.name, t.dropped) for t in vnode.tables()] == tables and vnode.live_count == 4  # t3 taken again
    again = _crashed(e, tmp_path, Engine.open).vnodes["old"][0]  # (the store covers the mark: the open replays it)
    assert [(t.name, t.dropped) for t in again.tables()] == tables and again.live_count == 4


def test_a_cut_of_a_re_created_table_while_the_wal_is_whole_drops_it_again(tmp_path: Path):
    cut, fresh = engine(tmp_path / "cut"), engine(tmp_path / "fresh")
    apply(cut, [("insert", 0, 1), ("drop", 0)], {})
    apply(fresh, [("insert", 0, 1), ("drop", 0)], {})
    mark = ends(cut)[0]
    apply(cut, [("insert", 0, 2)], {})  # t0 created again
    cut.truncate_vnode("db", 0, mark, high_watermark=mark)
    assert state(cut) == state(fresh) and [(t.name, t.dropped) for t in cut.vnodes["db"][0].tables()] == [
        ("t0", True)]
