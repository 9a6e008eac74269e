"""The storage engine facade: SQL, schemaless and CSV writes, queries, topics.

Threading: an Engine is synchronous and not thread-safe; the gateway calls it
from one dedicated thread.

Write protocol (the "nothing partial" rule): a request is parsed, resolved
against the catalog and every value coerced *before* anything is written.
Then schema changes the request implies (schemaless supertables/columns) are
committed to the catalog, and each vnode gets one atomic WAL append holding
the request's meta entries (auto-created tables) and one data entry. Every
vnode's entries are built before the first append, and metas are applied and
topic offset indexes advanced only after the last one (:meth:`Engine._commit`).
A failure while appending is atomic per vnode (see wal.py) and across vnodes:
the appends already made for the request are taken back (``Wal.undo_append``).

Retention and periodic fsync run from :meth:`Engine.sync_due`, which the
gateway calls on a timer (running the fsyncs it returns on another thread).
"""

from __future__ import annotations

import copy
import logging
import re
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from bisect import bisect_right
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import csvfile, datadir, lineproto, names
from walgate.storage.catalog import MAX_PARTITIONS, Catalog, DatabaseDef, StableDef, TopicDef, column_to_json
from walgate.storage.committed import Committed
from walgate.storage.damage import Damage, DamageLog
from walgate.storage.entry import Block, DecodedEntry, decode_entry, encode_blocks, encode_meta
from walgate.storage.errors import (
    AlreadyExists,
    OffsetOutOfRange,
    InvalidValue,
    NotFound,
    RequestTooLarge,
    StorageError,
    StorageUnavailable,
    Unsupported,
)
from walgate.storage.kafka_topics import backing_database, batch_info, rebase, validate_topic_name, wal_options
from walgate.storage.offsets import OffsetIndex
from walgate.storage.producers import DuplicateBatch, PartitionProducers, ProducerIds
from walgate.storage.render import KafkaRows, render
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.topics import Records, TopicEvaluator
from walgate.storage.values import coerce, coerce_text, format_timestamp
from walgate.storage.vnode import TableDef, Vnode, vnode_of
from walgate.storage.wal import KIND_DATA, KIND_KAFKA, KIND_META, CorruptEntry, FileRegion, PendingSync

__all__ = ["Engine", "Result", "ConsumerRow"]

log = logging.getLogger("walgate.engine")

_TICKS = {"ms": 1_000_000, "us": 1_000, "ns": 1}  # ns per tick
_TICKS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}
_RETENTION_CHECK_S = 5.0
_BASE_OFFSET = struct.Struct(">q")


@dataclass(frozen=True)
class ConsumerRow:
    """A consumer-group member as SHOW CONSUMERS lists it (supplied by the gateway's coordinator)."""

    group: str
    member_id: str
    client_id: str
    host: str
    state: str  # rebalancing | ready
    assignment: dict[str, tuple[int, ...]]
    last_heartbeat_ms: int


@dataclass
class Result:
    columns: list[tuple[str, str, int]]
    rows: list[list[Any]]
    affected_rows: int | None = None
    database: str | None = None


def _affected(n: int) -> Result:
    return Result([("affected_rows", "INT", 4)], [[n]], affected_rows=n)


@dataclass
class _Pending:
    """What one request will append to one vnode: meta entries, then one data entry of blocks."""

    metas: list[dict[str, Any]] = field(default_factory=list)
    # (source, is_stable) -> (columns, tbname per row, row dicts)
    blocks: dict[tuple[str, bool], tuple[tuple[Column, ...], list[str], list[dict[str, Any]]]] = field(default_factory=dict)
    new_tables: dict[str, TableDef] = field(default_factory=dict)

    def add_rows(self, source: str, is_stable: bool, columns: tuple[Column, ...], table: str, rows: list[dict[str, Any]]) -> None:
        _, names, block_rows = self.blocks.setdefault((source, is_stable), (columns, [], []))
        names += [table] * len(rows)
        block_rows += rows


class Engine:
    """Catalog + vnodes + topics of one data directory."""

    def __init__(self, data_dir: Path, max_request_bytes: int, max_partitions: int = MAX_PARTITIONS) -> None:
        self.data_dir = data_dir
        self.max_request_bytes = max_request_bytes
        self.damage_log = DamageLog(data_dir)  # every component opened here reports damage to it
        datadir.prepare(data_dir, self.damage_log)  # create, migrate, or refuse a data dir of a newer format
        self.catalog = Catalog.open(data_dir / datadir.CATALOG, self.damage_log, max_partitions=max_partitions)
        for orphan in datadir.unnamed_db_dirs(data_dir, {d.id for d in self.catalog.databases.values()}):
            self.damage_log.report(self.catalog.path, 0, 0, f"{orphan} is named by no catalog record (the record was "
                                   "lost, or a crash came between creating the directory and recording it); the "
                                   "directory is kept", "not served")
        self.vnodes: dict[str, list[Vnode]] = {}
        self.evaluators: dict[str, TopicEvaluator] = {}
        self.indexes: dict[tuple[str, int], OffsetIndex] = {}
        self.producers: dict[tuple[str, int], PartitionProducers] = {}  # Kafka-native partitions
        self.producer_ids = ProducerIds(data_dir / datadir.PRODUCER_IDS, self.damage_log)
        self._next_retention = 0.0
        self.on_records: Callable[[str, int], None] | None = None  # (topic, partition) got new records
        # the consumer-group members the gateway's coordinator knows (SHOW CONSUMERS / SUBSCRIPTIONS)
        self.consumers_view: Callable[[], list[ConsumerRow]] = list
        # record timestamps (ms) of a RecordBatch, for timestamp lookups in Kafka-native topics (set by the gateway,
        # which owns the record format)
        self.batch_timestamps: Callable[[bytes], list[int]] = _no_batch_decoder

    @classmethod
    def open(cls, data_dir: Path, *, max_request_bytes: int = 16 << 20, max_partitions: int = MAX_PARTITIONS) -> "Engine":
        """Open (creating if needed, migrating an older format) the data directory and recover every vnode and
        topic index. Never refuses because of damage (reported in :meth:`damage`); refuses a data dir of a newer
        format (:class:`~walgate.storage.datadir.UnsupportedFormat`). ``max_partitions`` caps the vnodes of all
        databases together (CREATE DATABASE, Kafka-native topics and their new partitions), never checked on open."""
        engine = cls(data_dir, max_request_bytes, max_partitions)
        for db in engine.catalog.databases.values():
            engine.vnodes[db.name] = engine._open_database(db)
        for topic in list(engine.catalog.topics.values()):
            try:
                engine._open_topic(topic)
            except StorageError as exc:  # e.g. its source's catalog record was lost: serve everything else
                engine.damage_log.report(engine.catalog.path, 0, 0, f"topic {topic.name} cannot be opened: "
                                         f"{exc.message}", "not served")
                del engine.catalog.topics[topic.name]
                engine.evaluators.pop(topic.name, None)
                for key in [k for k in engine.indexes if k[0] == topic.name]:
                    engine.indexes.pop(key).close()
        engine.producer_ids.at_least(1 + max((p.max_producer_id() for p in engine.producers.values()), default=-1))
        return engine

    # ---------------------------------------------------------------- helpers

    def _db_dir(self, db: DatabaseDef) -> Path:
        return datadir.db_dir(self.data_dir, db.id)

    def _open_database(self, db: DatabaseDef, commit: Callable[[], object] | None = None, first: int = 0) -> list[Vnode]:
        """Open vnodes ``first ..`` of ``db``. New vnodes (a new database, new partitions) are created *before*
        ``commit`` (their catalog record) runs: when either fails, the new directories are removed and nothing is
        kept (:class:`StorageUnavailable`, or the catalog's error)."""
        vnodes: list[Vnode] = []
        try:
            for i in range(first, db.vgroups):
                vnodes.append(Vnode.open(db, i, self._db_dir(db) / f"vnode{i}", self.damage_log))
            if commit is not None:
                commit()
        except (OSError, StorageError) as exc:
            if commit is None:
                raise
            for vnode in vnodes:
                vnode.wal.close()
            for i in range(first, db.vgroups):
                shutil.rmtree(self._db_dir(db) / f"vnode{i}", ignore_errors=True)
            if first == 0:
                shutil.rmtree(self._db_dir(db), ignore_errors=True)
            if isinstance(exc, StorageError):
                raise
            raise StorageUnavailable(f"Database {db.name}: vnodes could not be created ({exc.strerror or exc}); "
                                     "nothing was kept") from None
        return vnodes

    def _now_ts(self, db: DatabaseDef) -> int:
        return time.time_ns() // _TICKS[db.precision]

    def _resolve_db(self, name: str | None, session: str | None) -> DatabaseDef:
        db = name or session
        if db is None:
            raise InvalidValue("Database not specified: use db.name or USE db")
        return self.catalog.database(db)

    def _check_size(self, n: int) -> None:
        if n > self.max_request_bytes:
            raise RequestTooLarge(f"Request of {n} bytes exceeds the maximum of {self.max_request_bytes} bytes")

    def vnode(self, db: str, table: str) -> Vnode:
        vnodes = self.vnodes[db]
        return vnodes[vnode_of(db, table, len(vnodes))]

    def table(self, db: DatabaseDef, name: str) -> TableDef:
        t = self.vnode(db.name, name).live(name)
        if t is None:
            raise NotFound(f"Table does not exist: {db.name}.{name}")
        return t

    def _tag_tables(self, vnode: Vnode) -> Callable[[str], pa.Table]:
        """Per-stable tag tables of ``vnode`` (a stable dropped since keeps its subtables' names, no tags)."""
        db = vnode.db.name

        def lookup(stable: str) -> pa.Table:
            st = self.catalog.stables.get((db, stable))
            if st is None:
                names = [t.name for t in vnode.tables.values() if t.stable == stable]
                return pa.table({"tbname": pa.array(names, pa.string())})
            return vnode.tag_table(st)

        return lookup

    # ------------------------------------------------------------- execution

    def execute(self, sql: str, db: str | None = None) -> Result:
        """Execute one SQL statement; ``db`` is the session's current database."""
        self._check_size(len(sql.encode("utf-8", "surrogatepass")))  # the parser refuses lone surrogates
        stmt = parse(sql)
        handler = getattr(self, "_x_" + type(stmt).__name__)
        return handler(stmt, db)

    def _x_CreateDatabase(self, s: ast.CreateDatabase, _: str | None) -> Result:
        if s.name in self.catalog.databases:
            if s.if_not_exists:
                return _affected(0)
            raise AlreadyExists(f"Database already exists: {s.name}")
        db = self.catalog.new_database(s.name, s.options, int(time.time() * 1000))  # validated, nothing written
        self.vnodes[db.name] = self._open_database(db, lambda: self.catalog.add_database(db))
        return _affected(0)

    def _x_DropDatabase(self, s: ast.DropDatabase, _: str | None) -> Result:
        if s.name not in self.catalog.databases:
            if s.if_exists:
                return _affected(0)
            raise NotFound(f"Database not exist: {s.name}")
        users = [t.name for t in self.catalog.topics.values() if t.db == s.name]
        if users:
            raise InvalidValue(f"Database {s.name} is used by topic {users[0]}: drop the topic first")
        db = self.catalog.database(s.name)
        self.catalog.drop_database(s.name)  # first: when the disk refuses it, nothing changed
        for vnode in self.vnodes.pop(s.name):
            vnode.close()
        shutil.rmtree(self._db_dir(db), ignore_errors=True)
        return _affected(0)

    def _x_UseDatabase(self, s: ast.UseDatabase, _: str | None) -> Result:
        self.catalog.database(s.name)
        return Result([], [], affected_rows=0, database=s.name)

    def _x_CreateStable(self, s: ast.CreateStable, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        if (db.name, s.name.name) in self.catalog.stables or self.vnode(db.name, s.name.name).live(s.name.name):
            if s.if_not_exists:
                return _affected(0)
            raise AlreadyExists(f"Table already exists: {db.name}.{s.name.name}")
        _check_columns(s.columns, s.tags)
        self.catalog.create_stable(StableDef(db.name, s.name.name, s.columns, s.tags, int(time.time() * 1000)))
        return _affected(0)

    def _x_CreateTable(self, s: ast.CreateTable, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        names.validate_table_name(s.name.name)
        for c in s.columns:
            names.validate_column_name(c.name)
        _check_columns(s.columns, ())
        if self._exists(db, s.name.name, s.if_not_exists):
            return _affected(0)
        meta = {"op": "create_table", "name": s.name.name, "columns": [column_to_json(c) for c in s.columns]}
        self._commit(db, {vnode_of(db.name, s.name.name, db.vgroups): self._with_meta(db, meta)})
        return _affected(0)

    def _exists(self, db: DatabaseDef, name: str, if_not_exists: bool) -> bool:
        if self.vnode(db.name, name).live(name) is None and (db.name, name) not in self.catalog.stables:
            return False
        if if_not_exists:
            return True
        raise AlreadyExists(f"Table already exists: {db.name}.{name}")

    def _with_meta(self, db: DatabaseDef, *metas: dict[str, Any]) -> _Pending:
        pending = _Pending()
        for m in metas:
            pending.metas.append({**m, "ts": self._now_ts(db)})
        return pending

    def _x_CreateSubtable(self, s: ast.CreateSubtable, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        if self._exists(db, s.name.name, s.if_not_exists):
            return _affected(0)
        st = self.catalog.stable(self._resolve_db(s.stable.db, db.name).name, s.stable.name)
        if st.db != db.name:
            raise InvalidValue(f"Subtable {s.name.name} must be in the database of its supertable ({st.db})")
        meta = self._subtable_meta(db, st, s.name.name, s.tag_names, s.tag_values)
        self._commit(db, {vnode_of(db.name, s.name.name, db.vgroups): self._with_meta(db, meta)})
        return _affected(0)

    def _subtable_meta(
        self, db: DatabaseDef, st: StableDef, name: str, tag_names: tuple[str, ...] | None, values: tuple[ast.Value, ...]
    ) -> dict[str, Any]:
        names.validate_table_name(name)
        given = tag_names if tag_names is not None else tuple(t.name for t in st.tags)
        if len(given) != len(values):
            raise InvalidValue(f"Table {name}: {len(given)} tag names but {len(values)} tag values")
        now = time.time_ns()
        tags: dict[str, Any] = {t.name: None for t in st.tags}
        for tag_name, value in zip(given, values):
            tag = st.tag(tag_name)
            if tag is None:
                raise InvalidValue(f"Invalid tag name: {tag_name} (supertable {st.name})")
            tags[tag_name] = coerce(value, tag.type, db.precision, now)
        return {"op": "create_table", "name": name, "stable": st.name, "tags": tags}

    def _x_AlterStable(self, s: ast.AlterStable, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        st = self.catalog.stable(db.name, s.name.name)
        columns, tags = list(st.columns), list(st.tags)
        is_tag = s.action.endswith("TAG")
        target = tags if is_tag else columns
        if s.action.startswith("ADD"):
            assert s.column is not None
            if st.column(s.column.name) or st.tag(s.column.name):
                raise AlreadyExists(f"Column already exists: {s.column.name}")
            target.append(s.column)
        elif s.action.startswith("DROP"):
            i = next((i for i, c in enumerate(target) if c.name == s.column_name), None)
            if i is None:
                raise NotFound(f"Invalid column name: {s.column_name}")
            if (not is_tag and i == 0) or len(target) == 1:
                raise InvalidValue(f"Cannot drop column {s.column_name}: the timestamp column and the last column/tag stay")
            del target[i]
        else:  # MODIFY: only a longer VARCHAR / NCHAR
            assert s.column is not None
            i = next((i for i, c in enumerate(target) if c.name == s.column.name), None)
            if i is None:
                raise NotFound(f"Invalid column name: {s.column.name}")
            old = target[i].type
            if old.name != s.column.type.name or not old.is_string or (s.column.type.length or 0) < (old.length or 0):
                raise InvalidValue(f"Only the length of a VARCHAR/NCHAR column can grow: {s.column.name} is {old}")
            target[i] = s.column
        _check_columns(tuple(columns), tuple(tags))
        self._alter_stable(db, st, tuple(columns), tuple(tags), s.action, s.column_name or (s.column.name if s.column else ""))
        return _affected(0)

    def _alter_stable(
        self, db: DatabaseDef, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...], action: str, column: str
    ) -> StableDef:
        # a topic the change would break refuses it, before anything is written
        self._recompile(db.name, StableDef(st.db, st.name, columns, tags, st.created_ms))
        meta = {"op": "alter_stable", "stable": st.name, "action": action, "column": column}
        self._commit(db, {i: self._with_meta(db, meta) for i in range(db.vgroups)},
                     then=lambda: self.catalog.alter_stable(st, columns, tags))
        new = self.catalog.stable(db.name, st.name)
        for vnode in self.vnodes[db.name]:
            vnode.forget_tag_tables()
        self._recompile(db.name)
        return new

    def _x_DropTable(self, s: ast.DropTable, session: str | None) -> Result:
        plans: dict[str, dict[int, _Pending]] = {}
        for name in s.names:
            db = self._resolve_db(name.db, session)
            t = self.vnode(db.name, name.name).live(name.name)
            if t is None:
                if (db.name, name.name) in self.catalog.stables:
                    return self._x_DropStable(ast.DropStable(ast.Name(name.name, db.name), s.if_exists), session)
                if s.if_exists:
                    continue
                raise NotFound(f"Table does not exist: {db.name}.{name.name}")
            self._refuse_if_topic_source(db.name, name.name)
            pending = plans.setdefault(db.name, {}).setdefault(vnode_of(db.name, name.name, db.vgroups), _Pending())
            pending.metas.append({"op": "drop_table", "name": name.name, "stable": t.stable, "ts": self._now_ts(db)})
        for db_name, plan in plans.items():
            self._commit(self.catalog.database(db_name), plan)
        return _affected(0)

    def _refuse_if_topic_source(self, db: str, source: str) -> None:
        users = [t.name for t in self.catalog.topics.values() if t.db == db and t.source == source]
        if users:
            raise InvalidValue(f"{db}.{source} is used by topic {users[0]}: drop the topic first")

    def _x_DropStable(self, s: ast.DropStable, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        if (db.name, s.name.name) not in self.catalog.stables:
            if s.if_exists:
                return _affected(0)
            raise NotFound(f"STable not exist: {db.name}.{s.name.name}")
        self._refuse_if_topic_source(db.name, s.name.name)
        meta = {"op": "drop_stable", "stable": s.name.name}
        self._commit(db, {i: self._with_meta(db, meta) for i in range(db.vgroups)},
                     then=lambda: self.catalog.drop_stable(db.name, s.name.name))
        return _affected(0)

    # ----------------------------------------------------------------- insert

    def _x_Insert(self, s: ast.Insert, session: str | None) -> Result:
        now = time.time_ns()
        plans: dict[str, dict[int, _Pending]] = {}
        rows = 0
        for target in s.targets:
            db = self._resolve_db(target.table.db, session)
            plan = plans.setdefault(db.name, {})
            name = target.table.name
            i = vnode_of(db.name, name, db.vgroups)
            pending = plan.setdefault(i, _Pending())
            t = self.vnodes[db.name][i].live(name) or pending.new_tables.get(name)
            if t is None:
                if target.using is None:
                    raise NotFound(f"Table does not exist: {db.name}.{name}")
                st = self.catalog.stable(self._resolve_db(target.using.stable.db, db.name).name, target.using.stable.name)
                meta = self._subtable_meta(db, st, name, target.using.tag_names, target.using.tag_values)
                pending.metas.append({**meta, "ts": self._now_ts(db)})
                t = TableDef(name, st.name, meta["tags"], None, -1, 0)
                pending.new_tables[name] = t
            columns = self._columns_of(db, t)
            names = target.columns or tuple(c.name for c in columns)
            by_name = {c.name: c for c in columns}
            for n in names:
                if n not in by_name:
                    raise InvalidValue(f"Invalid column name: {n} (table {db.name}.{name})")
            if columns[0].name not in names:
                raise InvalidValue(f"Table {db.name}.{name}: the timestamp column {columns[0].name} is required")
            for row in target.rows:
                if len(row) != len(names):
                    raise InvalidValue(
                        f"Table {db.name}.{name}: {len(row)} values for {len(names)} columns in row {row!r}"
                    )
                values = {n: coerce(v, by_name[n].type, db.precision, now) for n, v in zip(names, row)}
                if values[columns[0].name] is None:
                    raise InvalidValue(f"Table {db.name}.{name}: the timestamp column cannot be NULL")
                pending.add_rows(t.stable or name, t.stable is not None, columns, name, [values])
                rows += 1
        for db_name, plan in plans.items():
            self._commit(self.catalog.database(db_name), plan)
        return _affected(rows)

    def _columns_of(self, db: DatabaseDef, t: TableDef) -> tuple[Column, ...]:
        if t.stable is None:
            assert t.columns is not None
            return t.columns
        return self.catalog.stable(db.name, t.stable).columns

    # ------------------------------------------------------------------ commit

    def _commit(self, db: DatabaseDef, plan: dict[int, _Pending], then: Callable[[], object] = lambda: None) -> None:
        """Append each vnode's pending entries atomically, then apply and index them: two phases.

        ``then`` is the catalog change the entries belong to (a dropped or altered supertable): it runs once every
        append succeeded and before anything is applied, and when it raises the appends are taken back, so the
        catalog and the vnodes change together or not at all.

        1. Every vnode's entries are built (Arrow blocks, encoding: all that bad data can make fail, raised as
           :class:`InvalidValue`) before anything is appended, so a request refused here writes nothing anywhere.
        2. One WAL append per vnode; metas are applied and offset indexes advanced (consumers woken) only once
           every append succeeded. An append the disk refuses raises :class:`StorageUnavailable` before anything
           was applied or indexed, and the appends already made for the request's other vnodes are taken back
           (:meth:`~walgate.storage.wal.Wal.undo_append`; a WAL that cannot cut them off is fenced and never serves
           them): a refused request is written nowhere."""
        staged: list[tuple[Vnode, _Pending, list[Block], list[tuple[int, int, int, bytes]]]] = []
        for i, pending in sorted(plan.items()):
            try:
                entries: list[tuple[int, int, int, bytes]] = [
                    (KIND_META, 1, m["ts"], encode_meta(m)) for m in pending.metas
                ]
                blocks = [_block(db, key, *parts) for key, parts in pending.blocks.items()]
                if blocks:
                    n = sum(b.batch.num_rows for b in blocks)
                    max_ts = max(pc.max(pc.cast(b.batch.column(1), pa.int64())).as_py() for b in blocks)
                    entries.append((KIND_DATA, n, max_ts, encode_blocks(blocks)))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise InvalidValue(f"rows that do not fit their columns: {exc}") from None
            if entries:
                staged.append((self.vnodes[db.name][i], pending, blocks, entries))
        appended: list[tuple[Vnode, _Pending, list[Block], int]] = []
        try:
            for vnode, pending, blocks, entries in staged:
                appended.append((vnode, pending, blocks, vnode.wal.append(entries)))
            then()
        except Exception:
            for vnode, _, _, version in reversed(appended):
                vnode.wal.undo_append(version)
            raise
        for vnode, pending, blocks, version in appended:
            decoded: list[DecodedEntry] = []
            for m in pending.metas:
                vnode.apply_meta(m, version)
                decoded.append(DecodedEntry(version, KIND_META, meta=m))
                version += 1
            if blocks:
                decoded.append(DecodedEntry(version, KIND_DATA, tuple(blocks)))
            self._index(vnode, decoded, vnode.wal.next_version)

    def _index(self, vnode: Vnode, entries: list[DecodedEntry], next_version: int, topics: list[str] | None = None) -> None:
        """Advance the offset indexes of ``topics`` (default: every topic of the vnode's database) over ``entries``;
        ``next_version`` is the WAL version after the last entry.

        Never fails the write that appended ``entries``: an entry a topic cannot evaluate (which compile-time
        validation should make impossible) yields no records for that topic, with one ERROR line per topic and
        call. Evaluation is deterministic, so rebuilding the index from the WAL skips the same entries and the
        topic's offsets stay what consumers saw."""
        tag_tables = self._tag_tables(vnode)
        if topics is None:
            topics = [name for name, t in self.catalog.topics.items() if t.db == vnode.db.name]
        for name in topics:
            ev = self.evaluators.get(name)  # None: a Kafka-native topic, whose records are its batches
            idx = self.indexes[(name, vnode.index)]
            failed: list[tuple[int, Exception]] = []
            for k, entry in enumerate(entries):
                if entry.version < idx.indexed_to:
                    continue
                if ev is None:
                    count, max_ts = entry.kafka_records, entry.max_ts
                else:
                    try:
                        recs = ev.evaluate(entry, tag_tables)
                        count = sum(len(r) for r in recs)
                        max_ts = max((pc.max(r.timestamps).as_py() for r in recs), default=0)
                    except Exception as exc:  # noqa: BLE001 - the write stands; the topic skips what it cannot read
                        failed.append((entry.version, exc))
                        count, max_ts = 0, 0
                end = entries[k + 1].version if k + 1 < len(entries) else next_version
                idx.append(entry.version, count, max_ts, end)
                if count and self.on_records is not None:
                    self.on_records(name, vnode.index)
            if failed:
                version, exc = failed[0]
                log.error("topic %s, vnode %s/%d: %d WAL entries could not be evaluated and yield no records "
                          "(first: version %d, %s: %s)", name, vnode.db.name, vnode.index, len(failed), version,
                          type(exc).__name__, exc)

    # ------------------------------------------------------------------ topics

    def _evaluator(self, topic: TopicDef, altered: StableDef | None = None) -> TopicEvaluator:
        """Compile a stored topic from its SQL, as every start does (``altered``: see :meth:`_compile`)."""
        stmt = parse(topic.sql)
        if not isinstance(stmt, ast.CreateTopic):
            raise InvalidValue(f"Topic {topic.name}: its stored SQL is not a CREATE TOPIC")
        db = self.catalog.database(topic.db)
        return self._compile(db, stmt.kind, topic.source, topic.with_meta, stmt.select, stmt.where, altered)

    def _compile(
        self,
        db: DatabaseDef,
        kind: str,
        source: str,
        with_meta: bool,
        items: tuple[ast.SelectItem, ...] | None,
        where: ast.Expr | None,
        altered: StableDef | None = None,
    ) -> TopicEvaluator:
        """The evaluator of a topic or query over ``source``, fully validated (every type error is raised here, see
        topics.py); ``altered`` stands in for the catalog's definition of the supertable of its name (a schema
        change being checked before it is written)."""
        if kind == "database":
            return TopicEvaluator("database", "", with_meta=with_meta)

        def stable(name: str) -> StableDef | None:
            if altered is not None and (altered.db, altered.name) == (db.name, name):
                return altered
            return self.catalog.stables.get((db.name, name))

        st = stable(source)
        if st is not None:
            return TopicEvaluator(kind, source, with_meta=with_meta, precision=db.precision, stable=st, items=items, where=where)
        if kind == "stable":
            raise NotFound(f"STable not exist: {db.name}.{source}")
        t = self.table(db, source)
        if t.stable is not None:  # a subtable: its supertable's rows, restricted to it
            st = stable(t.stable) or self.catalog.stable(db.name, t.stable)
            cond: ast.Expr = ast.Binary("=", ast.Col("tbname"), ast.Lit(source))
            where = cond if where is None else ast.Binary("AND", cond, where)
            return TopicEvaluator(kind, t.stable, with_meta=with_meta, precision=db.precision, stable=st, items=items, where=where)
        return TopicEvaluator(kind, source, with_meta=with_meta, precision=db.precision, columns=t.columns, items=items, where=where)

    def _recompile(self, db: str, altered: StableDef | None = None) -> None:
        """Recompile every TDengine topic of ``db`` after a schema change; nothing is replaced unless all compile.

        With ``altered`` (a supertable's definition after a proposed ALTER), only check that every topic still
        compiles with it: call it before writing the change, which a topic that would break then refuses."""
        compiled: dict[str, TopicEvaluator] = {}
        for name, topic in self.catalog.topics.items():
            if topic.db == db and topic.kind != "kafka":
                try:
                    compiled[name] = self._evaluator(topic, altered)
                except StorageError as exc:
                    raise type(exc)(f"{exc.message} (topic {name} depends on it: drop the topic first)") from None
        if altered is None:
            self.evaluators.update(compiled)

    def _open_topic(self, topic: TopicDef) -> None:
        """Compile the topic and bring its offset indexes up to the WAL's end."""
        if topic.kind != "kafka":
            self.evaluators[topic.name] = self._evaluator(topic)
        for vnode in self.vnodes[topic.db]:
            self._open_topic_partition(topic, vnode)

    def _open_topic_partition(self, topic: TopicDef, vnode: Vnode) -> None:
        if topic.kind == "kafka":
            self._open_native_producers(topic, vnode)
        path = datadir.topic_file(vnode.dir, topic.topic_id, ".oidx")
        idx = OffsetIndex.open(path, vnode.wal.next_version, self.damage_log)
        idx.trim_before(vnode.wal.first_version)
        self.indexes[(topic.name, vnode.index)] = idx
        start = max(idx.indexed_to, vnode.wal.first_version)
        if topic.kind == "kafka" and not idx.offsets:  # a rebuilt index numbers on from the offsets the batches carry
            first = next((e for e in vnode.wal.read_from(start) if e.kind == KIND_KAFKA and e.version >= start), None)
            if first is not None:
                idx.start_empty_at(_BASE_OFFSET.unpack_from(first.body, 0)[0])
        if start < vnode.wal.next_version:
            batch: list[DecodedEntry] = []
            for entry in vnode.wal.read_from(start):
                if entry.version >= start:
                    batch.append(decode_entry(entry))
                if len(batch) >= 256:  # bounded memory; the next entry starts after this one's first version
                    self._index(vnode, batch, batch[-1].version + 1, [topic.name])
                    batch = []
            self._index(vnode, batch, vnode.wal.next_version, [topic.name])

    def _x_CreateTopic(self, s: ast.CreateTopic, session: str | None) -> Result:
        if s.name in self.catalog.topics:
            if s.if_not_exists:
                return _affected(0)
            raise AlreadyExists(f"Topic already exists: {s.name}")
        if s.kind == "database":
            db, source = self.catalog.database(s.source.name), ""
        else:
            db, source = self._resolve_db(s.source.db, session), s.source.name
        self._compile(db, s.kind, source, s.with_meta, s.select, s.where)  # validates before anything is written
        sql = s.sql
        if s.kind != "database" and s.source.db is None:  # make the stored SQL independent of USE
            sql = _qualify(s, db.name)
        topic = self.catalog.create_topic(s.name, s.kind, db.name, source, s.with_meta, sql, int(time.time() * 1000))
        try:
            self._open_topic(topic)
        except Exception:
            self.drop_topic(topic.name)  # an answered error means nothing was kept
            raise
        return _affected(0)

    def _x_DropTopic(self, s: ast.DropTopic, _: str | None) -> Result:
        topic = self.catalog.topics.get(s.name)
        if topic is None:
            if s.if_exists:
                return _affected(0)
            raise NotFound(f"Topic not exist: {s.name}")
        self.drop_topic(s.name)
        return _affected(0)

    def drop_topic(self, name: str) -> None:
        """Drop a topic, its offset indexes and committed offsets; a Kafka-native one with its database."""
        topic = self.catalog.topics[name]
        self.delete_offsets(topic=name)
        db = self.catalog.database(topic.db)
        if topic.kind != "kafka":
            self.catalog.drop_topic(name)  # before memory and files: when the disk refuses it, the topic stays
        else:
            self.catalog.drop_database(topic.db)  # one record: the database and its topic go together
        self.evaluators.pop(name, None)
        for vnode in self.vnodes.get(topic.db, []):
            self.producers.pop((name, vnode.index), None)
            idx = self.indexes.pop((name, vnode.index), None)
            if idx is not None:
                idx.delete()
        if topic.kind == "kafka":
            for vnode in self.vnodes.pop(topic.db):
                vnode.close()
            shutil.rmtree(self._db_dir(db), ignore_errors=True)

    # ------------------------------------------------------------ Kafka view

    def _partition(self, topic: str, partition: int) -> tuple[TopicDef, Vnode, OffsetIndex]:
        t = self.catalog.topics.get(topic)
        if t is None:
            raise NotFound(f"Topic not exist: {topic}")
        vnodes = self.vnodes[t.db]
        if not 0 <= partition < len(vnodes):
            raise NotFound(f"Topic {topic} has no partition {partition}")
        return t, vnodes[partition], self.indexes[(topic, partition)]

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self.catalog.topics.get(topic)
        return t is not None and 0 <= partition < len(self.vnodes[t.db])

    def partition_count(self, topic: str) -> int:
        t = self.catalog.topics.get(topic)
        if t is None:
            raise NotFound(f"Topic not exist: {topic}")
        return len(self.vnodes[t.db])

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of a topic-partition."""
        idx = self._partition(topic, partition)[2]
        return idx.start_offset, idx.end_offset

    def index_entries(self, topic: str, partition: int, offset: int) -> Iterator[tuple[int, int, int]]:
        """(base offset, WAL version, record count) of each entry from the one holding ``offset`` on."""
        idx = self._partition(topic, partition)[2]
        if offset < idx.start_offset or offset >= idx.end_offset:
            return
        i = bisect_right(idx.offsets, offset) - 1
        for k in range(i, len(idx.offsets)):
            yield idx.offsets[k], idx.versions[k], idx.counts[k]

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """Every topic's Kafka topic id (the stable UUID the catalog keeps), by name."""
        return {name: uuid.UUID(t.topic_id) for name, t in self.catalog.topics.items()}

    def topics_by_id(self) -> dict[uuid.UUID, str]:
        """Every topic's name, by Kafka topic id."""
        return {uuid.UUID(t.topic_id): name for name, t in self.catalog.topics.items()}

    def _x_DropConsumerGroup(self, s: ast.DropConsumerGroup, _: str | None) -> Result:
        if s.topic not in self.catalog.topics:
            raise NotFound(f"Topic not exist: {s.topic}")
        if any(c.group == s.group for c in self.consumers_view()):
            raise InvalidValue(f"Consumer group {s.group} has active members: stop them first")
        if not self.delete_offsets(s.group, s.topic) and not s.if_exists:
            raise NotFound(f"Consumer group {s.group} has no progress on topic {s.topic}")
        return _affected(0)

    def topic_records(self, topic: str, partition: int, version: int) -> list[Records]:
        """Records the topic's entry at ``version`` yields on vnode ``partition`` (re-evaluation).

        Raises :class:`~walgate.storage.wal.CorruptEntry` when the entry was lost (quarantined or failing its
        checksum): its records are a gap in the partition's offsets, as after compaction."""
        _, vnode, _ = self._partition(topic, partition)
        entry = vnode.wal.read(version)
        if entry is None:
            return []
        return self.evaluators[topic].evaluate(decode_entry(entry), self._tag_tables(vnode))

    def kafka_rows(self, topic: str, partition: int, version: int) -> KafkaRows:
        """The Kafka records (keys, JSON values, ms timestamps, headers) of one indexed entry (CorruptEntry: lost)."""
        t, vnode, _ = self._partition(topic, partition)
        return render(self.topic_records(topic, partition, version), t.db, vnode.db.precision)

    def commit_offsets(
        self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int
    ) -> list[StorageError | None]:
        """Durably commit ``(topic, partition, offset, leader_epoch, metadata)`` entries for ``group``.

        Returns, per entry, None or the error that refused it: NotFound (unknown
        topic or partition) or the error of its vnode's write (StorageUnavailable:
        the disk refused it; the entries of other vnodes are committed). The
        accepted ones are fsynced, one write per vnode, before this returns."""
        errors: list[StorageError | None] = []
        per_vnode: dict[int, tuple[Vnode, list[int], list[tuple[str, int, Committed]]]] = {}
        for k, (topic, partition, offset, epoch, metadata) in enumerate(entries):
            try:
                _, vnode, _ = self._partition(topic, partition)
            except StorageError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            _, ks, items = per_vnode.setdefault(id(vnode), (vnode, [], []))
            ks.append(k)
            items.append((topic, partition, Committed(offset, epoch, metadata, now_ms)))
        for vnode, ks, items in per_vnode.values():
            try:
                vnode.offsets.commit(group, items)
            except StorageError as exc:
                for k in ks:
                    errors[k] = exc
        return errors

    def committed(self, group: str, topic: str, partition: int) -> Committed | None:
        """The offset ``group`` committed for a topic-partition (None: none, or no such partition)."""
        try:
            _, vnode, _ = self._partition(topic, partition)
        except StorageError:
            return None
        return vnode.offsets.get(group, topic, partition)

    def delete_offsets(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete committed offsets matching the filters (durably); returns how many went.

        Every vnode is tried: one whose write the disk refuses keeps its offsets, the others delete theirs, then
        the first error is raised (deleting again is safe)."""
        deleted, error = 0, None
        for vnodes in self.vnodes.values():
            for vnode in vnodes:
                try:
                    deleted += vnode.offsets.delete(group, topic, partition)
                except StorageError as exc:
                    error = error or exc
        if error is not None:
            raise error
        return deleted

    def all_committed(self) -> Iterator[tuple[str, str, int, Committed]]:
        """Every committed offset: (group, topic, partition, committed)."""
        for vnodes in self.vnodes.values():
            for vnode in vnodes:
                for (group, topic, partition), c in vnode.offsets.items():
                    yield group, topic, partition, c

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record whose timestamp >= ``ts_ms``; None if none.

        Lost entries (:class:`~walgate.storage.wal.CorruptEntry`) are skipped: their records are a gap."""
        _, vnode, idx = self._partition(topic, partition)
        ticks = ts_ms * _TICKS_PER_MS[vnode.db.precision]
        found = idx.entry_for_timestamp(ticks)
        if found is None:
            return None
        native = self.is_native(topic)
        for base, version, _count in self.index_entries(topic, partition, max(found[0], idx.start_offset)):
            try:
                if native:
                    timestamps = self.batch_timestamps(self.kafka_batch(topic, partition, version))
                else:
                    timestamps = self.kafka_rows(topic, partition, version).timestamps
            except CorruptEntry:
                continue
            for k, ms in enumerate(timestamps):
                if ms >= ts_ms:
                    return base + k, ms
        return None

    def max_timestamp(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record holding the partition's largest timestamp."""
        _, vnode, idx = self._partition(topic, partition)
        if not idx.offsets:
            return None
        # no record is later than the running max, so the first one reaching it holds it
        return self.offset_for_timestamp(topic, partition, idx.running_max[-1] // _TICKS_PER_MS[vnode.db.precision])

    # ------------------------------------------------------------ Kafka-native topics

    def is_native(self, topic: str) -> bool:
        t = self.catalog.topics.get(topic)
        return t is not None and t.kind == "kafka"

    def create_kafka_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicDef:
        """A Kafka-native topic of *partitions* partitions (its database's vgroups) with Kafka *configs*."""
        validate_topic_name(name)
        if name in self.catalog.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        options: dict[str, int | str] = {"VGROUPS": partitions, **wal_options(configs)}
        db, topic = self.catalog.new_kafka_topic(name, backing_database(name, self.catalog.databases), options,
                                                 dict(configs), int(time.time() * 1000))
        self.vnodes[db.name] = self._open_database(db, lambda: self.catalog.add_kafka_topic(db, topic))
        self._open_topic(topic)
        return topic

    def _open_native_producers(self, topic: TopicDef, vnode: Vnode) -> None:
        """Rebuild a partition's idempotent-producer state from the batch headers in its WAL."""
        producers = self.producers[(topic.name, vnode.index)] = PartitionProducers()
        for entry in vnode.wal.read_from(vnode.wal.first_version):
            if entry.kind == KIND_KAFKA:
                info = batch_info(entry.body)
                base = _BASE_OFFSET.unpack_from(entry.body, 0)[0]
                producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.record_count, base)

    def _native(self, name: str) -> TopicDef:
        topic = self.catalog.topics.get(name)
        if topic is None:
            raise NotFound(f"Topic not exist: {name}")
        if topic.kind != "kafka":
            raise InvalidValue(f"Topic {name} is a TDengine topic: its partitions and configs follow its database")
        return topic

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a Kafka-native topic's configs (validated); its database's WAL settings follow at once."""
        topic = self._native(name)
        options = {**self.catalog.database(topic.db).options, **wal_options(configs)}
        self.catalog.alter_kafka_topic(name, options, dict(configs))
        db = self.catalog.database(topic.db)
        for vnode in self.vnodes[db.name]:
            vnode.reconfigure(db)

    def create_partitions(self, name: str, count: int) -> None:
        """Grow a Kafka-native topic to *count* partitions (new vgroups of its database)."""
        topic = self._native(name)
        old = len(self.vnodes[topic.db])
        if count <= old:
            raise InvalidValue(f"Topic {name} has {old} partitions: the new count must be larger, not {count}")
        db = self.catalog.database(topic.db)
        self.catalog.check_partitions(count - old, f"topic {name}")
        options = {**db.options, "VGROUPS": count}
        new = self._open_database(DatabaseDef(db.name, options, db.created_ms, db.id),
                                  lambda: self.catalog.alter_kafka_topic(name, options, topic.configs), first=old)
        db = self.catalog.database(topic.db)
        for vnode in self.vnodes[db.name]:
            vnode.reconfigure(db)
        for vnode in new:
            vnode.reconfigure(db)
            self.vnodes[db.name].append(vnode)
            self._open_topic_partition(self.catalog.topics[name], vnode)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move a partition's log start to *offset* (-1: the high watermark); the new log start."""
        _, _, idx = self._partition(name, partition)
        target = idx.end_offset if offset == -1 else offset
        if not 0 <= target <= idx.end_offset:
            raise OffsetOutOfRange(f"offset {offset} is outside [0, {idx.end_offset}] of {name}-{partition}")
        idx.advance_start(target)
        return idx.start_offset

    def append_batches(self, topic: str, partition: int, batches: list[bytes]) -> int:
        """Append produced RecordBatch v2 *batches* (validated by the caller) atomically; their base offset.

        Idempotence (see :mod:`walgate.storage.producers`): a partition request
        whose batches were all appended before answers the original base offset
        and writes nothing; a sequence error refuses the whole request
        (:class:`~walgate.storage.producers.SequenceError`). Durable per the
        database's WAL level when this returns.
        """
        t, vnode, idx = self._partition(topic, partition)
        if t.kind != "kafka":
            raise InvalidValue(f"Topic {topic} is a TDengine topic: produce to Kafka-native topics only")
        producers = self.producers[(topic, partition)]
        infos = [batch_info(b) for b in batches]
        scratch = copy.deepcopy(producers) if len(infos) > 1 else producers  # later batches follow earlier ones
        verdicts = []
        for k, i in enumerate(infos):
            verdicts.append(scratch.check(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count))
            if k + 1 < len(infos):
                scratch.record(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count, -1)
        duplicates = [v for v in verdicts if isinstance(v, DuplicateBatch)]
        if duplicates:
            if len(duplicates) < len(verdicts):
                raise InvalidValue("a produce request mixing retried and new batches of one partition")
            return duplicates[0].base_offset
        self._check_size(sum(map(len, batches)))
        offset = base = idx.end_offset
        entries: list[tuple[int, int, int, bytes]] = []
        for batch, info in zip(batches, infos):
            entries.append((KIND_KAFKA, info.record_count, info.max_timestamp, rebase(batch, offset, 0)))
            offset += info.record_count
        version = vnode.wal.append(entries)
        decoded = []
        offset = base
        for info in infos:
            decoded.append(DecodedEntry(version, KIND_KAFKA, kafka_records=info.record_count, max_ts=info.max_timestamp))
            producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.record_count, offset)
            version += info.record_count
            offset += info.record_count
        self._index(vnode, decoded, vnode.wal.next_version, [topic])
        return base

    def kafka_batch(self, topic: str, partition: int, version: int) -> bytes:
        """The stored RecordBatch at WAL *version* of a Kafka-native partition (its base offset is its offset);
        :class:`~walgate.storage.wal.CorruptEntry` when its entry was lost."""
        _, vnode, _ = self._partition(topic, partition)
        entry = vnode.wal.read(version)
        if entry is None or entry.kind != KIND_KAFKA:
            raise NotFound(f"Topic {topic} partition {partition} has no batch at version {version}")
        return entry.body

    def kafka_region(self, topic: str, partition: int, version: int) -> FileRegion:
        """:meth:`kafka_batch` as a region of its WAL segment, for ``sendfile`` (the body's CRC is checked the first
        time it is served, see :meth:`Wal.region`; CorruptEntry when the entry is lost or damaged). The batch's first
        16 bytes, which its own CRC does not cover (base offset, length, partition leader epoch), are read each time
        and must be what the offset index, the WAL and :meth:`append_batches` say, or the entry is reported damaged:
        a client cannot tell a batch served at the wrong offset."""
        _, vnode, idx = self._partition(topic, partition)
        region = vnode.wal.region(version, KIND_KAFKA)
        if region is None:
            raise NotFound(f"Topic {topic} partition {partition} has no batch at version {version}")
        base, length, epoch = struct.unpack_from(">qii", region.read(16).ljust(16, b"\0"))
        k = bisect_right(idx.versions, version) - 1
        want = idx.offsets[k] if k >= 0 and idx.versions[k] == version else base
        if (base, length, epoch) != (want, len(region) - 12, 0):
            raise vnode.wal.damaged(version, f"Kafka batch header (base offset {base}, length {length}, leader epoch "
                                             f"{epoch}) is not the stored one (base offset {want}, length "
                                             f"{len(region) - 12}, leader epoch 0)")
        return region

    # ------------------------------------------------------------ schemaless

    def write_lines(self, db: str, body: bytes, precision: str = "ns") -> int:
        """InfluxDB line protocol (TDengine schemaless): returns rows written."""
        self._check_size(len(body))
        dbdef = self.catalog.database(db)
        points = lineproto.parse_lines(body, precision)
        now_ns = time.time_ns()
        ticks = _TICKS[dbdef.precision]
        series: dict[tuple[str, tuple[tuple[str, str], ...]], list[lineproto.Point]] = {}
        for p in points:
            series.setdefault((p.measurement, p.tags), []).append(p)
        # 1. the schema every measurement needs (validated, not yet committed)
        wanted: dict[str, tuple[dict[str, ColumnType], dict[str, ColumnType]]] = {}
        for (m, tag_pairs), pts in series.items():
            cols, tags = wanted.setdefault(m, ({}, {}))
            for k, v in tag_pairs:
                tags[k] = _widest(tags.get(k), ColumnType("NCHAR", max(len(v), 1)), k, m)
            for p in pts:
                for k, ctype, _v in p.fields:
                    have = cols.get(k)
                    if have != ctype:
                        cols[k] = _widest(have, ctype, k, m)
        changes: list[tuple[StableDef | None, StableDef]] = []
        for m, (cols, tags) in wanted.items():
            old = self.catalog.stables.get((db, m))
            if old is None and self.vnode(db, m).live(m) is not None:
                raise InvalidValue(f"Measurement {m}: {db}.{m} is a normal table, not a supertable")
            new = _merge_schema(dbdef, old, m, cols, tags)
            if new != old:
                changes.append((old, new))
        # 2. rows and auto-created subtables, per vnode
        stables = {st.name: st for _, st in changes}
        plan: dict[int, _Pending] = {}
        for (m, tag_pairs), pts in series.items():
            st = stables.get(m) or self.catalog.stable(db, m)
            name = lineproto.child_table_name(m, tag_pairs)
            i = vnode_of(db, name, dbdef.vgroups)
            pending = plan.setdefault(i, _Pending())
            t = self.vnodes[db][i].live(name) or pending.new_tables.get(name)
            if t is None:
                tags = {tag.name: None for tag in st.tags}
                tags.update(dict(tag_pairs))
                pending.metas.append({"op": "create_table", "name": name, "stable": st.name, "tags": tags, "ts": now_ns // ticks})
                t = TableDef(name, st.name, tags, None, -1, 0)
                pending.new_tables[name] = t
            elif t.stable != st.name:
                raise InvalidValue(f"Table {name} belongs to {t.stable}, not to measurement {m}")
            ts_col = st.columns[0].name
            rows = []
            for p in pts:
                row = {k: v for k, _, v in p.fields}
                row[ts_col] = (p.ts_ns if p.ts_ns is not None else now_ns) // ticks
                rows.append(row)
            pending.add_rows(st.name, True, st.columns, name, rows)
        for old, new in changes:  # a change that would break a topic is refused before anything is written
            if old is not None:
                self._recompile(db, new)
        # 3. commit: schema first (so the rows' columns exist), then the rows
        for old, new in changes:
            if old is None:
                self.catalog.create_stable(new)
            else:
                self._alter_stable(self.catalog.database(db), old, new.columns, new.tags, "SCHEMALESS", "")
        self._commit(dbdef, plan)
        return len(points)

    # -------------------------------------------------------------------- csv

    def write_csv(self, db: str, body: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column."""
        self._check_size(len(body))
        dbdef = self.catalog.database(db)
        if (table is None) == (stable is None):
            raise InvalidValue("CSV import needs exactly one of table= or stable=")
        header, rows, linenos = csvfile.parse_csv(body)
        now = time.time_ns()
        plan: dict[int, _Pending] = {}
        if table is not None:
            t = self.table(dbdef, table)
            columns = self._columns_of(dbdef, t)
            by_name = {c.name: c for c in columns}
            for h in header:
                if h not in by_name:
                    raise InvalidValue(f"CSV header: {h} is not a column of {db}.{table}")
            i = vnode_of(db, table, dbdef.vgroups)
            pending = plan.setdefault(i, _Pending())
            for line, row in zip(linenos, rows):
                values = _csv_values(header, row, by_name, dbdef.precision, now, line, columns[0].name)
                pending.add_rows(t.stable or table, t.stable is not None, columns, table, [values])
        else:
            st = self.catalog.stable(db, stable or "")
            if "tbname" not in header:
                raise InvalidValue("CSV import into a supertable needs a tbname column")
            by_name = {c.name: c for c in st.columns}
            tag_by_name = {t.name: t for t in st.tags}
            for h in header:
                if h != "tbname" and h not in by_name and h not in tag_by_name:
                    raise InvalidValue(f"CSV header: {h} is neither a column nor a tag of {db}.{stable}")
            col_header = [h for h in header if h in by_name]
            for line, row in zip(linenos, rows):
                record = dict(zip(header, row))
                name = record["tbname"]
                if not name:
                    raise InvalidValue(f"CSV line {line}: empty tbname")
                values = _csv_values(col_header, [record[h] for h in col_header], by_name, dbdef.precision, now, line, st.columns[0].name)
                self._plan_subtable_row(
                    dbdef, st, plan, name, values, f"CSV line {line}",
                    lambda tag: _coerce_csv(record.get(tag.name), tag.type, dbdef.precision, now, line, tag.name),
                )
        self._commit(dbdef, plan)
        return len(rows)

    def _plan_subtable_row(
        self, dbdef: DatabaseDef, st: StableDef, plan: dict[int, _Pending], name: str, values: dict[str, Any],
        where: str, tag_value: Callable[[Column], Any],
    ) -> None:
        """Plan one row of subtable *name* of *st*, creating the subtable (tags from *tag_value*) if it is new."""
        i = vnode_of(dbdef.name, name, dbdef.vgroups)
        pending = plan.setdefault(i, _Pending())
        t = self.vnodes[dbdef.name][i].live(name) or pending.new_tables.get(name)
        if t is None:
            try:
                names.validate_table_name(name)
            except InvalidValue as e:
                raise InvalidValue(f"{where}: {e.message}") from None
            tags = {tag.name: tag_value(tag) for tag in st.tags}
            pending.metas.append({"op": "create_table", "name": name, "stable": st.name, "tags": tags,
                                  "ts": time.time_ns() // _TICKS[dbdef.precision]})
            t = TableDef(name, st.name, tags, None, -1, 0)
            pending.new_tables[name] = t
        elif t.stable != st.name:
            raise InvalidValue(f"{where}: table {name} is not a subtable of {st.name}")
        pending.add_rows(st.name, True, st.columns, name, [values])

    def write_json_rows(self, db: str, stable: str, rows: list[tuple[str, dict[str, Any], int]]) -> int:
        """Rows given as JSON objects into subtables of *stable*: (subtable, fields, record timestamp ms).

        Fields are the supertable's columns and, for a subtable that does not
        exist yet, its tags (missing ones are NULL); values are typed as SQL
        literals are (timestamps: RFC 3339 strings or ticks). A row without its
        timestamp column takes the record's timestamp. Everything is validated
        before anything is written (a subtable name that is not a string, fields
        that are not an object, a timestamp outside years 0001-9999: an
        InvalidValue naming the record); returns the rows written.
        """
        dbdef = self.catalog.database(db)
        st = self.catalog.stable(db, stable)
        now = time.time_ns()
        known = {c.name: c for c in st.columns} | {t.name: t for t in st.tags}
        ts_name = st.columns[0].name
        plan: dict[int, _Pending] = {}
        for k, (name, fields, ts_ms) in enumerate(rows):
            if not isinstance(name, str):
                raise InvalidValue(f"record {k}: the subtable name must be a string, not {type(name).__name__}")
            try:
                name.encode()  # JSON's "\ud800" decodes to a lone surrogate, which no vnode hash takes
            except UnicodeEncodeError:
                raise InvalidValue(f"record {k}: the subtable name {name!r} is not valid Unicode text") from None
            if not isinstance(fields, dict):
                raise InvalidValue(f"record {k} ({name}): the value must be a JSON object, not {type(fields).__name__}")
            where = f"record {k} ({name})"
            unknown = sorted(set(fields) - set(known))
            if unknown:
                raise InvalidValue(f"{where}: {unknown[0]} is neither a column nor a tag of {db}.{stable}")

            def typed(column: Column, value: Any) -> Any:
                try:
                    return coerce(value, column.type, dbdef.precision, now)
                except InvalidValue as e:
                    raise InvalidValue(f"{where}, {column.name}: {e.message}") from None

            values = {c.name: typed(c, fields[c.name]) for c in st.columns if c.name in fields}
            if values.get(ts_name) is None:
                values[ts_name] = typed(st.columns[0], ts_ms * _TICKS_PER_MS[dbdef.precision])
            self._plan_subtable_row(dbdef, st, plan, name, values, where, lambda tag: typed(tag, fields.get(tag.name)))
        self._check_size(sum(len(str(f)) for _, f, _ in rows))
        self._commit(dbdef, plan)
        return len(rows)

    # ---------------------------------------------------------------- queries

    def _x_Show(self, s: ast.Show, session: str | None) -> Result:
        what = s.what
        if what == "DATABASES":
            cols = [("name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("vgroups", "SMALLINT", 2), ("precision", "VARCHAR", 2),
                    ("wal_level", "TINYINT", 1), ("wal_fsync_period", "INT", 4), ("wal_retention_period", "INT", 4),
                    ("wal_retention_size", "BIGINT", 8), ("wal_segment_size", "BIGINT", 8)]
            rows = [
                [d.name, format_timestamp(d.created_ms, "ms"), d.vgroups, d.precision] +
                [d.options[k] for k in ("WAL_LEVEL", "WAL_FSYNC_PERIOD", "WAL_RETENTION_PERIOD", "WAL_RETENTION_SIZE", "WAL_SEGMENT_SIZE")]
                for d in self.catalog.databases.values()
            ]
            return Result(cols, rows)
        if what == "STABLES":
            db = self._resolve_db(s.db, session)
            cols = [("stable_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("columns", "INT", 4), ("tags", "INT", 4)]
            rows = [[st.name, db.name, format_timestamp(st.created_ms, "ms"), len(st.columns), len(st.tags)]
                    for (d, _), st in self.catalog.stables.items() if d == db.name]
            return Result(cols, rows)
        if what == "TABLES":
            db = self._resolve_db(s.db, session)
            cols = [("table_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("columns", "INT", 4),
                    ("stable_name", "VARCHAR", 192), ("vgroup_id", "INT", 4), ("type", "VARCHAR", 21)]
            rows = []
            for vnode in self.vnodes[db.name]:
                for t in vnode.tables.values():
                    if t.dropped:
                        continue
                    ncols = len(self._columns_of(db, t)) if t.stable is None or (db.name, t.stable) in self.catalog.stables else 0
                    rows.append([t.name, db.name, format_timestamp(t.created_ts, db.precision), ncols, t.stable,
                                 vnode.index, "CHILD_TABLE" if t.stable else "NORMAL_TABLE"])
            return Result(cols, sorted(rows))
        if what == "TOPICS":
            cols = [("topic_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("sql", "VARCHAR", 1024),
                    ("meta", "VARCHAR", 7), ("type", "VARCHAR", 8), ("topic_id", "VARCHAR", 36)]
            rows = [[t.name, t.db, format_timestamp(t.created_ms, "ms"), t.sql, "with" if t.with_meta else "no",
                     {"database": "db", "stable": "stable", "select": "column", "kafka": "kafka"}[t.kind], t.topic_id]
                    for t in self.catalog.topics.values()]
            return Result(cols, rows)
        if what == "CONSUMERS":
            cols = [("consumer_id", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192), ("client_id", "VARCHAR", 192),
                    ("host", "VARCHAR", 64), ("status", "VARCHAR", 20), ("topics", "VARCHAR", 1024),
                    ("assignment", "VARCHAR", 1024), ("last_heartbeat", "TIMESTAMP", 8)]
            rows = [[c.member_id, c.group, c.client_id, c.host, c.state, ",".join(sorted(c.assignment)),
                     ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(c.assignment.items())),
                     format_timestamp(c.last_heartbeat_ms, "ms")] for c in self.consumers_view()]
            return Result(cols, rows)
        if what == "SUBSCRIPTIONS":
            return self._subscriptions()
        if what == "QUARANTINE":
            return self._show_quarantine()
        raise Unsupported(f"SHOW {what} is not supported")

    def _subscriptions(self) -> Result:
        """One row per (topic, group, partition) assigned to a member or with a committed offset: the committed
        offset, the WAL version of the record it points at (the next to read) and the lag behind the high watermark."""
        owners: dict[tuple[str, str, int], str] = {}
        for c in self.consumers_view():
            for topic, partitions in c.assignment.items():
                for p in partitions:
                    owners[(topic, c.group, p)] = c.member_id
        committed = {(t, g, p): c.offset for g, t, p, c in self.all_committed()}
        rows = []
        for key in sorted(set(owners) | set(committed)):
            topic, group, partition = key
            if not self.has_partition(topic, partition):
                continue
            start, end = self.watermarks(topic, partition)
            offset = committed.get(key)
            version = self._version_at(topic, partition, offset) if offset is not None else None
            lag = end - max(offset, start) if offset is not None else None
            rows.append([topic, group, partition, owners.get(key), offset, version, lag])
        cols = [("topic_name", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192), ("vgroup_id", "INT", 4),
                ("consumer_id", "VARCHAR", 192), ("offset", "BIGINT", 8), ("version", "BIGINT", 8), ("lag", "BIGINT", 8)]
        return Result(cols, rows)

    def _version_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The WAL version of the record at ``offset`` (None at or past the end, before the log start, or lost)."""
        loc = self.indexes[(topic, partition)].locate(offset)
        if loc is None:
            return None
        if self.is_native(topic):  # a stored batch spans one version per record
            return loc[0] + loc[1]
        try:
            records = self.topic_records(topic, partition, loc[0])
        except CorruptEntry:
            return None
        versions = [v for r in records for v in r.versions.to_pylist()]
        return versions[loc[1]]

    def _x_Describe(self, s: ast.Describe, session: str | None) -> Result:
        db = self._resolve_db(s.name.db, session)
        st = self.catalog.stables.get((db.name, s.name.name))
        if st is not None:
            fields = [(c, "") for c in st.columns] + [(t, "TAG") for t in st.tags]
        else:
            t = self.table(db, s.name.name)
            if t.stable is None:
                fields = [(c, "") for c in self._columns_of(db, t)]
            else:
                parent = self.catalog.stable(db.name, t.stable)
                fields = [(c, "") for c in parent.columns] + [(tag, "TAG") for tag in parent.tags]
        cols = [("field", "VARCHAR", 64), ("type", "VARCHAR", 32), ("length", "INT", 4), ("note", "VARCHAR", 8)]
        return Result(cols, [[c.name, c.type.name, c.type.size, note] for c, note in fields])

    def _x_Select(self, s: ast.Select, session: str | None) -> Result:
        db = self._resolve_db(s.source.db, session)
        ev = self._compile(db, "select", s.source.name, False, s.items, s.where)
        schema = ev.output_schema()
        rows: list[list[Any]] = []
        for recs in self._scan(db, ev):
            assert recs.values is not None
            rows += _json_rows(recs.values)
            if s.limit is not None and len(rows) >= s.limit:
                del rows[s.limit :]
                break
        return Result([_column_meta(f, ev.known.get(f.name)) for f in schema], rows)

    def _scan(self, db: DatabaseDef, ev: TopicEvaluator) -> Iterator[Records]:
        for vnode in self.vnodes[db.name]:
            tag_tables = self._tag_tables(vnode)
            for entry in vnode.wal.read_from(vnode.wal.first_version):
                if entry.kind == KIND_DATA:
                    yield from ev.evaluate(decode_entry(entry), tag_tables)

    # ------------------------------------------------------------ maintenance

    def sync_due(self, now: float) -> tuple[float, list[PendingSync]]:
        """Apply retention when due; (seconds until the next call is useful, the periodic fsyncs due now, for the
        caller to run off the storage thread and then mark done)."""
        delay, pending = _RETENTION_CHECK_S, []
        for vnodes in self.vnodes.values():
            for vnode in vnodes:
                wait, sync = vnode.wal.sync_due(now)
                delay = min(delay, wait)
                if sync is not None:
                    pending.append(sync)
        if now >= self._next_retention:
            self._next_retention = now + _RETENTION_CHECK_S
            self.apply_retention(time.time())
        return delay, pending

    def apply_retention(self, now_wall: float) -> None:
        for db, vnodes in self.vnodes.items():
            for vnode in vnodes:
                if vnode.apply_retention(now_wall):
                    for (topic, part), idx in self.indexes.items():
                        if part == vnode.index and self.catalog.topics[topic].db == db:
                            idx.trim_before(vnode.wal.first_version)

    def close(self) -> None:
        """fsync and close every vnode and index."""
        for idx in self.indexes.values():
            idx.close()
        for vnodes in self.vnodes.values():
            for vnode in vnodes:
                vnode.close()

    def damage(self) -> list[Damage]:
        """Every damage found in the data dir since it was opened (see :mod:`walgate.storage.damage`)."""
        return list(self.damage_log.records)

    def _show_quarantine(self) -> Result:
        cols = [("file", "VARCHAR", 256), ("start", "BIGINT", 8), ("end", "BIGINT", 8), ("reason", "VARCHAR", 1024),
                ("action", "VARCHAR", 32), ("kept", "VARCHAR", 256), ("first_version", "BIGINT", 8),
                ("end_version", "BIGINT", 8)]
        rows = [[d.file, d.start, d.end, d.reason, d.action, d.kept, d.first_version, d.end_version]
                for d in self.damage_log.records]
        return Result(cols, rows)


# --------------------------------------------------------------------- helpers


def _no_batch_decoder(batch: bytes) -> list[int]:
    raise InvalidValue("timestamp lookups in Kafka-native topics need the gateway's batch decoder")


def _check_columns(columns: tuple[Column, ...], tags: tuple[Column, ...]) -> None:
    if not columns or columns[0].type.name != "TIMESTAMP":
        raise InvalidValue("The first column must be of type TIMESTAMP")
    names = [c.name for c in columns + tags]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise InvalidValue(f"Duplicated column names: {sorted(dup)[0]}")
    if "tbname" in names:
        raise InvalidValue("tbname is a reserved column name")
    if any(c.type.name == "JSON" for c in columns):
        raise InvalidValue("JSON is only allowed as a tag type")
    if any(t.type.name == "JSON" for t in tags) and len(tags) != 1:
        raise InvalidValue("A JSON tag must be the only tag")


def _block(
    db: DatabaseDef, key: tuple[str, bool], columns: tuple[Column, ...], names: list[str], rows: list[dict[str, Any]]
) -> Block:
    """Rows (dicts; a missing column is NULL) as one Arrow block: ``tbname`` then the columns."""
    struct = pa.array(rows, type=pa.struct([(c.name, c.type.arrow(db.precision)) for c in columns]))
    arrays = [pa.array(names, pa.string()), *struct.flatten()]
    return Block(key[0], key[1], pa.RecordBatch.from_arrays(arrays, names=["tbname", *(c.name for c in columns)]))


def _widest(old: ColumnType | None, new: ColumnType, name: str, measurement: str) -> ColumnType:
    if old is None or old == new:
        return new
    if old.name == new.name and old.is_string:
        return old if (old.length or 0) >= (new.length or 0) else new
    raise InvalidValue(f"Measurement {measurement}: field {name} is {new} in one line and {old} in another")


def _merge_schema(
    db: DatabaseDef, old: StableDef | None, name: str, cols: dict[str, ColumnType], tags: dict[str, ColumnType]
) -> StableDef:
    """The supertable a schemaless write needs: ``old`` widened / extended, or a new one (ts column ``_ts``).

    InvalidValue when a field or tag changes type, a new name breaks the naming rules (:mod:`walgate.storage.names`:
    checked here, before the write commits anything), or a name would be ``tbname`` or used twice (a tag named like
    a column, a field named like the timestamp column)."""
    if old is None:
        names.validate_table_name(name)
        columns, tag_cols = [Column("_ts", ColumnType("TIMESTAMP"))], []
        old = StableDef(db.name, name, (), (), int(time.time() * 1000))
        if not tags:
            tags = {"_tag_none": ColumnType("NCHAR", 8)}
        tags = {k: ColumnType("NCHAR", max(t.length or 1, 8)) for k, t in tags.items()}
    else:
        columns, tag_cols = list(old.columns), list(old.tags)
    for group, wanted in ((columns, cols), (tag_cols, tags)):
        for k, t in wanted.items():
            i = next((i for i, c in enumerate(group) if c.name == k), None)
            if i is None:
                names.validate_column_name(k)
                group.append(Column(k, t))
                continue
            have = group[i].type
            if have == t or (have.name == t.name and have.is_string and (have.length or 0) >= (t.length or 0)):
                continue
            if have.is_string and t.is_string and have.name == t.name:
                group[i] = Column(k, t)
                continue
            if group is tag_cols and have.is_string:  # tag values are strings; widen
                group[i] = Column(k, ColumnType(have.name, max(have.length or 0, t.length or 0)))
                continue
            raise InvalidValue(f"Measurement {name}: {'tag' if group is tag_cols else 'field'} {k} is {t} but the {'tag' if group is tag_cols else 'column'} is {have}")
    try:  # a key named tbname, like the timestamp column, or a tag named like a column (or the reverse)
        _check_columns(tuple(columns), tuple(tag_cols))
    except InvalidValue as e:
        raise InvalidValue(f"Measurement {name}: {e.message}") from None
    return StableDef(db.name, name, tuple(columns), tuple(tag_cols), old.created_ms)


def _coerce_csv(text: str | None, ctype: ColumnType, precision: str, now: int, line: int, column: str) -> Any:
    try:
        return coerce_text(text, ctype, precision, now)
    except InvalidValue as e:
        raise InvalidValue(f"CSV line {line}, column {column}: {e.message}") from None


def _csv_values(
    header: list[str], row: list[str | None], by_name: dict[str, Column], precision: str, now: int, line: int, ts_name: str
) -> dict[str, Any]:
    values = {h: _coerce_csv(v, by_name[h].type, precision, now, line, h) for h, v in zip(header, row)}
    if values.get(ts_name) is None:
        raise InvalidValue(f"CSV line {line}: the timestamp column {ts_name} is required")
    return values


def _qualify(s: ast.CreateTopic, db: str) -> str:
    """``s.sql`` with its source written ``db.source``, so that the stored SQL does not depend on USE.

    Every ``FROM`` / ``STABLE`` followed by the source's name is a candidate, qualified plainly or back-quoted; the
    first candidate text that parses back to ``s`` with the qualified source is kept, so a string, a back-quoted
    column or an alias that looks alike is never rewritten, and what is stored is what every start re-parses."""
    name = s.source.name
    expected = (s.name, s.kind, ast.Name(name, db), s.with_meta, s.select, s.where)
    for m in re.finditer(rf"(?i)\b(?:from|stable)\s+(`{re.escape(name)}`|{re.escape(name)}\b)", s.sql):
        for qualified in (f"{db}.{name}", f"`{db}`.`{name}`"):
            text = s.sql[: m.start(1)] + qualified + s.sql[m.end(1) :]
            try:
                again = parse(text)
            except StorageError:
                continue
            if isinstance(again, ast.CreateTopic) and (
                again.name, again.kind, again.source, again.with_meta, again.select, again.where
            ) == expected:
                return text
    raise InvalidValue(f"Topic {s.name}: write its source with its database, as {db}.{name}")


_SIZES = {"BOOL": 1, "TINYINT": 1, "SMALLINT": 2, "INT": 4, "FLOAT": 4}


def _column_meta(f: pa.Field, known: Column | None) -> tuple[str, str, int]:
    """TDengine column_meta ``[name, type, length]`` of a result column."""
    if known is not None and _type_name(known.type.arrow()) == _type_name(f.type):
        return f.name, known.type.name, known.type.size
    name = _type_name(f.type)
    return f.name, name, _SIZES.get(name.split()[0], 8)


def _json_rows(table: pa.Table) -> list[list[Any]]:
    """Rows as JSON-ready lists: timestamps as RFC 3339 UTC strings, FLOATs at their shortest decimal form."""
    cols = []
    for col, f in zip(table.columns, table.schema):
        if pa.types.is_timestamp(f.type):
            cols.append([None if v is None else format_timestamp(v, f.type.unit) for v in pc.cast(col, pa.int64()).to_pylist()])
        elif pa.types.is_float32(f.type):
            cols.append(pc.cast(pc.cast(col, pa.string()), pa.float64()).to_pylist())
        else:
            cols.append(col.to_pylist())
    return [list(r) for r in zip(*cols)] if cols else []


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return {
        pa.bool_(): "BOOL", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED", pa.uint32(): "INT UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
    }.get(t, "VARCHAR")
