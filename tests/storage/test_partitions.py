"""The partition interface (:mod:`walgate.storage.partitions`, issue 23): what Produce, Fetch, ListOffsets,
DeleteRecords, OffsetForLeaderEpoch, DescribeProducers, the console and the metrics know of a topic-partition, called
here as they call it, with every answer checked against what was appended (values, offsets, timestamps)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from faults import FAULT_KINDS, Faults

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotFound, OffsetNotAvailable, RequestTooLarge, StorageUnavailable
from walgate.storage.partitions import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    MAX_TIMESTAMP,
    SENDFILE_MIN_BYTES,
    Appended,
    PartitionOffsets,
    Partitions,
    TransactionsUnsupported,
    is_lost,
)
from walgate.storage.produced_rows import RecordsRefused
from walgate.storage.producers import SequenceError
from walgate.storage.wal import FileRegion
from walgate.wire import decode_batches, encode_batch
from walgate.wire.errors import CorruptRecord, RecordTooLarge

NOW = 1_700_000_000_000


def batch(values: list[bytes], ts: int = 1000, keys: list[bytes | None] | None = None, **kw: object) -> bytes:
    return encode_batch(0, [ts + i for i in range(len(values))], keys or [b"k"] * len(values), values, **kw)


def values(read: list[bytes | FileRegion]) -> list[tuple[int, int, bytes | None]]:
    """(offset, timestamp, value) of every record of what a read served, lost batches skipped."""
    return [(r.offset, r.timestamp, r.value)
            for data in read for b in decode_batches(data.read() if isinstance(data, FileRegion) else data)
            if not is_lost(b) for r in b.records]


@pytest.fixture
def engine(tmp_path: Path):
    e = Engine.open(tmp_path / "data")
    yield e
    e.close()


def test_a_native_append_answers_each_partition_on_its_own(engine: Engine):
    engine.create_kafka_topic("k", 3, {"max.message.bytes": "2000"})
    parts: Partitions = engine.partitions
    flipped = bytearray(batch([b"a"]))
    flipped[-1] ^= 1  # its CRC fails
    got = parts.append("k", [(0, batch([b"a", b"b"])), (1, bytes(flipped)), (2, batch([b"x" * 3000])),
                             (7, batch([b"c"])), (0, batch([b"c"]))], NOW, 0)
    assert got[0] == Appended(0, -1, 0, []) and got[4] == Appended(2, -1, 0, [])
    assert [type(r) for r in got[1:4]] == [CorruptRecord, RecordTooLarge, NotFound]
    assert str(got[3]) == "unknown topic or partition k-7"
    assert parts.offsets("k", 0) == PartitionOffsets(0, 3, 3) and parts.offsets("k", 1) == PartitionOffsets(0, 0, 0)
    read = parts.read("k", 0, 0, 1 << 20, must_one=True, read_committed=False)
    assert values(read.batches) == [(0, 1000, b"a"), (1, 1001, b"b"), (2, 1000, b"c")] and read.aborted is None


def test_append_applies_the_topic_configs(engine: Engine):
    engine.create_kafka_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    engine.create_kafka_topic("small", 1, {"segment.bytes": "100"})
    engine.create_kafka_topic("comp", 1, {"cleanup.policy": "compact"})
    parts = engine.partitions
    [stamped] = parts.append("lat", [(0, batch([b"a", b"b"]))], NOW, 0)
    assert stamped == Appended(0, NOW, 0, [])
    [read] = parts.read("lat", 0, 0, 1 << 20, must_one=True, read_committed=False).batches
    assert [b.max_timestamp for b in decode_batches(read)] == [NOW]
    [too_large] = parts.append("small", [(0, batch([b"x" * 200]))], NOW, 0)
    assert isinstance(too_large, RequestTooLarge) and "above segment.bytes 100" in str(too_large)
    [keyless] = parts.append("comp", [(0, batch([b"a", b"b", b"c"], keys=[b"k", None, None]))], NOW, 0)
    assert isinstance(keyless, RecordsRefused) and [i for i, _ in keyless.records] == [1, 2]
    assert str(keyless) == "Compacted topic cannot accept message without key in topic partition comp-0."
    assert parts.offsets("comp", 0).high_watermark == 0  # nothing of it written


def test_a_tdengine_topic_takes_rows_and_no_transactions(engine: Engine):
    engine.execute("CREATE DATABASE db VGROUPS 2 PRECISION 'ms'")
    engine.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    engine.execute("CREATE TOPIC rows AS STABLE db.st")
    parts = engine.partitions
    rows = [orjson.dumps({"tbname": f"d{i}", "ts": 1000 + i, "v": i, "site": i}) for i in range(4)]
    [written, bad] = parts.append("rows", [(0, batch(rows)), (1, batch([b"{", b"[1]"]))], NOW, 0)
    assert written == Appended(-1, -1, 0, [])
    assert isinstance(bad, RecordsRefused) and [i for i, _ in bad.records] == [0, 1]
    served = sorted(orjson.loads(v or b"")["v"] for p in (0, 1) for _, _, v in values(
        parts.read("rows", p, 0, 1 << 20, must_one=True, read_committed=False).batches))
    assert served == [0, 1, 2, 3]
    [txn] = parts.append("rows", [(0, batch([rows[0]], producer_id=5, producer_epoch=0, base_sequence=0,
                                                 is_transactional=True))], NOW, 0)
    assert isinstance(txn, TransactionsUnsupported)


def test_read_bounds_and_gaps(engine: Engine):
    engine.create_kafka_topic("k", 1, {})
    parts = engine.partitions
    for i in range(3):
        parts.append("k", [(0, batch([b"%d" % i * (SENDFILE_MIN_BYTES // 2)] * 3))], NOW, 0)
    whole = parts.read("k", 0, 4, 1, must_one=True, read_committed=False)  # the batch holding 4, whole
    assert [len(b) >= SENDFILE_MIN_BYTES and isinstance(b, FileRegion) for b in whole.batches] == [True]
    assert [o for o, _, _ in values(whole.batches)] == [3, 4, 5]
    assert parts.read("k", 0, 4, 1, must_one=False, read_committed=False).batches == []
    assert parts.read("k", 0, 9, 1 << 20, must_one=True, read_committed=False).batches == []  # at the end
    out = parts.read("k", 0, 10, 1 << 20, must_one=True, read_committed=False)
    assert out.out_of_range and out.offsets == PartitionOffsets(0, 9, 9) and out.batches == []
    assert parts.delete_records("k", 0, 4) == 4 and parts.offsets("k", 0).log_start == 4
    assert parts.read("k", 0, 3, 1 << 20, must_one=True, read_committed=False).out_of_range


def test_a_lost_entry_is_served_as_a_gap(tmp_path: Path):
    e = Engine.open(tmp_path / "data")
    e.create_kafka_topic("k", 1, {})
    for i in range(3):
        e.partitions.append("k", [(0, batch([b"v%d" % i] * 2))], NOW, 0)
    e.close()
    [segment] = (tmp_path / "data").glob("db/*/vnode0/wal/*.log")
    data = bytearray(segment.read_bytes())
    data[data.index(b"v1")] ^= 0x10  # a value byte of the second batch: its entry fails its checksum
    segment.write_bytes(bytes(data))
    e = Engine.open(tmp_path / "data")
    try:
        read = e.partitions.read("k", 0, 0, 1 << 20, must_one=True, read_committed=False)
        lost = [b for data in read.batches for b in decode_batches(data.read() if isinstance(data, FileRegion) else data)
                if is_lost(b)]
        assert [(b.base_offset, b.last_offset_delta) for b in lost] == [(2, 1)]  # offsets 2..3: skipped by clients
        assert [(o, v) for o, _, v in values(read.batches)] == [(0, b"v0"), (1, b"v0"), (4, b"v2"), (5, b"v2")]
    finally:
        e.close()


def test_read_committed_and_the_producers(engine: Engine):
    engine.create_kafka_topic("t", 1, {})
    parts = engine.partitions
    txn = dict(producer_id=7, producer_epoch=0, is_transactional=True)
    assert parts.append("t", [(0, batch([b"a", b"b"], base_sequence=0, **txn))], NOW, 0)[0] == Appended(0, -1, 0, [])
    parts.append("t", [(0, batch([b"plain"]))], NOW, 0)
    assert parts.offsets("t", 0) == PartitionOffsets(0, 3, 0)
    held = parts.read("t", 0, 0, 1 << 20, must_one=True, read_committed=True)
    assert (held.batches, held.aborted) == ([], [])
    assert parts.list_offset("t", 0, LATEST, read_committed=True) == (0, -1)
    assert [(p.producer_id, p.epoch, p.last_sequence, p.txn_start_offset) for p in parts.producers("t", 0)] == [
        (7, 0, 1, 0)]
    assert engine.write_txn_markers(7, 0, 0, False, [("t", 0)]) == [None]
    done = parts.read("t", 0, 0, 1 << 20, must_one=True, read_committed=True)
    assert [(a.producer_id, a.first_offset) for a in done.aborted or ()] == [(7, 0)]
    assert parts.offsets("t", 0) == PartitionOffsets(0, 4, 4)
    [(_, _, _, ongoing)] = [(p.producer_id, p.epoch, p.last_sequence, p.txn_start_offset)
                            for p in parts.producers("t", 0)]
    assert ongoing == -1
    [stale] = parts.append("t", [(0, batch([b"c"], base_sequence=5, **txn))], NOW, 0)  # a sequence gap
    assert isinstance(stale, SequenceError) and parts.offsets("t", 0).high_watermark == 4


def test_list_offset_answers_each_spec(engine: Engine):
    engine.create_kafka_topic("k", 1, {})
    parts = engine.partitions
    parts.append("k", [(0, encode_batch(0, [500, 900, 700], [b"k"] * 3, [b"a", b"b", b"c"]))], NOW, 0)
    parts.append("k", [(0, encode_batch(0, [900, 100], [b"k"] * 2, [b"d", b"e"]))], NOW, 0)
    answers = {spec: parts.list_offset("k", 0, spec, read_committed=False)
               for spec in (EARLIEST, EARLIEST_LOCAL, LATEST, MAX_TIMESTAMP, EARLIEST_PENDING_UPLOAD, 0, 600, 901)}
    assert answers == {EARLIEST: (0, -1), EARLIEST_LOCAL: (0, -1), LATEST: (5, -1), MAX_TIMESTAMP: (1, 900),
                       EARLIEST_PENDING_UPLOAD: (-1, -1), 0: (0, 500), 600: (1, 900), 901: (-1, -1)}
    with pytest.raises(NotFound):
        parts.list_offset("nope", 0, LATEST, read_committed=False)
    with pytest.raises(InvalidValue):  # ListOffsets answers it INVALID_REQUEST
        parts.list_offset("k", 0, EARLIEST_PENDING_UPLOAD - 1, read_committed=False)


def test_a_leader_whose_high_watermark_lags_its_epoch_start_answers_no_latest_offset(engine: Engine):
    """KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): a replicated partition's leader just elected, its high
    watermark below the start of its leader epoch, answers OFFSET_NOT_AVAILABLE for LATEST and for a timestamp whose
    record is not fetchable yet, never an offset below its predecessor's high watermark; once its high watermark
    passes the epoch's start it answers as before."""
    engine.create_kafka_topic("k", 1, {})
    parts = engine.partitions
    _, vnode, _ = engine.store.partition("k", 0)
    vnode.epochs.lead_replicated()
    vnode.epochs.begin(1, vnode.wal.next_version)
    parts.append("k", [(0, encode_batch(0, [100, 200], [b"k"] * 2, [b"a", b"b"]))], NOW, 0)  # epoch 1: offsets 0-1
    hw = vnode.wal.next_version  # what it knew as a follower: offsets 0-1, below its next epoch's start
    parts.append("k", [(0, encode_batch(0, [300], [b"k"], [b"c"]))], NOW, 0)  # offset 2, its predecessor's tail
    vnode.epochs.begin(2, vnode.wal.next_version)  # elected: epoch 2 starts at its log end
    parts.append("k", [(0, encode_batch(0, [400], [b"k"], [b"d"]))], NOW, 0)  # offset 3
    vnode.wal.sync()  # (durable: the high watermark is what bounds it)
    vnode.wal.replication = lambda next_version, durable: hw
    for spec in (LATEST, 250, MAX_TIMESTAMP):  # (the largest timestamp is the tail's)
        with pytest.raises(OffsetNotAvailable, match="lagging behind the start of its leader epoch"):
            parts.list_offset("k", 0, spec, read_committed=False)
    assert [parts.list_offset("k", 0, spec, read_committed=False) for spec in (EARLIEST, 150)] == [
        (0, -1), (1, 200)]  # records below the high watermark
    hw = vnode.wal.next_version
    assert [parts.list_offset("k", 0, spec, read_committed=False) for spec in (LATEST, 250)] == [(4, -1), (2, 300)]
    vnode.epochs.lead_single_node(new=False)  # a one-copy vnode never answers it
    hw = 0
    assert parts.list_offset("k", 0, LATEST, read_committed=False) == (0, -1)


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_write_the_disk_refuses_is_that_partitions_error_and_nothing_of_it_is_kept(tmp_path: Path, kind: str):
    e = Engine.open(tmp_path / "data")
    e.create_kafka_topic("k", 2, {})
    faults = Faults()
    with faults.active():
        faults.fail_kind("write", kind)
        got = e.partitions.append("k", [(0, batch([b"a"])), (1, batch([b"b"]))], NOW, 0)
    assert isinstance(got[0], StorageUnavailable) and got[1] == Appended(0, -1, 0, [])
    assert [e.partitions.offsets("k", p).high_watermark for p in (0, 1)] == [0, 1]
    assert e.partitions.append("k", [(0, batch([b"c"]))], NOW, 0) == [Appended(0, -1, 0, [])]
    e.close()
    e = Engine.open(tmp_path / "data")
    try:
        assert [values(e.partitions.read("k", p, 0, 1 << 20, must_one=True, read_committed=False).batches)
                for p in (0, 1)] == [[(0, 1000, b"c")], [(0, 1000, b"b")]]
    finally:
        e.close()


def test_under_group_commit_an_append_says_what_it_waits_for(tmp_path: Path):
    e = Engine.open(tmp_path / "data", group_commit=True)
    try:
        e.create_kafka_topic("k", 2, {"flush.messages": "1"})
        e.take_unsynced()
        [a, b] = e.partitions.append("k", [(0, batch([b"a"])), (1, batch([b"b"]))], NOW, 0)
        assert isinstance(a, Appended) and isinstance(b, Appended) and a.needs == b.needs
        assert a.needs and all(isinstance(n, tuple) for n in a.needs)
        assert e.take_unsynced() == []  # taken by the append
    finally:
        e.close()


def test_a_re_created_tdengine_topic_never_serves_the_old_topics_batches(engine: Engine):
    """Rendered batches are cached per topic, partition and WAL version; a topic dropped by SQL and created again
    under its name renders the same WAL entries anew (the cache is keyed by the topic's id, not its name)."""
    engine.execute("CREATE DATABASE db VGROUPS 1 PRECISION 'ms'")
    engine.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    engine.execute("INSERT INTO db.d0 USING db.st TAGS (7) VALUES (1000, 1)")
    parts = engine.partitions

    def served() -> list[dict[str, object]]:
        return [orjson.loads(v or b"") for _, _, v in values(
            parts.read("t", 0, 0, 1 << 20, must_one=True, read_committed=False).batches)]

    engine.execute("CREATE TOPIC t AS SELECT ts, v FROM db.st")
    assert [r["v"] for r in served()] == [1] and all("site" not in r for r in served())
    engine.execute("DROP TOPIC t")
    engine.execute("CREATE TOPIC t AS SELECT ts, site FROM db.st")
    assert [(r.get("site"), "v" in r) for r in served()] == [(7, False)]


def test_the_end_a_replica_needs_to_hold_the_records_below_an_offset(engine: Engine):
    engine.create_kafka_topic("held", 1, {})
    parts = engine.partitions
    wal = engine.store.local_vnode(engine.catalog.topics["held"].db, 0).wal
    first = wal.next_version
    parts.append("held", [(0, batch([b"a", b"b"]))], NOW, 0)  # offsets 0-1
    parts.append("held", [(0, batch([b"c"]))], NOW, 0)  # offset 2, the WAL's last entry
    assert parts.end_holding("held", 0, 0) == 0  # nothing below offset 0
    assert parts.end_holding("held", 0, 1) == parts.end_holding("held", 0, 2) == first + 1  # the first batch
    assert parts.end_holding("held", 0, 3) == parts.end_holding("held", 0, 99) == wal.next_version  # both
