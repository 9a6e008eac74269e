"""Ingestion: SQL INSERT, InfluxDB line protocol, CSV and JSON rows, all through one row planner: plan, then apply.

Every path resolves and coerces the whole request into a plan (:mod:`~walgate.storage.write_plan`: rows per vnode,
and the meta entries of the subtables it creates on the way: ``INSERT ... USING``, a new series of a measurement, a
CSV or JSON row naming a new subtable) before anything is written, then applies it (:meth:`Ingest.apply`: hands it to
:meth:`~walgate.storage.commit.Commits.commit`); so a refused request writes nothing. Schemaless writes (line
protocol) first widen or create the supertables they need (:func:`merge_schema`), refused before anything is written
when a topic depends on what would change; those of a cluster database are made through the cluster's stream
first (:class:`~walgate.storage.write_plan.SchemaChangeNeeded`). A plan made elsewhere (a worker process, against a
snapshot) is applied only if what it read still holds; else the request is planned again on this thread, as if it
had just come.

Lanes (:mod:`walgate.storage.lanes`): a plan made elsewhere is applied holding every vnode of each database it writes or read
(:func:`write_keys`), beside calls holding other vnodes: it reads the catalog, which nothing changes meanwhile, and
changes only those vnodes, their topics' indexes and the databases' table counts, which only calls holding all of a
database's vnodes change (so a database's ``max_tables`` check sees every creation before it). Its schema changes
(new or wider supertables: the catalog) are made first by an exclusive call (:meth:`Ingest.apply_changes`); a plan
that no longer holds (planned again: it may touch anything) is refused on vnodes
(:class:`~walgate.storage.lanes.Relane`) before anything is written, and applied with the whole storage lane. A
request planned and applied at once (:meth:`Ingest.write`: the gateway's INSERTs, line-protocol and CSV bodies
below the ingest workers' size) may run holding every vnode of the databases it writes the same way: planned against
the live tables of the vnodes it holds, refused on vnodes before anything is written when its plan changes a schema
(or, asked so, with its schema changes alone, to be made apart: ``schemas_apart``) or writes or reads another
database. Every other write runs with the whole lane.

Values are typed a whole column at a time (pyarrow kernels; :mod:`~walgate.storage.lineproto_columns`,
:func:`~walgate.storage.values.coerce_texts`, :func:`~walgate.storage.values.coerce_values`) into one Arrow batch
per vnode and supertable; a value the kernels cannot type (a date string, say) is coerced on its own within its
column. A request the column path refuses (any error) or does not take goes through the row-by-row reference path
instead, which names the first bad line, row or record; both paths plan the same rows
(tests/storage/test_ingest_columns.py, tests/storage/test_lineproto_columns.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import lineproto_columns, write_plan
from walgate.storage.catalog import DatabaseDef, StableDef
from walgate.storage.commit import Commits, Pending
from walgate.storage.ddl import Ddl
from walgate.storage.errors import InvalidValue, StorageError
from walgate.storage.lanes import Relane, VnodeKey, covers, database_keys, held
from walgate.storage.result import Result, affected
from walgate.storage.schema import Column
from walgate.storage.sql import ast
from walgate.storage.store import TICKS_PER_MS, Store
from walgate.storage.stored_tables import StoredTables
from walgate.storage.topic_views import TopicViews
from walgate.storage.values import coerce, coerce_values
from walgate.storage.vnode import TableDef, Vnode, vnode_of
from walgate.storage.write_plan import (
    CsvRequest,
    InsertRequest,
    LinesRequest,
    LiveTables,
    PreparedWrite,
    Reads,
    RowPlan,
    SchemaChangeNeeded,
    TableLookup,
    WriteRequest,
    WriteSnapshot,
    merge_schema,
    typed_batch,
)

__all__ = ["Ingest", "RowPlan", "insert_databases", "merge_schema", "write_keys"]


def request_databases(request: WriteRequest) -> set[str | None]:
    """The databases ``request`` writes, as far as it tells before it is planned: a line-protocol or CSV body's; a
    parsed INSERT's targets' (the session's for a target that names none); None among them where it does not tell
    (an INSERT not parsed yet, or a target naming no database without a session one)."""
    if not isinstance(request, InsertRequest):
        return {request.db}
    return {None} if isinstance(request.stmt, str) else insert_databases(request.stmt, request.session)


def insert_databases(stmt: ast.Insert, session: str | None) -> set[str | None]:
    """The databases of ``stmt``'s targets (``session`` for one that names none)."""
    return {t.table.db or session for t in stmt.targets}


def write_keys(p: PreparedWrite, databases: Mapping[str, DatabaseDef]) -> frozenset[VnodeKey] | None:
    """The vnodes applying ``p`` holds: every vnode of each database whose tables it writes or read, as
    ``databases`` define them (what the plan read, on the event loop; the catalog, on the lane); None (the whole
    storage lane) when it changes a schema (the catalog) or such a database is gone."""
    return None if p.changes else _tables_keys(p, databases)


def _tables_keys(p: PreparedWrite, databases: Mapping[str, DatabaseDef]) -> frozenset[VnodeKey] | None:
    """Every vnode of each database whose tables ``p`` writes or read (:func:`database_keys`)."""
    return database_keys({*p.plans, *(db for db, _ in p.assumed), *(db for db, _ in p.covered)}, databases)


class Ingest:
    """Writes rows: each request planned (:mod:`~walgate.storage.write_plan`), then applied (:meth:`apply`)."""

    def __init__(self, store: Store, commits: Commits, ddl: Ddl, views: TopicViews) -> None:
        self.store = store
        self.commits = commits
        self.ddl = ddl
        self.views = views
        self.replans = 0  # plans made elsewhere that no longer held when applied, and were planned again here
        self.rechecked = 0  # tables such plans read that were looked up again here (their vnode changed since)
        self._counting = threading.Lock()  # applies into different databases count at once (module docstring)

    def snapshot(self, tables: TableLookup | None = None) -> WriteSnapshot:
        """The catalog now (its mappings themselves: a snapshot to plan with at once, on this thread;
        :meth:`worker_snapshot` copies them), its tables looked up live unless ``tables`` is given."""
        catalog = self.store.catalog
        return WriteSnapshot(catalog.generation, catalog.databases, catalog.stables,
                             LiveTables(self.store) if tables is None else tables, catalog.cluster)

    def worker_snapshot(self, keys: list[tuple[str, str]]) -> WriteSnapshot:
        """The catalog now, copied (to pickle to a planner in another process), with each database's vnode stores
        and their meta versions as its lookup (:class:`~walgate.storage.stored_tables.StoredTables`), and the live
        tables named by ``keys`` (``(database, name)``; None: absent) for the vnodes whose store it cannot read."""
        catalog, vnodes = self.store.catalog, self.store.vnodes
        known = {(db, name): (self.store.vnode(db, name).live(name) if db in vnodes else None) for db, name in keys}
        stores = {db: (str(self.store.db_dir(catalog.databases[db])), _versions(of_db, catalog.databases[db].vgroups))
                  for db, of_db in vnodes.items() if db in catalog.databases}
        return WriteSnapshot(catalog.generation, dict(catalog.databases), dict(catalog.stables),
                             StoredTables(stores, known), catalog.cluster)

    def write(self, request: WriteRequest, schemas_apart: bool = False) -> int:
        """``request`` planned and applied here, at once; rows written. Holding only some vnodes (module docstring):
        :class:`~walgate.storage.lanes.Relane`, nothing written, unless they are the plan's :func:`write_keys` (it
        changes no schema: the catalog, which nothing changes meanwhile, is read as the plan read it); checked
        before it is planned too, as far as the request tells (:func:`request_databases`: its plan reads their
        tables). With ``schemas_apart``, a plan that holds but for its schema changes raises
        :class:`~walgate.storage.write_plan.SchemaChangeNeeded` instead, nothing written: its caller makes them alone
        (:meth:`make_schemas`, an exclusive call) and asks again, so the rows still hold only their vnodes."""
        keyed = held() is not None
        databases = self.store.catalog.databases
        if keyed and not covers(database_keys(request_databases(request), databases)):
            raise Relane
        p = write_plan.plan(self.snapshot(), request)
        if keyed and not covers(write_keys(p, databases)):
            if schemas_apart and p.changes and covers(_tables_keys(p, databases)):
                raise SchemaChangeNeeded(p.changes)
            raise Relane
        return self._commit(p)

    def apply(self, prepared: PreparedWrite, request: WriteRequest) -> int:
        """Write ``prepared`` (planned from ``request``, maybe in another process) if what it read still holds
        (:meth:`_holds`), else ``request`` planned again here (today's path: its refusals and messages); rows
        written. Holding only some vnodes (module docstring): :class:`~walgate.storage.lanes.Relane`, nothing written,
        unless they are :func:`write_keys` now, and when it would be planned again."""
        keyed = held() is not None
        if keyed and not covers(write_keys(prepared, self.store.catalog.databases)):
            raise Relane
        if not self._holds(prepared):
            if keyed:
                raise Relane  # (_holds changed nothing: it returns False before it drops or notes anything)
            self.replans += 1
            return self.write(request)
        return self._commit(prepared)

    def _holds(self, p: PreparedWrite) -> bool:
        """Whether the databases, supertables and tables ``p`` read are still what it read. The tables of a vnode
        whose meta version is still the one ``p``'s lookups there hold as of (``p.covered``) are not looked up
        again; the others are, in bulk, the vnode's store read first when ``p``'s reader of it gave up (damage is
        reported by the vnode). A candidate creation whose table exists now as a subtable of the same supertable is
        dropped from ``p`` (the write goes into the table, as when it was found)."""
        catalog = self.store.catalog
        if p.generation != catalog.generation and (
            any(catalog.databases.get(name) != d for name, d in p.databases.items())
            or any(catalog.stables.get(key) != st for key, st in p.stables.items())
        ):
            return False
        dropped: dict[tuple[str, int], set[str]] = {}
        creates: dict[tuple[str, int], dict[str, str]] = {}  # per vnode: the tables the plan creates, their stable
        for (db, vnode), name, t, live in self._now(p):
            if t is not None:
                if live is None or (live.stable, live.version, live.columns) != (t.stable, t.version, t.columns):
                    return False
                continue
            if live is None:
                continue
            if (db, vnode) not in creates:
                pending = p.plans.get(db, {}).get(vnode)
                creates[(db, vnode)] = {m["name"]: m["stable"] for m in (pending.metas if pending else ())
                                        if m["op"] == "create_table"}
            if live.stable is None or live.stable != creates[(db, vnode)].get(name):
                return False
            dropped.setdefault((db, vnode), set()).add(name)
        for (db, vnode), gone in dropped.items():
            pending = p.plans[db][vnode]
            pending.metas = [m for m in pending.metas if m["op"] != "create_table" or m["name"] not in gone]
        for (db, index), at in p.covered.items():  # the creations its store showed no row for need no lookup
            pending = p.plans.get(db, {}).get(index)
            if at is not None and pending is not None and pending.metas:
                self.store.local_vnode(db, index).note_absent(
                    (m["name"] for m in pending.metas if m["op"] == "create_table"
                     and (db, m["name"]) not in p.maybe_stored), at)
        return True

    def _now(self, p: PreparedWrite) -> Iterator[tuple[tuple[str, int], str, TableDef | None, TableDef | None]]:
        """Per table ``p`` read that may have changed since (see :meth:`_holds`): its vnode, name, what ``p`` read
        and the live table now (None: absent)."""
        vnodes = self.store.vnodes
        settled = {db for db, _ in p.covered if all(p.covered.get((db, v.index), -1) == v.meta_version
                                                    for v in vnodes[db])}  # no vnode of it changed
        by_vnode: dict[tuple[str, int], dict[str, TableDef | None]] = {}
        for (db, name), t in p.assumed.items():
            if db not in settled:
                by_vnode.setdefault((db, vnode_of(db, name, self.store.catalog.database(db).vgroups)), {})[name] = t
        for (db, index), assumed in by_vnode.items():
            vnode = self.store.local_vnode(db, index)
            at = p.covered.get((db, index), -1)
            if at == vnode.meta_version:
                continue  # no meta entry since the version every lookup there was read at
            if at is None:  # its reader gave up: damage it met is reported (once) by the vnode's own reads
                vnode.check_store(assumed)
            with self._counting:
                self.rechecked += len(assumed)
            now = vnode.get_many(assumed)
            for name, t in assumed.items():
                live = now.get(name)
                yield (db, index), name, t, None if live is None or live.dropped else live

    def apply_changes(self, p: PreparedWrite) -> PreparedWrite | None:
        """``p``'s schema changes alone (an exclusive call), so that the rest of it is applied holding only its
        vnodes (:meth:`apply`): ``p`` without them, as if it had been planned against the supertables they made
        (what another reader sees in between: the supertables, not yet the rows, as after a schemaless write that
        failed after its schema changes); None when ``p`` no longer holds (nothing changed: apply it whole, planned
        again)."""
        if not self._holds(p):
            return None
        self._change_schemas(p)
        catalog = self.store.catalog
        p.stables.update({(new.db, new.name): catalog.stables.get((new.db, new.name)) for _, new in p.changes})
        p.changes = []
        p.generation = catalog.generation
        return p

    def _commit(self, p: PreparedWrite) -> int:
        """Schema changes first (:meth:`_change_schemas`), then each database's entries (rows written)."""
        self._change_schemas(p)
        catalog = self.store.catalog
        for db_name, vnodes in p.plans.items():
            self.commits.commit(catalog.database(db_name), vnodes)
        return p.rows

    def _change_schemas(self, p: PreparedWrite) -> None:
        """``p``'s schema changes (none of a cluster database's in a plan that holds: the planner raised
        :class:`~walgate.storage.write_plan.SchemaChangeNeeded` for them), refused before anything is written when a
        vgroup it writes is on another node; then made (:meth:`make_schemas`), so that the rows' columns exist."""
        for db_name, vnodes in p.plans.items():  # NotHere before anything changes when a vgroup is elsewhere
            for index in vnodes:
                self.store.written_vnode(db_name, index)
        self.make_schemas(p.changes)

    def make_schemas(self, changes: list[tuple[StableDef | None, StableDef]]) -> None:
        """Create or widen each supertable ``(old, new)`` of a schemaless write (:func:`merge_schema`'s decisions),
        refused before anything changes when one is not ``old`` any more (changed meanwhile: plan the write again)
        or a topic depends on what would change. In a cluster database, called staged: its records go through the
        cluster's stream (:class:`~walgate.storage.write_plan.SchemaChangeNeeded`)."""
        catalog = self.store.catalog
        for old, new in changes:
            if catalog.stables.get((new.db, new.name)) != old:
                raise InvalidValue(f"Supertable {new.db}.{new.name} changed meanwhile: the write is planned again")
            if old is not None:
                self.views.recompile(new.db, new)
        for old, new in changes:
            if old is None:
                catalog.create_stable(new)
            else:  # checked above
                self.ddl.change_stable(catalog.database(new.db), old, new.columns, new.tags, "SCHEMALESS", "")

    def insert(self, s: ast.Insert, session: str | None) -> Result:
        """SQL INSERT (:func:`~walgate.storage.write_plan.plan_insert`), planned and written here."""
        return affected(self.write(InsertRequest(s, session, self.store.clock.time_ns())))

    def write_lines(self, db: str, body: bytes, precision: str = "ns") -> int:
        """InfluxDB line protocol (TDengine schemaless), parsed by columns (:mod:`~walgate.storage.lineproto_columns`):
        returns rows written."""
        self.store.check_size(len(body))
        self.store.catalog.database(db)  # an unknown database is refused before the body is read
        return self.write_measurements(db, lineproto_columns.parse_body(body, precision))

    def write_measurements(self, db: str, measurements: list[lineproto_columns.Measurement],
                           schemas_apart: bool = False) -> int:
        """:meth:`write_lines` of a body :func:`~walgate.storage.lineproto_columns.parse_body` parsed (elsewhere: it
        is pure; :func:`~walgate.storage.write_plan.plan_lines`); returns rows written (``schemas_apart``: as
        :meth:`write`)."""
        return self.write(LinesRequest(db, measurements, "ns", self.store.clock.time_ns()), schemas_apart)

    def write_csv(self, db: str, body: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column
        (:func:`~walgate.storage.write_plan.plan_csv`); rows written."""
        self.store.check_size(len(body))
        return self.write(CsvRequest(db, body, table, stable, self.store.clock.time_ns()))

    def write_json_rows(self, db: str, stable: str, rows: list[tuple[str, dict[str, Any], int]]) -> int:
        """Rows given as JSON objects into subtables of *stable*: (subtable, fields, record timestamp ms).

        Fields are the supertable's columns and, for a subtable that does not
        exist yet, its tags (missing ones are NULL); values are typed as SQL
        literals are (timestamps: RFC 3339 strings or ticks). A row without its
        timestamp column takes the record's timestamp. Everything is validated
        before anything is written (a subtable name that is not a string, fields
        that are not an object, a timestamp outside years 0001-9999: an
        InvalidValue naming the record); returns the rows written. Typed by
        columns (:func:`~walgate.storage.values.coerce_values`); rows that path
        does not take, or refuses, go one by one, which names the first bad
        record and gives the same rows.
        """
        store = self.store
        dbdef = store.catalog.database(db)
        st = store.catalog.stable(db, stable)
        now = self.store.clock.time_ns()
        try:
            done = self._json_by_columns(dbdef, st, rows, now)
        except StorageError:
            done = None
        plan = done or self._json_by_rows(dbdef, st, rows, now)
        store.check_size(sum(len(str(f)) for _, f, _ in rows))
        self.commits.commit(dbdef, plan.vnodes)
        return len(rows)

    def _json_by_columns(
        self, db: DatabaseDef, st: StableDef, rows: list[tuple[str, dict[str, Any], int]], now: int
    ) -> RowPlan | None:
        """The plan of JSON rows typed by columns, or None (or a StorageError) where the rows must decide."""
        plan = RowPlan(Reads(self.snapshot()), db, now)
        tables = [r[0] for r in rows]
        fields = [r[1] for r in rows]
        if not rows or set(map(type, tables)) != {str} or set(map(type, fields)) != {dict}:
            return None
        keys = set().union(*fields)
        if keys - {c.name for c in (*st.columns, *st.tags)}:
            return None
        firsts: dict[str, int] = {}
        for k, name in enumerate(tables):
            if name not in firsts:
                try:
                    name.encode()
                except UnicodeEncodeError:
                    return None  # a lone surrogate: the rows name it
                firsts[name] = k
        typed = {c.name: coerce_values([f.get(c.name) for f in fields], c.type, db.precision, now)
                 for c in st.columns if c.name in keys}
        ts_col = st.columns[0]
        given = typed.get(ts_col.name)
        per_ms = TICKS_PER_MS[db.precision]
        missing = [True] * len(rows) if given is None else given.is_null().to_pylist()
        stamps = coerce_values([r[2] * per_ms if m else None for r, m in zip(rows, missing)], ts_col.type, db.precision,
                               now)
        typed[ts_col.name] = stamps if given is None else pc.coalesce(given, stamps)
        vnodes = []
        for name, k in firsts.items():
            first = fields[k]
            plan.subtable(st, name, "JSON", lambda tag: coerce(first.get(tag.name), tag.type, db.precision, now))
            vnodes.append(vnode_of(db.name, name, db.vgroups))
        names = pa.array(tables, pa.string())
        batch = typed_batch(st.columns, names, typed, db.precision)
        if len(set(vnodes)) == 1:
            plan.pending(tables[0]).add_batch(st.name, True, batch)
            return plan
        vnode_of_table = dict(zip(firsts, vnodes))
        vnode_of_row = pa.array([vnode_of_table[name] for name in tables], pa.int32())
        for vnode in dict.fromkeys(vnodes):
            plan.vnodes.setdefault(vnode, Pending()).add_batch(st.name, True, batch.filter(pc.equal(vnode_of_row, vnode)))
        return plan

    def _json_by_rows(
        self, dbdef: DatabaseDef, st: StableDef, rows: list[tuple[str, dict[str, Any], int]], now: int
    ) -> RowPlan:
        """The plan of JSON rows, one by one (the reference of :meth:`_json_by_columns`); errors name the record."""
        known = {c.name: c for c in st.columns} | {t.name: t for t in st.tags}
        ts_name = st.columns[0].name
        plan = RowPlan(Reads(self.snapshot()), dbdef, now)
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
                raise InvalidValue(f"{where}: {unknown[0]} is neither a column nor a tag of {dbdef.name}.{st.name}")

            def typed(column: Column, value: Any) -> Any:
                try:
                    return coerce(value, column.type, dbdef.precision, now)
                except InvalidValue as e:
                    raise InvalidValue(f"{where}, {column.name}: {e.message}") from None

            values = {c.name: typed(c, fields[c.name]) for c in st.columns if c.name in fields}
            if values.get(ts_name) is None:
                values[ts_name] = typed(st.columns[0], ts_ms * TICKS_PER_MS[dbdef.precision])
            plan.subtable_rows(st, name, [values], where, lambda tag: typed(tag, fields.get(tag.name)))
        return plan




def _versions(vnodes: list[Vnode], vgroups: int) -> tuple[int, ...]:
    """The meta version of each of ``vgroups`` vgroups, from the ``vnodes`` open here; 0 for one placed on another
    node (its store is not here: a planner's reader of it gives up, and a write to it is refused where it is
    applied, :meth:`Store.local_vnode <walgate.storage.store.Store.local_vnode>`)."""
    by_index = {v.index: v.meta_version for v in vnodes}
    return tuple(by_index.get(i, 0) for i in range(vgroups))
