"""Ingestion: SQL INSERT, InfluxDB line protocol, CSV and JSON rows, all through one row planner.

Every path resolves and coerces the whole request into a :class:`RowPlan` (rows per vnode, and the meta entries of
the subtables it creates on the way: ``INSERT ... USING``, a new series of a measurement, a CSV or JSON row naming
a new subtable) before anything is written, then hands it to :meth:`~walgate.storage.commit.Commits.commit`; so a
refused request writes nothing. Schemaless writes (line protocol) first widen or create the supertables they need
(:func:`merge_schema`), refused before anything is written when a topic depends on what would change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from walgate.storage import csvfile, lineproto, names
from walgate.storage.catalog import DatabaseDef, StableDef
from walgate.storage.commit import Commits, Pending, Plan
from walgate.storage.ddl import Ddl, check_columns, subtable_meta
from walgate.storage.errors import InvalidValue, NotFound
from walgate.storage.result import Result, affected
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.store import TICKS, TICKS_PER_MS, Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.values import coerce, coerce_text
from walgate.storage.vnode import TableDef, vnode_of

__all__ = ["Ingest", "RowPlan", "merge_schema"]


class RowPlan:
    """The rows one request writes to one database, and the subtables it creates, per vnode (see the module
    docstring). A table is found live in its vnode or among those this request creates."""

    def __init__(self, store: Store, db: DatabaseDef) -> None:
        self.store = store
        self.db = db
        self.vnodes: Plan = {}

    def pending(self, name: str) -> Pending:
        """The pending entries of the vnode of table ``name``."""
        return self.vnodes.setdefault(vnode_of(self.db.name, name, self.db.vgroups), Pending())

    def find(self, name: str) -> TableDef | None:
        vnodes = self.store.vnodes[self.db.name]
        return vnodes[vnode_of(self.db.name, name, self.db.vgroups)].live(name) or self.pending(name).new_tables.get(name)

    def create(self, st: StableDef, name: str, tags: dict[str, Any]) -> TableDef:
        """Plan the creation of subtable ``name`` of ``st`` (name and tags validated by the caller)."""
        pending = self.pending(name)
        pending.metas.append({"op": "create_table", "name": name, "stable": st.name, "tags": tags,
                              "ts": self.store.now_ts(self.db)})
        t = pending.new_tables[name] = TableDef(name, st.name, tags, None, -1, 0)
        return t

    def subtable_rows(
        self, st: StableDef, name: str, rows: list[dict[str, Any]], where: str, tag_value: Callable[[Column], Any]
    ) -> None:
        """Plan ``rows`` of subtable ``name`` of ``st``, creating it (tags from ``tag_value``) if it is new;
        InvalidValue prefixed with ``where`` for a bad name or a table of another supertable."""
        t = self.find(name)
        if t is None:
            try:
                names.validate_table_name(name)
            except InvalidValue as e:
                raise InvalidValue(f"{where}: {e.message}") from None
            self.create(st, name, {tag.name: tag_value(tag) for tag in st.tags})
        elif t.stable != st.name:
            raise InvalidValue(f"{where}: table {name} is not a subtable of {st.name}")
        self.pending(name).add_rows(st.name, True, st.columns, name, rows)


class Ingest:
    def __init__(self, store: Store, commits: Commits, ddl: Ddl, views: TopicViews) -> None:
        self.store = store
        self.commits = commits
        self.ddl = ddl
        self.views = views

    def insert(self, s: ast.Insert, session: str | None) -> Result:
        """SQL INSERT, possibly into several tables of several databases (``INSERT ... USING`` creates subtables)."""
        store = self.store
        now = time.time_ns()
        plans: dict[str, RowPlan] = {}
        rows = 0
        for target in s.targets:
            db = store.resolve_db(target.table.db, session)
            plan = plans.setdefault(db.name, RowPlan(store, db))
            name = target.table.name
            t = plan.find(name)
            if t is None:
                if target.using is None:
                    raise NotFound(f"Table does not exist: {db.name}.{name}")
                st = store.catalog.stable(store.resolve_db(target.using.stable.db, db.name).name, target.using.stable.name)
                meta = subtable_meta(db, st, name, target.using.tag_names, target.using.tag_values)
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
        for db_name, plan in plans.items():
            self.commits.commit(store.catalog.database(db_name), plan.vnodes)
        return affected(rows)

    def write_lines(self, db: str, body: bytes, precision: str = "ns") -> int:
        """InfluxDB line protocol (TDengine schemaless): returns rows written."""
        store = self.store
        store.check_size(len(body))
        dbdef = store.catalog.database(db)
        points = lineproto.parse_lines(body, precision)
        now_ns = time.time_ns()
        ticks = TICKS[dbdef.precision]
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
            old = store.catalog.stables.get((db, m))
            if old is None and store.vnode(db, m).live(m) is not None:
                raise InvalidValue(f"Measurement {m}: {db}.{m} is a normal table, not a supertable")
            new = merge_schema(dbdef, old, m, cols, tags)
            if new != old:
                changes.append((old, new))
        # 2. rows and auto-created subtables, per vnode
        stables = {st.name: st for _, st in changes}
        plan = RowPlan(store, dbdef)
        for (m, tag_pairs), pts in series.items():
            st = stables.get(m) or store.catalog.stable(db, m)
            ts_col = st.columns[0].name
            rows = []
            for p in pts:
                row = {k: v for k, _, v in p.fields}
                row[ts_col] = (p.ts_ns if p.ts_ns is not None else now_ns) // ticks
                rows.append(row)
            pairs = dict(tag_pairs)
            plan.subtable_rows(st, lineproto.child_table_name(m, tag_pairs), rows, f"Measurement {m}",
                               lambda tag: pairs.get(tag.name))
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
        return len(points)

    def write_csv(self, db: str, body: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column."""
        store = self.store
        store.check_size(len(body))
        dbdef = store.catalog.database(db)
        if (table is None) == (stable is None):
            raise InvalidValue("CSV import needs exactly one of table= or stable=")
        header, rows, linenos = csvfile.parse_csv(body)
        now = time.time_ns()
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
        self.commits.commit(dbdef, plan.vnodes)
        return len(rows)

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
        store = self.store
        dbdef = store.catalog.database(db)
        st = store.catalog.stable(db, stable)
        now = time.time_ns()
        known = {c.name: c for c in st.columns} | {t.name: t for t in st.tags}
        ts_name = st.columns[0].name
        plan = RowPlan(store, dbdef)
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
                values[ts_name] = typed(st.columns[0], ts_ms * TICKS_PER_MS[dbdef.precision])
            plan.subtable_rows(st, name, [values], where, lambda tag: typed(tag, fields.get(tag.name)))
        store.check_size(sum(len(str(f)) for _, f, _ in rows))
        self.commits.commit(dbdef, plan.vnodes)
        return len(rows)


def _widest(old: ColumnType | None, new: ColumnType, name: str, measurement: str) -> ColumnType:
    """The type a schemaless key takes when it is ``old`` in one line and ``new`` in another of one request."""
    if old is None or old == new:
        return new
    if old.name == new.name and old.is_string:
        return old if (old.length or 0) >= (new.length or 0) else new
    raise InvalidValue(f"Measurement {measurement}: field {name} is {new} in one line and {old} in another")


def merge_schema(
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
            what = "tag" if group is tag_cols else "field"
            raise InvalidValue(f"Measurement {name}: {what} {k} is {t} but the {'tag' if group is tag_cols else 'column'} is {have}")
    try:  # a key named tbname, like the timestamp column, or a tag named like a column (or the reverse)
        check_columns(tuple(columns), tuple(tag_cols))
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
