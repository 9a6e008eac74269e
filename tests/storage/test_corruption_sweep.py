"""Corruption sweep (issue 13, "Tests the project keeps"): every kind of file a data dir holds, damaged at many
positions; the engine opens each time and serves everything intact, nothing wrong.

One template data dir is built with the real :class:`Engine`: two TDengine databases (VGROUPS 2; ``alpha`` at
WAL_LEVEL 2 with rows big enough for sealed and active 1 MB WAL segments in both vnodes, ``beta`` at level 1),
supertables whose subtables are created by ``INSERT ... USING``, line protocol (schemaless, with a column added
later) and CSV, normal tables, an ``AS SELECT`` and an ``AS DATABASE WITH META`` topic, a Kafka-native topic of
RecordBatch v2 batches from an idempotent producer (several segments in partition 0) with DeleteRecords applied,
committed offsets (several groups, rounds and a deletion), and table meta stores (the engine closed). What the
template serves is the *truth*: every database and topic, every table's rows with the WAL version of each, every
topic-partition's records by offset (with the WAL version they come from), watermarks and committed offsets.

Each case copies the template, damages one file (a bit flip or a truncation at one position; for files other than
WAL segments also zeros over the whole file, or deleting it) and checks:

(a) :meth:`Engine.open` opens it;
(b) SHOW DATABASES / STABLES / TABLES / TOPICS / SUBSCRIPTIONS / QUARANTINE, a SELECT of every table and supertable
    and a read of every topic-partition (``index_entries`` + ``kafka_rows`` / ``kafka_batch`` / ``kafka_region``)
    answer; a :class:`CorruptEntry` for a lost entry or NotFound for a lost object is an answer, anything else is
    a failure;
(c) what the damage did not touch is served exactly as the truth: files of other vnodes and databases, and derived
    files (``.idx``, ``.oidx``, ``meta.db``: the WAL still holds every meta entry) lose nothing; a damaged WAL
    segment loses at most the versions of the damaged entry's batch (a truncation: from the cut), a damaged
    coordinator partition (``coordinator/offsets-<p>.log``) exactly the commits whose lines were damaged (the key
    falls back to its previous line);
(d) nothing served is wrong: every row, record (by offset), log start, high watermark and committed offset
    served is one of the truth, OffsetForLeaderEpoch of epoch 0 ends at the high watermark (a vnode's
    ``leader-epoch-checkpoint`` damaged or not: a single node led epoch 0 from version 0), and Fetch's
    ``kafka_region`` never sends an entry ``kafka_batch`` finds damaged;
(e) a change of meaningful bytes of a file that is not derived is reported (:meth:`Engine.damage`) naming that
    file and, for a WAL segment, covering the versions of the damaged entry;
(f) the engine then takes new writes (a new database and table, rows in every vnode, a retried and a new
    idempotent batch in every Kafka partition, a commit), and a second open reports no new damage and serves what
    the first served plus those writes.

Whatever already fails on the undamaged template is reported once, by
``test_the_template_is_served_without_error``, and left out of the cases. Counts per file kind are printed at the
end of each test (``pytest -s``). ``WALGATE_FUZZ_LONG=1`` tries every
header byte and many more seeded random positions; ``WALGATE_FUZZ_SEED`` picks other positions.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import struct
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzzing import LONG

from walgate.storage import lines
from walgate.storage.coordinator_log import Committed
from walgate.storage.damage import Damage
from walgate.storage.datadir import UnsupportedFormat
from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.errors import NotFound, StorageError
from walgate.storage.producers import SequenceError
from walgate.storage.vnode import vnode_of
from walgate.storage.wal import FLAG_MORE, HEADER_SIZE, KIND_DATA, KIND_META, CorruptEntry
from walgate.wire import CorruptRecord, InvalidRecord, decode_batches, encode_batch

SEED = int(os.environ.get("WALGATE_FUZZ_SEED", "13"))
RANDOM_POSITIONS = 150 if LONG else 5  # per kind
HEADER_POSITIONS = 5  # of the first record's header bytes, when not long (long: all)
FILES_PER_KIND = None if LONG else 2  # files of a kind whose ends are tried, zeroed and deleted (None: all)

T0 = 1_700_000_000_000
T_NEW = 1_800_000_000_000  # rows written by step (f) have timestamps from here
NATIVE = "orders.v1"
_WAL_HEADER = struct.Struct("<IIIBBHQIq")
_VNODE_PATH = re.compile(r"db/(?P<id>[0-9a-f]{32})/vnode(?P<k>\d+)/")
_COORDINATOR_PATH = re.compile(r"coordinator/offsets-\d+\.log")


# ----------------------------------------------------------------------------------------------- the template


def _batch(values: list[bytes], *, ts: int, pid: int = -1, seq: int = -1) -> bytes:
    n = len(values)
    return encode_batch(0, [ts + i for i in range(n)], [b"k%d" % (i % 3) for i in range(n)], values,
                        [[("h", b"%d" % i)] for i in range(n)], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=seq)


def build_template(root: Path) -> dict[str, Any]:
    """The template data dir (closed); returns what the writes need to know later (producer ids, sequences)."""
    e = Engine.open(root)
    x = e.execute
    x("CREATE DATABASE alpha VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0 WAL_SEGMENT_SIZE 1")
    x("CREATE DATABASE beta VGROUPS 2 WAL_SEGMENT_SIZE 1")
    x("CREATE STABLE alpha.meters (ts TIMESTAMP, v INT, note VARCHAR(8000)) TAGS (site INT, zone VARCHAR(16))")
    x("CREATE TABLE alpha.plain (ts TIMESTAMP, x DOUBLE, s VARCHAR(20))")
    x("CREATE TOPIC t_sel AS SELECT ts, v, site FROM alpha.meters WHERE v > 10")
    x("CREATE STABLE beta.sensors (ts TIMESTAMP, temp FLOAT, label NCHAR(20)) TAGS (room INT)")
    x("CREATE TABLE beta.events (ts TIMESTAMP, kind VARCHAR(10), n INT)")
    x("CREATE TOPIC t_db WITH META AS DATABASE beta")
    # alpha: ~2.8 MB of rows (two 1 MB segments per vnode), eight rows of 7 kB per INSERT (few entries: cheap scans)
    for i in range(0, 400, 8):
        values = " ".join(f"({T0 + i + j}, {i + j}, '{chr(97 + (i + j) % 26) * 7000}{i + j}')" for j in range(8))
        x(f"INSERT INTO alpha.m{i % 5} USING alpha.meters TAGS ({i % 5}, 'z{i % 3}') VALUES {values}")
        if i % 80 == 0:
            x(f"INSERT INTO alpha.plain VALUES ({T0 + i}, {i / 8}, 'p{i}') ({T0 + i + 1}, -{i / 8}, 'q{i}')")
    # beta: SQL, CSV into the supertable and the normal table, line protocol (a column added by a later write)
    for i in range(0, 40, 5):
        values = " ".join(f"({T0 + i + j}, {(i + j) * 0.75}, 'l{i + j}')" for j in range(5))
        x(f"INSERT INTO beta.s{i % 4} USING beta.sensors TAGS ({i % 4}) VALUES {values}")
    e.write_csv("beta", b"tbname,ts,temp,label,room\n" + b"".join(
        b"%s,%d,%d.5,csv%d,%d\n" % (b"c0" if i % 3 else b"s1", T0 + 100 + i, 5 + i, i, 10) for i in range(30)),
        stable="sensors")
    e.write_csv("beta", b"ts,kind,n\n" + b"".join(b"%d,k%d,%d\n" % (T0 + i, i % 4, i) for i in range(25)),
                table="events")
    e.write_lines("beta", b"".join(b"weather,city=c%d temp=%d.25,hum=%di %d\n" % (i % 2, i, i * 2, T0 + i)
                                   for i in range(30)), "ms")
    e.write_lines("beta", b"".join(b"weather,city=c%d temp=%d.5,hum=%di,wind=%d.0 %d\n" % (i % 2, i, i, i, T0 + 50 + i)
                                   for i in range(20)), "ms")
    # a Kafka-native topic: partition 0 spans three 1 MB segments (big batches, served by sendfile, and small ones)
    e.create_kafka_topic(NATIVE, 2, {"segment.bytes": "1048576", "flush.messages": "1"})
    pid = e.producer_ids.allocate()
    handed_out = [e.producer_ids.allocate() for _ in range(2)]  # to producers that never produced
    seq = {0: 0, 1: 0}
    for b in range(36):
        n = 6 if b % 3 else 2
        size = 14_000 if b % 3 else 300
        batch = _batch([(b"%02d:%d:" % (b, r) * size)[:size] for r in range(n)], ts=T0 + 10 * b, pid=pid, seq=seq[0])
        e.append_batches(NATIVE, 0, [batch])
        seq[0] += n
        if b % 6 == 0:
            e.append_batches(NATIVE, 0, [_batch([b"anon%d" % b], ts=T0 + 10 * b)])  # not idempotent
            e.append_batches(NATIVE, 1, [_batch([b"p1-%d-%d" % (b, r) for r in range(3)], ts=T0 + b, pid=pid,
                                                seq=seq[1])])
            seq[1] += 3
    # committed offsets: several groups and rounds, one deleted; the log start of partition 0 moved
    now = 1_750_000_000_000
    for rnd in range(4):
        e.commit_offsets("g1", [("t_db", 0, 10 + rnd, 0, f"r{rnd}"), ("t_db", 1, 5 + rnd, 0, None),
                                ("t_sel", 0, 1 + rnd, 0, None), (NATIVE, 0, 20 + 7 * rnd, 3, "m")], now + rnd)
        e.commit_offsets("g2", [("t_sel", 1, rnd, 0, None), (NATIVE, 1, 2 + rnd, 0, None),
                                ("t_db", 0, 40 + rnd, 0, None)], now + 10 + rnd)
    e.delete_offsets("g2", "t_db", 0)
    e.commit_offsets("g3", [("t_db", 1, 7, 1, "only")], now + 20)
    full = snapshot(e, [], [], [(NATIVE, 0)]).parts[(NATIVE, 0)]  # what DeleteRecords hides is truth too (below)
    e.delete_records(NATIVE, 0, 19)  # inside a batch (17-22)
    e.close()
    return {"pid": pid, "max_pid": max(handed_out), "seq": seq, "before_delete": full}


# ----------------------------------------------------------------------------------------------- what is served


@dataclass
class Part:
    """What one topic-partition serves."""

    start: int
    end: int
    records: dict[int, tuple[Any, ...]]  # offset -> (key, value, timestamp, headers)
    versions: dict[int, int]  # offset -> WAL version its entry starts at
    lost: set[int] = field(default_factory=set)  # offsets of entries answered CorruptEntry
    batches: dict[int, bytes] = field(default_factory=dict)  # native: base offset -> stored batch


@dataclass
class Snap:
    """Everything an engine serves (see :func:`snapshot`)."""

    databases: dict[str, list[Any]] = field(default_factory=dict)
    topics: dict[str, list[Any]] = field(default_factory=dict)
    stables: dict[str, set[str]] = field(default_factory=dict)  # db -> stable names
    tables: dict[tuple[str, str], Any] = field(default_factory=dict)  # SHOW TABLES rows (name -> row)
    rows: dict[tuple[str, str], list[dict[str, Any]] | str] = field(default_factory=dict)  # SELECT *; str: missing
    parts: dict[tuple[str, int], Part | str] = field(default_factory=dict)  # str: missing
    committed: dict[tuple[str, str, int], Committed] = field(default_factory=dict)
    damage: list[Damage] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # (b): anything that raised what it must not, (d) in reads


def _answer(snap: Snap, what: str, fn: Callable[[], Any], strict: bool = False) -> Any:
    """``fn()``; a StorageError is an answer (returned as its message) unless ``strict``, anything else an error
    of (b)."""
    try:
        return fn()
    except StorageError as exc:
        if strict:
            snap.errors.append(f"{what} answered {type(exc).__name__}: {exc}")
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        snap.errors.append(f"{what} raised:\n{traceback.format_exc()}")
        return f"error: {what}"


def _dicts(result: Any) -> list[dict[str, Any]]:
    names = [c[0] for c in result.columns]
    return [dict(zip(names, r)) for r in result.rows]


def snapshot(e: Engine, tables: list[tuple[str, str]], stables: list[tuple[str, str]],
             parts: list[tuple[str, int]], subtables: bool = True) -> Snap:
    """Read everything: the SHOW statements, every table and supertable in ``tables``/``stables``, every
    topic-partition in ``parts`` (and whatever else SHOW lists), committed offsets, damage. Without
    ``subtables``, subtables are read through their supertables only (each SELECT scans the database's WAL)."""
    s = Snap()
    shows = {}
    for what in ("DATABASES", "TOPICS", "SUBSCRIPTIONS", "CONSUMERS"):
        shows[what] = _answer(s, f"SHOW {what}", lambda w=what: e.execute(f"SHOW {w}"), strict=True)
    if not isinstance(shows["DATABASES"], str):
        s.databases = {r[0]: r for r in shows["DATABASES"].rows}
    if not isinstance(shows["TOPICS"], str):
        s.topics = {r[0]: r for r in shows["TOPICS"].rows}
    for db in s.databases:
        got = _answer(s, f"SHOW {db}.STABLES", lambda d=db: e.execute(f"SHOW {d}.STABLES"))
        s.stables[db] = set() if isinstance(got, str) else {r[0] for r in got.rows}
        got = _answer(s, f"SHOW {db}.TABLES", lambda d=db: e.execute(f"SHOW {d}.TABLES"))
        if not isinstance(got, str):
            s.tables.update({(db, r[0]): r for r in got.rows})
    for db, table in sorted(set(tables) | set(s.tables)):
        if not subtables and s.tables.get((db, table), [None] * 5)[4]:
            continue
        got = _answer(s, f"SELECT * FROM {db}.{table}", lambda: e.execute(f"SELECT * FROM {db}.{table}"))
        s.rows[(db, table)] = got if isinstance(got, str) else _dicts(got)
    for db, st in sorted(set(stables) | {(d, st) for d, names in s.stables.items() for st in names}):
        q = f"SELECT tbname, * FROM {db}.{st}"
        got = _answer(s, q, lambda: e.execute(q))
        s.rows[(db, "@" + st)] = got if isinstance(got, str) else _dicts(got)
    for topic, p in sorted(set(parts) | {(t, p) for t in s.topics for p in range(_partitions(e, t))}):
        s.parts[(topic, p)] = _read_partition(e, s, topic, p)
    got = _answer(s, "all_committed", lambda: {(g, t, p): c for g, t, p, c in e.all_committed()})
    if not isinstance(got, str):
        s.committed = got
    # damage in a sealed segment trusted from its index is found when first read: compare after every read
    s.damage = e.damage()
    quarantine = _answer(s, "SHOW QUARANTINE", lambda: e.execute("SHOW QUARANTINE"), strict=True)
    if not isinstance(quarantine, str) and len(quarantine.rows) != len(s.damage):
        s.errors.append(f"SHOW QUARANTINE lists {len(quarantine.rows)} rows, damage() {len(s.damage)}")
    return s


def _partitions(e: Engine, topic: str) -> int:
    try:
        return e.partition_count(topic)
    except StorageError:
        return 0


def _read_partition(e: Engine, s: Snap, topic: str, p: int) -> Part | str:
    marks = _answer(s, f"watermarks({topic}, {p})", lambda: e.watermarks(topic, p))
    if isinstance(marks, str):
        return marks
    part = Part(marks[0], marks[1], {}, {})
    epoch_end = _answer(s, f"epoch_end({topic}, {p}, 0)", lambda: e.partitions.epoch_end(topic, p, 0))
    if epoch_end != (0, marks[1]):  # a single node led epoch 0 from the start, whatever its epoch file lost
        s.errors.append(f"(d) {topic}-{p}: OffsetForLeaderEpoch(0) answers {epoch_end}, not (0, {marks[1]})")
    native = e.is_native(topic)
    entries = _answer(s, f"index_entries({topic}, {p})", lambda: list(e.index_entries(topic, p, marks[0])))
    if isinstance(entries, str):
        s.errors.append(f"index_entries({topic}, {p}) answered {entries}")
        return part
    for base, version, count in entries:
        where = f"{topic}-{p} offset {base} (version {version})"
        try:
            if native:  # Fetch sends kafka_region; kafka_batch reads (and checks) the body
                try:
                    region: bytes | None = e.native.kafka_region(topic, p, version).read()
                except CorruptEntry:
                    region = None
                batch = e.kafka_batch(topic, p, version)
                part.batches[base] = batch
                recs = [(r.offset, (r.key, r.value, r.timestamp, tuple(r.headers)))
                        for b in decode_batches(batch) for r in b.records]
                if region is None:
                    s.errors.append(f"(c) {where}: kafka_region answers CorruptEntry, kafka_batch serves the batch")
                elif region != batch:
                    s.errors.append(f"(d) {where}: kafka_region serves other bytes than kafka_batch: {region[:40]!r}")
            else:
                rows = e.kafka_rows(topic, p, version)
                recs = [(base + k, (rows.keys[k], rows.values[k], rows.timestamps[k], tuple(rows.headers[k])))
                        for k in range(len(rows))]
        except CorruptEntry:
            part.lost.update(range(base, base + count))
            if native:  # Fetch sends the region: it must not send what kafka_batch refuses
                _region_after_loss(s, region, where)
            continue
        except Exception:
            s.errors.append(f"{where} raised:\n{traceback.format_exc()}")
            continue
        if [o for o, _ in recs] != list(range(base, base + count)):
            s.errors.append(f"(d) {where}: the entry yields offsets {[o for o, _ in recs][:5]}..., the index says "
                            f"{count} from {base}")
        for o, rec in recs:
            part.records[o] = rec
            part.versions[o] = version
    return part


def _region_after_loss(s: Snap, data: bytes | None, where: str) -> None:
    """kafka_batch answered CorruptEntry for an entry whose region (what Fetch sends) read as ``data`` (None:
    CorruptEntry too)."""
    if data is None:
        return
    try:
        batches = decode_batches(data)  # with its CRC checked, as a client checking CRCs reads it
    except (CorruptRecord, InvalidRecord):
        s.errors.append(f"(d) {where}: kafka_batch answers CorruptEntry, kafka_region (Fetch) serves the damaged "
                        "bytes: a client that checks CRCs sees CORRUPT_MESSAGE, librdkafka (check.crcs=false by "
                        "default) delivers them")
        return
    s.errors.append(f"(d) {where}: kafka_batch answers CorruptEntry, kafka_region (Fetch) serves damaged bytes no "
                    f"client can detect (the batch CRC holds; base offset {batches[0].base_offset if batches else None})")


# ----------------------------------------------------------------------------------------------- the truth


@dataclass
class Truth:
    snap: Snap
    db_ids: dict[str, str]  # database id -> name
    row_versions: dict[tuple[str, str], dict[Any, int]]  # (db, table) -> ts -> WAL version of the row
    table_vnode: dict[tuple[str, str], int]
    created_at: dict[tuple[str, str], int]  # (db, table) -> version of its create meta entry
    all_records: dict[tuple[str, int], Part]  # native partition 0 before DeleteRecords, other parts as served
    history: dict[tuple[str, str, int], list[Committed | None]]  # every committed value of a key, in order
    catalog_lines: list[tuple[int, int, dict[str, Any]]]
    topic_db: dict[str, str]
    vnode_files: dict[str, tuple[str, int]]  # "db/<id>/vnode<k>" -> (db, k)
    segments: dict[str, list[tuple[int, int, int, int, int]]]  # segment rel path -> entries (pos, end, v, count, flags)
    segment_end: dict[str, int]  # sealed segment rel path -> next segment's first version
    writes: dict[str, Any]
    known_errors: set[str]  # what raised on the undamaged template too (first lines of Snap.errors)
    template: Path
    topic_ids: dict[str, str]  # topic id -> name
    tables: list[tuple[str, str]]
    normal_tables: list[tuple[str, str]]
    stables: list[tuple[str, str]]
    parts: list[tuple[str, int]]

    def label(self, rel: str) -> str:
        """``rel`` with database and topic names for their ids: ``db/alpha/vnode0/wal/...``, ``.../t_db.oidx``."""
        for ids in (self.db_ids, self.topic_ids):
            for key, name in ids.items():
                rel = rel.replace(key, name)
        return rel


def _wal_entries(data: bytes) -> list[tuple[int, int, int, int, int]]:
    out, pos = [], 0
    while pos < len(data):
        _, body_len, _, _, flags, _, version, count, _ = _WAL_HEADER.unpack_from(data, pos)
        end = pos + HEADER_SIZE + body_len
        out.append((pos, end, version, count, flags))
        pos = end
    return out


def record_truth(template: Path, work: Path, writes: dict[str, Any]) -> Truth:
    copy = work / "truth"
    shutil.copytree(template, copy)
    e = Engine.open(copy)
    try:
        assert e.damage() == []
        tables = [(db, t.name) for db, vnodes in e.vnodes.items() for v in vnodes for t in v.tables()]
        normal_tables = [(db, t.name) for db, vnodes in e.vnodes.items() for v in vnodes for t in v.tables()
                         if t.stable is None]
        stables = sorted(e.catalog.stables)
        parts = [(t, p) for t in e.catalog.topics for p in range(e.partition_count(t))]
        snap = snapshot(e, tables, stables, parts)
        row_versions: dict[tuple[str, str], dict[Any, int]] = {}
        table_vnode, created_at = {}, {}
        for db, vnodes in e.vnodes.items():
            for v in vnodes:
                ordered: dict[str, list[int]] = {}
                for entry in v.wal.read_from(0):
                    if entry.kind == KIND_META:
                        meta = decode_entry(entry).meta or {}
                        if meta.get("op") == "create_table":
                            created_at[(db, meta["name"])] = entry.version
                            table_vnode[(db, meta["name"])] = v.index
                    elif entry.kind == KIND_DATA:
                        r = 0
                        for block in decode_entry(entry).blocks:
                            for name in block.batch.column("tbname").to_pylist():
                                ordered.setdefault(name, []).append(entry.version + r)
                                r += 1
                for name, versions in ordered.items():  # SELECT serves a table's rows in WAL order
                    rows = snap.rows[(db, name)]
                    assert isinstance(rows, list) and len(rows) == len(versions), (db, name)
                    row_versions[(db, name)] = {_ts(row): ver for row, ver in zip(rows, versions)}
                    assert len(row_versions[(db, name)]) == len(rows), f"{db}.{name}: timestamps are not unique"
        db_ids = {d.id: d.name for d in e.catalog.databases.values()}
        topic_db = {t.name: t.db for t in e.catalog.topics.values()}
        topic_ids = {t.topic_id: t.name for t in e.catalog.topics.values()}
    finally:
        e.close()
    # partition 0 of the native topic before DeleteRecords: its records below the log start are truth too (a lost
    # log start may serve them again)
    full = writes["before_delete"]
    assert isinstance(full, Part) and full.start == 0
    all_records = {k: v for k, v in snap.parts.items() if isinstance(v, Part)}
    all_records[(NATIVE, 0)] = full
    # committed values per key in file order (the coordinator partitions' offset lines)
    history: dict[tuple[str, str, int], list[Committed | None]] = {}
    for path in sorted(template.glob("coordinator/offsets-*.log")):
        for _, _, r in lines.scan(path.read_bytes()).records:
            if "v" in r:  # a group record
                continue
            c = None if r["o"] is None else Committed(r["o"], r["e"], r["m"], r["ts"])
            history.setdefault((r["g"], r["t"], r["p"]), []).append(c)
    catalog_lines = lines.scan((template / "catalog.log").read_bytes()).records
    segments, segment_end = {}, {}
    for wal in sorted(template.glob("db/*/vnode*/wal")):
        logs = sorted(wal.glob("*.log"))
        for i, log in enumerate(logs):
            rel = str(log.relative_to(template))
            segments[rel] = _wal_entries(log.read_bytes())
            if i + 1 < len(logs):
                segment_end[rel] = int(logs[i + 1].stem)
    vnode_files = {}
    for vdir in template.glob("db/*/vnode*"):
        vnode_files[str(vdir.relative_to(template))] = (db_ids[vdir.parent.name], int(vdir.name[5:]))
    return Truth(snap, db_ids, row_versions, table_vnode, created_at, all_records, history, catalog_lines, topic_db,
                 vnode_files, segments, segment_end, writes, {_first_line(x) for x in snap.errors},
                 template, topic_ids, sorted(set(tables)), normal_tables, stables, parts)


def _first_line(error: str) -> str:
    return error.split("\n", 1)[0]


# ----------------------------------------------------------------------------------------------- file kinds


def kind_of(rel: str, truth: Truth) -> str:
    name = rel.rsplit("/", 1)[-1]
    if rel in ("walgate.json", "catalog.log", "producer_ids.log", "users.key"):
        return rel
    if _COORDINATOR_PATH.fullmatch(rel):
        return "coordinator .log"
    if _VNODE_PATH.match(rel):
        if name == "meta.db":
            return name
        if "/wal/" in rel and name.endswith(".log"):
            return "wal sealed .log" if rel in truth.segment_end else "wal active .log"
        if "/wal/" in rel and name.endswith(".idx"):
            return "wal .idx"
        if "/topics/" in rel and name.endswith(".oidx"):
            return "topics .oidx"
        if "/topics/" in rel and name.endswith(".start"):
            return "topics .start"
        if name == "leader-epoch-checkpoint":
            return name
    return "other"


KINDS = ["walgate.json", "catalog.log", "producer_ids.log", "users.key", "meta.db", "coordinator .log", "wal sealed .log",
         "wal active .log", "wal .idx", "topics .oidx", "topics .start", "leader-epoch-checkpoint", "other"]
DERIVED = {"wal .idx", "topics .oidx", "meta.db"}  # rebuilt from the WAL: must lose nothing
WAL_LOGS = {"wal sealed .log", "wal active .log"}


@dataclass(frozen=True)
class Case:
    kind: str
    file: str  # relative to the data dir
    label: str  # the file with names for ids (Truth.label)
    op: str  # flip | truncate | zeros | delete
    pos: int = 0
    mask: int = 0

    def __str__(self) -> str:
        extra = {"flip": f" at byte {self.pos} (xor 0x{self.mask:02x})", "truncate": f" to {self.pos} bytes"}
        return f"{self.op} {self.label}{extra.get(self.op, '')}"

    def apply(self, root: Path) -> None:
        path = root / self.file
        if self.op == "delete":
            path.unlink()
            return
        data = bytearray(path.read_bytes())
        if self.op == "flip":
            data[self.pos] ^= self.mask
        elif self.op == "truncate":
            del data[self.pos :]
        else:
            data = bytearray(len(data))
        path.write_bytes(bytes(data))


def cases_for(kind: str, files: dict[str, int], truth: Truth, rng: random.Random) -> list[Case]:
    """Flips (one random bit) at the first and last byte of the files, at the first record's header bytes (of a WAL
    segment: the first entry's header, and a middle entry's header and first body bytes, of the last segment: a
    Kafka batch's base offset there is not covered by the batch CRC) and at seeded random positions; truncations at
    the first, last and random positions (every position when long); files other than WAL segments also zeroed and
    deleted. Files are taken in the order of their labels (names, not random ids), so a seed always picks the same
    cases."""
    names = sorted(files, key=truth.label)
    if not names:
        return []
    ends = [(n, p) for n in names[:FILES_PER_KIND] for p in (0, files[n] - 1)]
    first = names[0]
    if kind in WAL_LOGS:
        mid = truth.segments[names[-1]][len(truth.segments[names[-1]]) // 2]
        header = [(first, p) for p in range(HEADER_SIZE)] + [(names[-1], p) for p in range(mid[0], mid[0] + 52)]
        ends.append((names[-1], mid[0] + HEADER_SIZE + 7))  # always: a stored Kafka batch's base offset (low byte)
        ends.append((names[-1], truth.segments[names[-1]][-1][0] + 8))  # and the header of the last entry
    elif kind in ("wal .idx", "topics .oidx"):
        header = [(first, p) for p in range(min(files[first], 24 if kind == "wal .idx" else 28))]
    elif kind == "walgate.json":
        header = [(first, p) for p in range(files[first])]  # all of it
    else:  # checksummed lines: the CRC, the space and the JSON's first byte
        header = [(first, p) for p in range(min(files[first], 10))]
    if not LONG and kind != "walgate.json":
        header = sorted(rng.sample(header, min(len(header), HEADER_POSITIONS)))
    spread = []
    for _ in range(RANDOM_POSITIONS):
        name = rng.choice(names)
        spread.append((name, rng.randrange(files[name])))
    out: list[Case] = []
    seen = set()
    for name, pos in ends + header + spread:
        if ("flip", name, pos) not in seen:
            seen.add(("flip", name, pos))
            out.append(Case(kind, name, truth.label(name), "flip", pos, 1 << rng.randrange(8)))
    if kind == "walgate.json":  # every bit of the format digit: a flip may read as another format
        digit = (truth.template / first).read_bytes().index(b"2")
        out += [Case(kind, first, first, "flip", digit, 1 << bit) for bit in range(8)]
    for name, pos in ends + spread + (header if LONG else []):
        if ("truncate", name, pos) not in seen:
            seen.add(("truncate", name, pos))
            out.append(Case(kind, name, truth.label(name), "truncate", pos))
    if kind not in WAL_LOGS:
        for name in names[:FILES_PER_KIND]:
            out += [Case(kind, name, truth.label(name), "zeros"), Case(kind, name, truth.label(name), "delete")]
    return list({(c.file, c.op, c.pos, c.mask): c for c in out}.values())


# ----------------------------------------------------------------------------------------------- expectations


@dataclass
class Allow:
    """What a case may lose, and what it must report."""

    dbs: set[str] = field(default_factory=set)  # anything of these databases may be missing
    topics: set[str] = field(default_factory=set)
    lost: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)  # (db, vnode) -> versions
    commits: dict[tuple[str, str, int], Committed | None] | None = None  # expected values of a damaged coordinator log
    start_may_drop: set[tuple[str, int]] = field(default_factory=set)
    report: bool = False  # (e): a Damage naming case.file is required
    report_versions: tuple[int, int] | None = None  # ... covering these WAL versions
    refused_newer: bool = False  # walgate.json now says a newer format


def _changed_line(data: bytes, new: bytes, start: int, end: int) -> bool:
    """Whether the checksummed line data[start:end] reads differently in ``new`` (a flip at the same size)."""
    try:
        old = lines.decode(data[start : end - 1])
    except ValueError:
        return True
    try:
        return lines.decode(new[start : end - 1]) != old or new[end - 1 : end] != b"\n"
    except ValueError:
        return True


def expectations(case: Case, template: Path, truth: Truth) -> Allow:
    a = Allow()
    path = template / case.file
    data = path.read_bytes()
    new = bytearray(data)
    if case.op == "flip":
        new[case.pos] ^= case.mask
    m = _VNODE_PATH.match(case.file)
    vnode = truth.vnode_files[m.group(0).rstrip("/")] if m else None
    if case.kind == "walgate.json":
        if case.op == "flip":
            try:
                before, after = orjson.loads(data), orjson.loads(bytes(new))
                a.report = before != after
                a.refused_newer = type(after.get("format")) is int and after["format"] > before["format"]
            except (orjson.JSONDecodeError, AttributeError):
                a.report = True
        a.report = a.report or case.op == "zeros"
    elif case.kind == "catalog.log":
        if case.op == "flip":
            damaged = [(s, e_, r) for s, e_, r in truth.catalog_lines if s <= case.pos < e_ or case.pos == s - 1]
            a.report = any(_changed_line(data, bytes(new), s, e_) for s, e_, _ in damaged)
        elif case.op == "truncate":
            damaged = [(s, e_, r) for s, e_, r in truth.catalog_lines if e_ > case.pos]
        else:
            damaged = truth.catalog_lines
            a.report = True  # zeros, or no catalog beside the databases' directories: never silently empty
        for _, _, r in damaged:
            if r["op"] == "create_topic":
                a.topics.add(r["name"])
            elif r["op"] == "create_kafka_topic":
                a.topics.add(r["name"])
                a.dbs.add(r["db"])
            else:  # create_db / create_stable / alter_stable: everything of the database
                a.dbs.add(r.get("db", r.get("name")))
        a.topics |= {t for t, db in truth.topic_db.items() if db in a.dbs}
    elif case.kind == "producer_ids.log":
        a.report = case.op == "zeros" or (case.op in ("flip", "truncate") and _single_line_changed(data, case, new))
    elif case.kind == "users.key":  # a missing one is made anew without a report: data dirs from before it have none
        a.report = case.op == "zeros" or (case.op in ("flip", "truncate") and _single_line_changed(data, case, new))
    elif case.kind == "leader-epoch-checkpoint":  # one line; a missing one is what a single node's vnode held before
        a.report = case.op == "zeros" or (case.op in ("flip", "truncate") and _single_line_changed(data, case, new))
    elif case.kind == "meta.db":  # SQLite: a flip in a free or unused byte changes nothing, so none is required
        a.report = case.op == "zeros" or (case.op == "truncate" and case.pos < len(data))
    elif case.kind == "topics .start":
        assert vnode is not None
        topic = next(t for t, db in truth.topic_db.items() if db == vnode[0])
        a.start_may_drop.add((topic, vnode[1]))
        a.report = case.op == "zeros" or (case.op in ("flip", "truncate") and _single_line_changed(data, case, new))
    elif case.kind == "coordinator .log":
        scan = lines.scan(data)
        if case.op == "flip":
            hit = [(s, e_) for s, e_, _ in scan.records if s <= case.pos < e_ or case.pos == s - 1]
            a.report = any(_changed_line(data, bytes(new), s, e_) for s, e_ in hit)
            # a flipped final newline is repaired: that last line is kept (and reported)
            gone = [(s, e_) for s, e_ in hit if case.pos != len(data) - 1]
        elif case.op == "truncate":
            gone = [(s, e_) for s, e_, _ in scan.records if e_ > case.pos]
        else:
            gone = [(s, e_) for s, e_, _ in scan.records]
            a.report = case.op == "zeros"
        expected: dict[tuple[str, str, int], Committed | None] = {}
        for s, e_, r in scan.records:
            if "v" in r:  # a group record (the template has none)
                continue
            key = (r["g"], r["t"], r["p"])
            expected.setdefault(key, None)
            if (s, e_) not in gone:
                expected[key] = None if r["o"] is None else Committed(r["o"], r["e"], r["m"], r["ts"])
        a.commits = expected
    elif case.kind in WAL_LOGS:
        assert vnode is not None
        entries = truth.segments[case.file]
        hit = next(i for i, (s, e_, *_) in enumerate(entries) if s <= case.pos < e_)
        first = hit
        while first and entries[first - 1][4] & FLAG_MORE:  # the batch the entry belongs to
            first -= 1
        last = hit
        while entries[last][4] & FLAG_MORE:
            last += 1
        lo, hi = entries[first][2], entries[last][2] + entries[last][3]
        if case.op == "truncate" or case.kind == "wal sealed .log" and case.op == "flip" and hit == len(entries) - 1:
            hi = truth.segment_end.get(case.file, 1 << 62)  # (a damaged last entry of a sealed segment: its tail)
        if case.op == "truncate" and case.kind == "wal sealed .log":
            lo = entries[hit][2]  # a sealed segment keeps the entries before the cut, its batches being whole
        a.lost[vnode] = [(lo, hi)]
        if case.op == "flip":
            a.report, a.report_versions = True, (entries[hit][2], entries[hit][2] + entries[hit][3])
        elif case.kind == "wal sealed .log":
            a.report, a.report_versions = True, (entries[hit][2], entries[hit][2] + entries[hit][3])
    return a


def _single_line_changed(data: bytes, case: Case, new: bytearray) -> bool:
    """A one-line file (flip: ``new``; truncate: cut at case.pos) reads differently."""
    after = bytes(new) if case.op == "flip" else data[: case.pos]
    try:
        return lines.decode(after.rstrip(b"\n")) != lines.decode(data.rstrip(b"\n"))
    except ValueError:
        return True


# ----------------------------------------------------------------------------------------------- the checks


def _in(version: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= version < hi for lo, hi in ranges)


def check(case: Case, snap: Snap, truth: Truth, allow: Allow) -> list[str]:
    """(b) to (e) for one snapshot of a damaged copy; the failures found."""
    t = truth.snap
    bad = [x for x in snap.errors if _first_line(x) not in truth.known_errors]
    # databases, topics, tables: present unless allowed missing, never different
    for name in t.databases:
        if name not in snap.databases and name not in allow.dbs:
            bad.append(f"(c) database {name} is gone")
    for name, row in snap.databases.items():
        if t.databases.get(name) != row:
            bad.append(f"(d) SHOW DATABASES serves {row}, the truth is {t.databases.get(name)}")
    for name, row in snap.topics.items():
        if t.topics.get(name) != row:
            bad.append(f"(d) SHOW TOPICS serves {row}, the truth is {t.topics.get(name)}")
    for name in t.topics:
        if name not in snap.topics and name not in allow.topics:
            bad.append(f"(c) topic {name} is gone")
    for key, row in snap.tables.items():
        if key[0] in allow.dbs and t.tables.get(key, [])[:3] + t.tables.get(key, [])[4:] == row[:3] + row[4:]:
            continue  # its supertable's catalog record was lost: SHOW TABLES counts no columns
        if t.tables.get(key) != row:
            bad.append(f"(d) SHOW TABLES serves {row}, the truth is {t.tables.get(key)}")
    for (db, table), want in t.rows.items():
        bad += _check_rows(db, table, snap.rows.get((db, table), "not read"), want, truth, allow)
    for key in snap.rows.keys() - t.rows.keys():
        bad.append(f"(d) {key[0]}.{key[1]} is served and not in the truth: {str(snap.rows[key])[:200]}")
    for key, want_part in t.parts.items():
        bad += _check_part(key, snap.parts.get(key, "not read"), want_part, truth, allow)
    for key in snap.parts.keys() - t.parts.keys():
        bad.append(f"(d) topic-partition {key} is served and not in the truth")
    bad += _check_commits(snap, truth, allow)
    # (e) damage reported, naming the file (and the versions of a damaged WAL entry)
    named = [d for d in snap.damage if d.file == case.file]
    if allow.report and not named:
        bad.append(f"(e) no damage reported for {case.label}: {[(d.file, d.reason) for d in snap.damage]}")
    if allow.report_versions and named:
        lo, hi = allow.report_versions
        ranges = [(d.first_version, d.end_version if d.end_version >= 0 else 1 << 62)  # (-1: end unknown)
                  for d in named if d.first_version >= 0]
        if not all(_in(v, ranges) for v in range(lo, hi)):
            bad.append(f"(e) versions [{lo}, {hi}) of the damaged entry are not all in the reported ranges {ranges}")
    wal_dir = case.file.rsplit("/", 1)[0]
    for d in snap.damage:
        related = d.file == case.file or d.file.startswith(wal_dir + "/") or d.file == "catalog.log"
        if not related:
            bad.append(f"(e) damage reported for a file that was not damaged: {d}")
    return bad


def _check_rows(db: str, table: str, got: Any, want: Any, truth: Truth, allow: Allow) -> list[str]:
    stable = table.startswith("@")
    where = f"SELECT from {db}.{table[1:] if stable else table}"
    if db in allow.dbs:
        lost_ranges, may_vanish = None, True  # its catalog records were damaged: anything of it may be missing
    else:
        lost_ranges = {k: r for (d, k), r in allow.lost.items() if d == db}
        may_vanish = not stable and _in(truth.created_at.get((db, table), -1),
                                        lost_ranges.get(truth.table_vnode.get((db, table), -1), []))
    if isinstance(got, str):
        if want == got or may_vanish:
            return []
        return [f"(c) {where}: {got}"]
    assert isinstance(want, list)
    out = []
    index = {_row_key(r, stable): r for r in want}
    seen: Counter[Any] = Counter()
    for row in got:
        key = _row_key(row, stable)
        seen[key] += 1
        truth_row = index.get(key)
        if truth_row is None or seen[key] > 1:
            out.append(f"(d) {where} serves a row that is not in the truth (or twice): {str(row)[:200]}")
        elif row != truth_row and not (db in allow.dbs and row.items() <= truth_row.items()):
            out.append(f"(d) {where} serves {str(row)[:200]}, the truth is {str(truth_row)[:200]}")
    if lost_ranges is None:
        return out
    for key, row in index.items():
        if seen[key]:
            continue
        name = key[0] if stable else table
        version = truth.row_versions[(db, name)][_ts(row)]
        vnode = truth.table_vnode[(db, name)]
        if not (_in(version, lost_ranges.get(vnode, [])) or _in(truth.created_at[(db, name)], lost_ranges.get(vnode, []))):
            out.append(f"(c) {where}: the row at version {version} (vnode {vnode}) is missing: {str(row)[:120]}")
    return out[:20]


def _ts(row: dict[str, Any]) -> Any:
    """The row's timestamp: its first column, after ``tbname`` (``ts``, or ``_ts`` for schemaless tables)."""
    return next(v for k, v in row.items() if k != "tbname")


def _row_key(row: dict[str, Any], stable: bool) -> Any:
    return (row["tbname"], _ts(row)) if stable else _ts(row)


def _check_part(key: tuple[str, int], got: Part | str, want: Part | str, truth: Truth, allow: Allow) -> list[str]:
    topic, p = key
    where = f"{topic}-{p}"
    db = truth.topic_db[topic]
    if isinstance(got, str) or isinstance(want, str):
        if got == want or topic in allow.topics:
            return []
        return [f"(c) {where}: {got}"]
    full = truth.all_records[key]
    out = []
    lost_ranges = allow.lost.get((db, p), [])
    # (d): the log start, high watermark and every record served are the truth's
    if got.start < want.start and key not in allow.start_may_drop:
        out.append(f"(d) {where}: log start {got.start}, the truth is {want.start}")
    if got.end > want.end:
        out.append(f"(d) {where}: high watermark {got.end} beyond the truth's {want.end}")
    for o, rec in got.records.items():
        if topic in allow.topics and _sub_record(rec, full.records.get(o)):
            continue  # a catalog record of its source was lost: fewer columns
        if full.records.get(o) != rec:
            out.append(f"(d) {where} offset {o}: serves {str(rec)[:160]}, the truth is {str(full.records.get(o))[:160]}")
        elif got.versions[o] != full.versions[o]:
            out.append(f"(d) {where} offset {o}: from version {got.versions[o]}, the truth's {full.versions[o]}")
    for base, batch in got.batches.items():
        if full.batches.get(base) != batch:
            out.append(f"(d) {where}: the batch at offset {base} is not the stored one")
    # (c): every record of the truth whose entry was not damaged is served at its offset
    for o in range(want.start, want.end):
        if o in got.records or _in(want.versions[o], lost_ranges) or topic in allow.topics:
            continue
        if _record_table_lost(want.records[o], truth, allow, db):
            continue
        out.append(f"(c) {where} offset {o} (version {want.versions[o]}) is not served"
                   + (" (answered CorruptEntry)" if o in got.lost else ""))
        if len(out) > 20:
            break
    if not lost_ranges and topic not in allow.topics and key not in allow.start_may_drop \
            and (got.start, got.end) != (want.start, want.end):
        out.append(f"(c) {where}: watermarks {(got.start, got.end)}, the truth's {(want.start, want.end)}")
    return out


def _sub_record(rec: tuple[Any, ...], truth: tuple[Any, ...] | None) -> bool:
    """``rec`` is ``truth`` with fewer columns in its JSON value."""
    if truth is None or rec[0] != truth[0] or rec[2:] != truth[2:]:
        return False
    try:
        return orjson.loads(rec[1]).items() <= orjson.loads(truth[1]).items()
    except (orjson.JSONDecodeError, AttributeError):
        return False


def _record_table_lost(rec: tuple[Any, ...], truth: Truth, allow: Allow, db: str) -> bool:
    """The record's table was created by a meta entry in a lost range (the table is unknown now)."""
    table = rec[0].decode() if isinstance(rec[0], bytes) else rec[0]
    vnode = truth.table_vnode.get((db, table))
    return vnode is not None and _in(truth.created_at[(db, table)], allow.lost.get((db, vnode), []))


def _check_commits(snap: Snap, truth: Truth, allow: Allow) -> list[str]:
    out = []
    want = dict(truth.snap.committed)
    if allow.commits is not None:
        for key, value in allow.commits.items():
            if value is None:
                want.pop(key, None)
            else:
                want[key] = value
    for key in want.keys() | snap.committed.keys():
        got, expected = snap.committed.get(key), want.get(key)
        if got == expected:
            continue
        db = truth.topic_db.get(key[1])
        if got is None and (db in allow.dbs or key[1] in allow.topics):
            continue
        if got is not None and got not in truth.history.get(key, []):
            out.append(f"(d) committed offset of {key} is {got}, never committed")
        else:
            out.append(f"(c) committed offset of {key} is {got}, expected {expected}")
    return out


# ----------------------------------------------------------------------------------------------- one case


def _writes(e: Engine, truth: Truth, allow: Allow, cut: bool) -> tuple[list[str], bool]:
    """(f): new writes everywhere; (the failures: a refusal is one unless the case lost what the write needs,
    whether a commit was accepted). Offsets of a Kafka partition are never given again unless the case ``cut`` its
    log (a truncation is a crash's torn tail: Kafka too reuses the offsets of a log it truncates)."""
    out = []
    committed = False
    w = truth.writes

    def must(what: str, fn: Callable[[], Any], may_fail: bool = False) -> Any:
        try:
            return fn()
        except (SequenceError, NotFound):
            if may_fail:
                return None
            out.append(f"(f) {what} refused: {traceback.format_exc(limit=2)}")
        except Exception:
            out.append(f"(f) {what} raised:\n{traceback.format_exc()}")
        return None

    must("CREATE DATABASE sweepnew", lambda: e.execute("CREATE DATABASE sweepnew VGROUPS 1"))
    must("CREATE TABLE sweepnew.t", lambda: e.execute("CREATE TABLE sweepnew.t (ts TIMESTAMP, v INT)"))
    must("INSERT INTO sweepnew.t", lambda: e.execute(f"INSERT INTO sweepnew.t VALUES ({T_NEW}, 1)"))
    for db in ("alpha", "beta"):
        for k in range(2):
            gone = db in allow.dbs
            table = f"n{db}{k}"
            while _vnode_of(e, db, table) not in (k, None):
                table += "x"
            if db == "alpha":
                sql = f"INSERT INTO alpha.{table} USING alpha.meters TAGS (99, 'new') VALUES ({T_NEW}, -1, 'new')"
            else:
                sql = f"INSERT INTO beta.{table} USING beta.sensors TAGS (99) VALUES ({T_NEW}, 99.5, 'new')"
            must(sql, lambda q=sql: e.execute(q), may_fail=gone)
    gone = NATIVE in allow.topics
    for p in range(2):
        lost = any(r for (d, k), r in allow.lost.items() if k == p and d == truth.topic_db[NATIVE])
        new = _batch([b"new"], ts=T_NEW, pid=w["pid"], seq=w["seq"][p])  # (a lost batch: OUT_OF_ORDER_SEQUENCE)
        first = must(f"append_batches({NATIVE}, {p}) of a new idempotent batch",
                     lambda p=p, b=new: e.append_batches(NATIVE, p, [b]), may_fail=gone or lost)
        if first is not None:
            again = must(f"append_batches({NATIVE}, {p}) retried", lambda p=p, b=new: e.append_batches(NATIVE, p, [b]))
            if again is not None and again != first:
                out.append(f"(f) a retried idempotent batch was written again at {again} (first at {first})")
        base = must(f"append_batches({NATIVE}, {p}) of a plain batch",
                    lambda p=p: e.append_batches(NATIVE, p, [_batch([b"plain"], ts=T_NEW)]), may_fail=gone)
        end = truth.snap.parts[(NATIVE, p)].end  # type: ignore[union-attr]
        if base is not None and base < end and not cut:
            out.append(f"(f) {NATIVE}-{p}: a new batch got offset {base}, below the high watermark {end} served "
                       "before the damage (consumers that read or committed those offsets skip the new records)")
    for topic in ("t_db", NATIVE):
        res = must(f"commit_offsets sweep {topic}",
                   lambda topic=topic: e.commit_offsets("sweep", [(topic, 0, 1, 0, None)], T_NEW))
        if res and res[0] is not None and not isinstance(res[0], NotFound):
            out.append(f"(f) commit to {topic} refused: {res[0]}")
        committed = committed or bool(res and res[0] is None)
    return out, committed


def _vnode_of(e: Engine, db: str, table: str) -> int | None:
    vnodes = e.vnodes.get(db)
    return vnode_of(db, table, len(vnodes)) if vnodes else None


def _same(first: Snap, second: Snap, committed: bool) -> list[str]:
    """(f): what the second open serves, without the new writes, is what the first served."""
    out = []

    def old_rows(rows: Any) -> Any:
        if isinstance(rows, str):
            return rows
        return [r for r in rows if not str(_ts(r)).startswith("2027")]  # T_NEW is in 2027

    for name in ("databases", "topics", "stables"):
        a = {k: v for k, v in getattr(first, name).items() if k != "sweepnew"}
        b = {k: v for k, v in getattr(second, name).items() if k != "sweepnew"}
        if a != b:
            out.append(f"(f) the second open serves other {name}: {a} / {b}")
    for key in second.rows.keys() | {k for k in first.rows if k[1].startswith("@") or k in second.rows}:
        if key[0] == "sweepnew" or key[1].startswith(("nalpha", "nbeta")):
            continue
        a, b = old_rows(first.rows.get(key, "absent")), old_rows(second.rows.get(key, "absent"))
        if a != b:
            out.append(f"(f) {key}: the second open serves {str(b)[:200]}, the first {str(a)[:200]}")
    for key in first.parts.keys() | second.parts.keys():
        a, b = first.parts.get(key, "absent"), second.parts.get(key, "absent")
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                out.append(f"(f) {key}: the second open serves {b}, the first {a}")
            continue
        if b.start != a.start or b.end < a.end:
            out.append(f"(f) {key}: watermarks {(a.start, a.end)} then {(b.start, b.end)}")
        old = {o: r for o, r in b.records.items() if o < a.end}
        if old != a.records or {o for o in b.lost if o < a.end} != a.lost:
            out.append(f"(f) {key}: the second open serves other records below {a.end}")
        if len(b.records) + len(b.lost) - len(old) - len({o for o in b.lost if o < a.end}) != b.end - a.end:
            out.append(f"(f) {key}: the new records are not served ({a.end} -> {b.end})")
    a = {k: v for k, v in first.committed.items() if k[0] != "sweep"}
    b = {k: v for k, v in second.committed.items() if k[0] != "sweep"}
    if a != b:
        out.append(f"(f) committed offsets differ after the second open: {a} / {b}")
    if committed and not any(k[0] == "sweep" for k in second.committed):
        out.append("(f) the new commits are not served after the second open")
    keys = {(d.file, d.start, d.end, d.first_version, d.end_version) for d in first.damage}
    new = [d for d in second.damage if (d.file, d.start, d.end, d.first_version, d.end_version) not in keys]
    if new:
        out.append(f"(f) the second open reports new damage: {new}")
    rows = second.rows.get(("sweepnew", "t"))
    if not isinstance(rows, list) or len(rows) != 1:
        out.append(f"(f) the new table's row is not served after the second open: {rows}")
    return out


def run_case(case: Case, template: Path, truth: Truth, work: Path) -> tuple[str, list[str]]:
    """(outcome: reported / silent / refused / raised, failures) of one case."""
    root = work / "case"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    case.apply(root)
    allow = expectations(case, template, truth)
    try:
        e = Engine.open(root)
    except UnsupportedFormat as exc:
        why = " (walgate.json is not checksummed: a flipped bit reads as a newer format)" if allow.refused_newer else ""
        return "refused", [f"(a) Engine.open refused it{why}: {exc}"]
    except Exception:
        return "raised", [f"(a) Engine.open raised:\n{traceback.format_exc()}"]
    try:
        first = snapshot(e, truth.tables, truth.stables, truth.parts)
        failures = check(case, first, truth, allow)
        failures += [f"(e) the copy of the damaged bytes is missing: {d}" for d in first.damage
                     if d.kept and not (root / d.kept).is_file()]
        written, committed = _writes(e, truth, allow, case.op == "truncate")
        failures += written
        if case.kind == "producer_ids.log" or case.kind == "wal active .log":
            pid = e.producer_ids.allocate()
            if pid <= truth.writes["max_pid"]:
                failures.append(f"(f) producer id {pid} handed out again (the template handed out up to "
                                f"{truth.writes['max_pid']})")
    finally:
        e.close()
    try:
        e = Engine.open(root)
    except Exception:
        return "raised", failures + [f"(f) the second open raised:\n{traceback.format_exc()}"]
    try:
        second = snapshot(e, truth.normal_tables, truth.stables, truth.parts, subtables=False)
    finally:
        e.close()
    failures += [f"(b) second open: {x}" for x in second.errors if _first_line(x) not in truth.known_errors]
    failures += _same(first, second, committed)
    return ("reported" if first.damage else "silent"), failures


# ----------------------------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Truth, dict[str, dict[str, int]], Path]]:
    work = tmp_path_factory.mktemp("sweep")
    template = work / "template"
    writes = build_template(template)
    truth = record_truth(template, work, writes)
    files: dict[str, dict[str, int]] = {k: {} for k in KINDS}
    for path in sorted(template.rglob("*")):
        if path.is_file():
            rel = str(path.relative_to(template))
            files[kind_of(rel, truth)][rel] = path.stat().st_size
    yield template, truth, files, work
    print(f"\ncorruption sweep (seed {SEED}{', long' if LONG else ''}):")
    for line in SUMMARY:
        print("  " + line)


SUMMARY: list[str] = []


def test_the_template_is_served_without_error(sweep: tuple[Path, Truth, dict[str, dict[str, int]], Path]) -> None:
    """Everything the sweep reads answers on the undamaged template (a failure here is left out of the sweep's
    cases, which would all show it)."""
    assert not sweep[1].snap.errors, "\n".join(sweep[1].snap.errors)


def test_the_template_has_every_kind_of_file(sweep: tuple[Path, Truth, dict[str, dict[str, int]], Path]) -> None:
    _, truth, files, _ = sweep
    assert not files["other"], f"files the sweep does not know: {sorted(files['other'])}"
    for kind in KINDS[:-1]:
        assert files[kind], f"the template has no {kind}"
    assert len(files["wal sealed .log"]) >= 3  # both alpha vnodes and the native partition 0
    assert len(truth.segment_end) == len(files["wal sealed .log"])
    part = truth.all_records[(NATIVE, 0)]
    assert part.start == 0 and truth.snap.parts[(NATIVE, 0)].start == 19  # type: ignore[union-attr]
    assert any(len(b) >= 16 << 10 for b in part.batches.values()) and any(len(b) < 16 << 10 for b in part.batches.values())


@pytest.mark.parametrize("kind", KINDS[:-1])
def test_sweep(kind: str, sweep: tuple[Path, Truth, dict[str, dict[str, int]], Path]) -> None:
    template, truth, files, work = sweep
    rng = random.Random(f"{SEED}:{kind}")
    cases = cases_for(kind, files[kind], truth, rng)
    outcomes: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    failed: list[str] = []
    started = time.monotonic()
    for case in cases:
        outcome, failures = run_case(case, template, truth, work)
        outcomes[outcome] += 1
        ops[case.op] += 1
        if failures:
            failed.append(f"{case}:\n    " + "\n    ".join(failures[:6]))
    took = time.monotonic() - started
    SUMMARY.append(f"{kind:18} {len(files[kind]):3} files {len(cases):4} cases ({', '.join(f'{n} {op}' for op, n in sorted(ops.items()))}): "
                   f"{outcomes['reported']} reported, {outcomes['silent']} silent, {len(failed)} failed, {took:.1f} s")
    print(f"\n{SUMMARY[-1]}")
    assert not failed, f"{len(failed)} of {len(cases)} cases failed:\n" + "\n".join(failed)
