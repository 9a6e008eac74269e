"""The log cleaner (walgate/storage/cleaner.py): newest record per key, tombstones, lag settings, dirty ratio, the
active segment, offsets and producer state kept, a reader during cleaning, and the crash-safe swap."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from faults import FAULT_KINDS, Faults

from walgate.storage import fileio
from walgate.storage.cleaner import CHECKPOINT, MAP_ENTRIES, CleanStats, map_entries
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.storage.producers import SequenceError
from walgate.storage.resource_configs import BROKER
from walgate.storage.wal import CorruptEntry
from walgate.wire import batch_header, decode_batches, encode_batch
from walgate.wire.errors import ErrorCode

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", "delete.retention.ms": "86400000"}
LATER = time.time() + 3600  # "now" for passes that should see every segment as old
NODE = 1  # the node id whose dynamic broker defaults apply


def batch(pairs: list[tuple[bytes | None, bytes | None]], *, pid: int = -1, epoch: int = -1, seq: int = -1,
          codec: str | None = None, ts: int = 1_000) -> bytes:
    return encode_batch(0, [ts] * len(pairs), [k for k, _ in pairs], [v for _, v in pairs], compression=codec,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_engine(path: Path) -> Engine:
    return Engine.open(path)


def clean(engine: Engine, now: float = LATER, max_keys: int = MAP_ENTRIES) -> CleanStats | None:
    """A whole pass, step by step as the gateway runs it (after each step the fdatasync it leaves, whose failure
    the gateway logs before the next step): its stats, None when nothing was due (or it stopped)."""
    stats = engine.clean(now, NODE, max_keys)
    steps = 1
    while stats is not None and not stats.finished:
        sync = engine.clean_sync()
        if sync is not None:
            with contextlib.suppress(OSError):
                sync()
        stats = engine.clean(now, NODE, max_keys)
        steps += 1
        assert steps < 1000
    return stats


def roll_every_append(engine: Engine, topic: str = "t", segment_ms: int = 0) -> None:
    """Each append starts a segment of its own (a sealed segment per batch); with ``segment_ms=-1``, none does."""
    for vnode in engine.vnodes[engine.catalog.topics[topic].db]:
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_ms=segment_ms)


def records(engine: Engine, topic: str = "t", partition: int = 0, offset: int | None = None
            ) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record a consumer reads from *offset* (default: the log start), through the index as Fetch reads."""
    start, _ = engine.watermarks(topic, partition)
    out = []
    for base, version, _count in engine.index_entries(topic, partition, start if offset is None else offset):
        try:
            stored = engine.kafka_batch(topic, partition, version)
        except CorruptEntry:  # lost: Fetch serves a gap
            continue
        assert batch_header(stored).base_offset == base
        region = engine.native.kafka_region(topic, partition, version)  # the header checks Fetch makes
        assert region.read() == stored
        out += [(r.offset, r.key, r.value) for b in decode_batches(stored) for r in b.records]
    return out


@pytest.fixture
def engine(tmp_path: Path):
    e = open_engine(tmp_path)
    yield e
    e.close()


def produce_history(engine: Engine) -> None:
    """Offsets 0..7: a=1 b=1 | a=2 | c=1 b=2 | a=3 | (b tombstone) | c=2 (active)."""
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    for pairs in ([(b"a", b"1"), (b"b", b"1")], [(b"a", b"2")], [(b"c", b"1"), (b"b", b"2")], [(b"a", b"3")],
                  [(b"b", None)], [(b"c", b"2")]):
        engine.append_batches("t", 0, [batch(pairs)])


def test_newest_record_per_key_kept_with_offsets_and_the_active_segment_untouched(engine: Engine):
    produce_history(engine)
    assert engine.watermarks("t", 0) == (0, 8)
    stats = clean(engine)
    assert stats is not None and stats.records_removed == 4
    got = records(engine)
    # superseded: a=1 b=1 a=2 b=2; c=2 is in the active segment, which neither is cleaned nor supersedes c=1
    assert got == [(3, b"c", b"1"), (5, b"a", b"3"), (6, b"b", None), (7, b"c", b"2")]
    assert engine.watermarks("t", 0) == (0, 8)  # log start and high watermark do not move
    # every offset asked for is served from the next batch on
    assert records(engine, offset=1) == got and records(engine, offset=5)[0][0] == 5
    assert clean(engine) is None  # nothing dirty left
    assert engine.append_batches("t", 0, [batch([(b"d", b"1")])]) == 8


def test_tombstones_go_after_delete_retention(tmp_path: Path):
    e = open_engine(tmp_path)
    try:
        produce_history(e)
        e.alter_topic_configs("t", {**COMPACT, "delete.retention.ms": "0"})
        roll_every_append(e)
        clean(e)
        assert [r for r in records(e) if r[2] is None] == []
        assert [r[0] for r in records(e)] == [3, 5, 7]
    finally:
        e.close()


def test_min_compaction_lag_and_dirty_ratio_hold_cleaning_back(engine: Engine):
    produce_history(engine)
    engine.alter_topic_configs("t", {**COMPACT, "min.compaction.lag.ms": str(10**14)})
    roll_every_append(engine)
    assert clean(engine) is None  # every record is younger than the lag (timestamps ~1970 + lag)
    engine.alter_topic_configs("t", {**COMPACT, "min.cleanable.dirty.ratio": "1"})
    roll_every_append(engine)
    assert clean(engine) is not None  # never cleaned: all dirty (ratio 1)
    engine.append_batches("t", 0, [batch([(b"a", b"4")])])  # seals c=2's segment: a little dirty
    assert clean(engine) is None  # below the ratio
    engine.alter_topic_configs("t", {**COMPACT, "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "1"})
    roll_every_append(engine)
    assert clean(engine) is not None  # overdue: max.compaction.lag.ms passed


def test_a_record_from_the_future_holds_nothing_back_without_a_compaction_lag(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    future = int((LATER + 10 * 365 * 86400) * 1000)
    for value, ts in ((b"1", future), (b"2", 1_000), (b"3", 1_000)):
        engine.append_batches("t", 0, [batch([(b"a", value)], ts=ts)])
    assert clean(engine) is not None
    assert records(engine) == [(1, b"a", b"2"), (2, b"a", b"3")]  # the active segment holds a=3


def test_a_timestamp_lookup_answers_a_records_own_offset_after_cleaning(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [encode_batch(0, [1_000, 2_000, 3_000], [b"a", b"b", b"c"], [b"1"] * 3)])
    engine.append_batches("t", 0, [batch([(b"b", b"2")], ts=4_000)])
    engine.append_batches("t", 0, [batch([(b"d", b"1")], ts=5_000)])
    assert clean(engine) is not None and [r[0] for r in records(engine)] == [0, 2, 3, 4]  # b=1 (offset 1) went
    assert engine.offset_for_timestamp("t", 0, 1_500) == (2, 3_000)
    assert engine.offset_for_timestamp("t", 0, 3_500) == (3, 4_000)


def test_delete_policy_topics_are_never_cleaned(engine: Engine):
    engine.create_kafka_topic("t", 1, {})
    roll_every_append(engine)
    for _ in range(3):
        engine.append_batches("t", 0, [batch([(b"a", b"1")])])
    assert clean(engine) is None
    assert len(records(engine)) == 3


def test_a_dynamic_broker_cleanup_policy_compacts_topics_without_their_own(engine: Engine):
    engine.create_kafka_topic("t", 1, {"min.cleanable.dirty.ratio": "0"})
    roll_every_append(engine)
    for value in (b"1", b"2", b"3"):
        engine.append_batches("t", 0, [batch([(b"a", value)])])
    engine.set_resource_configs(BROKER, str(NODE + 1), {"log.cleanup.policy": "compact"})  # another node's
    assert clean(engine) is None
    engine.set_resource_configs(BROKER, str(NODE), {"log.cleanup.policy": "compact"})
    assert clean(engine) is not None
    assert records(engine) == [(1, b"a", b"2"), (2, b"a", b"3")]  # the active segment holds a=3


def test_cleaned_log_survives_a_restart_and_a_rebuilt_index(tmp_path: Path):
    e = open_engine(tmp_path)
    produce_history(e)
    clean(e)
    expected = records(e)
    oidx = [p for p in tmp_path.rglob("*.oidx")]
    e.close()
    e = open_engine(tmp_path)  # the index with its gaps is trusted: the WAL holds nothing in them
    assert records(e) == expected and e.damage() == []
    e.close()
    for p in oidx:
        p.unlink()  # the index is rebuilt from the stored batches' own offsets (gaps included)
    e = open_engine(tmp_path)
    try:
        assert records(e) == expected and e.watermarks("t", 0) == (0, 8)
        assert e.damage() == []
        assert clean(e) is None  # the dirty point was kept
    finally:
        e.close()


def test_producer_state_survives_cleaning(tmp_path: Path):
    e = open_engine(tmp_path)
    e.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(e)
    for seq in range(0, 14, 2):  # every batch rewrites the same two keys
        e.append_batches("t", 0, [batch([(b"a", b"%d" % seq), (b"b", b"%d" % seq)], pid=7, epoch=0, seq=seq)])
    clean(e)
    e.close()
    e = open_engine(tmp_path)
    try:
        assert e.append_batches("t", 0, [batch([(b"a", b"x"), (b"b", b"x")], pid=7, epoch=0, seq=10)]) == 10  # dup
        assert e.append_batches("t", 0, [batch([(b"a", b"y")], pid=7, epoch=0, seq=14)]) == 14
    finally:
        e.close()


def _txn(values: list[bytes], seq: int = 0) -> bytes:
    return encode_batch(0, [1] * len(values), [b"a"] * len(values), values, producer_id=3, producer_epoch=0,
                        base_sequence=seq, is_transactional=True)


def end_txn(engine: Engine, commit: bool) -> None:
    """Producer 3's transaction ends: the marker (COMMIT / ABORT) written as the transaction coordinator writes it."""
    assert engine.write_txn_markers(3, 0, 0, commit, [("t", 0)]) == [None]


def values(engine: Engine) -> list[bytes | None]:
    return [v for o, k, v in records(engine) if k != b"\x00\x00\x00\x01" and k != b"\x00\x00\x00\x00"]


@pytest.mark.parametrize(("commit", "left"), [(True, [b"plain", b"1"]), (False, [b"plain", b"1"])])
def test_ended_transactions_are_compacted_and_markers_kept(engine: Engine, commit: bool, left: list[bytes]):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [_txn([b"t1", b"t2"])])
    end_txn(engine, commit)
    engine.append_batches("t", 0, [batch([(b"a", b"plain")])])
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])
    stats = clean(engine)
    assert stats is not None and stats.records_removed == 2  # committed: superseded; aborted: removed
    assert values(engine) == left
    assert len(records(engine)) == 3  # the marker stays


def test_an_aborted_record_never_hides_an_older_one(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [batch([(b"a", b"committed")])])
    engine.append_batches("t", 0, [_txn([b"aborted"])])
    end_txn(engine, False)
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])
    clean(engine)
    assert values(engine) == [b"committed", b"1"]


def test_an_ongoing_transaction_stops_the_pass_before_it(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [batch([(b"a", b"old")])])  # 0: cleanable
    engine.append_batches("t", 0, [batch([(b"a", b"new")])])  # 1: cleanable
    engine.append_batches("t", 0, [_txn([b"open"])])  # 2: the transaction begins (no marker yet)
    engine.append_batches("t", 0, [batch([(b"a", b"after")])])  # 3: not cleaned while it is open
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])  # 4: active
    clean(engine)
    assert values(engine) == [b"new", b"open", b"after", b"1"]
    end_txn(engine, True)  # committed: the rest becomes cleanable
    engine.append_batches("t", 0, [batch([(b"y", b"1")])])
    clean(engine)
    assert values(engine) == [b"after", b"1", b"1"]


def test_a_reader_holding_a_region_reads_the_old_bytes(engine: Engine):
    produce_history(engine)
    _, version, _ = next(engine.index_entries("t", 0, 0))
    region = engine.native.kafka_region("t", 0, version)  # as Fetch hands it to sendfile
    before = region.read()
    clean(engine)
    assert region.read() == before  # the old file stays open for it
    assert engine.kafka_batch("t", 0, version) != before  # new reads see the cleaned batch


def test_compressed_batches_are_recompressed(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [batch([(b"a", b"1"), (b"b", b"1")], codec="zstd")])
    engine.append_batches("t", 0, [batch([(b"a", b"2")])])
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])
    clean(engine)
    _, version, _ = next(engine.index_entries("t", 0, 0))
    assert batch_header(engine.kafka_batch("t", 0, version)).attributes & 7 == 4  # zstd
    assert records(engine) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"z", b"1")]


def test_tdengine_topics_and_bad_values_are_refused(engine: Engine):
    with pytest.raises(InvalidValue):
        engine.create_kafka_topic("t", 1, {"cleanup.policy": "compact,sometimes"})
    engine.create_kafka_topic("t", 1, {"cleanup.policy": "delete, compact"})  # any order, spaces
    assert engine.vnodes[engine.catalog.topics["t"].db][0].wal.options.retention_period_s == 604800


# ------------------------------------------------------------------ crash safety


def _fileio_steps(tmp_path: Path) -> int:
    """How many file operations one cleaning pass of produce_history makes."""
    e = open_engine(tmp_path / "count")
    produce_history(e)
    faults = Faults()
    with faults.active():
        clean(e)
    e.close()
    return sum(faults.calls.values())


class _Killed(BaseException):
    """A kill -9 in the middle of a file operation: nothing after it runs, nothing is closed."""


def test_a_kill_at_any_step_leaves_the_old_or_the_new_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    steps = _fileio_steps(tmp_path)
    assert steps > 8
    reference = open_engine(tmp_path / "ref")
    produce_history(reference)
    old = records(reference)
    clean(reference)
    new = records(reference)
    reference.close()
    for step in range(1, steps + 1):
        path = tmp_path / f"kill{step}"
        e = open_engine(path)
        produce_history(e)
        faults = Faults()
        with faults.active():
            faults.fail("write", at=10**9)  # counts only
            calls = 0
            real = faults._due

            def due(name: str, real=real):  # noqa: ANN001 - the kill lands on the step-th operation
                nonlocal calls
                calls += 1
                if calls == step:
                    raise _Killed
                return real(name)

            monkeypatch.setattr(faults, "_due", due)
            with pytest.raises(_Killed):
                clean(e)
        monkeypatch.undo()
        again = open_engine(path)  # the killed engine is abandoned, never closed
        try:
            got = records(again)
            per_segment = {o: (k, v) for o, k, v in got}
            assert got == new or all(per_segment.get(o) == (k, v) for o, k, v in old if o in per_segment), step
            assert {o for o, _, _ in new} <= set(per_segment) <= {o for o, _, _ in old}, step
            assert not [p for p in path.rglob("*.log.tmp")], step  # removed by the WAL's recovery
            assert again.damage() == [], step  # nothing reported: a kill is not damage
            for _base, version, _count in again.index_entries("t", 0, 0):
                again.kafka_batch("t", 0, version)  # every indexed batch is in the log (none served as lost)
            clean(again)
            assert records(again) == new, step
            assert not [p for p in path.rglob("*.tmp")], step
        finally:
            again.close()


def test_a_refused_write_changes_nothing_and_the_next_pass_cleans(engine: Engine):
    produce_history(engine)
    old = records(engine)
    faults = Faults()
    with faults.active():
        faults.fail("write", at=1, error=errno.ENOSPC)
        clean(engine)
    assert records(engine)[0] == old[0] or records(engine)  # the first segment stayed as it was
    engine.cleaner._dirty.clear()
    (engine.vnodes[engine.catalog.topics["t"].db][0].dir / CHECKPOINT).unlink(missing_ok=True)
    clean(engine)
    assert [r[0] for r in records(engine)] == [3, 5, 6, 7]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_cleaned_segment_is_reported_and_the_rest_served(tmp_path: Path, damage: str):
    e = open_engine(tmp_path)
    produce_history(e)
    clean(e)
    wal_dir = e.vnodes[e.catalog.topics["t"].db][0].wal.dir
    e.close()
    merged, _active = sorted(wal_dir.glob("*.log"))  # the cleaned segments, merged into one
    data = bytearray(merged.read_bytes())
    if damage == "truncate":  # its last entry (b's tombstone) is damaged
        merged.write_bytes(bytes(data[: len(data) - 5]))
    else:
        data[len(data) - 3] ^= 0xFF
        merged.write_bytes(bytes(data))
    for idx in wal_dir.glob("*.idx"):
        os.utime(idx)  # (the seal no longer matches the log: it is scanned)
    e = open_engine(tmp_path)
    try:
        assert e.damage()  # reported, never fatal
        assert [r[0] for r in records(e)] == [3, 5, 7]  # the rest is served
    finally:
        e.close()


def _failing_writes(seen: Faults, kind: str) -> Iterator[tuple[str, int, Faults]]:
    """For every write, fsync and fdatasync the run counted by *seen* made: (op, n, faults that fail the n-th
    such call: a write with *kind*, a sync with EIO)."""
    for op in ("write", "fsync", "fdatasync"):
        for n in range(1, seen.calls[op] + 1):
            faults = Faults()
            if op == "write":
                faults.fail_kind(op, kind, at=n)
            else:
                faults.fail(op, at=n, error=errno.EIO)
            yield op, n, faults


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_write_fault_at_any_step_keeps_a_consistent_log(tmp_path: Path, kind: str):
    """ENOSPC, EIO or a short write at each write or fsync of a pass (a directory's fsync after a swap's rename
    too): no error escapes, the log reads as before or partly cleaned (never a half-written segment, never a swapped
    file read at the old one's positions), and a later pass finishes the job."""
    faults_seen = Faults()
    e = open_engine(tmp_path / "count")
    produce_history(e)
    with faults_seen.active():
        clean(e)
    e.close()
    for op, n, faults in _failing_writes(faults_seen, kind):
        path = tmp_path / f"{op}{n}"
        e = open_engine(path)
        produce_history(e)
        old = {o: (k, v) for o, k, v in records(e)}
        with faults.active():
            clean(e)
        got = cold_records(e)  # (read by name: a file swapped in is read with its own positions)
        assert all(old[o] == (k, v) for o, k, v in got), (op, n)
        e.cleaner._dirty.clear()
        (e.vnodes[e.catalog.topics["t"].db][0].dir / CHECKPOINT).unlink(missing_ok=True)
        clean(e)
        assert [r[0] for r in records(e)] == [3, 5, 6, 7], (op, n)
        e.close()
        again = open_engine(path)
        assert [r[0] for r in records(again)] == [3, 5, 6, 7] and again.damage() == [], (op, n)
        again.close()


def test_a_pass_runs_in_bounded_steps_with_reads_and_appends_in_between(engine: Engine):
    produce_history(engine)
    engine.cleaner.step_bytes = 1  # one entry per scan step
    before = {o: (k, v) for o, k, v in records(engine)}
    steps = 0
    stats = engine.clean(LATER, NODE)
    while stats is not None and not stats.finished:
        steps += 1
        got = records(engine)  # a consumer between two steps: every record it reads is one that was written
        assert all(before.get(o, (k, v)) == (k, v) for o, k, v in got)
        assert {5, 6, 7} <= {o for o, _, _ in got}  # the newest of every key is always there
        engine.append_batches("t", 0, [batch([(b"e", b"%d" % steps)])])  # a producer too (new segments)
        stats = engine.clean(LATER, NODE)
    assert steps > 6 and stats is not None and stats.records_removed == 4
    assert [o for o, _, _ in records(engine)][:4] == [3, 5, 6, 7]


_CHILD = """
import sys, time
from pathlib import Path
from walgate.storage.engine import Engine
e = Engine.open(Path(sys.argv[1]))
e.cleaner.step_bytes = 200
print("ready", flush=True)
while True:
    e.clean(time.time() + 3600, NODE)
    sync = e.clean_sync()  # as the gateway runs it (there on a thread of its own): kills land inside it too
    if sync is not None:
        sync()
    time.sleep(0.002)  # (a pass spread over more time: more kills land inside it)
"""


def test_kill_9_of_a_process_cleaning_leaves_a_consistent_log(tmp_path: Path):
    """A real SIGKILL at whatever point a cleaning process reached (no close, no cleanup): the next open serves a
    log where every record read is one written, the newest of each key is there, nothing is reported damaged, and a
    pass then gives the log a pass without a kill gives."""
    keys = [b"k%d" % i for i in range(8)]
    setup = open_engine(tmp_path / "ref")
    setup.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(setup)
    for n in range(60):
        setup.append_batches("t", 0, [batch([(k, b"%d" % n) for k in keys[n % 3:n % 3 + 4]])])
    setup.close()
    subprocess.run(["cp", "-a", str(tmp_path / "ref"), str(tmp_path / "cleaned")], check=True)
    reference = open_engine(tmp_path / "cleaned")
    clean(reference)
    cleaned = records(reference)
    reference.close()
    rng = random.Random(17)
    for attempt in range(4):
        path = tmp_path / f"kill{attempt}"
        subprocess.run(["cp", "-a", str(tmp_path / "ref"), str(path)], check=True)
        e = open_engine(path)
        old = {o: (k, v) for o, k, v in records(e)}
        newest = {k: o for o, (k, _) in sorted(old.items())}
        e.close()
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.4))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        again = open_engine(path)
        try:
            got = records(again)
            assert all(old[o] == (k, v) for o, k, v in got), attempt
            assert set(newest.values()) <= {o for o, _, _ in got}, attempt
            assert again.damage() == [], attempt
            clean(again)
            assert records(again) == cleaned, attempt
        finally:
            again.close()


def test_a_damaged_segment_is_left_as_it_is_and_later_tombstones_stay(tmp_path: Path):
    e = open_engine(tmp_path)
    e.create_kafka_topic("t", 1, {**COMPACT, "delete.retention.ms": "0"})
    roll_every_append(e)
    e.append_batches("t", 0, [batch([(b"b", b"old")]), batch([(b"x", b"1")])])  # one segment: offsets 0, 1
    e.append_batches("t", 0, [batch([(b"b", None)])])  # 2: b deleted
    e.append_batches("t", 0, [batch([(b"z", b"1")])])  # 3 (active)
    wal_dir = e.vnodes[e.catalog.topics["t"].db][0].wal.dir
    e.close()
    first = sorted(wal_dir.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # the second entry (x=1) is damaged
    first.write_bytes(bytes(data))
    e = open_engine(tmp_path)
    try:
        clean(e)
        got = records(e)
        # b=old is still in the damaged segment: its tombstone must stay, or b would come back
        assert (0, b"b", b"old") in got and (2, b"b", None) in got
        assert e.damage()
    finally:
        e.close()


def test_a_batch_the_cleaner_cannot_rewrite_stays_as_it_is(engine: Engine):
    """A record timestamp of -1 (Kafka's "no timestamp", which encode_batch refuses to write): kept, and the pass
    goes on."""
    odd = bytearray(batch([(b"a", b"1"), (b"b", b"1")]))
    odd[27:35] = (-1).to_bytes(8, "big", signed=True)  # base timestamp
    odd[17:21] = crc32c.crc32c(bytes(odd[21:])).to_bytes(4, "big")
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [bytes(odd)])
    engine.append_batches("t", 0, [batch([(b"a", b"2")])])
    engine.append_batches("t", 0, [batch([(b"c", b"2")])])
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])
    stats = clean(engine)
    assert stats is not None and stats.finished
    assert [r[2] for r in records(engine)] == [b"1", b"1", b"2", b"2", b"1"]


# ------------------------------------------------------------------ transaction markers (KIP-534's delete horizon)


def _txn_a(value: bytes, seq: int) -> bytes:
    return _txn([value], seq)


def offsets(engine: Engine) -> list[int]:
    return [o for o, _, _ in records(engine)]


def test_markers_go_once_their_transaction_is_gone_and_their_delete_horizon_passed(tmp_path: Path):
    e = open_engine(tmp_path)
    _txn_history(e)  # the transactions' data goes (7 stays empty: a producer's last batches); every marker stays
    assert offsets(e) == [0, 2, 4, 6, 8, 9, 10, 11, 12]
    e.append_batches("t", 0, [batch([(b"w", b"1")])])  # 13: something dirty again
    clean(e)  # 2 and 4 have no batch of their transaction left: they get a delete horizon, and stay
    stored = {batch_header(e.kafka_batch("t", 0, v)).base_offset: batch_header(e.kafka_batch("t", 0, v))
              for _, v, _ in e.index_entries("t", 0, 0)}
    horizon = int(LATER * 1000) + 1000
    assert [(o, h.base_timestamp) for o, h in stored.items() if h.attributes & 0x40] == [(2, horizon), (4, horizon)]
    assert offsets(e) == [0, 2, 4, 6, 8, 9, 10, 11, 12, 13]
    assert clean(e, LATER + 0.5) is None  # nothing dirty, the horizon not passed
    e.close()
    e = open_engine(tmp_path)  # the horizons are in the batches (and the next one in the checkpoint)
    try:
        assert e.partitions.offsets("t", 0).last_stable == 14
        assert clean(e, LATER + 1.5) is not None  # due: a horizon passed, nothing else dirty
        assert offsets(e) == [0, 6, 8, 9, 10, 11, 12, 13]
        assert clean(e, LATER + 3) is None  # nothing left waiting
    finally:
        e.close()
    e = open_engine(tmp_path)  # the transaction state rebuilt without the markers
    try:
        assert e.partitions.offsets("t", 0).last_stable == 14 and e.native.aborted_transactions("t", 0, 0, 14) == []
        assert e.append_batches("t", 0, [_txn_a(b"next", 5)]) == 14  # producer 3 goes on where it was
        end_txn(e, False)
        assert e.native.aborted_transactions("t", 0, 0, 16) == [(3, 14, 15)] and e.partitions.offsets("t", 0).last_stable == 16
    finally:
        e.close()


def _txn_history(e: Engine) -> None:
    """Two segments of producer 3's transactions (key a; the first aborted) and plain records, then a pass that
    removes their data: the markers of offsets 2 and 4 are left without a batch."""
    e.create_kafka_topic("t", 1, {**COMPACT, "delete.retention.ms": "1000"})
    roll_every_append(e, segment_ms=-1)
    e.append_batches("t", 0, [batch([(b"x", b"1")])])  # 0
    for n in range(4):
        e.append_batches("t", 0, [_txn_a(b"v%d" % n, n)])  # 1, 3, 5, 7
        end_txn(e, commit=n > 0)  # 2, 4, 6, 8
    e.append_batches("t", 0, [batch([(b"y", b"1")])])  # 9
    roll_every_append(e)
    e.append_batches("t", 0, [_txn_a(b"last", 4)])  # 10: supersedes every a
    end_txn(e, True)  # 11 (producer 3's last five batches: 6, 7, 8, 10, 11)
    e.append_batches("t", 0, [batch([(b"z", b"1")])])  # 12 (active)
    clean(e)


def _marker_passes(e: Engine, faults: Faults) -> None:
    """The passes that give the markers a delete horizon, then remove them (dirty segments in between), under
    ``faults``."""
    for n in range(3):
        e.append_batches("t", 0, [batch([(b"w", b"%d" % n)])])
        with faults.active():
            clean(e, LATER + 2 * n)


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_write_fault_while_markers_go_keeps_a_consistent_log(tmp_path: Path, kind: str):
    """ENOSPC, EIO or a short write at each write or fsync of the passes that set delete horizons and remove
    markers: the log reads as before or after, the transaction state rebuilt at open is right, and later passes
    finish the job."""
    reference = open_engine(tmp_path / "ref")
    _txn_history(reference)
    faults_seen = Faults()
    _marker_passes(reference, faults_seen)
    want = records(reference)
    reference.close()
    assert 2 not in {o for o, _, _ in want}  # (the marker went)
    for op, n, faults in _failing_writes(faults_seen, kind):
        path = tmp_path / f"{op}{n}"
        e = open_engine(path)
        _txn_history(e)
        before = {o: (k, v) for o, k, v in records(e)}
        _marker_passes(e, faults)
        written = {**before, **{13 + m: (b"w", b"%d" % m) for m in range(3)}}  # (and the passes' w records)
        assert [r for r in records(e) if written.get(r[0]) != r[1:]] == [], (op, n)
        e.close()
        again = open_engine(path)
        try:
            high = again.watermarks("t", 0)[1]
            assert again.partitions.offsets("t", 0).last_stable == high and again.damage() == [], (op, n)
            assert again.native.aborted_transactions("t", 0, 0, high) in ([], [(3, 1, 2)]), (op, n)
            for m in range(3, 6):
                again.append_batches("t", 0, [batch([(b"w", b"%d" % m)])])
                roll_every_append(again)
                clean(again, LATER + 2 * m)
            assert [o for o, _, _ in records(again)][:7] == [o for o, _, _ in want][:7], (op, n)
        finally:
            again.close()


def test_a_marker_stays_while_a_batch_of_its_transaction_does(tmp_path: Path):
    """An aborted transaction's batch kept (empty) as its segment's first: its marker stays, or a restart would
    find the transaction open."""
    engine = open_engine(tmp_path)
    engine.create_kafka_topic("t", 1, {**COMPACT, "delete.retention.ms": "0"})
    roll_every_append(engine, segment_ms=-1)
    engine.append_batches("t", 0, [_txn_a(b"aborted", 0)])  # 0: its segment's first batch
    end_txn(engine, False)  # 1
    engine.append_batches("t", 0, [batch([(b"q", b"1")])])  # 2: the segment's last
    roll_every_append(engine)
    for n in range(6):  # producer 3's last batches move on; passes come and go
        engine.append_batches("t", 0, [batch([(b"k", b"%d" % n)], pid=3, epoch=0, seq=1 + n)])
        clean(engine, LATER + n)
    assert offsets(engine)[:2] == [1, 2]  # the marker (its transaction's batch is there, empty)
    engine.close()
    again = open_engine(tmp_path)
    try:
        assert again.partitions.offsets("t", 0).last_stable == again.watermarks("t", 0)[1]
    finally:
        again.close()


def test_a_marker_that_ends_its_segment_becomes_an_empty_control_batch(tmp_path: Path):
    e = open_engine(tmp_path)
    e.create_kafka_topic("t", 1, {**COMPACT, "delete.retention.ms": "0"})
    roll_every_append(e, segment_ms=-1)
    e.append_batches("t", 0, [batch([(b"x", b"1")])])  # 0
    e.append_batches("t", 0, [_txn_a(b"aborted", 0)])  # 1
    e.append_batches("t", 0, [batch([(b"y", b"1")])])  # 2
    roll_every_append(e)
    end_txn(e, False)  # 3: a segment's only batch
    wal = e.vnodes[e.catalog.topics["t"].db][0].wal
    wal.options = dataclasses.replace(wal.options, segment_bytes=1)  # (segments too big to merge: it stays alone)
    end_txn(e, True)  # 4: producer 3's newest marker now, which stays whole (its coordinator epoch)
    for n in range(8):  # producer 3's last batches move on; passes come and go
        e.append_batches("t", 0, [batch([(b"k", b"%d" % n)], pid=3, epoch=0, seq=1 + n)])
        clean(e, LATER + n)
    assert offsets(e)[:4] == [0, 2, 4, 11]  # the marker's record went (and the superseded k values)
    version = next(v for base, v, _ in e.index_entries("t", 0, 0) if base == 3)
    header = batch_header(e.kafka_batch("t", 0, version))
    assert header.attributes & 0x20 and not header.attributes & 0x40 and header.record_count == 0
    # a read_committed reader is no longer told of the transaction: it would skip producer 3 until the marker
    assert e.native.aborted_transactions("t", 0, 0, e.watermarks("t", 0)[1]) == []
    e.close()
    e = open_engine(tmp_path)
    try:
        high = e.watermarks("t", 0)[1]
        assert e.partitions.offsets("t", 0).last_stable == high and e.native.aborted_transactions("t", 0, 0, high) == []
    finally:
        e.close()


# ------------------------------------------------------------------ a bounded key map, bounded steps, open transactions


def test_a_bounded_key_map_cleans_in_several_passes_to_the_same_log(tmp_path: Path):
    assert map_entries(128 << 20, 0.9) == 5033164  # Kafka's defaults: 128 MiB / 24 bytes * 0.9
    reference = open_engine(tmp_path / "ref")
    produce_history(reference)
    clean(reference)
    cleaned = records(reference)
    reference.close()
    e = open_engine(tmp_path / "bounded")
    try:
        produce_history(e)
        old = {o: (k, v) for o, k, v in records(e)}
        passes = []
        while (stats := clean(e, max_keys=1)) is not None:  # a map of one key takes one batch per pass
            passes.append(stats.records_removed)
            got = records(e)
            assert all(old[o] == (k, v) for o, k, v in got) and {5, 6, 7} <= {o for o, _, _ in got}
            assert len(passes) < 20
        assert len(passes) > 2 and passes[0] < 4
        assert records(e) == cleaned
    finally:
        e.close()


def test_a_segment_is_rewritten_in_bounded_steps_and_swapped_at_once(engine: Engine):
    engine.create_kafka_topic("t", 1, COMPACT)
    engine.append_batches("t", 0, [batch([(b"a", b"%d" % n)]) for n in range(20)])  # one segment of 20 batches
    roll_every_append(engine)
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])  # seals it
    old = records(engine)
    engine.cleaner.step_bytes = 1  # one batch per step
    stats = engine.clean(LATER, NODE)
    steps = 0
    while stats is not None and not stats.finished:
        steps += 1
        got = records(engine)  # between two steps: the old segment whole, or the new one
        assert got == old or [o for o, _, _ in got] == [19, 20]
        stats = engine.clean(LATER, NODE)
    assert steps > 30 and stats is not None and stats.records_removed == 19


def test_a_pass_stopped_by_an_open_transaction_waits_for_it_to_end(engine: Engine, monkeypatch: pytest.MonkeyPatch):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [batch([(b"a", b"old")])])
    engine.append_batches("t", 0, [_txn([b"open"])])  # the transaction begins (no marker yet)
    engine.append_batches("t", 0, [batch([(b"z", b"1")])])
    assert clean(engine) is not None
    scans = 0
    real = engine.cleaner._scan

    def counted(p):  # noqa: ANN001, ANN202
        nonlocal scans
        scans += 1
        real(p)

    monkeypatch.setattr(engine.cleaner, "_scan", counted)
    for n in range(3):  # more dirty segments: the pass would stop at the same place
        engine.append_batches("t", 0, [batch([(b"z", b"%d" % n)])])
        assert clean(engine) is None
    assert scans == 0
    end_txn(engine, True)
    engine.append_batches("t", 0, [batch([(b"y", b"1")])])
    assert clean(engine) is not None and scans > 0
    assert values(engine) == [b"open", b"2", b"1"]


def test_segment_ms_is_timed_from_the_segments_first_batch_across_a_restart(tmp_path: Path):
    e = open_engine(tmp_path)
    e.create_kafka_topic("t", 1, {**COMPACT, "segment.ms": "1000"})
    wal = e.vnodes[e.catalog.topics["t"].db][0].wal
    e.append_batches("t", 0, [batch([(b"a", b"1")], ts=10_000)])
    e.append_batches("t", 0, [batch([(b"a", b"2")], ts=10_500)])
    assert len(wal.segments) == 1
    e.close()
    e = open_engine(tmp_path)  # Kafka's rollingBasedTimestamp: the first batch's timestamp, not the open's clock
    try:
        wal = e.vnodes[e.catalog.topics["t"].db][0].wal
        e.append_batches("t", 0, [batch([(b"a", b"3")], ts=10_900)])
        assert len(wal.segments) == 1
        e.append_batches("t", 0, [batch([(b"a", b"4")], ts=11_000)])  # 1000 ms after the segment's first batch
        assert len(wal.segments) == 2
    finally:
        e.close()


# ------------------------------------------------------------------ merging cleaned segments (Kafka's groupSegmentsBySize)


def test_cleaned_segments_are_merged_up_to_segment_bytes(tmp_path: Path):
    e = open_engine(tmp_path)
    try:
        produce_history(e)  # five sealed segments of one batch each, and the active one
        wal = e.vnodes[e.catalog.topics["t"].db][0].wal
        wal.options = dataclasses.replace(wal.options, segment_bytes=250)  # two cleaned segments fit, not three
        stats = clean(e)
        assert stats is not None and stats.merged == 2
        assert [s.size <= 250 for s in wal.segments[:-1]] == [True, True, True]
        assert [r[0] for r in records(e)] == [3, 5, 6, 7]
        wal.options = dataclasses.replace(wal.options, segment_bytes=1 << 20)
        e.append_batches("t", 0, [batch([(b"d", b"1")])])  # something dirty: the next pass merges the rest
        stats = clean(e)
        assert stats is not None and stats.merged == 3 and len(wal.segments) == 2
        assert [r[0] for r in records(e)] == [5, 6, 7, 8]  # (c=1 went too: c=2 is sealed now)
    finally:
        e.close()
    e = open_engine(tmp_path)
    try:
        assert [r[0] for r in records(e)] == [5, 6, 7, 8] and e.damage() == []
        assert len(sorted(e.vnodes[e.catalog.topics["t"].db][0].wal.dir.glob("*.log"))) == 2
    finally:
        e.close()


def test_a_merge_committed_before_a_kill_is_finished_at_open(tmp_path: Path):
    """The merged log committed as ``<first>.<end>.swap``, some of the merged segments' files deleted, the rest not
    (a kill between two deletions): the next open finishes the merge, reports nothing, and serves every record."""
    e = open_engine(tmp_path / "fresh")
    produce_history(e)
    fresh_dir = e.vnodes[e.catalog.topics["t"].db][0].wal.dir
    want = records(e)
    e.close()
    sealed = sorted(fresh_dir.glob("*.log"))[:-1]
    end = int(sorted(fresh_dir.glob("*.log"))[-1].name[:20])
    (fresh_dir / f"{sealed[0].name[:20]}.{end:020d}.swap").write_bytes(b"".join(p.read_bytes() for p in sealed))
    sealed[2].unlink()
    sealed[2].with_suffix(".idx").unlink()
    e = open_engine(tmp_path / "fresh")
    try:
        assert records(e) == want and e.damage() == []
        assert [p.name[:20] for p in sorted(fresh_dir.glob("*.log"))] == [sealed[0].name[:20], f"{end:020d}"]
        assert not list(fresh_dir.glob("*.swap"))
        e.append_batches("t", 0, [batch([(b"d", b"1")])])  # (into the active segment, after c=2)
        clean(e)
        assert [r[0] for r in records(e)] == [3, 5, 6, 7, 8]
    finally:
        e.close()


def _distinct_history(e: Engine) -> None:
    """Five sealed segments of one batch each, every key distinct (a pass removes nothing, and merges them all),
    then the active segment."""
    e.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(e)
    for n in range(6):
        e.append_batches("t", 0, [batch([(b"k%d" % n, b"v%d" % n)])])


def cold_records(e: Engine) -> list[tuple[int, bytes | None, bytes | None]]:
    """:func:`records` with no segment file open (as the engine's descriptor cache evicts them): every read
    opens its segment's file by name."""
    for seg in e.vnodes[e.catalog.topics["t"].db][0].wal.segments:
        seg.forget_files(e.files)
    return records(e)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
def test_a_disk_refusing_a_merges_file_operations_never_fails_a_read(tmp_path: Path, error: int):
    """Each unlink, rename and fsync of a pass refused from then on, as long as the fault lasts (after the merge's
    commit, the ``.swap`` file, too): reads serve the same records throughout (the merged segment is read from the
    swap file until it is renamed), a restart at that point opens with them, while the fault lasts too, and once the
    disk accepts the operations again the cleaner finishes the merge."""
    seen = Faults()
    e = open_engine(tmp_path / "count")
    _distinct_history(e)
    want = records(e)
    with seen.active():
        stats = clean(e)
    assert stats is not None and stats.merged == 4 and records(e) == want
    e.close()
    ops = [(op, n) for op in ("unlink", "replace", "fsync") for n in range(1, seen.calls[op] + 1)]
    assert len(ops) > 15
    for op, n in ops:
        path = tmp_path / f"{op}{n}"
        e = open_engine(path)
        try:
            _distinct_history(e)
            faults = Faults()
            with faults.active():
                faults.fail(op, at=n, error=error, times=10**9)  # the n-th and every later one, until cleared
                for now in (LATER, LATER + 1):  # a pass, then the cleaner's next calls try again, and fail again
                    stats = e.clean(now, NODE)
                    while stats is not None and not stats.finished:  # a read between every two steps
                        assert cold_records(e) == want, (op, n)
                        stats = e.clean(now, NODE)
                    assert cold_records(e) == want, (op, n)
                shutil.copytree(path, tmp_path / f"{op}{n}-restart")  # a kill now
                faults.clear()
            _finished(e, want)
        finally:
            e.close()
        assert not list(path.rglob("*.tmp")), (op, n)  # (a kill may leave cleaner.ckpt.tmp: deleted when read)
        faults = Faults()
        with faults.active():
            faults.fail(op, at=1, error=error, times=10**9)  # restarted while the disk still refuses them
            again = open_engine(tmp_path / f"{op}{n}-restart")
        try:
            assert cold_records(again) == want and again.damage() == [], (op, n)
            _finished(again, want)
        finally:
            again.close()
        for restarted in (path, tmp_path / f"{op}{n}-restart"):
            again = open_engine(restarted)
            try:
                assert cold_records(again) == want and again.damage() == [], (op, n, restarted)
                assert not list(restarted.rglob("*.swap*")) and not list(restarted.rglob("*.log.tmp")), (op, n)
            finally:
                again.close()


def _finished(e: Engine, want: list[tuple[int, bytes | None, bytes | None]]) -> None:
    """The disk accepts every operation: the cleaner's next call finishes the merge (or the pass that merges)."""
    clean(e, LATER + 2)
    wal = e.vnodes[e.catalog.topics["t"].db][0].wal
    assert cold_records(e) == want and not wal.merging
    assert len(wal.segments) == 2 and not list(wal.dir.glob("*.swap"))


def test_a_producers_newest_marker_keeps_its_coordinator_epoch_across_a_restart(tmp_path: Path):
    """A transaction's marker (coordinator epoch 5), then more than five batches of its producer: the transaction's
    data goes and its marker is no longer one of the producer's last batches, but as the producer's newest marker it
    stays, so the state rebuilt at open still fences a marker of an older coordinator (Kafka: its producer snapshot)."""
    e = open_engine(tmp_path)
    try:
        e.create_kafka_topic("t", 1, {**COMPACT, "delete.retention.ms": "1000"})
        roll_every_append(e, segment_ms=-1)  # one segment: x, the transaction and its marker, producer 3's batches, y
        e.append_batches("t", 0, [batch([(b"x", b"1")])])  # 0
        e.append_batches("t", 0, [_txn_a(b"txn", 0)])  # 1
        assert e.write_txn_markers(3, 0, 5, True, [("t", 0)]) == [None]  # 2
        for seq in range(1, 7):  # 3..8: key a supersedes the transaction's record
            e.append_batches("t", 0, [batch([(b"a", b"%d" % seq)], pid=3, epoch=0, seq=seq)])
        e.append_batches("t", 0, [batch([(b"y", b"1")])])  # 9
        roll_every_append(e)
        for n in range(3):  # the transaction's data goes, then its marker gets a delete horizon, which then passes
            e.append_batches("t", 0, [batch([(b"w", b"%d" % n)])])
            clean(e, LATER + 2 * n)
        assert 1 not in offsets(e) and 2 in offsets(e)
    finally:
        e.close()
    e = open_engine(tmp_path)
    try:
        assert [p.coordinator_epoch for p in e.partitions.producers("t", 0) if p.producer_id == 3] == [5]
        fenced = e.write_txn_markers(3, 0, 4, True, [("t", 0)])
        assert isinstance(fenced[0], SequenceError) and fenced[0].error_code is ErrorCode.transaction_coordinator_fenced
    finally:
        e.close()


def test_retention_deletes_a_merged_segment_whose_merge_is_unfinished_with_every_file_of_it(tmp_path: Path):
    """The rename of the swap file refused (the merged segment served from it), then retention deletes that
    segment: the swap file and every file of the segments it merged go, so no restart brings any of them back."""
    e = open_engine(tmp_path)
    try:
        _distinct_history(e)
        wal = e.vnodes[e.catalog.topics["t"].db][0].wal
        faults = Faults()
        with faults.active():
            faults.fail("replace", at=2, times=10**9)  # the commit's rename goes through, the swap file's does not
            clean(e)
            assert wal.merging and len(wal.segments) == 2 and list(wal.dir.glob("*.swap"))
        wal.options = dataclasses.replace(wal.options, retention_period_s=0)  # (as cleanup.policy=compact,delete)
        e.apply_retention(LATER)  # (the cleaner is not called in between: the merge is not finished)
        assert not wal.merging and [r[0] for r in cold_records(e)] == [5]
    finally:
        e.close()
    e = open_engine(tmp_path)
    try:
        assert [r[0] for r in cold_records(e)] == [5] and e.damage() == []
        assert len(list(e.vnodes[e.catalog.topics["t"].db][0].wal.dir.glob("*.log"))) == 1
    finally:
        e.close()


def test_every_fsync_of_a_pass_runs_on_the_callers_thread_between_steps(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """Issue 23: every fsync and fdatasync of a pass (the staged bytes of rewritten logs and merges; each swap's,
    merge's, index's and checkpoint's whole-file fsync and its directory's fsync) is run by the function
    ``Engine.clean_sync`` hands out after a step, which the gateway runs on a thread of its own, so the storage
    thread never waits for the disk (on main the swaps', merges' and checkpoint's fsyncs ran in the steps, on the
    storage thread); the pass's result is the same, and so is the log after a restart."""
    engine = open_engine(tmp_path)
    produce_history(engine)
    engine.cleaner.step_bytes = 1  # segments rewritten in several steps: staged bytes fdatasynced between them
    threads: list[tuple[str, str]] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(fileio, name)

        def recorded(fd: int, *, real: Any = real, name: str = name, **kw: Any) -> None:
            threads.append((name, threading.current_thread().name))
            real(fd, **kw)

        monkeypatch.setattr(fileio, name, recorded)
    steps = 0
    stats = engine.clean(LATER, NODE)
    while True:
        sync = getattr(engine, "clean_sync", lambda: None)()
        if sync is not None:
            worker = threading.Thread(target=sync, name="sync")
            worker.start()
            worker.join()
        if stats is None or stats.finished:
            break
        stats = engine.clean(LATER, NODE)
        steps += 1
        assert steps < 1000
    assert stats is not None and stats.records_removed == 4 and stats.merged > 0
    assert {name for name, _ in threads} == {"fsync", "fdatasync"}
    assert {thread for _, thread in threads} == {"sync"}  # every sync of the pass, none in a step
    assert [o for o, _, _ in records(engine)][:4] == [3, 5, 6, 7]
    monkeypatch.undo()
    engine.close()
    again = open_engine(tmp_path)
    try:
        assert [o for o, _, _ in records(again)][:4] == [3, 5, 6, 7] and again.damage() == []
        assert not [p for p in tmp_path.rglob("*.tmp")]
    finally:
        again.close()
