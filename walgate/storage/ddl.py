"""DDL: databases, supertables, tables and subtables, ALTER STABLE, DROP.

Databases and supertables live in the catalog (catalog.py); tables and subtables live in their vnode, created and
dropped by meta entries appended to its WAL through :class:`~walgate.storage.commit.Commits`. A change a topic
depends on is refused before anything is written: dropping a topic's source, or an ALTER STABLE after which one of
the database's topics would no longer compile.

In cluster mode a database, and its supertables, are the cluster's (:meth:`Catalog.is_cluster_db
<walgate.storage.catalog.Catalog.is_cluster_db>`): their DDL is validated here and its catalog record staged, nothing
else (no vnode made, closed or written); every node, this one too, makes the rest when it applies the record
(:mod:`walgate.storage.sql_objects`).
"""

from __future__ import annotations

import shutil
from typing import Any

from walgate.storage import names
from walgate.storage.catalog import DatabaseDef, StableDef, column_to_json
from walgate.storage.commit import Commits, Pending, Plan
from walgate.storage.errors import AlreadyExists, BatchDropStable, InvalidValue, NotFound, NotHere, table_not_found
from walgate.storage.result import Result, affected
from walgate.storage.schema import Column
from walgate.storage.sql import ast
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.values import coerce
from walgate.storage.vnode import vnode_of

__all__ = ["Ddl", "check_columns", "subtable_meta"]


class Ddl:
    def __init__(self, store: Store, commits: Commits, views: TopicViews) -> None:
        self.store = store
        self.commits = commits
        self.views = views

    # ------------------------------------------------------------ databases

    def create_database(self, s: ast.CreateDatabase, _: str | None) -> Result:
        store = self.store
        if s.name in store.catalog.databases:
            if s.if_not_exists:
                return affected(0)
            raise AlreadyExists(f"Database already exists: {s.name}")
        db = store.catalog.new_database(s.name, s.options, store.clock.time_ms())  # validated, nothing written
        if db.replication_factor > 1 and not store.catalog.replication:
            raise InvalidValue(f"Invalid option REPLICA {db.replication_factor}: this cluster runs without replicas "
                               "(replication.enable=false on its nodes; docs/cluster.md, \"Replicas\")")
        if store.catalog.cluster:  # placed over the live nodes; staged: its vnodes open where it is applied
            store.catalog.add_database(db)
            return affected(0)
        store.vnodes[db.name] = store.open_database(db, lambda: store.catalog.add_database(db))
        return affected(0)

    def drop_database(self, s: ast.DropDatabase, _: str | None) -> Result:
        store = self.store
        if s.name not in store.catalog.databases:
            if s.if_exists:
                return affected(0)
            raise NotFound(f"Database not exist: {s.name}")
        users = [t.name for t in store.catalog.topics.values() if t.db == s.name]
        if users:
            raise InvalidValue(f"Database {s.name} is used by topic {users[0]}: drop the topic first")
        db = store.catalog.database(s.name)
        shared = store.catalog.is_cluster_db(s.name)
        store.catalog.drop_database(s.name)  # first: when the disk refuses it, nothing changed
        if shared:  # staged: its vnodes go where it is applied (NativeTopics.follow_catalog)
            return affected(0)
        for vnode in store.vnodes.pop(s.name):
            vnode.close()
        shutil.rmtree(store.db_dir(db), ignore_errors=True)
        return affected(0)

    def use_database(self, s: ast.UseDatabase, _: str | None) -> Result:
        self.store.catalog.database(s.name)
        return Result([], [], affected_rows=0, database=s.name)

    # --------------------------------------------------------------- tables

    def create_stable(self, s: ast.CreateStable, session: str | None) -> Result:
        store = self.store
        db = store.resolve_db(s.name.db, session)
        if (db.name, s.name.name) in store.catalog.stables or self._table_here(db, s.name.name):
            if s.if_not_exists:
                return affected(0)
            raise AlreadyExists(f"Table already exists: {db.name}.{s.name.name}")
        check_columns(s.columns, s.tags)
        store.catalog.create_stable(StableDef(db.name, s.name.name, s.columns, s.tags, store.clock.time_ms()))
        return affected(0)

    def _table_here(self, db: DatabaseDef, name: str) -> bool:
        """Whether table ``name`` of ``db`` exists, as far as this node knows: a cluster database's table whose vgroup
        is on another node is not seen (the HTTP API sends a CREATE STABLE of such a name to that node:
        gateway/http_api)."""
        try:
            return self.store.vnode(db.name, name).live(name) is not None
        except NotHere:
            return False

    def create_table(self, s: ast.CreateTable, session: str | None) -> Result:
        db = self.store.resolve_db(s.name.db, session)
        names.validate_table_name(s.name.name)
        for c in s.columns:
            names.validate_column_name(c.name)
        check_columns(s.columns, ())
        if self._exists(db, s.name.name, s.if_not_exists):
            return affected(0)
        meta = {"op": "create_table", "name": s.name.name, "columns": [column_to_json(c) for c in s.columns]}
        self.commits.commit(db, {vnode_of(db.name, s.name.name, db.vgroups): self.commits.with_meta(db, meta)})
        return affected(0)

    def _exists(self, db: DatabaseDef, name: str, if_not_exists: bool) -> bool:
        if self.store.vnode(db.name, name).live(name) is None and (db.name, name) not in self.store.catalog.stables:
            return False
        if if_not_exists:
            return True
        raise AlreadyExists(f"Table already exists: {db.name}.{name}")

    def create_subtable(self, s: ast.CreateSubtable, session: str | None) -> Result:
        store = self.store
        db = store.resolve_db(s.name.db, session)
        if self._exists(db, s.name.name, s.if_not_exists):
            return affected(0)
        st = store.catalog.stable(store.resolve_db(s.stable.db, db.name).name, s.stable.name)
        if st.db != db.name:
            raise InvalidValue(f"Subtable {s.name.name} must be in the database of its supertable ({st.db})")
        meta = subtable_meta(db, st, s.name.name, s.tag_names, s.tag_values, store.clock.time_ns())
        self.commits.commit(db, {vnode_of(db.name, s.name.name, db.vgroups): self.commits.with_meta(db, meta)})
        return affected(0)

    # ---------------------------------------------------------------- alter

    def alter_stable_statement(self, s: ast.AlterStable, session: str | None) -> Result:
        db = self.store.resolve_db(s.name.db, session)
        st = self.store.catalog.stable(db.name, s.name.name)
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
        check_columns(tuple(columns), tuple(tags))
        self.alter_stable(db, st, tuple(columns), tuple(tags), s.action, s.column_name or (s.column.name if s.column else ""))
        return affected(0)

    def alter_stable(
        self, db: DatabaseDef, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...], action: str, column: str
    ) -> None:
        """Change a supertable's schema: a meta entry in every vnode of ``db``, then the catalog (in one commit),
        then every topic of ``db`` is recompiled. A topic the change would break refuses it first. A cluster
        database's: the catalog record staged, with the change (module docstring)."""
        self.views.recompile(db.name, StableDef(st.db, st.name, columns, tags, st.created_ms))
        self.change_stable(db, st, columns, tags, action, column)

    def change_stable(
        self, db: DatabaseDef, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...], action: str, column: str
    ) -> None:
        """:meth:`alter_stable` once the caller checked the topics of ``db`` against the change."""
        if self.store.catalog.is_cluster_db(db.name):
            self.store.catalog.alter_stable(st, columns, tags, {"action": action, "column": column})
            return
        meta = {"op": "alter_stable", "stable": st.name, "action": action, "column": column}
        self.commits.commit(db, {i: self.commits.with_meta(db, meta) for i in range(db.vgroups)},
                            then=lambda: self.store.catalog.alter_stable(st, columns, tags))
        self.views.recompile(db.name)

    # ----------------------------------------------------------------- drop

    def drop_table(self, s: ast.DropTable, session: str | None) -> Result:
        """Drop the named tables, all of them or none (on one node: one commit per database). A supertable is
        dropped only when it is the only name (DROP STABLE; found in the catalog first, so no vnode is needed), and
        refused in a list of several, as TDengine does ("Cannot drop super table in batch"); a topic's source is
        refused before anything is looked up in a vnode (cluster mode: before any part is forwarded)."""
        store = self.store
        named = [(store.resolve_db(name.db, session).name, name.name) for name in s.names]
        stables = [f"{db_name}.{table}" for db_name, table in named if (db_name, table) in store.catalog.stables]
        if stables and len(named) == 1:
            return self.drop_stable(ast.DropStable(ast.Name(named[0][1], named[0][0]), s.if_exists), session)
        if stables:
            raise BatchDropStable(f"Cannot drop super table in batch: {stables[0]} is a supertable (DROP STABLE "
                                  "it alone); nothing was dropped")
        for db_name, table in named:
            self._refuse_if_topic_source(db_name, table)
        plans: dict[str, Plan] = {}
        for name in s.names:
            db = store.resolve_db(name.db, session)
            t = store.vnode(db.name, name.name).live(name.name)
            if t is None:
                if s.if_exists:
                    continue
                raise table_not_found(db.name, name.name)
            pending = plans.setdefault(db.name, {}).setdefault(vnode_of(db.name, name.name, db.vgroups), Pending())
            pending.metas.append({"op": "drop_table", "name": name.name, "stable": t.stable, "ts": store.now_ts(db)})
        for db_name, plan in plans.items():
            self.commits.commit(store.catalog.database(db_name), plan)
        return affected(0)

    def _refuse_if_topic_source(self, db: str, source: str) -> None:
        users = [t.name for t in self.store.catalog.topics.values() if t.db == db and t.source == source]
        if users:
            raise InvalidValue(f"{db}.{source} is used by topic {users[0]}: drop the topic first")

    def drop_stable(self, s: ast.DropStable, session: str | None) -> Result:
        store = self.store
        db = store.resolve_db(s.name.db, session)
        if (db.name, s.name.name) not in store.catalog.stables:
            if s.if_exists:
                return affected(0)
            raise NotFound(f"STable not exist: {db.name}.{s.name.name}")
        self._refuse_if_topic_source(db.name, s.name.name)
        if store.catalog.is_cluster_db(db.name):  # staged (module docstring)
            store.catalog.drop_stable(db.name, s.name.name)
            return affected(0)
        meta = {"op": "drop_stable", "stable": s.name.name}
        self.commits.commit(db, {i: self.commits.with_meta(db, meta) for i in range(db.vgroups)},
                            then=lambda: store.catalog.drop_stable(db.name, s.name.name))
        return affected(0)


def subtable_meta(
    db: DatabaseDef, st: StableDef, name: str, tag_names: tuple[str, ...] | None, values: tuple[ast.Value, ...],
    now: int,
) -> dict[str, Any]:
    """The meta entry creating subtable ``name`` of ``st`` with the given tags (SQL literals; ``now``: the ns a ``now``
    tag value stands for), validated."""
    names.validate_table_name(name)
    given = tag_names if tag_names is not None else tuple(t.name for t in st.tags)
    if len(given) != len(values):
        raise InvalidValue(f"Table {name}: {len(given)} tag names but {len(values)} tag values")
    tags: dict[str, Any] = {t.name: None for t in st.tags}
    for tag_name, value in zip(given, values):
        tag = st.tag(tag_name)
        if tag is None:
            raise InvalidValue(f"Invalid tag name: {tag_name} (supertable {st.name})")
        tags[tag_name] = coerce(value, tag.type, db.precision, now)
    return {"op": "create_table", "name": name, "stable": st.name, "tags": tags}


def check_columns(columns: tuple[Column, ...], tags: tuple[Column, ...]) -> None:
    """A table's or supertable's columns and tags are valid together (InvalidValue naming the first problem)."""
    if not columns or columns[0].type.name != "TIMESTAMP":
        raise InvalidValue("The first column must be of type TIMESTAMP")
    all_names = [c.name for c in columns + tags]
    dup = {n for n in all_names if all_names.count(n) > 1}
    if dup:
        raise InvalidValue(f"Duplicated column names: {min(dup)}")
    if "tbname" in all_names:
        raise InvalidValue("tbname is a reserved column name")
    if any(c.type.name == "JSON" for c in columns):
        raise InvalidValue("JSON is only allowed as a tag type")
    if any(t.type.name == "JSON" for t in tags) and len(tags) != 1:
        raise InvalidValue("A JSON tag must be the only tag")
