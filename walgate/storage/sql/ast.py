"""The statement AST the SQL parser produces and the engine executes.

Names: every object reference is a :class:`Name` with an optional database
(``db.name``); ``db is None`` means "the session's current database".
Identifiers are lower-cased by the parser unless back-quoted.

Values in INSERT are Python literals (int, float, str, bool, None) or
:class:`Now` (``now``, ``now() ± duration``); timestamps given as strings or
integers are converted by the engine with the database precision.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TypeAlias

from walgate.storage.schema import Column

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Col:
    """A column, tag or the pseudo-column ``tbname`` (also ``ts`` etc.)."""

    name: str


@dataclass(frozen=True)
class Lit:
    value: int | float | str | bool | None


@dataclass(frozen=True)
class Unary:
    op: str  # "NOT" | "-"
    operand: Expr


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / % = != < <= > >= AND OR
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Call:
    name: str  # lower-case scalar function name: abs, ceil, floor, round, sqrt, pow, log, lower, upper, length, concat, cast ...
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast:
    expr: Expr
    type: ColumnTypeRef


@dataclass(frozen=True)
class InList:
    expr: Expr
    values: tuple[Expr, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    expr: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    expr: Expr
    negated: bool = False


@dataclass(frozen=True)
class Like:
    expr: Expr
    pattern: str
    negated: bool = False


@dataclass(frozen=True)
class Duration:
    """A duration literal (``1h``, ``10s``) in nanoseconds: only in queries, as in ``ts > now - 1h``."""

    ns: int


Expr: TypeAlias = Col | Lit | Unary | Binary | Call | Cast | InList | Between | IsNull | Like | Duration
_EXPR_CLASSES = (Col, Lit, Unary, Binary, Call, Cast, InList, Between, IsNull, Like, Duration)  # == Expr's members


def children(expr: Expr) -> list[Expr]:
    """The direct sub-expressions of ``expr``, in field order."""
    out: list[Expr] = []
    for f in fields(expr):
        value = getattr(expr, f.name)
        out += [c for c in (value if isinstance(value, tuple) else (value,)) if isinstance(c, _EXPR_CLASSES)]
    return out


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield ``expr`` and all its sub-expressions, depth first (pre-order); iterative, so any depth is safe."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack += reversed(children(node))


def depth(expr: Expr) -> int:
    """Nesting depth of ``expr`` (a column or literal is 1); iterative, so any depth is safe."""
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack += [(c, level + 1) for c in children(node)]
    return deepest


@dataclass(frozen=True)
class ColumnTypeRef:
    """A type named in CAST (same vocabulary as column definitions)."""

    name: str
    length: int | None = None


@dataclass(frozen=True)
class SelectItem:
    expr: Expr | None  # None means "*"
    alias: str | None = None


# ------------------------------------------------------------------ values


@dataclass(frozen=True)
class Now:
    """``now`` / ``now()`` plus ``offset_ns`` nanoseconds (negative for ``now - 1h``)."""

    offset_ns: int = 0


Value: TypeAlias = int | float | str | bool | None | Now

# -------------------------------------------------------------- statements


@dataclass(frozen=True)
class Name:
    name: str
    db: str | None = None


@dataclass(frozen=True)
class CreateDatabase:
    name: str
    if_not_exists: bool = False
    # keys upper-case: VGROUPS, PRECISION, WAL_LEVEL, WAL_FSYNC_PERIOD, WAL_RETENTION_PERIOD, WAL_RETENTION_SIZE,
    # WAL_SEGMENT_SIZE, REPLICA, MIN_INSYNC (others are refused by the parser)
    options: dict[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class DropDatabase:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class UseDatabase:
    name: str


@dataclass(frozen=True)
class CreateStable:
    name: Name
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class CreateTable:
    """A normal table (no tags)."""

    name: Name
    columns: tuple[Column, ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class CreateSubtable:
    """``CREATE TABLE [IF NOT EXISTS] name USING stable [(tag, ...)] TAGS (v, ...)``."""

    name: Name
    stable: Name
    tag_names: tuple[str, ...] | None
    tag_values: tuple[Value, ...]
    if_not_exists: bool = False


@dataclass(frozen=True)
class AlterStable:
    name: Name
    action: str  # "ADD COLUMN" | "DROP COLUMN" | "ADD TAG" | "DROP TAG" | "MODIFY COLUMN" | "MODIFY TAG"
    column: Column | None = None  # for ADD / MODIFY
    column_name: str | None = None  # for DROP


@dataclass(frozen=True)
class DropTable:
    names: tuple[Name, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class DropStable:
    name: Name
    if_exists: bool = False


@dataclass(frozen=True)
class Using:
    stable: Name
    tag_names: tuple[str, ...] | None
    tag_values: tuple[Value, ...]


@dataclass(frozen=True)
class InsertTarget:
    table: Name
    using: Using | None
    columns: tuple[str, ...] | None
    rows: tuple[tuple[Value, ...], ...]


@dataclass(frozen=True)
class Insert:
    targets: tuple[InsertTarget, ...]


@dataclass(frozen=True)
class CreateTopic:
    name: str
    kind: str  # "database" | "stable" | "select"
    source: Name  # the database (name=db, db=None) or the stable / table
    with_meta: bool = False
    if_not_exists: bool = False
    select: tuple[SelectItem, ...] | None = None  # kind == "select"
    where: Expr | None = None  # tag condition for "stable", any condition for "select"
    sql: str = ""  # original text, shown by SHOW TOPICS


@dataclass(frozen=True)
class DropTopic:
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class DropConsumerGroup:
    """``DROP CONSUMER GROUP [IF EXISTS] group ON topic``: forget the group's progress on the topic."""

    group: str
    topic: str
    if_exists: bool = False


@dataclass(frozen=True)
class RedistributeVgroup:
    """TDengine's ``REDISTRIBUTE VGROUP vgroup_no DNODE d1 [DNODE d2] [DNODE d3]``: move vgroup ``vgroup`` of
    database ``db`` (None: the session's; walgate's vgroup numbers are per database, so ``db.vgroup_no`` may name
    it) to the nodes ``dnodes``, the first the preferred leader (cluster mode: :mod:`walgate.gateway.cluster_sql`)."""

    db: str | None
    vgroup: int
    dnodes: tuple[int, ...]


@dataclass(frozen=True)
class BalanceVgroup:
    """TDengine's ``BALANCE VGROUP`` (even out the replicas over the live nodes) or, with ``leader``, ``BALANCE
    VGROUP LEADER`` (elect each vgroup's preferred leader)."""

    leader: bool = False


@dataclass(frozen=True)
class DropDnode:
    """TDengine's ``DROP DNODE dnode_id``: move every replica off node ``dnode`` (decommission it)."""

    dnode: int


@dataclass(frozen=True)
class Show:
    what: str  # "DATABASES" | "STABLES" | "TABLES" | "TOPICS" | "CONSUMERS" | "SUBSCRIPTIONS" | "QUARANTINE"
    db: str | None = None


@dataclass(frozen=True)
class CreateUser:
    """``CREATE USER name PASS 'password'`` (the password is never shown: ``repr`` hides it)."""

    name: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class AlterUser:
    """``ALTER USER name PASS 'password'``."""

    name: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class DropUser:
    name: str


@dataclass(frozen=True)
class ShowUsers:
    """``SHOW USERS``."""


@dataclass(frozen=True)
class Describe:
    name: Name


@dataclass(frozen=True)
class Interval:
    """``INTERVAL(length [, offset]) [SLIDING(sliding)]``, in nanoseconds (``sliding`` None: tumbling windows)."""

    length_ns: int
    offset_ns: int = 0
    sliding_ns: int | None = None


@dataclass(frozen=True)
class Fill:
    """``FILL(mode)``: NONE | NULL | PREV | NEXT | LINEAR, or VALUE with its values."""

    mode: str
    values: tuple[int | float | str | bool | None, ...] = ()


@dataclass(frozen=True)
class OrderItem:
    expr: Expr
    descending: bool = False


@dataclass(frozen=True)
class Select:
    """A query: ``SELECT ... FROM ... [WHERE] [PARTITION BY] [INTERVAL [SLIDING] [FILL]] [GROUP BY] [HAVING]
    [ORDER BY] [LIMIT n [OFFSET m]]`` (storage/query.py checks what may be combined and runs it)."""

    items: tuple[SelectItem, ...]
    source: Name
    where: Expr | None = None
    limit: int | None = None
    offset: int = 0
    partition_by: tuple[Expr, ...] = ()
    interval: Interval | None = None
    fill: Fill | None = None
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    order_by: tuple[OrderItem, ...] = ()

    def expressions(self) -> list[Expr]:
        """Every expression of the query (select list, WHERE, keys, HAVING, ORDER BY)."""
        exprs = [i.expr for i in self.items if i.expr is not None] + list(self.partition_by + self.group_by)
        exprs += [e for e in (self.where, self.having) if e is not None] + [o.expr for o in self.order_by]
        return exprs


@dataclass(frozen=True)
class Grant:
    """GRANT (``revoke`` False) or REVOKE ``privileges`` ON ``db.*`` (``table`` "*"), ``db.table``, or a topic
    (``db`` None, ``table`` the topic) TO / FROM ``user``."""

    privileges: tuple[str, ...]  # "ALL" | "READ" | "WRITE" | "SUBSCRIBE"
    db: str | None
    table: str
    user: str
    revoke: bool = False


@dataclass(frozen=True)
class ShowUserPrivileges:
    """SHOW USER PRIVILEGES: every grant and ACL, one row per (user, privilege, object)."""


Statement: TypeAlias = (
    CreateDatabase
    | DropDatabase
    | UseDatabase
    | CreateStable
    | CreateTable
    | CreateSubtable
    | AlterStable
    | DropTable
    | DropStable
    | Insert
    | CreateTopic
    | DropTopic
    | DropConsumerGroup
    | RedistributeVgroup
    | BalanceVgroup
    | DropDnode
    | Show
    | Describe
    | Select
    | Grant
    | ShowUserPrivileges
    | CreateUser
    | AlterUser
    | DropUser
    | ShowUsers
)
