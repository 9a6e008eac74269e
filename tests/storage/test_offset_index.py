"""The offset index (``.oidx``) is derived state, never trusted: garbage is detected and rebuilt from the WAL;
the DeleteRecords log start (``.start``) is written atomically and survives corruption (issue 13, item 4)."""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from faults import FAULT_KINDS, Faults

from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.offsets import OffsetIndex
from walgate.wire import encode_batch

REC = struct.Struct("<QQIqI")  # offset, version, count, running max, CRC32C of the first 28 bytes
TOPICS = ("hi", "everything")


def make(tmp_path: Path) -> dict[str, object]:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("CREATE TOPIC hi AS SELECT ts, v FROM db.st WHERE v > 2")
    e.execute("CREATE TOPIC everything WITH META AS DATABASE db")
    for i in range(12):
        e.execute(f"INSERT INTO db.t{i % 3} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i}) ({2000 + i}, {i + 1})")
    state = view(e)
    e.close()
    return state


def view(e: Engine) -> dict[str, object]:
    return {t: (e.watermarks(t, 0), list(e.index_entries(t, 0, e.watermarks(t, 0)[0])),
                [list(e.indexes[(t, 0)].running_max)]) for t in TOPICS}


def oidx(tmp_path: Path, topic: str) -> Path:
    e = Engine.open(tmp_path)
    [path] = e.indexes[(topic, 0)].path.parent.glob(f"{e.catalog.topics[topic].topic_id}.oidx")
    e.close()
    return path


def record(offset: int, version: int, count: int, running: int) -> bytes:
    """One index record with a CRC that verifies."""
    body = REC.pack(offset, version, count, running, 0)[:-4]
    return body + struct.pack("<I", crc32c.crc32c(body))


def patch(k: int, field: int, value: Callable[[tuple[int, ...]], int]) -> Callable[[bytearray], None]:
    """Change one field of record ``k``, its CRC left as it was (damage)."""
    def apply(data: bytearray) -> None:
        rec = list(REC.unpack_from(data, k * REC.size))
        rec[field] = value(tuple(rec))
        REC.pack_into(data, k * REC.size, *rec)
    return apply


def swap(data: bytearray) -> None:
    a, b = slice(2 * REC.size, 3 * REC.size), slice(3 * REC.size, 4 * REC.size)
    data[a], data[b] = data[b], data[a]


GARBAGE: dict[str, Callable[[bytearray], None]] = {
    "records out of order": swap,
    "absurd count": patch(3, 2, lambda r: 2**32 - 1),
    "zero count": patch(3, 2, lambda r: 0),
    "version not increasing": patch(3, 1, lambda r: r[1] - 1),
    "offsets not dense": patch(3, 0, lambda r: r[0] + 1),
    "running max going back": patch(3, 3, lambda r: -(2**63)),
    "random bytes": lambda d: d.__setitem__(slice(REC.size + 5, 3 * REC.size), b"\xa5" * (2 * REC.size - 5)),
    "garbage in the first record": patch(0, 0, lambda r: 2**63 - 1),
    # plausible values only the CRC catches (the sweep's high watermark 149 -> 524437)
    "first offset shifted by a flipped bit": patch(0, 0, lambda r: r[0] ^ 1 << 19),
    "first version shifted by a flipped bit": patch(0, 1, lambda r: r[1] ^ 1),
    "last count grown by a flipped bit": lambda d: patch(len(d) // REC.size - 1, 2, lambda r: r[2] ^ 1)(d),
}


@pytest.mark.parametrize("how", GARBAGE)
def test_garbage_in_the_offset_index_is_detected_and_rebuilt_from_the_wal(tmp_path: Path, how: str):
    before = make(tmp_path)
    for path in [oidx(tmp_path, topic) for topic in TOPICS]:
        data = bytearray(path.read_bytes())
        GARBAGE[how](data)
        path.write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    assert view(e) == before
    assert [d.action for d in e.damage()] == ["rebuilt", "rebuilt"]
    assert all(d.file.endswith(".oidx") and d.kept for d in e.damage())
    e.execute("INSERT INTO db.t0 VALUES (9000, 9)")
    after = view(e)
    e.close()
    e = Engine.open(tmp_path)  # the rebuilt index was written back: nothing to report any more
    assert view(e) == after and e.damage() == []
    e.close()


@pytest.mark.parametrize("tail", ["zeros", "torn", "past the WAL's end"])
def test_a_crash_tail_is_dropped_without_a_report(tmp_path: Path, tail: str):
    before = make(tmp_path)
    path = oidx(tmp_path, "hi")
    data = path.read_bytes()
    offset, version, count, running, _ = REC.unpack(data[-REC.size :])
    path.write_bytes(data + {"zeros": b"\0" * (3 * REC.size), "torn": data[-REC.size : -3],  # an unsynced file
                             "past the WAL's end": record(offset + count, 10**6, 1, running)}[tail])  # a WAL lost its tail
    e = Engine.open(tmp_path)
    assert view(e) == before and e.damage() == []
    e.close()


def old_format(data: bytes) -> bytes:
    """The records of ``data`` in the 28-byte format before the CRC."""
    return b"".join(data[i : i + REC.size - 4] for i in range(0, len(data), REC.size))


def test_an_index_of_the_old_record_format_is_rebuilt(tmp_path: Path):
    before = make(tmp_path)
    for path in [oidx(tmp_path, topic) for topic in TOPICS]:
        path.write_bytes(old_format(path.read_bytes()))
    e = Engine.open(tmp_path)
    assert view(e) == before
    e.close()
    e = Engine.open(tmp_path)
    assert view(e) == before and e.damage() == []
    e.close()


def test_an_index_write_the_disk_refuses_is_repaired(tmp_path: Path):
    path = tmp_path / "t.oidx"
    idx = OffsetIndex.open(path, 100)
    faults = Faults()
    with faults.active():
        idx.append(0, 2, 10, 2)
        faults.fail("write", short=True)
        idx.append(2, 3, 20, 5)  # derived state: memory goes on
        idx.append(5, 1, 30, 6)
    assert idx.end_offset == 6
    idx.close()  # written whole on close
    again = OffsetIndex.open(path, 100, DamageLog(tmp_path))
    assert list(again.offsets) == [0, 2, 5] and again.end_offset == 6 and again.damage.records == []
    again.close()


def native(tmp_path: Path) -> Engine:
    e = Engine.open(tmp_path)
    e.create_kafka_topic("k", 1, {})
    for i in range(3):
        e.append_batches("k", 0, [encode_batch(0, [1000 + i, 1001 + i], [b"a", b"b"], [b"x", b"y"])])
    return e


@pytest.mark.parametrize("how", ["garbage", "old record format"])
def test_a_native_partition_rebuilt_from_scratch_keeps_the_offsets_its_batches_carry(tmp_path: Path, how: str):
    e = native(tmp_path)
    assert e.delete_records("k", 0, 3) == 3
    before = (e.watermarks("k", 0), list(e.index_entries("k", 0, 3)))
    topic_id = e.catalog.topics["k"].topic_id
    e.close()
    [path] = tmp_path.glob(f"db/*/vnode0/topics/{topic_id}.oidx")
    path.write_bytes(b"\xff" * path.stat().st_size if how == "garbage" else old_format(path.read_bytes()))
    e = Engine.open(tmp_path)
    assert (e.watermarks("k", 0), list(e.index_entries("k", 0, 3))) == before == ((3, 6), [(2, 2, 2), (4, 4, 2)])
    assert e.append_batches("k", 0, [encode_batch(0, [5], [None], [b"z"])]) == 6
    e.close()


def test_a_corrupt_log_start_falls_back_and_is_reported(tmp_path: Path):
    e = native(tmp_path)
    e.delete_records("k", 0, 3)
    e.close()
    [start] = tmp_path.glob("db/*/vnode0/topics/*.start")
    start.write_bytes(b"\x00garbage")
    e = Engine.open(tmp_path)
    assert e.watermarks("k", 0) == (2, 6)  # the first indexed batch: records 2.. are served again, none is lost
    [damage] = e.damage()
    assert damage.file.endswith(".start") and damage.action == "reset"
    e.close()


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_delete_records_the_disk_refuses_changes_nothing(tmp_path: Path, kind: str):
    e = native(tmp_path)
    faults = Faults()
    with faults.active():
        faults.fail_kind("write", kind)
        with pytest.raises(StorageUnavailable):
            e.delete_records("k", 0, 3)
        assert e.watermarks("k", 0) == (0, 6)
        faults.fail("fsync", error=errno.EIO)
        with pytest.raises(StorageUnavailable):
            e.delete_records("k", 0, 3)
        assert e.watermarks("k", 0) == (0, 6)
    e.close()
    e = Engine.open(tmp_path)
    assert e.watermarks("k", 0) == (0, 6) and e.delete_records("k", 0, 3) == 3
    e.close()
