"""WAL recovery from damaged files (issue 13, item 6): the WAL always opens, serves every intact entry, never serves
wrong content, reports what it lost (file, bytes, versions) once, and keeps version numbers (lost ones are gaps).

The sweep flips a byte, or truncates, at many positions of every file of a WAL with several sealed segments and
an active one: every header field of a few entries, body bytes, index records and seals, and seeded random
positions (``WALGATE_FUZZ_LONG=1``: every byte)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from walgate.storage.damage import DamageLog
from walgate.storage.wal import (
    FLAG_MORE,
    HEADER_SIZE,
    KIND_DATA,
    KIND_KAFKA,
    KIND_META,
    CorruptEntry,
    Wal,
    WalOptions,
)

OPTS = WalOptions(segment_bytes=600)
HEADER_FIELDS = (0, 4, 8, 12, 13, 14, 16, 24, 28)  # header_crc, body_len, body_crc, kind, flags, reserved, ...
LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"


@dataclass(frozen=True)
class Ent:
    version: int
    count: int
    kind: int
    max_ts: int
    body: bytes
    file: str  # the segment's log name
    pos: int
    end: int
    flags: int
    batch_end: int  # where the last entry of its batch ends


def _build(directory: Path) -> list[Ent]:
    """A WAL of 5 sealed segments and an active one (multi-entry batches included, one of them last)."""
    rng = random.Random(13)
    wal = Wal.open(directory, OPTS)
    batches = []
    for i in range(34):
        n = 3 if i % 5 == 2 or i == 33 else 1
        batch = [(rng.choice((KIND_DATA, KIND_META, KIND_KAFKA)), rng.randint(1, 3), i * 10 + k,
                  rng.randbytes(rng.randint(8, 48))) for k in range(n)]
        batches.append((wal.append(batch), batch))
    out = []
    by_version = {}
    for first, batch in batches:
        v = first
        for k, (kind, count, ts, body) in enumerate(batch):
            by_version[v] = (kind, count, ts, body, FLAG_MORE if k < len(batch) - 1 else 0)
            v += count
    for seg in wal.segments:
        ents = []
        for i, version in enumerate(seg.versions):
            kind, count, ts, body, flags = by_version[version]
            pos = seg.positions[i]
            ents.append([version, count, kind, ts, body, seg.path.name, pos, pos + HEADER_SIZE + len(body), flags])
        batch_end = 0
        for e in reversed(ents):  # the end of the batch is the end of its first non-"more" entry from there
            if not e[8]:
                batch_end = e[7]
            out.append(Ent(*e, batch_end))
    assert len(wal.segments) == 6 and len(wal.segments[-1].versions) >= 6
    wal.close()
    return sorted(out, key=lambda e: e.version)


def _positions(size: int, ents: list[Ent], rng: random.Random) -> list[int]:
    if LONG:
        return list(range(size))
    chosen = {0, size - 1}
    for e in ents[:2] + ents[len(ents) // 2 : len(ents) // 2 + 1] + ents[-2:]:
        chosen.update(e.pos + f for f in HEADER_FIELDS)
        chosen.update((e.pos + HEADER_SIZE, e.end - 1))
    chosen.update(rng.randrange(size) for _ in range(6))
    return sorted(p for p in chosen if p < size)


def _index_positions(size: int, rng: random.Random) -> list[int]:
    if LONG:
        return list(range(size))
    records = (size - 32) // 24
    chosen = {0, 8, 16, size - 32, size - 24, size - 16, size - 8, size - 4}
    for r in (records // 2, records - 1):
        chosen.update((r * 24, r * 24 + 8, r * 24 + 16))
    chosen.update(rng.randrange(size) for _ in range(4))
    return sorted(p for p in chosen if 0 <= p < size)


def _survives(e: Ent, ents: list[Ent], name: str, p: int, how: str, active: str) -> bool:
    """Whether ``e`` must still be readable after byte ``p`` of ``name`` was flipped (or the file cut there)."""
    if not name.endswith(".log") or e.file != name:
        return True
    if how == "truncate":
        return (e.batch_end if name == active else e.end) <= p
    if e.pos <= p < e.end:
        return False
    if name != active:
        return True
    # in the active segment an incomplete final batch is dropped whole: entries after the last intact entry that
    # ends a batch go
    closing = [x.pos for x in ents if x.file == name and not x.flags and not x.pos <= p < x.end]
    return bool(closing) and e.pos <= max(closing)


def _open_and_check(directory: Path, root: Path, ents: list[Ent], must: set[int]) -> tuple[Wal, DamageLog, set[int]]:
    damage = DamageLog(root)
    wal = Wal.open(directory, OPTS, damage=damage)
    by_version = {e.version: e for e in ents}
    seen = set()
    last = -1
    for entry in wal.read_from(0):
        e = by_version[entry.version]
        assert (entry.count, entry.kind, entry.max_ts, entry.body) == (e.count, e.kind, e.max_ts, e.body)
        assert entry.version > last
        last = entry.version
        seen.add(entry.version)
    for e in ents:
        for v in (e.version, e.version + e.count - 1):
            try:
                got = wal.read(v)
            except CorruptEntry:
                assert e.version not in seen
                continue
            if got is None:
                assert v >= wal.next_version and e.version not in must
                continue
            assert (got.version, got.body) == (e.version, e.body)
    assert must <= seen, sorted(must - seen)
    return wal, damage, seen


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory (tmpfs) when there is one: these tests are about recovery and descriptors, not about
    how fast the disk fsyncs."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="walgate-sweep-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_corruption_sweep(scratch):
    base = scratch / "base" / "wal"
    ents = _build(base)
    active = max(p.name for p in base.glob("*.log"))
    rng = random.Random(7)
    cases = reported = 0
    for file in sorted(base.iterdir()):
        original = file.read_bytes()
        positions = (_positions(len(original), [e for e in ents if e.file == file.name], rng) if file.suffix == ".log"
                     else _index_positions(len(original), rng))
        for p in positions:
            for how in ("flip", "truncate"):
                cases += 1
                root = scratch / f"case{cases}"
                directory = shutil.copytree(base, root / "wal")
                target = directory / file.name
                target.write_bytes(original[:p] + bytes([original[p] ^ 0x5A]) + original[p + 1 :] if how == "flip"
                                   else original[:p])
                must = {e.version for e in ents if _survives(e, ents, file.name, p, how, active)}
                wal, damage, seen = _open_and_check(directory, root, ents, must)
                records = damage.records
                where = f"{how} at byte {p} of {file.name}"
                assert all(r.file == f"wal/{file.name}" for r in records), (where, records)
                if file.suffix == ".idx":
                    assert all(r.action == "rebuilt" and r.first_version == -1 for r in records), (where, records)
                    assert records or (how == "truncate" and p % 24 == 0), where
                elif how == "flip":
                    hit = next(e for e in ents if e.file == file.name and e.pos <= p < e.end)
                    r = next((r for r in records if r.start <= p < r.end), None)
                    assert r is not None and r.first_version <= hit.version, (where, records)
                    header_intact = p >= hit.pos + HEADER_SIZE
                    assert r.end_version >= hit.version + hit.count or (file.name == active and not header_intact), (
                        where, records)
                    assert r.kept and (root / r.kept).read_bytes()[p - r.start] == original[p] ^ 0x5A
                elif file.name == active or p == len(original):
                    assert not records, (where, records)  # a torn tail is what a crash leaves: logged only
                else:
                    cut = [e for e in ents if e.file == file.name and e.end > p]
                    assert len(records) == 1 and records[0].first_version <= cut[0].version, (where, records)
                    assert records[0].end_version >= cut[-1].version + cut[-1].count, (where, records)
                reported += bool(records)
                wal.close()
                # the damage was dealt with for good: the next open finds nothing more and serves the same
                again = DamageLog(root)
                reopened = Wal.open(directory, OPTS, damage=again)
                assert not again.records, (where, again.records)
                assert {e.version for e in reopened.read_from(0)} == seen
                assert reopened.append([(KIND_DATA, 1, 0, b"after")]) >= max(seen)
                reopened.close()
                shutil.rmtree(root)
    print(f"{cases} damaged files opened, {reported} with damage reported")
    assert cases > 300 and reported > cases // 3


def _wal_with(directory: Path, n: int, options: WalOptions = OPTS, size: int = 40) -> Wal:
    wal = Wal.open(directory, options)
    for i in range(n):
        wal.append([(KIND_DATA, 2, i, bytes([i + 1]) * size)])
    return wal


def test_a_flipped_byte_in_the_active_segment_keeps_the_entries_after_it(tmp_path):
    wal = _wal_with(tmp_path / "wal", 10, WalOptions())
    wal.close()
    log = tmp_path / "wal" / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    data[3 * (HEADER_SIZE + 40) + 5] ^= 1  # the 4th entry's body_len
    log.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", WalOptions(), damage=damage)
    assert [e.version for e in wal.read_from(0)] == [0, 2, 4, 8, 10, 12, 14, 16, 18]  # only 6 is lost
    assert wal.next_version == 20
    [record] = damage.records
    assert (record.file, record.start, record.end, record.first_version, record.end_version, record.action) == (
        f"wal/{log.name}", 3 * 76, 4 * 76, 6, 8, "quarantined")
    assert (tmp_path / record.kept).read_bytes() == bytes(data[3 * 76 : 4 * 76])
    with pytest.raises(CorruptEntry):
        wal.read(6)
    with pytest.raises(CorruptEntry):
        wal.read(7)
    assert wal.read(5).version == 4 and wal.read(8).version == 8
    assert [e.version for e in wal.read_from(6)] == [8, 10, 12, 14, 16, 18]  # from inside the gap: what follows
    assert log.stat().st_size == 9 * 76  # rewritten without the damaged bytes
    assert wal.append([(KIND_DATA, 1, 0, b"x")]) == 20
    wal.close()
    again = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", WalOptions(), damage=again)
    assert not again.records and [e.version for e in wal.read_from(0)] == [0, 2, 4, 8, 10, 12, 14, 16, 18, 20]
    with pytest.raises(CorruptEntry):
        wal.read(6)  # still a gap: versions are never reused
    wal.close()


@pytest.mark.parametrize("where", ["last header", "first header", "truncated", "emptied"])
def test_a_damaged_sealed_segment_does_not_stop_the_wal_from_opening(tmp_path, where):
    wal = _wal_with(tmp_path / "wal", 12, WalOptions(segment_bytes=250))  # 3 entries of 76 bytes per segment
    wal.close()
    sealed = sorted((tmp_path / "wal").glob("*.log"))[1]  # versions 6..11
    data = bytearray(sealed.read_bytes())
    lost = {"last header": {10}, "first header": {6}, "truncated": {8, 10}, "emptied": {6, 8, 10}}[where]
    if where == "last header":
        data[2 * 76 + 20] ^= 0xFF
    elif where == "first header":
        data[0] ^= 0xFF
    elif where == "truncated":
        del data[76 + 10 :]
    else:
        data.clear()
    sealed.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", WalOptions(segment_bytes=250), damage=damage)
    assert [e.version for e in wal.read_from(0)] == [v for v in range(0, 24, 2) if v not in lost]
    assert [(r.first_version, r.end_version) for r in damage.records] == [(min(lost), max(lost) + 2)]
    for v in lost:
        with pytest.raises(CorruptEntry):
            wal.read(v)
    wal.close()


def test_an_index_with_wrong_values_is_never_trusted(tmp_path):
    wal = _wal_with(tmp_path / "wal", 9, WalOptions(segment_bytes=250))
    wal.close()
    index = sorted((tmp_path / "wal").glob("*.idx"))[0]
    raw = bytearray(index.read_bytes())
    raw[24 + 8 : 24 + 16] = raw[8:16]  # the 2nd record points at the 1st entry: a valid header, the wrong entry
    index.write_bytes(bytes(raw))
    damage = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", WalOptions(segment_bytes=250), damage=damage)
    assert [(e.version, e.body[0]) for e in wal.read_from(0)] == [(2 * i, i + 1) for i in range(9)]
    assert wal.read(2).body == bytes([2]) * 40
    assert [r.action for r in damage.records] == ["rebuilt"]
    wal.close()


def test_odd_files_missing_logs_and_empty_segments_all_open(tmp_path):
    directory = tmp_path / "wal"
    wal = _wal_with(directory, 15, WalOptions(segment_bytes=250))  # segments 0, 6, 12, 18, 24 (active)
    wal.close()
    (directory / "notes.txt").write_text("hello")
    (directory / "abc.log").write_bytes(b"junk")
    (directory / "123.log").write_bytes(b"junk")  # not a 20-digit name
    (directory / f"{0:020d}.idx.tmp").write_bytes(b"left by a crash")
    (directory / f"{6:020d}.log").unlink()  # the idx of segment 6 stays: its versions are lost
    (directory / f"{12:020d}.log").write_bytes(b"")  # an empty sealed segment
    damage = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(segment_bytes=250), damage=damage)
    assert [e.version for e in wal.read_from(0)] == [0, 2, 4, 18, 20, 22, 24, 26, 28]
    assert not (directory / f"{0:020d}.idx.tmp").exists() and not (directory / f"{6:020d}.idx").exists()
    lost = sorted((r.first_version, r.end_version) for r in damage.records if r.first_version >= 0)
    assert lost == [(6, 12), (12, 18)]
    assert sorted(r.file for r in damage.records if r.action == "ignored") == ["wal/123.log", "wal/abc.log",
                                                                                "wal/notes.txt"]
    for v in (6, 13):
        with pytest.raises(CorruptEntry):
            wal.read(v)
    assert wal.append([(KIND_DATA, 1, 0, b"x")]) == 30
    wal.close()
    again = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(segment_bytes=250), damage=again)
    assert [r.action for r in again.records] == ["ignored"] * 3  # the losses were reported once
    wal.close()


def test_the_log_of_the_active_segment_missing(tmp_path):
    directory = tmp_path / "wal"
    _wal_with(directory, 8, WalOptions(segment_bytes=250)).close()  # segments 0, 6 (sealed), 12 (active)
    (directory / f"{12:020d}.idx").write_bytes(b"")  # as an earlier release left the active index
    (directory / f"{12:020d}.log").unlink()
    damage = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(segment_bytes=250), damage=damage)
    assert [e.version for e in wal.read_from(0)] == [0, 2, 4, 6, 8, 10]
    assert [(r.first_version, r.action) for r in damage.records] == [(12, "lost")]
    assert wal.append([(KIND_DATA, 1, 0, b"x")]) == 12  # versions go on after the lost segment's first
    wal.close()


def test_a_torn_tail_is_logged_not_quarantined(tmp_path, caplog):
    directory = tmp_path / "wal"
    _wal_with(directory, 3, WalOptions()).close()
    log = directory / f"{0:020d}.log"
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\x00" * 100)  # the zeros of a crash that extended the file
    damage = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(), damage=damage)
    assert not damage.records and "crash" in caplog.text and log.stat().st_size == size
    assert wal.next_version == 6
    wal.close()


def test_a_wal_written_before_the_seal_opens_clean(tmp_path):
    """Earlier releases wrote index records without a seal, the active segment's too: the sealed indexes are
    rebuilt once (no damage), the stale active index is ignored."""
    directory = tmp_path / "wal"
    _wal_with(directory, 12, WalOptions(segment_bytes=250)).close()
    indexes = sorted(directory.glob("*.idx"))
    for index in indexes:
        index.write_bytes(index.read_bytes()[:-32])  # exactly what the old release wrote
    (directory / f"{18:020d}.idx").write_bytes(b"\x00" * 24)  # the old active index (stale here)
    damage = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(segment_bytes=250), damage=damage)
    assert not damage.records and [e.version for e in wal.read_from(0)] == list(range(0, 24, 2))
    assert all(len(index.read_bytes()) % 24 == 8 for index in indexes)  # sealed now
    assert wal.append([(KIND_DATA, 1, 0, b"x")]) == 24
    wal.close()


@pytest.mark.parametrize("field", [0, 8, 24], ids=["header_crc", "body_crc", "count"])
def test_a_damaged_header_of_the_last_entry_never_gives_its_versions_again(tmp_path, field):
    """The last entry was complete, so maybe acknowledged and read: its versions (unknown: its header is damaged)
    become a gap up to a bound, which a reopen keeps (the cut segment is sealed there). A torn tail is reused."""
    directory = tmp_path / "wal"
    _wal_with(directory, 10, WalOptions()).close()
    log = directory / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    data[9 * 76 + field] ^= 1
    log.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(), damage=damage)
    [record] = damage.records
    assert (record.start, record.end, record.first_version, record.end_version) == (9 * 76, 10 * 76, 18, -1)
    assert wal.next_version >= 20 and [e.version for e in wal.read_from(0)] == list(range(0, 18, 2))
    with pytest.raises(CorruptEntry):
        wal.read(18)
    gap_end = wal.next_version
    assert wal.append([(KIND_DATA, 1, 0, b"after")]) == gap_end
    wal.close()
    again = DamageLog(tmp_path)
    wal = Wal.open(directory, WalOptions(), damage=again)
    assert not again.records and wal.next_version == gap_end + 1
    assert [e.version for e in wal.read_from(0)] == list(range(0, 18, 2)) + [gap_end]
    wal.close()
    reopened = Wal.open(directory, WalOptions())  # with nothing appended after the open that cut it, too
    assert reopened.next_version == gap_end + 1
    reopened.close()
