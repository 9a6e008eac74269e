"""Ingestion: SQL INSERT, InfluxDB line protocol, CSV and JSON rows, all through one row planner.

Every path resolves and coerces the whole request into a :class:`RowPlan` (rows per vnode, and the meta entries of
the subtables it creates on the way: ``INSERT ... USING``, a new series of a measurement, a CSV or JSON row naming
a new subtable) before anything is written, then hands it to :meth:`~walgate.storage.commit.Commits.commit`; so a
refused request writes nothing. Schemaless writes (line protocol) first widen or create the supertables they need
(:func:`merge_schema`), refused before anything is written when a topic depends on what would change.

Values are typed a whole column at a time (pyarrow kernels; :mod:`~walgate.storage.lineproto_columns`,
:func:`~walgate.storage.values.coerce_texts`, :func:`~walgate.storage.values.coerce_values`) into one Arrow batch
per vnode and supertable; a value the kernels cannot type (a date string, say) is coerced on its own within its
column. A request the column path refuses (any error) or does not take goes through the row-by-row reference path
instead, which names the first bad line, row or record; both paths plan the same rows
(tests/storage/test_ingest_columns.py, tests/storage/test_lineproto_columns.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import csvfile, lineproto, lineproto_columns, names
from walgate.storage.catalog import DatabaseDef, StableDef
from walgate.storage.commit import Commits, Pending, Plan
from walgate.storage.ddl import Ddl, check_columns, subtable_meta
from walgate.storage.errors import InvalidValue, NotFound, StorageError
from walgate.storage.result import Result, affected
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.store import TICKS, TICKS_PER_MS, Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.values import coerce, coerce_text, coerce_texts, coerce_values
from walgate.storage.vnode import TableDef, vnode_of

__all__ = ["Ingest", "RowPlan", "merge_schema"]


class RowPlan:
    """The rows one request writes to one database, and the subtables it creates, per vnode (see the module
    docstring). A table is found live in its vnode or among those this request creates."""

    def __init__(self, store: Store, db: DatabaseDef) -> None:
        self.store = store
        self.db = db
        self.vnodes: Plan = {}
        self.created = 0  # tables this plan creates

    def pending(self, name: str) -> Pending:
        """The pending entries of the vnode of table ``name``."""
        return self.vnodes.setdefault(vnode_of(self.db.name, name, self.db.vgroups), Pending())

    def find(self, name: str) -> TableDef | None:
        vnodes = self.store.vnodes[self.db.name]
        return vnodes[vnode_of(self.db.name, name, self.db.vgroups)].live(name) or self.pending(name).new_tables.get(name)

    def create(self, st: StableDef, name: str, tags: dict[str, Any]) -> TableDef:
        """Plan the creation of subtable ``name`` of ``st`` (name and tags validated by the caller); LimitExceeded
        early (checked again at the commit) when the database may hold no more tables."""
        self.created += 1
        if self.created == 1 or self.created % 1024 == 0:
            self.store.check_new_tables(self.db, self.created)
        pending = self.pending(name)
        pending.metas.append({"op": "create_table", "name": name, "stable": st.name, "tags": tags,
                              "ts": self.store.now_ts(self.db)})
        t = pending.new_tables[name] = TableDef(name, st.name, tags, None, -1, 0)
        return t

    def subtable(self, st: StableDef, name: str, where: str, tag_value: Callable[[Column], Any]) -> Pending:
        """The pending entries of subtable ``name`` of ``st``, planning its creation (tags from ``tag_value``) if it
        is new; InvalidValue prefixed with ``where`` for a bad name or a table of another supertable."""
        t = self.find(name)
        if t is None:
            try:
                names.validate_table_name(name)
            except InvalidValue as e:
                raise InvalidValue(f"{where}: {e.message}") from None
            self.create(st, name, {tag.name: tag_value(tag) for tag in st.tags})
        elif t.stable != st.name:
            raise InvalidValue(f"{where}: table {name} is not a subtable of {st.name}")
        return self.pending(name)

    def subtable_rows(
        self, st: StableDef, name: str, rows: list[dict[str, Any]], where: str, tag_value: Callable[[Column], Any]
    ) -> None:
        """Plan ``rows`` of subtable ``name`` of ``st`` (see :meth:`subtable`)."""
        self.subtable(st, name, where, tag_value).add_rows(st.name, True, st.columns, name, rows)


class Ingest:
    def __init__(self, store: Store, commits: Commits, ddl: Ddl, views: TopicViews) -> None:
        self.store = store
        self.commits = commits
        self.ddl = ddl
        self.views = views

    def insert(self, s: ast.Insert, session: str | None) -> Result:
        """SQL INSERT, possibly into several tables of several databases (``INSERT ... USING`` creates subtables).

        Each VALUES list is typed by columns (:func:`~walgate.storage.values.coerce_values`); a statement that path
        does not take, or refuses, goes row by row, which names the first bad row and gives the same rows."""
        now = self.store.clock.time_ns()
        try:
            done = self._insert(s, session, now, by_columns=True)
        except StorageError:
            done = None
        if done is None:
            done = self._insert(s, session, now, by_columns=False)
            assert done is not None  # by rows, every VALUES list is taken or refused
        plans, rows = done
        for db_name, plan in plans.items():
            self.commits.commit(self.store.catalog.database(db_name), plan.vnodes)
        return affected(rows)

    def _insert(
        self, s: ast.Insert, session: str | None, now: int, by_columns: bool
    ) -> tuple[dict[str, RowPlan], int] | None:
        """The plans of an INSERT and its row count; ``by_columns``: None where a VALUES list needs the rows."""
        store = self.store
        plans: dict[str, RowPlan] = {}
        rows = 0
        lists: list[_ValuesList] = []
        for target in s.targets:
            db = store.resolve_db(target.table.db, session)
            plan = plans.setdefault(db.name, RowPlan(store, db))
            name = target.table.name
            t = plan.find(name)
            if t is None:
                if target.using is None:
                    raise NotFound(f"Table does not exist: {db.name}.{name}")
                st = store.catalog.stable(store.resolve_db(target.using.stable.db, db.name).name, target.using.stable.name)
                meta = subtable_meta(db, st, name, target.using.tag_names, target.using.tag_values, now)
                t = plan.create(st, name, meta["tags"])
            columns = store.columns_of(db, t)
            given = target.columns or tuple(c.name for c in columns)
            by_name = {c.name: c for c in columns}
            for n in given:
                if n not in by_name:
                    raise InvalidValue(f"Invalid column name: {n} (table {db.name}.{name})")
            if columns[0].name not in given:
                raise InvalidValue(f"Table {db.name}.{name}: the timestamp column {columns[0].name} is required")
            pending = plan.pending(name)
            if by_columns:
                if {len(row) for row in target.rows} != {len(given)}:
                    return None
                lists.append(_ValuesList(len(lists), db, plan, name, (t.stable or name, t.stable is not None), columns,
                                         given, target.rows))
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

    def write_lines(self, db: str, body: bytes, precision: str = "ns") -> int:
        """InfluxDB line protocol (TDengine schemaless), parsed by columns (:mod:`~walgate.storage.lineproto_columns`):
        returns rows written."""
        self.store.check_size(len(body))
        self.store.catalog.database(db)  # an unknown database is refused before the body is read
        return self.write_measurements(db, lineproto_columns.parse_body(body, precision))

    def write_measurements(self, db: str, measurements: list[lineproto_columns.Measurement]) -> int:
        """:meth:`write_lines` of a body :func:`~walgate.storage.lineproto_columns.parse_body` parsed (elsewhere: it
        is pure); returns rows written."""
        store = self.store
        dbdef = store.catalog.database(db)
        now_ns = store.clock.time_ns()  # a line without a timestamp, and a new supertable's creation time
        # 1. the schema every measurement needs (validated, not yet committed)
        changes: list[tuple[StableDef | None, StableDef]] = []
        for m in measurements:
            old = store.catalog.stables.get((db, m.name))
            if old is None and store.vnode(db, m.name).live(m.name) is not None:
                raise InvalidValue(f"Measurement {m.name}: {db}.{m.name} is a normal table, not a supertable")
            new = merge_schema(dbdef, old, m.name, m.fields, m.tags, now_ns // 1_000_000)
            if new != old:
                changes.append((old, new))
        # 2. auto-created subtables (series by first line, as the lines come) and one batch per vnode and measurement
        stables = {st.name: st for _, st in changes}
        plan = RowPlan(store, dbdef)
        targets = [stables.get(m.name) or store.catalog.stable(db, m.name) for m in measurements]
        tables = [[lineproto.child_table_name(m.name, tags) for tags, _ in m.series] for m in measurements]
        vnodes = [[vnode_of(db, name, dbdef.vgroups) for name in names] for names in tables]
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
        for old, new in changes:  # a change that would break a topic is refused before anything is written
            if old is not None:
                self.views.recompile(db, new)
        # 3. commit: schema first (so the rows' columns exist), then the rows
        for old, new in changes:
            if old is None:
                store.catalog.create_stable(new)
            else:
                self.ddl.alter_stable(store.catalog.database(db), old, new.columns, new.tags, "SCHEMALESS", "")
        self.commits.commit(dbdef, plan.vnodes)
        return sum(m.rows.num_rows for m in measurements)

    def write_csv(self, db: str, body: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column.

        Typed by whole columns (:func:`~walgate.storage.csvfile.read_columns`,
        :func:`~walgate.storage.values.coerce_texts`); a body that path does not take, or refuses, goes row by row
        (:meth:`_csv_by_rows`), which names the first bad line and gives the same rows."""
        store = self.store
        store.check_size(len(body))
        dbdef = store.catalog.database(db)
        if (table is None) == (stable is None):
            raise InvalidValue("CSV import needs exactly one of table= or stable=")
        now = self.store.clock.time_ns()
        try:
            done = self._csv_by_columns(dbdef, body, table, stable, now)
        except StorageError:
            done = None
        plan, rows = done or self._csv_by_rows(dbdef, body, table, stable, now)
        self.commits.commit(dbdef, plan.vnodes)
        return rows

    def _csv_by_columns(
        self, dbdef: DatabaseDef, body: bytes, table: str | None, stable: str | None, now: int
    ) -> tuple[RowPlan, int] | None:
        """The plan of a CSV body typed by columns, or None (or a StorageError) where rows must decide."""
        store = self.store
        read = csvfile.read_columns(body)
        if read is None:
            return None
        header, table_texts = read
        texts = [c.combine_chunks() for c in table_texts.columns]
        n = table_texts.num_rows
        plan = RowPlan(store, dbdef)
        if table is not None:
            t = store.table(dbdef, table)
            columns = store.columns_of(dbdef, t)
        else:
            st = store.catalog.stable(dbdef.name, stable or "")
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
            batch = _typed_batch(columns, pa.array([table] * n, pa.string()), typed, dbdef.precision)
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
        vnodes = []
        for k, name in enumerate(distinct.dictionary.to_pylist()):
            row = first_row[k]
            plan.subtable(st, name, "CSV", lambda tag: coerce_text(
                tag_texts[tag.name][row].as_py() if tag.name in tag_texts else None, tag.type, dbdef.precision, now))
            vnodes.append(vnode_of(dbdef.name, name, dbdef.vgroups))
        batch = _typed_batch(columns, names, typed, dbdef.precision)
        if len(set(vnodes)) == 1:
            plan.pending(names[0].as_py()).add_batch(st.name, True, batch)
            return plan, n
        vnode_of_row = pa.array(vnodes, pa.int32()).take(distinct.indices)
        for vnode in dict.fromkeys(vnodes):
            plan.vnodes.setdefault(vnode, Pending()).add_batch(st.name, True, batch.filter(pc.equal(vnode_of_row, vnode)))
        return plan, n

    def _csv_by_rows(
        self, dbdef: DatabaseDef, body: bytes, table: str | None, stable: str | None, now: int
    ) -> tuple[RowPlan, int]:
        """The plan of a CSV body, row by row (the reference of :meth:`_csv_by_columns`); errors name the line."""
        store = self.store
        db = dbdef.name
        header, rows, linenos = csvfile.parse_csv(body)
        plan = RowPlan(store, dbdef)
        if table is not None:
            t = store.table(dbdef, table)
            columns = store.columns_of(dbdef, t)
            by_name = {c.name: c for c in columns}
            for h in header:
                if h not in by_name:
                    raise InvalidValue(f"CSV header: {h} is not a column of {db}.{table}")
            pending = plan.pending(table)
            for line, row in zip(linenos, rows):
                values = _csv_values(header, row, by_name, dbdef.precision, now, line, columns[0].name)
                pending.add_rows(t.stable or table, t.stable is not None, columns, table, [values])
        else:
            st = store.catalog.stable(db, stable or "")
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
        plan = RowPlan(self.store, db)
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
        batch = _typed_batch(st.columns, names, typed, db.precision)
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
        plan = RowPlan(self.store, dbdef)
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


class _ValuesList(NamedTuple):
    """One VALUES list of an INSERT, resolved: its place in the statement, database, plan, table, the source its rows
    go to (supertable or table, is_stable), the source's columns and the columns the list gives."""

    order: int
    db: DatabaseDef
    plan: RowPlan
    table: str
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
        batch = _typed_batch(chunk[0].columns, pa.array([v.table for v in chunk for _ in v.rows], pa.string()), typed,
                             db.precision)
        order = pa.array([v.order for v in chunk for _ in v.rows], pa.int32())
        vnodes = [vnode_of(db.name, v.table, db.vgroups) for v in chunk]
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


def _typed_batch(columns: tuple[Column, ...], names: pa.Array, typed: dict[str, pa.Array], precision: str) -> pa.RecordBatch:
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
