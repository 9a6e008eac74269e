"""Planning a write: an INSERT, a line-protocol body or a CSV body resolved, typed and split per vnode against a
:class:`WriteSnapshot`, before it takes any lane.

The planner is pure: it reads the catalog only through the snapshot (every database and supertable, and the catalog
``generation`` they were read at) and tables only through a :class:`TableLookup`; it writes nothing. What it gives,
a :class:`PreparedWrite`, is picklable, so a plan can be made in another process (:mod:`walgate.gateway.ingest_workers`)
and applied on the storage thread (:meth:`~walgate.storage.ingest.Ingest.apply`), which first checks that every
database, supertable and table the plan read is still what it read (``databases``, ``stables``, ``assumed``).

Two lookups: :class:`LiveTables` reads the vnodes (on the storage thread: a table it does not find is absent), and
:class:`~walgate.storage.stored_tables.StoredTables` reads the vnodes' stores (in a worker: a table it does not
find is absent as of the version the store covers, :meth:`TableLookup.versions`, which apply compares with the
vnode's). A table it cannot answer for (on a vnode whose store it cannot read, and not among the tables the node
looked up for it) is planned as a *candidate* creation, which apply keeps when the table is still absent and drops
when it exists as a subtable of the same supertable; a table a write needs to exist (an INSERT without ``USING``, a
CSV ``table=``) that it cannot answer for makes the planner raise :class:`NeedTables`, and the node asks again with
those tables.

Each plan goes through the column path first and the row-by-row reference path when that refuses, so the errors
are those of the reference path, naming the first bad line, row or record (see :mod:`walgate.storage.ingest`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import csvfile, lineproto, lineproto_columns, names
from walgate.storage.catalog import DatabaseDef, StableDef
from walgate.storage.commit import Pending, Plan
from walgate.storage.ddl import check_columns, subtable_meta
from walgate.storage.errors import InvalidValue, NotFound, NotHere, StorageError, table_not_found
from walgate.storage.meta_store import create_body
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.store import TICKS, Store
from walgate.storage.values import coerce, coerce_text, coerce_texts, coerce_values
from walgate.storage.vnode import TableDef, vnode_of

__all__ = [
    "CsvRequest", "InsertRequest", "LinesRequest", "LiveTables", "NeedTables", "PreparedWrite",
    "Reads", "RowPlan", "SchemaChangeNeeded", "TableLookup", "WriteRequest", "WriteSnapshot", "merge_schema", "plan", "plan_csv", "plan_insert",
    "not_a_supertable", "plan_lines", "typed_batch",
]


class NeedTables(Exception):
    """The planner needs these tables (``(database, name)``) looked up before it can plan: its lookup
    does not know them. Not a StorageError: no fallback path takes it."""

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__(f"{len(keys)} tables to look up")
        self.keys = keys


class TableLookup(Protocol):
    """How the planner finds tables (see the module docstring)."""

    def find(self, db: str, vnode: int, name: str) -> TableDef | None:
        """The live table ``name`` of vnode ``vnode`` of ``db``; None when absent (or, for a partial lookup, not
        known: a candidate creation)."""

    def require(self, keys: Iterable[tuple[str, str]]) -> None:
        """NeedTables for those of ``keys`` :meth:`find` cannot answer for certain."""

    def prefetch(self, db: DatabaseDef, names: Iterable[str]) -> None:
        """A hint: the planner is about to :meth:`find` these tables of ``db`` (a lookup may read them at once)."""

    def versions(self) -> dict[tuple[str, int], int | None]:
        """Per vnode ``(database, index)`` whose store answered lookups: the meta version its answers hold as of
        (None: it could not answer, its tables were taken as candidates); empty for a lookup that is live or
        reads no store."""

    def maybe_stored(self) -> set[tuple[str, str]]:
        """The tables ``(database, name)`` answered as absent from a vnode in :meth:`versions` that may have a row
        in its store all the same (found dropped, or answered from what the node looked up); every other table
        answered absent there had none."""

    def check_new_tables(self, db: DatabaseDef, more: int) -> None:
        """LimitExceeded early when ``more`` new tables would take ``db`` past its limit (checked again at the
        commit); a lookup that cannot count tables checks nothing."""


class SchemaChangeNeeded(InvalidValue):
    """A schemaless write needs ``changes`` (``(old, new)`` supertables: :func:`merge_schema`'s) of a cluster
    database: they go through the cluster's stream first (the gateway stages
    :meth:`Ingest.make_schemas <walgate.storage.ingest.Ingest.make_schemas>`, then plans the write again); nothing
    was written. Where no gateway does that (a Produce into a TDengine topic), the answer."""

    def __init__(self, changes: list[tuple[StableDef | None, StableDef]]) -> None:
        old, new = changes[0]
        super().__init__(f"Supertable {new.db}.{new.name}: a Produce into a topic does not "
                         f"{'create' if old is None else 'change'} a supertable of a cluster database (a line-protocol"
                         " write over HTTP does): make it with CREATE STABLE or ALTER STABLE first; nothing was written"
                         " (docs/cluster.md)")
        self.changes = changes

    def __reduce__(self) -> tuple[type[SchemaChangeNeeded], tuple[list[tuple[StableDef | None, StableDef]]]]:
        return SchemaChangeNeeded, (self.changes,)  # raised in an ingest worker, pickled to the node


class LiveTables:
    """The tables of a store's vnodes, as they are now (storage thread)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, db: str, vnode: int, name: str) -> TableDef | None:
        return self.store.local_vnode(db, vnode).live(name)

    def require(self, keys: Iterable[tuple[str, str]]) -> None:
        pass  # every answer is certain

    def prefetch(self, db: DatabaseDef, names: Iterable[str]) -> None:
        pass  # the vnodes answer from memory first

    def versions(self) -> dict[tuple[str, int], int | None]:
        return {}

    def maybe_stored(self) -> set[tuple[str, str]]:
        return set()

    def check_new_tables(self, db: DatabaseDef, more: int) -> None:
        self.store.check_new_tables(db, more)


@dataclass(frozen=True)
class WriteSnapshot:
    """The catalog a plan is made against (its ``generation``, every database and supertable, whether it is a cluster
    node's: ``cluster``) and its tables."""

    generation: int
    databases: Mapping[str, DatabaseDef]
    stables: Mapping[tuple[str, str], StableDef]
    tables: TableLookup
    cluster: bool = False


@dataclass
class PreparedWrite:
    """A planned write (picklable): the pending entries per database (commit order) and vnode, the schema changes
    to commit first, the rows it writes, and what it read: the catalog generation, the databases and supertables
    (None: absent), the tables found (None: taken as absent, for a creation or a name that must be free) and, per
    vnode whose stored tables answered, the meta version they hold as of (:meth:`TableLookup.versions`), with the
    tables taken as absent there that may have a row all the same (:meth:`TableLookup.maybe_stored`)."""

    generation: int
    plans: dict[str, Plan]
    changes: list[tuple[StableDef | None, StableDef]]
    rows: int
    databases: dict[str, DatabaseDef]
    stables: dict[tuple[str, str], StableDef | None]
    assumed: dict[tuple[str, str], TableDef | None]
    covered: dict[tuple[str, int], int | None] = field(default_factory=dict)
    maybe_stored: set[tuple[str, str]] = field(default_factory=set)


class Reads:
    """What one planning reads from its snapshot, recorded for :class:`PreparedWrite`."""

    def __init__(self, snapshot: WriteSnapshot) -> None:
        self.snapshot = snapshot
        self.databases: dict[str, DatabaseDef] = {}
        self.stables: dict[tuple[str, str], StableDef | None] = {}
        self.assumed: dict[tuple[str, str], TableDef | None] = {}

    def database(self, name: str) -> DatabaseDef:
        db = self.snapshot.databases.get(name)
        if db is None:
            raise NotFound(f"Database not exist: {name}")
        self.databases[name] = db
        return db

    def resolve_db(self, name: str | None, session: str | None) -> DatabaseDef:
        """The database a statement names, else the session's (``USE``); InvalidValue when neither is given."""
        db = name or session
        if db is None:
            raise InvalidValue("Database not specified: use db.name or USE db")
        return self.database(db)

    def stable_or_none(self, db: str, name: str) -> StableDef | None:
        st = self.stables[(db, name)] = self.snapshot.stables.get((db, name))
        return st

    def stable(self, db: str, name: str) -> StableDef:
        st = self.stable_or_none(db, name)
        if st is None:
            raise NotFound(f"STable not exist: {db}.{name}")
        return st

    def find(self, db: DatabaseDef, vnode: int, name: str) -> TableDef | None:
        t = self.snapshot.tables.find(db.name, vnode, name)
        self.assumed.setdefault((db.name, name), t)
        return t

    def table(self, db: DatabaseDef, name: str) -> TableDef:
        t = self.find(db, vnode_of(db.name, name, db.vgroups), name)
        if t is None:
            raise table_not_found(db.name, name)
        return t

    def columns_of(self, db: DatabaseDef, t: TableDef) -> tuple[Column, ...]:
        if t.stable is None:
            assert t.columns is not None
            return t.columns
        return self.stable(db.name, t.stable).columns

    def prepared(self, plans: dict[str, Plan], rows: int,
                 changes: list[tuple[StableDef | None, StableDef]] | None = None) -> PreparedWrite:
        return PreparedWrite(self.snapshot.generation, plans, changes or [], rows, self.databases, self.stables,
                             self.assumed, self.snapshot.tables.versions(), self.snapshot.tables.maybe_stored())


class RowPlan:
    """The rows one request writes to one database, and the subtables it creates, per vnode (see the module
    docstring). A table is found among those this request creates, else through the snapshot's lookup."""

    def __init__(self, reads: Reads, db: DatabaseDef, now: int) -> None:
        self.reads = reads
        self.db = db
        self.now_ts = now // TICKS[db.precision]  # the creation time of the tables it creates
        self.vnodes: Plan = {}
        self.created = 0  # tables this plan creates

    def vnode(self, name: str) -> int:
        return vnode_of(self.db.name, name, self.db.vgroups)

    def pending(self, name: str, vnode: int | None = None) -> Pending:
        """The pending entries of the vnode of table ``name`` (``vnode``, when the caller knows it)."""
        return self.vnodes.setdefault(self.vnode(name) if vnode is None else vnode, Pending())

    def find(self, name: str, vnode: int | None = None) -> TableDef | None:
        vnode = self.vnode(name) if vnode is None else vnode
        pending = self.vnodes.get(vnode)
        created = pending.new_tables.get(name) if pending is not None else None
        return created or self.reads.find(self.db, vnode, name)

    def create(self, st: StableDef, name: str, tags: dict[str, Any], vnode: int | None = None) -> TableDef:
        """Plan the creation of subtable ``name`` of ``st`` (name and tags validated by the caller); LimitExceeded
        early (checked again at the commit) when the database may hold no more tables."""
        self.created += 1
        if self.created == 1 or self.created % 1024 == 0:
            self.reads.snapshot.tables.check_new_tables(self.db, self.created)
        pending = self.pending(name, vnode)
        meta = {"op": "create_table", "name": name, "stable": st.name, "tags": tags, "ts": self.now_ts}
        pending.metas.append(meta)
        body = create_body(meta)  # the meta store's row, encoded here rather than on the vnode's lane
        if body is not None:
            pending.bodies[name] = body
        t = pending.new_tables[name] = TableDef(name, st.name, tags, None, -1, 0)
        return t

    def subtable(self, st: StableDef, name: str, where: str, tag_value: Callable[[Column], Any]) -> Pending:
        """The pending entries of subtable ``name`` of ``st``, planning its creation (tags from ``tag_value``) if it
        is new; InvalidValue prefixed with ``where`` for a bad name or a table of another supertable."""
        vnode = self.vnode(name)
        t = self.find(name, vnode)
        if t is None:
            try:
                names.validate_table_name(name)
            except InvalidValue as e:
                raise InvalidValue(f"{where}: {e.message}") from None
            self.create(st, name, {tag.name: tag_value(tag) for tag in st.tags}, vnode)
        elif t.stable != st.name:
            raise InvalidValue(f"{where}: table {name} is not a subtable of {st.name}")
        return self.pending(name, vnode)

    def subtable_rows(
        self, st: StableDef, name: str, rows: list[dict[str, Any]], where: str, tag_value: Callable[[Column], Any]
    ) -> None:
        """Plan ``rows`` of subtable ``name`` of ``st`` (see :meth:`subtable`)."""
        self.subtable(st, name, where, tag_value).add_rows(st.name, True, st.columns, name, rows)


# ------------------------------------------------------------------ requests


@dataclass(frozen=True)
class InsertRequest:
    """An INSERT (its SQL text, for a worker to parse, or parsed), its session database and its "now"."""

    stmt: ast.Insert | str
    session: str | None
    now_ns: int


@dataclass(frozen=True)
class LinesRequest:
    """A line-protocol body (bytes, or parsed) into database ``db``, and its "now"."""

    db: str
    body: bytes | list[lineproto_columns.Measurement]
    precision: str
    now_ns: int


@dataclass(frozen=True)
class CsvRequest:
    """A CSV body into ``table`` or subtables of ``stable`` of database ``db``, and its "now"."""

    db: str
    body: bytes
    table: str | None
    stable: str | None
    now_ns: int


WriteRequest = InsertRequest | LinesRequest | CsvRequest


def plan(snapshot: WriteSnapshot, request: WriteRequest) -> PreparedWrite:
    """``request`` planned against ``snapshot`` (parsed first when it is text or bytes). An INSERT whose text turns
    out to be another statement is a caller's error (the gateway's worker checks it before)."""
    if isinstance(request, InsertRequest):
        stmt = request.stmt
        if isinstance(stmt, str):
            parsed = _parse(stmt)
            if not isinstance(parsed, ast.Insert):
                raise InvalidValue(f"{type(parsed).__name__} is not an INSERT")
            stmt = parsed
        return plan_insert(snapshot, stmt, request.session, request.now_ns)
    if isinstance(request, LinesRequest):
        body = request.body
        if isinstance(body, bytes):
            try:
                body = lineproto_columns.parse_body(body, request.precision)
            except StorageError:  # an unknown database is the answer before a bad line
                Reads(snapshot).database(request.db)
                raise
        return plan_lines(snapshot, request.db, body, request.now_ns)
    return plan_csv(snapshot, request.db, request.body, request.table, request.stable, request.now_ns)


def _parse(sql: str) -> ast.Statement:
    from walgate.storage.sql.parser import parse  # the parser is large: imported where statements are parsed

    return parse(sql)


def plan_insert(snapshot: WriteSnapshot, s: ast.Insert, session: str | None, now: int) -> PreparedWrite:
    """SQL INSERT, possibly into several tables of several databases (``INSERT ... USING`` creates subtables).

    Each VALUES list is typed by columns (:func:`~walgate.storage.values.coerce_values`); a statement that path
    does not take, or refuses, goes row by row, which names the first bad row and gives the same rows."""
    wanted = []
    named: dict[str, tuple[DatabaseDef, list[str]]] = {}  # per database: the tables the statement names
    for target in s.targets:
        try:
            db = Reads(snapshot).resolve_db(target.table.db, session)
        except StorageError:
            continue  # refused in statement order below
        named.setdefault(db.name, (db, []))[1].append(target.table.name)
        if target.using is None:
            wanted.append((db.name, target.table.name))
    snapshot.tables.require(wanted)
    for db, tables in named.values():
        snapshot.tables.prefetch(db, tables)
    reads = Reads(snapshot)
    try:
        done = _insert(reads, s, session, now, by_columns=True)
    except StorageError:
        done = None
    if done is None:
        reads = Reads(snapshot)
        done = _insert(reads, s, session, now, by_columns=False)
        assert done is not None  # by rows, every VALUES list is taken or refused
    plans, rows = done
    return reads.prepared({db: p.vnodes for db, p in plans.items()}, rows)


def _insert(
    reads: Reads, s: ast.Insert, session: str | None, now: int, by_columns: bool
) -> tuple[dict[str, RowPlan], int] | None:
    """The plans of an INSERT and its row count; ``by_columns``: None where a VALUES list needs the rows."""
    plans: dict[str, RowPlan] = {}
    rows = 0
    lists: list[_ValuesList] = []
    for target in s.targets:
        db = reads.resolve_db(target.table.db, session)
        plan = plans.setdefault(db.name, RowPlan(reads, db, now))
        name = target.table.name
        vnode = plan.vnode(name)
        t = plan.find(name, vnode)
        if t is None:
            if target.using is None:
                raise table_not_found(db.name, name)
            st = reads.stable(reads.resolve_db(target.using.stable.db, db.name).name, target.using.stable.name)
            meta = subtable_meta(db, st, name, target.using.tag_names, target.using.tag_values, now)
            t = plan.create(st, name, meta["tags"], vnode)
        columns = reads.columns_of(db, t)
        given = target.columns or tuple(c.name for c in columns)
        by_name = {c.name: c for c in columns}
        for n in given:
            if n not in by_name:
                raise InvalidValue(f"Invalid column name: {n} (table {db.name}.{name})")
        if columns[0].name not in given:
            raise InvalidValue(f"Table {db.name}.{name}: the timestamp column {columns[0].name} is required")
        pending = plan.pending(name, vnode)
        if by_columns:
            if {len(row) for row in target.rows} != {len(given)}:
                return None
            lists.append(_ValuesList(len(lists), db, plan, name, vnode, (t.stable or name, t.stable is not None),
                                     columns, given, target.rows))
            rows += len(target.rows)
            continue
        for row in target.rows:
            if len(row) != len(given):
                raise InvalidValue(
                    f"Table {db.name}.{name}: {len(row)} values for {len(given)} columns in row {row!r}"
                )
            values = {n: coerce(v, by_name[n].type, db.precision, now) for n, v in zip(given, row)}
            if values[columns[0].name] is None:
                raise InvalidValue(f"Table {db.name}.{name}: the timestamp column cannot be NULL")
            pending.add_rows(t.stable or name, t.stable is not None, columns, name, [values])
            rows += 1
    if by_columns and not _plan_values_lists(lists, now):
        return None
    return plans, rows


def plan_lines(
    snapshot: WriteSnapshot, db: str, measurements: list[lineproto_columns.Measurement], now_ns: int
) -> PreparedWrite:
    """Line protocol parsed by :func:`~walgate.storage.lineproto_columns.parse_body`: the supertables it needs
    created or widened (:func:`merge_schema`; committed first), the subtables it creates (series by first line) and
    one batch per vnode and measurement. ``now_ns``: a line without a timestamp, and a new supertable's creation
    time."""
    reads = Reads(snapshot)
    dbdef = reads.database(db)
    # 1. the schema every measurement needs (validated, not yet committed)
    changes: list[tuple[StableDef | None, StableDef]] = []
    for m in measurements:
        old = reads.stable_or_none(db, m.name)
        if old is None and _normal_table(reads, dbdef, m.name):
            raise not_a_supertable(db, m.name)
        new = merge_schema(dbdef, old, m.name, m.fields, m.tags, now_ns // 1_000_000)
        if new != old:
            changes.append((old, new))
    if changes and snapshot.cluster and dbdef.nodes is not None:  # a cluster database's (Catalog.is_cluster_db):
        # through the cluster's stream, for the whole write, before any table is looked up
        raise SchemaChangeNeeded(changes)
    # 2. auto-created subtables (series by first line, as the lines come) and one batch per vnode and measurement
    stables = {st.name: st for _, st in changes}
    plan = RowPlan(reads, dbdef, now_ns)
    targets = [stables.get(m.name) or reads.stable(db, m.name) for m in measurements]
    tables = [[lineproto.child_table_name(m.name, tags) for tags, _ in m.series] for m in measurements]
    vnodes = [[vnode_of(db, name, dbdef.vgroups) for name in names] for names in tables]
    snapshot.tables.prefetch(dbdef, (name for names in tables for name in names))
    series = sorted((line, k, n) for k, m in enumerate(measurements) for n, (_, line) in enumerate(m.series))
    first_of: dict[tuple[int, int], int] = {}  # (vnode, measurement) -> its first line
    for line, k, n in series:
        pairs = dict(measurements[k].series[n][0])
        plan.subtable(targets[k], tables[k][n], f"Measurement {measurements[k].name}", lambda tag: pairs.get(tag.name))
        first_of.setdefault((vnodes[k][n], k), line)
    batches = [_lines_batches(dbdef, st, m, names, where, now_ns)
               for st, m, names, where in zip(targets, measurements, tables, vnodes)]
    for vnode, k in sorted(first_of, key=first_of.__getitem__):
        plan.vnodes.setdefault(vnode, Pending()).add_batch(targets[k].name, True, batches[k][vnode])
    return reads.prepared({db: plan.vnodes}, sum(m.rows.num_rows for m in measurements), changes)


def plan_csv(
    snapshot: WriteSnapshot, db: str, body: bytes, table: str | None, stable: str | None, now: int
) -> PreparedWrite:
    """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column.

    Typed by whole columns (:func:`~walgate.storage.csvfile.read_columns`,
    :func:`~walgate.storage.values.coerce_texts`); a body that path does not take, or refuses, goes row by row
    (:func:`_csv_by_rows`), which names the first bad line and gives the same rows."""
    dbdef = Reads(snapshot).database(db)
    if (table is None) == (stable is None):
        raise InvalidValue("CSV import needs exactly one of table= or stable=")
    if table is not None:
        snapshot.tables.require([(db, table)])
    reads = Reads(snapshot)
    reads.database(db)
    try:
        done = _csv_by_columns(reads, dbdef, body, table, stable, now)
    except StorageError:
        done = None
    if done is None:
        reads = Reads(snapshot)
        reads.database(db)
        done = _csv_by_rows(reads, dbdef, body, table, stable, now)
    plan, rows = done
    return reads.prepared({db: plan.vnodes}, rows)


def _csv_by_columns(
    reads: Reads, dbdef: DatabaseDef, body: bytes, table: str | None, stable: str | None, now: int
) -> tuple[RowPlan, int] | None:
    """The plan of a CSV body typed by columns, or None (or a StorageError) where rows must decide."""
    read = csvfile.read_columns(body)
    if read is None:
        return None
    header, table_texts = read
    texts = [c.combine_chunks() for c in table_texts.columns]
    n = table_texts.num_rows
    plan = RowPlan(reads, dbdef, now)
    if table is not None:
        t = reads.table(dbdef, table)
        columns = reads.columns_of(dbdef, t)
    else:
        st = reads.stable(dbdef.name, stable or "")
        columns = st.columns
        if "tbname" not in header or any(h not in {c.name for c in (*st.columns, *st.tags)} for h in header
                                         if h != "tbname"):
            return None
    by_name = {c.name: c for c in columns}
    given = [h for h in header if h in by_name]
    if table is not None and len(given) < len(header):
        return None
    if n == 0:
        return plan, 0
    typed = {h: coerce_texts(texts[header.index(h)], by_name[h].type, dbdef.precision, now) for h in given}
    ts = typed.get(columns[0].name)
    if ts is None or ts.null_count:
        return None
    if table is not None:
        batch = typed_batch(columns, pa.array([table] * n, pa.string()), typed, dbdef.precision)
        plan.pending(table).add_batch(t.stable or table, t.stable is not None, batch)
        return plan, n
    names = texts[header.index("tbname")]
    if names.null_count or not pc.all(pc.greater(pc.binary_length(names), 0)).as_py():
        return None
    distinct = names.dictionary_encode()
    firsts = pa.table({"n": distinct.indices, "i": pc.indices_nonzero(pc.is_valid(names))}).group_by(
        "n", use_threads=False).aggregate([("i", "min")])
    first_row = dict(zip(firsts["n"].to_pylist(), firsts["i_min"].to_pylist()))
    tag_texts = {h: texts[header.index(h)] for h in header if h != "tbname" and h not in by_name}
    reads.snapshot.tables.prefetch(dbdef, distinct.dictionary.to_pylist())
    vnodes = []
    for k, name in enumerate(distinct.dictionary.to_pylist()):
        row = first_row[k]
        plan.subtable(st, name, "CSV", lambda tag: coerce_text(
            tag_texts[tag.name][row].as_py() if tag.name in tag_texts else None, tag.type, dbdef.precision, now))
        vnodes.append(plan.vnode(name))
    batch = typed_batch(columns, names, typed, dbdef.precision)
    if len(set(vnodes)) == 1:
        plan.pending(names[0].as_py(), vnodes[0]).add_batch(st.name, True, batch)
        return plan, n
    vnode_of_row = pa.array(vnodes, pa.int32()).take(distinct.indices)
    for vnode in dict.fromkeys(vnodes):
        plan.vnodes.setdefault(vnode, Pending()).add_batch(st.name, True, batch.filter(pc.equal(vnode_of_row, vnode)))
    return plan, n


def _csv_by_rows(
    reads: Reads, dbdef: DatabaseDef, body: bytes, table: str | None, stable: str | None, now: int
) -> tuple[RowPlan, int]:
    """The plan of a CSV body, row by row (the reference of :func:`_csv_by_columns`); errors name the line."""
    db = dbdef.name
    header, rows, linenos = csvfile.parse_csv(body)
    plan = RowPlan(reads, dbdef, now)
    if table is not None:
        t = reads.table(dbdef, table)
        columns = reads.columns_of(dbdef, t)
        by_name = {c.name: c for c in columns}
        for h in header:
            if h not in by_name:
                raise InvalidValue(f"CSV header: {h} is not a column of {db}.{table}")
        pending = plan.pending(table)
        for line, row in zip(linenos, rows):
            values = _csv_values(header, row, by_name, dbdef.precision, now, line, columns[0].name)
            pending.add_rows(t.stable or table, t.stable is not None, columns, table, [values])
    else:
        st = reads.stable(db, stable or "")
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
            values = _csv_values(col_header, [record[h] for h in col_header], by_name, dbdef.precision, now, line,
                                 st.columns[0].name)
            plan.subtable_rows(
                st, name, [values], f"CSV line {line}",
                lambda tag: _coerce_csv(record.get(tag.name), tag.type, dbdef.precision, now, line, tag.name),
            )
    return plan, len(rows)


class _ValuesList(NamedTuple):
    """One VALUES list of an INSERT, resolved: its place in the statement, database, plan, table and its vnode, the
    source its rows go to (supertable or table, is_stable), the source's columns and the columns the list gives."""

    order: int
    db: DatabaseDef
    plan: RowPlan
    table: str
    vnode: int
    source: tuple[str, bool]
    columns: tuple[Column, ...]
    given: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def _plan_values_lists(lists: list[_ValuesList], now: int) -> bool:
    """Plan the rows of an INSERT's VALUES lists, typed by columns: the lists of a source that give the same columns
    are typed together (many small lists cost one typing), then each vnode gets one batch per source, its rows in
    statement order, planned in the order the statement reaches that vnode and source, as the rows would be; False,
    with nothing planned, where the rows must decide."""
    chunks: dict[tuple[str, tuple[str, bool], tuple[str, ...]], list[_ValuesList]] = {}
    for v in lists:
        chunks.setdefault((v.db.name, v.source, v.given), []).append(v)
    parts: dict[tuple[int, str, tuple[str, bool]], list[tuple[pa.RecordBatch, pa.Array]]] = {}
    first: dict[tuple[int, str, tuple[str, bool]], _ValuesList] = {}
    for chunk in chunks.values():
        db, by_name = chunk[0].db, {c.name: c for c in chunk[0].columns}
        rows = [row for v in chunk for row in v.rows]
        typed = {n: coerce_values(list(col), by_name[n].type, db.precision, now)
                 for n, col in zip(chunk[0].given, zip(*rows))}
        if typed[chunk[0].columns[0].name].null_count:
            return False
        batch = typed_batch(chunk[0].columns, pa.array([v.table for v in chunk for _ in v.rows], pa.string()), typed,
                             db.precision)
        order = pa.array([v.order for v in chunk for _ in v.rows], pa.int32())
        vnodes = [v.vnode for v in chunk]
        vnode_of_row = pa.array([n for v, n in zip(chunk, vnodes) for _ in v.rows], pa.int32())
        for v, vnode in zip(chunk, vnodes):
            key = (vnode, db.name, v.source)
            if key not in first or v.order < first[key].order:
                first[key] = v
        for vnode in dict.fromkeys(vnodes):
            mine = pc.equal(vnode_of_row, vnode)
            parts.setdefault((vnode, db.name, chunk[0].source), []).append(
                (batch, order) if len(set(vnodes)) == 1 else (batch.filter(mine), order.filter(mine)))
    for key in sorted(parts, key=lambda k: first[k].order):
        pieces = parts[key]
        batch = pieces[0][0]
        if len(pieces) > 1:  # lists giving other columns between them: back to statement order (a stable sort)
            joined = pa.Table.from_batches([b for b, _ in pieces])
            batch = joined.take(pc.sort_indices(pa.chunked_array([o for _, o in pieces]))).combine_chunks().to_batches()[0]
        first[key].plan.vnodes.setdefault(key[0], Pending()).add_batch(key[2][0], key[2][1], batch)
    return True


def _lines_batches(
    db: DatabaseDef, st: StableDef, m: lineproto_columns.Measurement, tables: list[str], vnodes: list[int], now_ns: int
) -> dict[int, pa.RecordBatch]:
    """The rows of ``m`` as batches of ``st``'s columns (``tbname`` first), one per vnode (``tables``, ``vnodes``:
    the subtable and vnode of each series): a missing timestamp is ``now_ns``, nanoseconds floor to the database's
    ticks, a column the body lacks is NULL."""
    rows = m.rows
    series = rows.column(0)
    ts = pc.fill_null(rows.column(1), now_ns)
    ticks = TICKS[db.precision]
    if ticks != 1:
        floor = pc.divide(ts, ticks)  # truncates toward zero: one less for a negative value not on a tick
        ts = pc.if_else(pc.greater(pc.multiply(floor, ticks), ts), pc.subtract(floor, 1), floor)
    given = {key: rows.column(2 + j) for j, key in enumerate(m.fields)}
    arrays = [pa.array(tables, pa.string()).take(series), ts.cast(st.columns[0].type.arrow(db.precision))]
    for c in st.columns[1:]:
        arrow = c.type.arrow(db.precision)
        column = given.get(c.name)
        arrays.append(pa.nulls(rows.num_rows, arrow) if column is None else column.cast(arrow))
    batch = pa.RecordBatch.from_arrays(arrays, names=["tbname", *(c.name for c in st.columns)])
    if len(set(vnodes)) == 1:
        return {vnodes[0]: batch}
    vnode_of_row = pa.array(vnodes, pa.int32()).take(series)
    return {vnode: batch.filter(pc.equal(vnode_of_row, vnode)) for vnode in dict.fromkeys(vnodes)}


def not_a_supertable(db: str, name: str) -> InvalidValue:
    """The refusal of a line-protocol measurement ``name`` of ``db`` that is a table, not a supertable."""
    return InvalidValue(f"Measurement {name}: {db}.{name} is a normal table, not a supertable")


def _normal_table(reads: Reads, db: DatabaseDef, name: str) -> bool:
    """Whether ``name`` is a normal table of ``db``, as far as this node knows: a cluster database's table whose
    vgroup is on another node is not seen here (the gateway asks that node before it makes the supertable:
    :mod:`walgate.gateway.schemaless`)."""
    try:
        return reads.find(db, vnode_of(db.name, name, db.vgroups), name) is not None
    except NotHere:
        return False


def merge_schema(
    db: DatabaseDef, old: StableDef | None, name: str, cols: dict[str, ColumnType], tags: dict[str, ColumnType],
    now_ms: int,
) -> StableDef:
    """The supertable a schemaless write needs: ``old`` widened / extended, or a new one (ts column ``_ts``, created
    at ``now_ms``).

    InvalidValue when a field or tag changes type, a new name breaks the naming rules (:mod:`walgate.storage.names`:
    checked here, before the write commits anything), or a name would be ``tbname`` or used twice (a tag named like
    a column, a field named like the timestamp column)."""
    if old is None:
        names.validate_table_name(name)
        columns, tag_cols = [Column("_ts", ColumnType("TIMESTAMP"))], []
        old = StableDef(db.name, name, (), (), now_ms)
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
            what = "tag" if group is tag_cols else "field"
            raise InvalidValue(f"Measurement {name}: {what} {k} is {t} but the {'tag' if group is tag_cols else 'column'} is {have}")
    try:  # a key named tbname, like the timestamp column, or a tag named like a column (or the reverse)
        check_columns(tuple(columns), tuple(tag_cols))
    except InvalidValue as e:
        raise InvalidValue(f"Measurement {name}: {e.message}") from None
    return StableDef(db.name, name, tuple(columns), tuple(tag_cols), old.created_ms)


def typed_batch(columns: tuple[Column, ...], names: pa.Array, typed: dict[str, pa.Array], precision: str) -> pa.RecordBatch:
    """``tbname`` then ``columns`` (typed arrays by name; a column not given is NULL) as one batch."""
    arrays = [names]
    for c in columns:
        arrays.append(typed.get(c.name, pa.nulls(len(names), c.type.arrow(precision))))
    return pa.RecordBatch.from_arrays(arrays, names=["tbname", *(c.name for c in columns)])


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
