"""Topic evaluation: which rows of a WAL entry a topic (or a query) yields, vectorised.

A topic is evaluated on one decoded entry at a time with pyarrow compute, never
row by row:

* ``database`` topics take every row of every table of the database;
* ``stable`` topics take the rows of one supertable's subtables whose tags
  satisfy the tag condition (evaluated once per subtable on the vnode's tag
  table, then applied to rows with ``is_in`` on ``tbname``);
* ``select`` topics join each row to its subtable's tags (``index_in`` +
  ``take``), filter with the condition and project the select list.

Rows of database and stable topics carry their data columns followed by their
tags; ``SELECT *`` means the same. Meta entries become records only for
``WITH META`` topics, and only those that concern the topic's source.

Evaluation is deterministic given the entry and the tables known to the
vnode (dropped tables stay known for this reason), which is what lets the
offset index store one record per entry instead of one per row.

An evaluator is validated completely when it is built: unknown columns, a
WHERE that is not boolean and every other type error are raised then (the
condition and select list are evaluated once on no rows of the source's
schema), and evaluation is total after that (see :mod:`walgate.storage.expr`),
so indexing a write never fails on a topic's expressions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.catalog import StableDef
from walgate.storage.entry import Block, DecodedEntry
from walgate.storage.errors import InvalidValue
from walgate.storage.expr import compile_expr, compile_filter, referenced_columns
from walgate.storage.schema import Column, arrow_schema
from walgate.storage.sql import ast

__all__ = ["NoRowsHere", "Records", "TopicEvaluator", "expr_name"]


@dataclass(frozen=True)
class Records:
    """The records one entry yields: data rows (``values`` set) or one meta record."""

    source: str
    versions: pa.Array  # int64 WAL version of each record
    keys: pa.Array  # string: subtable / table name
    timestamps: pa.Array  # int64 ticks in the database precision
    values: pa.Table | None = None
    meta: dict[str, Any] | None = None
    is_stable: bool = True  # source is a supertable (False: a normal table)

    def __len__(self) -> int:
        return len(self.versions)


TagTables = Callable[[str, pa.Array], pa.Table]  # (stable, tbnames) -> tbname + tag columns of those (this vnode)


class TopicEvaluator:
    """Evaluates a topic definition on decoded WAL entries of its database."""

    def __init__(
        self,
        kind: str,
        source: str,
        *,
        with_meta: bool = False,
        precision: str = "ms",
        stable: StableDef | None = None,
        columns: tuple[Column, ...] | None = None,
        items: tuple[ast.SelectItem, ...] | None = None,
        where: ast.Expr | None = None,
    ) -> None:
        self._definition = (kind, source, with_meta, precision, stable, columns, items, where)
        self.kind = kind
        self.source = source
        self.with_meta = with_meta
        self.stable = stable
        known = {"tbname"} | {c.name for c in (stable.columns + stable.tags if stable else columns or ())}
        if kind != "database":
            for expr in [where] + [i.expr for i in items or ()]:
                missing = referenced_columns(expr) - known if expr is not None else set()
                if missing:
                    raise InvalidValue(f"Invalid column name: {sorted(missing)[0]}")
        if kind == "stable" and where is not None and stable is not None:
            bad = referenced_columns(where) - {"tbname"} - {t.name for t in stable.tags}
            if bad:
                raise InvalidValue(f"Only tag conditions are allowed in a STABLE topic: {sorted(bad)[0]}")
        self._filter = compile_filter(where) if where is not None else None
        self._items = None
        if items and any(i.expr is not None for i in items):
            self._items = [
                (i.alias or expr_name(i.expr), compile_expr(i.expr)) if i.expr is not None else (None, None)
                for i in items
            ]
        current = stable.columns if stable is not None else columns
        self._schema = arrow_schema(current, precision) if current else None
        self._tag_schema = arrow_schema(stable.tags, precision) if stable is not None else None
        self.known: dict[str, Column] = {c.name: c for c in (current or ()) + (stable.tags if stable else ())}
        if kind != "database":
            self._typecheck()

    def __reduce__(self) -> tuple[Callable[..., TopicEvaluator], tuple[Any, ...]]:
        """Pickled as its definition and compiled again when unpickled (a query run in another process)."""
        return _evaluator, self._definition

    def _typecheck(self) -> None:
        """Evaluate the condition and the select list on no rows: raises every type error (see the docstring)."""
        if self._filter is not None:
            tags = self._tag_schema.empty_table() if self._tag_schema is not None else pa.table({})
            env: dict[str, Any] = {"tbname": pa.array([], pa.string())}
            env.update({name: tags.column(name) for name in tags.column_names})
            if self.kind != "stable":
                assert self._schema is not None
                env.update({f.name: pa.array([], f.type) for f in self._schema})
            self._filter(env)
        self.output_schema()

    # ----------------------------------------------------------------- entries

    def evaluate(self, entry: DecodedEntry, tag_tables: TagTables) -> list[Records]:
        if entry.meta is not None:
            return self._meta(entry) if self.with_meta else []
        out = []
        version = entry.version
        for block in entry.blocks:
            n = block.batch.num_rows
            if self._wants(block):
                versions = _consecutive(version, n)
                rec = self._rows(block, versions, tag_tables)
                if rec is not None and len(rec):
                    out.append(rec)
            version += n
        return out

    def _wants(self, block: Block) -> bool:
        if self.kind == "database":
            return True
        return block.source == self.source and (block.is_stable == (self.stable is not None))

    def _rows(self, block: Block, versions: pa.Array, tag_tables: TagTables) -> Records | None:
        batch = pa.Table.from_batches([block.batch])
        tags = tag_tables(block.source, block.batch.column(0)) if block.is_stable else None
        env: dict[str, Any] = {name: batch.column(name) for name in batch.column_names}
        data_columns = batch.column_names[1:]
        if self._schema is not None:  # read older entries with today's columns (added ones are NULL)
            data_columns = self._schema.names
            for f in self._schema:
                if f.name not in env:
                    env[f.name] = pa.nulls(batch.num_rows, f.type)
        if tags is not None:
            positions = pc.index_in(batch.column("tbname"), value_set=tags.column("tbname"))
            for name in tags.column_names[1:]:
                env[name] = tags.column(name).take(positions)
        if self.kind == "stable" and self._filter is not None and tags is not None:
            mask = pc.is_in(batch.column("tbname"), value_set=self._matching_tables(tags))
        elif self._filter is not None:
            mask = self._filter(env)
        else:
            mask = None
        if mask is not None:
            if not pc.any(mask).as_py():
                return None
            env = {k: v.filter(mask) for k, v in env.items()}
            versions = versions.filter(mask)
        timestamps = pc.cast(env[batch.column_names[1]], pa.int64())
        values = self._project(env, data_columns, tags)
        return Records(block.source, versions, env["tbname"], timestamps, values=values, is_stable=block.is_stable)

    def _project(self, env: Mapping[str, Any], data_columns: list[str], tags: pa.Table | None) -> pa.Table:
        everything = list(data_columns) + (tags.column_names[1:] if tags is not None else [])
        if self._items is None:
            return pa.table({name: env[name] for name in everything})
        cols: dict[str, Any] = {}
        n = len(env["tbname"])
        for name, fn in self._items:
            if name is None or fn is None:  # "*"
                cols.update({c: env[c] for c in everything})
                continue
            value = fn(env)
            if isinstance(value, pa.Scalar):
                value = pa.repeat(value, n)
            cols[name] = value
        return pa.table(cols)

    def output_schema(self) -> pa.Schema:
        """The schema of ``values`` this evaluator yields (known even when no row matches)."""
        assert self._schema is not None, "database topics have no single schema"
        env: dict[str, Any] = {f.name: pa.array([], f.type) for f in self._schema}
        env["tbname"] = pa.array([], pa.string())
        tags = None
        if self._tag_schema is not None:
            tags = self._tag_schema.empty_table().add_column(0, "tbname", pa.array([], pa.string()))
            env.update({f.name: pa.array([], f.type) for f in self._tag_schema})
        return self._project(env, self._schema.names, tags).schema

    def _matching_tables(self, tags: pa.Table) -> pa.Array:
        """The subtables of ``tags`` (a tag table) whose tags satisfy the condition."""
        env = {name: tags.column(name) for name in tags.column_names}
        assert self._filter is not None
        return tags.column("tbname").filter(self._filter(env))

    def _meta(self, entry: DecodedEntry) -> list[Records]:
        meta = entry.meta or {}
        if self.kind != "database" and self.source not in (meta.get("stable"), meta.get("name")):
            return []
        key = str(meta.get("name") or meta.get("stable") or "")
        return [
            Records(
                self.source,
                pa.array([entry.version], pa.int64()),
                pa.array([key], pa.string()),
                pa.array([int(meta.get("ts", 0))], pa.int64()),
                meta=meta,
            )
        ]


class NoRowsHere(TopicEvaluator):
    """A topic of one table (or subtable) on a node that holds other vgroups of its database, not the table's
    (cluster mode, docs/cluster.md): its rows are all in that vgroup's vnode, where the topic is compiled, so its
    partitions here are empty (such a topic has no ``WITH META``: the parser takes it only AS STABLE or DATABASE)."""

    def __init__(self) -> None:
        super().__init__("database", "")

    def __reduce__(self) -> tuple[Callable[..., TopicEvaluator], tuple[Any, ...]]:
        return NoRowsHere, ()

    def evaluate(self, entry: DecodedEntry, tag_tables: TagTables) -> list[Records]:
        return []


_OPS = {"AND": " and ", "OR": " or "}


def expr_name(expr: ast.Expr) -> str:
    """A column name for an un-aliased select item, rendered like the SQL that wrote it."""
    if isinstance(expr, ast.Col):
        return expr.name
    if isinstance(expr, ast.Lit):
        return repr(expr.value) if isinstance(expr.value, str) else str(expr.value).lower()
    if isinstance(expr, ast.Binary):
        return f"{expr_name(expr.left)}{_OPS.get(expr.op, expr.op)}{expr_name(expr.right)}"
    if isinstance(expr, ast.Unary):
        return f"{expr.op.lower()}{' ' if expr.op == 'NOT' else ''}{expr_name(expr.operand)}"
    if isinstance(expr, ast.Call):
        return f"{expr.name}({','.join(expr_name(a) for a in expr.args)})"
    if isinstance(expr, ast.Cast):
        return f"cast({expr_name(expr.expr)} as {expr.type.name.lower()})"
    return type(expr).__name__.lower()


_ONE = pa.scalar(1, pa.int64())


def _consecutive(first: int, n: int) -> pa.Array:
    """int64 ``first, first + 1, ..., first + n - 1``, made by a kernel (a Python ``range`` held the GIL ten times
    longer: a query's scan shares it with the storage thread)."""
    return pc.cumulative_sum(pa.repeat(_ONE, n), start=first - 1)


def _evaluator(kind: str, source: str, with_meta: bool, precision: str, stable: StableDef | None,
               columns: tuple[Column, ...] | None, items: tuple[ast.SelectItem, ...] | None,
               where: ast.Expr | None) -> TopicEvaluator:
    return TopicEvaluator(kind, source, with_meta=with_meta, precision=precision, stable=stable, columns=columns,
                          items=items, where=where)
