"""The log cleaner (walgate/storage/cleaner.py): newest record per key, tombstones, lag settings, dirty ratio, the
active segment, offsets and producer state kept, a reader during cleaning, and the crash-safe swap."""

from __future__ import annotations

import dataclasses
import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import crc32c
import pytest
from faults import FAULT_KINDS, Faults

from walgate.storage.cleaner import CHECKPOINT, CleanStats
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.storage.resource_configs import BROKER
from walgate.storage.wal import CorruptEntry
from walgate.wire import batch_header, decode_batches, encode_batch

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", "delete.retention.ms": "86400000"}
LATER = time.time() + 3600  # "now" for passes that should see every segment as old
NODE = 1  # the node id whose dynamic broker defaults apply


def batch(pairs: list[tuple[bytes | None, bytes | None]], *, pid: int = -1, epoch: int = -1, seq: int = -1,
          codec: str | None = None, ts: int = 1_000) -> bytes:
    return encode_batch(0, [ts] * len(pairs), [k for k, _ in pairs], [v for _, v in pairs], compression=codec,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_engine(path: Path) -> Engine:
    return Engine.open(path)


def clean(engine: Engine, now: float = LATER) -> CleanStats | None:
    """A whole pass, step by step as the gateway runs it: its stats, None when nothing was due (or it stopped)."""
    stats = engine.clean(now, NODE)
    steps = 1
    while stats is not None and not stats.finished:
        stats = engine.clean(now, NODE)
        steps += 1
        assert steps < 1000
    return stats


def roll_every_append(engine: Engine, topic: str = "t") -> None:
    """Each append starts a segment of its own (a sealed segment per batch)."""
    for vnode in engine.vnodes[engine.catalog.topics[topic].db]:
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_ms=0)


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
        region = engine.kafka_region(topic, partition, version)  # the header checks Fetch makes
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


def _marker(commit: bool, seq: int) -> bytes:
    """An end-of-transaction control batch (key: version 0, type 1 COMMIT / 0 ABORT; value: version, epoch)."""
    return encode_batch(0, [1], [b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")], [b"\x00" * 6], producer_id=3,
                        producer_epoch=0, base_sequence=seq, is_transactional=True, is_control=True)


def values(engine: Engine) -> list[bytes | None]:
    return [v for o, k, v in records(engine) if k != b"\x00\x00\x00\x01" and k != b"\x00\x00\x00\x00"]


@pytest.mark.parametrize(("commit", "left"), [(True, [b"plain", b"1"]), (False, [b"plain", b"1"])])
def test_ended_transactions_are_compacted_and_markers_kept(engine: Engine, commit: bool, left: list[bytes]):
    engine.create_kafka_topic("t", 1, COMPACT)
    roll_every_append(engine)
    engine.append_batches("t", 0, [_txn([b"t1", b"t2"])])
    engine.append_batches("t", 0, [_marker(commit, 2)])
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
    engine.append_batches("t", 0, [_marker(False, 1)])
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
    engine.append_batches("t", 0, [_marker(True, 1)])  # committed: the rest becomes cleanable
    engine.append_batches("t", 0, [batch([(b"y", b"1")])])
    clean(engine)
    assert values(engine) == [b"after", b"1", b"1"]


def test_a_reader_holding_a_region_reads_the_old_bytes(engine: Engine):
    produce_history(engine)
    _, version, _ = next(engine.index_entries("t", 0, 0))
    region = engine.kafka_region("t", 0, version)  # as Fetch hands it to sendfile
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
    first = sorted(wal_dir.glob("*.log"))[2]  # a cleaned segment (c=1 dropped, b=2 kept)
    data = bytearray(first.read_bytes())
    if damage == "truncate":
        first.write_bytes(bytes(data[: len(data) - 5]))
    else:
        data[len(data) - 3] ^= 0xFF
        first.write_bytes(bytes(data))
    for idx in wal_dir.glob("*.idx"):
        os.utime(idx)  # (the seal no longer matches the log: it is scanned)
    e = open_engine(tmp_path)
    try:
        assert e.damage()  # reported, never fatal
        assert [r[0] for r in records(e)] == [5, 6, 7]  # the rest is served
    finally:
        e.close()


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_write_fault_at_any_step_keeps_a_consistent_log(tmp_path: Path, kind: str):
    """ENOSPC, EIO or a short write at each write or fsync of a pass: no error escapes, the log reads as before or
    partly cleaned (never a half-written segment), and a later pass finishes the job."""
    faults_seen = Faults()
    e = open_engine(tmp_path / "count")
    produce_history(e)
    with faults_seen.active():
        clean(e)
    e.close()
    ops = [(op, n) for op in ("write", "fsync") for n in range(1, faults_seen.calls[op] + 1)]
    for op, n in ops:
        path = tmp_path / f"{op}{n}"
        e = open_engine(path)
        produce_history(e)
        old = {o: (k, v) for o, k, v in records(e)}
        faults = Faults()
        with faults.active():
            if op == "write":
                faults.fail_kind(op, kind, at=n)
            else:
                faults.fail(op, at=n, error=errno.EIO)
            clean(e)
        got = records(e)
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
