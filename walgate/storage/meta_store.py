"""A vnode's meta store: the definitions of its tables on disk (``meta.db``), derived from the vnode's WAL.

As TDengine keeps child-table meta in each vnode's meta store, a vnode keeps its table definitions here and only a
bounded cache of them in memory (:mod:`walgate.storage.vnode`), so millions of subtables cost disk, not memory.
The WAL's meta entries stay the source of truth: the store records the WAL version it covers (every meta entry
below it is applied) and is rebuilt from the WAL when it is missing, damaged or ahead of the WAL.

Format: a SQLite database (Python's ``sqlite3``) in WAL mode (``meta.db-wal`` and ``meta.db-shm`` beside it while
it is open; SQLite folds them in and removes them at a clean close) of three tables. A write is one transaction, and a
killed one is rolled back at the next open. Writes are ``synchronous=NORMAL``: committed, not fsynced, so a power
loss may take the last writes back to an earlier consistent store, which covers an earlier WAL version (the rows and
the covered version are one transaction); the vnode replays the WAL's meta entries from there, as after any open.
A write with ``durable=True`` is fsynced with every write before it: the vnode asks for it where it relies on the
store (before retention deletes WAL segments, at close, before it removes ``tables.ckpt``). Between writes the
connection stays in a read transaction; another connection (another engine on the same data dir in one process, as
tests do) may read and write, and this one's next write may then be refused as a full disk's is. Read-only readers
(:mod:`walgate.storage.meta_reader`, which plans writes from the store) may read it from any thread or process.

* ``tables(id INTEGER PRIMARY KEY, name UNIQUE, def, version)``: rows in the order they were written (a new table
  is appended: TDengine's child-table names are md5-like, and a table keyed by them took one random page write per
  new table once it outgrew the page cache, 3-5x slower creation; only the name index's small pages are random now).
  ``def`` is the definition (name first, supertable, tags, columns, creation time, dropped) as a checksummed line
  of :mod:`walgate.storage.lines`' shape (no ``\n``) whose CRC-32C is that of the JSON followed by the decimal
  digits of ``version``, the WAL version of the create entry, kept in its own column so that a definition is
  encoded before its version is known (by the worker that plans the write, :func:`create_body`). A row of a store
  written before that column existed holds a :mod:`~walgate.storage.lines` line with the version inside as its
  ``def`` and NULL in ``version``: both kinds are read. An old store gains the column at its first writable open
  (:func:`_migrate`: one SQLite transaction that changes only the schema, whatever the number of rows); one whose
  migration SQLite refuses is used, and written, in the old format until an open migrates it. A flipped
  byte in a ``def`` or a ``version`` is found when the row is read, and one in
  a name when the store is opened, or by :func:`check` after an open without those checks (every name is compared
  with the one its ``def`` starts with, in SQL, and every row must be found through the name index, which holds no
  other entry), or read whole; there is no other index (a
  supertable's subtables are found by reading every row, as a query over it reads them anyway), so nothing
  unchecked decides which rows a read sees;
* ``covered(id = 0, line)``: the covered WAL version and the number of tables not dropped, a checksummed line;
  with ``ofs`` once the vnode applied an ALTER/DROP STABLE meta entry naming the cluster catalog record it is of
  (``[[WAL version, record], ...]`` in WAL order, :attr:`Vnode.stable_ofs <walgate.storage.vnode.Vnode.stable_ofs>`;
  a store without the key, as every store written before it, holds none); with ``undo``, the version the undo
  journal keeps before-images from (:attr:`MetaStore.undo_from`; without the key, the covered version);
* ``undo(id INTEGER PRIMARY KEY, version, line)``: the undo journal, as Kafka's follower truncation
  (``UnifiedLog.truncateTo``) needs the state below the cut without replaying the log from its start (which
  retention deleted): for each meta entry of WAL ``version`` at or after :attr:`MetaStore.undo_from` and below the
  covered version, the before-image of every row it changed (a dropped table's row alive, a re-created table's
  earlier row, each subtable's row of a DROP STABLE), written in the same transaction as the change
  (:meth:`MetaStore.write`), ``line`` one checksummed line ``{"at": version, "before": row}``. A new table's
  before-image is no row, and not written: a row whose own version (its create entry's) is at or after a cut is
  deleted by it, so creating subtables writes nothing more. The journal loses the lines below the high watermark
  the vnode passes each write (no cut goes below it), so it holds the entries above it, usually none.
  :meth:`MetaStore.undo_to` applies the before-images at or after a cut newest first, in one fsynced transaction
  that also covers the cut. A store written before the journal gains the empty table at its first writable open, in
  the migration's transaction (:func:`_migrate`), keeping before-images from its covered version on. A flipped byte
  in a line or its ``version`` is found when the line is read (the cut it would serve falls back: see
  :meth:`Vnode.truncate_to <walgate.storage.vnode.Vnode.truncate_to>`).

Descriptors: an open store holds three (``meta.db`` and the two SQLite files beside it), and a node may have
thousands of vnodes (a Kafka-native topic of 400 partitions has 400), so at most :data:`OPEN_STORES` stores keep
their connection open at a time (:class:`OpenStores`, one per process, as descriptors are a process's): using
another closes the least recently used one's (SQLite folds its side files in), and a store whose connection was
closed opens it again when next used, without the checks of :meth:`MetaStore.open` (they were made when the store
was first opened in this process, and nothing else writes it meanwhile). A store that a read is still iterating is
never closed.

Errors: a file that is not such a store, a row that does not verify, or SQLite reporting corruption raise
:class:`MetaDamaged` (the vnode reports it and rebuilds); any other SQLite error (a full disk, an I/O error) raises
:class:`~walgate.storage.errors.StorageUnavailable` naming the file; a write is one transaction, all or nothing.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import crc32c
import orjson

from walgate.storage import lines
from walgate.storage.catalog import column_from_json
from walgate.storage.errors import MetaDamaged, StorageUnavailable
from walgate.storage.schema import Column

__all__ = ["CHUNK", "META_STORE", "OPEN_STORES", "MetaDamaged", "MetaStore", "Ofs", "OpenStores", "TableDef", "Undo",
           "check", "create_body", "decode_def", "has_version_column", "read_covered"]

log = logging.getLogger("walgate.meta_store")

Ofs = tuple[tuple[int, int], ...]
"""``(WAL version, cluster catalog record)`` of each ALTER/DROP STABLE meta entry applied, in WAL order."""

META_STORE = "meta.db"
CHUNK = 500  # names per ``IN (...)`` lookup (SQLite allows 999 parameters at least)
CACHE_KIB = 16_384  # SQLite's page cache of one store
OPEN_STORES = 64  # stores with an open connection at a time (three descriptors each)
_CRC = re.compile(rb"[0-9a-f]{8} ")
_KEYS_UNLIKE_NAMES = ("SELECT name, def, {version} FROM tables WHERE typeof(name) != 'text' OR typeof(def) != 'blob'"
                      " OR substr(def, 10, length(CAST(name AS BLOB)) + 10) != CAST('{{\"name\":\"' || name || '\"' AS BLOB)")
"""The rows whose name is not the one their ``def`` starts with (as JSON without escapes); ``{version}``: the
``version`` column, or NULL in a store without it."""
_ROWS_NOT_INDEXED = ("SELECT count(*) FROM tables AS t NOT INDEXED WHERE NOT EXISTS"
                     " (SELECT 1 FROM tables AS u INDEXED BY tables_name WHERE u.name = t.name AND u.id = t.id)")
"""The rows the name index does not find (with the index's entries counted, the index is checked whole)."""
_UNDO = "CREATE TABLE undo (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, line BLOB NOT NULL)"
"""The undo journal (see the module docstring)."""
_SCHEMA = (
    "CREATE TABLE tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL, def BLOB NOT NULL, version INTEGER)",
    "CREATE UNIQUE INDEX tables_name ON tables (name)",
    _UNDO,  # (before ``covered``: a new store's last page holds the covered line, so a cut of its end is found)
    "CREATE TABLE covered (id INTEGER PRIMARY KEY CHECK (id = 0), line BLOB NOT NULL)",
)
_OLD_TABLES = "CREATE TABLE tables (id INTEGER PRIMARY KEY, name TEXT NOT NULL, def BLOB NOT NULL)"
"""``tables`` of a store written before the ``version`` column (SQLite's ``ALTER TABLE ... ADD COLUMN`` makes it
``_SCHEMA[0]``, text included)."""
_BEFORE_UNDO = tuple(s for s in _SCHEMA if s != _UNDO)
_SCHEMAS = {tuple(sorted(_SCHEMA)): (True, True), tuple(sorted(_BEFORE_UNDO)): (True, False),
            tuple(sorted((_OLD_TABLES, *_BEFORE_UNDO[1:]))): (False, False)}
"""(versioned, journaled) by sorted schema: this release's, one written before the undo journal, and one written
before the ``version`` column."""


@dataclass(frozen=True)
class TableDef:
    """One table of a vnode, as its create entry (WAL ``version``) made it; ``dropped`` once a drop entry passed."""

    name: str
    stable: str | None  # None for a normal table
    tags: dict[str, Any]
    columns: tuple[Column, ...] | None  # normal tables only
    version: int  # WAL version of the create entry
    created_ts: int  # creation time, database precision
    dropped: bool = False


@dataclass(frozen=True)
class Undo:
    """A before-image of the undo journal: the meta entry of WAL ``version`` changed the row of ``before.name``, which
    was ``before`` until then."""

    version: int
    before: TableDef


def def_body(t: TableDef) -> bytes:
    """``t`` without its version as the JSON a row's ``def`` holds (its name first)."""
    return orjson.dumps({
        "name": t.name, "stable": t.stable, "tags": t.tags, "created_ts": t.created_ts,
        "columns": [[c.name, c.type.name, c.type.length] for c in t.columns] if t.columns is not None else None,
        "dropped": t.dropped,
    })


def create_body(meta: dict[str, Any]) -> bytes | None:
    """The :func:`def_body` of the subtable a ``create_table`` meta entry creates (what applying it makes: see
    ``Vnode.apply_meta``), None for a normal table's (its columns are encoded from the applied definition)."""
    if meta.get("columns"):
        return None
    return orjson.dumps({"name": meta["name"], "stable": meta.get("stable"), "tags": meta.get("tags") or {},
                         "created_ts": meta["ts"], "columns": None, "dropped": False})


def encode_row(body: bytes, version: int) -> bytes:
    """A row's ``def``: ``body`` (:func:`def_body`) behind the checksum of it followed by ``version``'s digits."""
    return b"%08x " % crc32c.crc32c(b"%d" % version, crc32c.crc32c(body)) + body


def _def_json(t: TableDef) -> dict[str, Any]:
    """``t`` as JSON with its version inside (its name first)."""
    return {
        "name": t.name, "stable": t.stable, "tags": t.tags, "version": t.version, "created_ts": t.created_ts,
        "columns": [[c.name, c.type.name, c.type.length] for c in t.columns] if t.columns is not None else None,
        "dropped": t.dropped,
    }


def encode_def(t: TableDef) -> bytes:
    """``t`` as a row of a store without the ``version`` column: one checksummed line (no ``\\n``), its name first,
    its version inside."""
    return lines.encode(_def_json(t))[:-1]


def encode_undo(u: Undo) -> bytes:
    """``u`` as a line of the undo journal: one checksummed line (no ``\\n``) of the entry's version (``at``) and the
    before-image with its version inside."""
    return lines.encode({"at": u.version, "before": _def_json(u.before)})[:-1]


def decode_undo(version: object, raw: object) -> Undo:
    """The journal row of ``version`` holding ``raw``; :class:`MetaDamaged` when it does not verify."""
    try:
        if not isinstance(raw, bytes):
            raise ValueError(f"a line of type {type(raw).__name__}")
        d = lines.decode(raw)
        if not isinstance(d, dict) or d.get("at") != version or type(version) is not int:
            raise ValueError(f"a line of version {version!r} that holds {d!r}")
        before = d["before"]
        return Undo(version, _table(before["name"], before, before["version"]))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise MetaDamaged(f"the undo journal's line of version {version!r}: {exc}") from None


def decode_def(name: object, raw: object, version: object = None) -> TableDef:
    """The row of ``name`` (``version``: its ``version`` column, None in a row that holds it in ``def``);
    :class:`MetaDamaged` when it does not verify."""
    try:
        if not isinstance(raw, bytes) or not isinstance(name, str):
            raise ValueError(f"a row of types {type(name).__name__}, {type(raw).__name__}")
        d: Any
        if version is None:
            d = lines.decode(raw)
            version = d["version"]
            if type(version) is not int:
                raise ValueError(f"version {version!r}")
        else:
            if type(version) is not int or len(raw) < 10 or not _CRC.match(raw):
                raise ValueError(f"version {version!r} of a row that is not a checksummed line")
            if crc32c.crc32c(b"%d" % version, crc32c.crc32c(raw[9:])) != int(raw[:8], 16):
                raise ValueError("checksum mismatch")
            d = orjson.loads(raw[9:])
        return _table(name, d, version)
    except (ValueError, KeyError, TypeError, IndexError) as exc:  # (orjson.JSONDecodeError is a ValueError)
        raise MetaDamaged(f"table {name!r}: {exc}") from None


def _table(name: str, d: Any, version: int) -> TableDef:
    """The table ``name`` of WAL ``version`` whose definition is the JSON ``d``; ValueError, KeyError, TypeError or
    IndexError when it is not one."""
    if type(version) is not int or not isinstance(name, str):
        raise ValueError(f"version {version!r} of table {name!r}")
    if d["name"] != name:
        raise ValueError(f"row {name!r} holds table {d['name']!r}")
    if type(d["dropped"]) is not bool:
        raise ValueError(f"dropped {d['dropped']!r}")
    cols = tuple(column_from_json(c) for c in d["columns"]) if d["columns"] is not None else None
    return TableDef(name, d["stable"], d["tags"], cols, version, int(d["created_ts"]), d["dropped"])


def _schema(conn: sqlite3.Connection) -> tuple[bool, bool]:
    """Whether the store of ``conn`` has the ``version`` column and whether it has the undo journal (its schema is
    :data:`_SCHEMA`, or one written before the journal, or before the column); :class:`MetaDamaged` when it is
    none of them (a read-only connection does not parse every part of a schema, so it is compared whole: what a
    reader accepts, the store accepts), sqlite3.Error when it cannot be read."""
    schema = tuple(sorted(str(row[0]) for row in conn.execute("SELECT sql FROM sqlite_master")))
    found = _SCHEMAS.get(schema)
    if found is None:
        raise MetaDamaged(f"not a meta store (its schema is {list(schema)})")
    return found


def has_version_column(conn: sqlite3.Connection) -> bool:
    """Whether the store of ``conn`` has the ``version`` column (:func:`_schema`)."""
    return _schema(conn)[0]


def _migrate(conn: sqlite3.Connection) -> None:
    """Give the ``tables`` of a store written before the ``version`` column existed that column (NULL in every row:
    those rows keep their version in ``def``), and a store written before the undo journal an empty one, in one
    transaction that changes the schema only, so its time does not grow with the rows; a process killed in it
    leaves the old store, migrated again at the next open. Raises sqlite3.Error with nothing changed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        versioned, journaled = _schema(conn)
        if not versioned:
            conn.execute("ALTER TABLE tables ADD COLUMN version INTEGER")
        if not journaled:
            conn.execute(_UNDO)
        conn.execute("COMMIT")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def read_covered(conn: sqlite3.Connection) -> tuple[int, int, Ofs]:
    """The covered WAL version, the count of live tables and the ``ofs`` pairs of the store of ``conn``;
    :class:`MetaDamaged` when the ``covered`` row does not verify (sqlite3.Error when it cannot be read)."""
    rows = conn.execute("SELECT line FROM covered").fetchall()
    if len(rows) != 1:
        raise MetaDamaged(f"{len(rows)} covered versions")
    try:
        state = lines.decode(rows[0][0]) if isinstance(rows[0][0], bytes) else {}
    except ValueError as exc:
        raise MetaDamaged(f"covered version: {exc}") from None
    covered, live = (state.get("version"), state.get("live")) if isinstance(state, dict) else (state, None)
    if type(covered) is not int or covered < 0 or type(live) is not int or live < 0:
        raise MetaDamaged(f"covered version {covered!r}, {live!r} live tables")
    raw = state.get("ofs", []) if isinstance(state, dict) else []
    if not isinstance(raw, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int and x >= 0 for x in p) and p[0] < covered
            for p in raw) or [p[0] for p in raw] != sorted({p[0] for p in raw}):
        raise MetaDamaged(f"stable entries' records {raw!r}")
    return covered, live, tuple((p[0], p[1]) for p in raw)


def read_undo_from(conn: sqlite3.Connection, covered: int) -> int:
    """The WAL version from which the undo journal of the store of ``conn`` (covering ``covered``) holds the
    before-images of every entry applied (``covered`` when the line names none: nothing before it is in the journal
    of a store written before it); :class:`MetaDamaged` when it is not a version at or below ``covered``."""
    state = lines.decode(conn.execute("SELECT line FROM covered").fetchone()[0])  # (verified by read_covered)
    undo_from = state.get("undo", covered) if isinstance(state, dict) else covered
    if type(undo_from) is not int or not 0 <= undo_from <= covered:
        raise MetaDamaged(f"undo journal from version {undo_from!r}, covered {covered}")
    return undo_from


class OpenStores:
    """The stores whose connection is open, least recently used first: at most ``capacity`` of them, beyond those
    a read is iterating (see the module docstring)."""

    def __init__(self, capacity: int = OPEN_STORES) -> None:
        self.capacity = capacity
        self._open: OrderedDict[int, MetaStore] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def used(self, store: MetaStore) -> None:
        """``store``'s connection is open and was just used: close the least recently used others' past capacity."""
        self._open[id(store)] = store
        self._open.move_to_end(id(store))
        if len(self._open) <= self.capacity:  # (every lookup passes here: nothing to close, nothing copied)
            return
        for key in list(self._open):
            if len(self._open) <= self.capacity:
                break
            other = self._open[key]
            if other is not store and not other.reading:
                del self._open[key]
                other.park()

    def closed(self, store: MetaStore) -> None:
        self._open.pop(id(store), None)


PROCESS_STORES = OpenStores()
"""The process's open stores (descriptors are the process's, whatever the number of engines)."""


class MetaStore:
    """One vnode's ``meta.db`` (see the module docstring); used from one thread at a time."""

    def __init__(self, path: Path, conn: sqlite3.Connection, covered: int, live: int,
                 stores: OpenStores = PROCESS_STORES, versioned: bool = True, ofs: Ofs = (), journaled: bool = True,
                 undo_from: int = 0, undo_lines: int = 0) -> None:
        self.path = path
        self.versioned = versioned  # its rows have the version column (False: an old store whose migration failed)
        self.journaled = journaled  # it has the undo journal (False: an old store whose migration failed)
        self.undo_from = undo_from  # the journal holds the before-images of every entry from this version on
        self.undo_lines = undo_lines  # the journal's lines (none: a write runs no statement on it)
        self._version = "version" if versioned else "NULL"  # the version column as a SELECT reads it
        self._conn: sqlite3.Connection | None = conn
        self._stores = stores
        self.covered = covered  # every meta entry below this WAL version is in the store
        self.live = live  # of the tables in the store, those not dropped
        self.ofs = ofs  # the ALTER/DROP STABLE entries below ``covered`` that name their catalog record
        self.synced = False  # every write so far is fsynced (not known at open: a killed process's may not be)
        self.reading = 0  # reads iterating the store now (its connection is not closed under them)
        stores.used(self)

    def _connection(self) -> sqlite3.Connection:
        """The open connection (opened again, in the read transaction, when it was closed)."""
        conn = self._conn
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
                conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from None
            self._conn = conn
        self._stores.used(self)
        return conn

    def park(self) -> None:
        """Close the connection until the store is used again (its writes are all committed)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            conn.close()

    @classmethod
    def open(cls, path: Path, stores: OpenStores = PROCESS_STORES, *, whole: bool = True) -> MetaStore:
        """Open ``path``, creating an empty store (covering nothing) when there is no file; :class:`MetaDamaged`
        when the file is not a sound store, StorageUnavailable when it cannot be read or created. Its connection
        counts among ``stores``. Without ``whole``, the checks that read the whole file (:func:`check`, seconds
        for millions of tables) are left to the caller."""
        fresh = not path.exists()
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageUnavailable(f"{path}: {exc}") from None
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if mode is None or mode[0] != "wal":
                raise sqlite3.OperationalError(f"journal mode {mode!r} instead of WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            if fresh:
                conn.execute("BEGIN")
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute("INSERT INTO covered VALUES (0, ?)", (lines.encode({"version": 0, "live": 0})[:-1],))
                conn.execute("COMMIT")
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()  # the schema in meta.db, fsynced:
                if busy is None or busy[0]:  # a store of no schema is damaged, one covering nothing is not
                    raise sqlite3.OperationalError(f"{path}: the new store's checkpoint returned {busy!r}")
                conn.execute("BEGIN")
                return cls(path, conn, 0, 0, stores)
            versioned, journaled = _schema(conn)
            covered, live, ofs = read_covered(conn)
            undo_from = read_undo_from(conn, covered)
            if not journaled:
                try:
                    _migrate(conn)
                    versioned = journaled = True
                except sqlite3.Error as exc:
                    if _is_corrupt(exc):
                        raise
                    log.warning("%s: the table meta store keeps %s until a next open: %s", path,
                                "no undo journal" if versioned else "its old row format", exc)
            if whole:
                _check_whole(conn, versioned)
            [(lines_n,)] = conn.execute("SELECT count(*) FROM undo").fetchall() if journaled else [(0,)]
            conn.execute("BEGIN")
            return cls(path, conn, covered, live, stores, versioned, ofs, journaled, undo_from, lines_n)
        except MetaDamaged:
            conn.close()
            raise
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            conn.close()
            if isinstance(exc, sqlite3.OperationalError) and not _is_corrupt(exc):
                raise StorageUnavailable(f"{path}: {exc}") from None
            raise MetaDamaged(str(exc)) from None

    def get(self, name: str) -> TableDef | None:
        """The table ``name`` (dropped ones too), None when there is none."""
        row = self._query(f"SELECT def, {self._version} FROM tables WHERE name = ?", (name,)).fetchone()
        return None if row is None else decode_def(name, row[0], row[1])

    def get_many(self, names: Iterable[str]) -> dict[str, TableDef]:
        """The tables of ``names`` the store holds (dropped ones too), by name, looked up :data:`CHUNK` names at a
        time (``IN (...)``); a name it does not hold is left out."""
        wanted = list(dict.fromkeys(names))
        found: dict[str, TableDef] = {}
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start:start + CHUNK]
            sql = f"SELECT name, def, {self._version} FROM tables WHERE name IN ({','.join('?' * len(chunk))})"
            found.update((t.name, t) for t in self._defs(sql, tuple(chunk)))
        return found

    def of_stable(self, stable: str) -> Iterator[TableDef]:
        """Every subtable of ``stable`` (dropped ones too), in the order they were written."""
        return (t for t in self.all() if t.stable == stable)

    def all(self) -> Iterator[TableDef]:
        """Every table (dropped ones too), in the order they were written (one pass over the file)."""
        return self._defs(f"SELECT name, def, {self._version} FROM tables NOT INDEXED ORDER BY id", ())

    def write(self, dropped_stables: Mapping[str, int], tables: Iterable[TableDef], covered: int, live: int,
              durable: bool = False, bodies: Mapping[str, bytes] | None = None, forget: Sequence[str] = (),
              ofs: Ofs | None = None, undo: Sequence[Undo] = (), trim: int | None = None) -> int:
        """In one transaction: mark dropped every live subtable of ``dropped_stables`` (name -> the WAL version of
        its drop) but those ``undo`` holds a before-image of from before that drop (an entry between changed them,
        the caller counted their drop and puts them among ``tables``), then put ``tables`` (replacing rows of the
        same name), then delete the rows named in ``forget``, then record ``covered``, the count of live tables
        (``live`` less those this marked dropped, whose number it returns) and those of ``ofs`` below ``covered``
        (None: the store's). ``bodies``: the :func:`def_body` of some of ``tables`` by name, already encoded (a
        table's must be that of the table given).

        The undo journal (a journaled store's) takes the before-images ``undo`` of the entries applied since the
        last write (in WAL order) and, of each subtable this marks dropped, its row at its supertable's drop, then
        loses those of entries below ``trim`` (None: none lost; a cut never goes below it from now on) and at or
        after ``covered``, its :attr:`undo_from` then ``trim`` when that is higher (capped by ``covered``). Nothing
        is written when it raises. With ``durable``, the transaction and every one
        before it are on disk (fsynced) when it returns; without, they may be lost with the machine."""
        gone = dropped_stables
        first: dict[str, int] = {}  # the version of each row's earliest before-image among ``undo``
        for u in undo:
            first.setdefault(u.before.name, u.version)
        live_then = [(at, t) for t in self.all() if (at := gone.get(t.stable or "")) is not None and not t.dropped
                     and first.get(t.name, at) >= at] if gone else []
        drops = [replace(t, dropped=True) for _, t in live_then]
        undo_from, records = self.undo_from, []
        if self.journaled:
            undo_from = min(covered, undo_from if trim is None else max(undo_from, trim))
            records = [(u.version, encode_undo(u)) for u in (*undo, *(Undo(at, t) for at, t in live_then))
                       if undo_from <= u.version < covered]
        # encoded before the transaction; executemany then steps through C iterators, calling no Python per row,
        # over lists of untracked objects (a list of row tuples costs the garbage collector more than it saves)
        ordered = [*drops, *sorted(tables, key=_name)]
        names = [t.name for t in ordered]
        if self.versioned:
            known = bodies or {}
            versions = [t.version for t in ordered]
            defs = [encode_row(def_body(t), t.version) for t in drops]
            defs += [encode_row(known.get(t.name) or def_body(t), t.version) for t in ordered[len(drops):]]
            rows: Iterable[tuple[Any, ...]] = zip(names, defs, versions, strict=True)
            insert = "INSERT OR REPLACE INTO tables (name, def, version) VALUES (?, ?, ?)"
        else:
            rows = zip(names, [encode_def(t) for t in ordered], strict=True)
            insert = "INSERT OR REPLACE INTO tables (name, def) VALUES (?, ?)"
        conn = self._connection()
        try:
            if durable:  # the level may not change inside the held read transaction
                if conn.in_transaction:
                    conn.execute("COMMIT")
                conn.execute("PRAGMA synchronous=FULL")  # the commit fsyncs the SQLite WAL (all of it)
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.executemany(insert, rows)
            if forget:
                conn.executemany("DELETE FROM tables WHERE name = ?", [(n,) for n in forget])
            lines_n = self.undo_lines
            if lines_n and undo_from > self.undo_from:
                lines_n -= conn.execute("DELETE FROM undo WHERE version < ?", (undo_from,)).rowcount
            if lines_n and covered < self.covered:
                lines_n -= conn.execute("DELETE FROM undo WHERE version >= ?", (covered,)).rowcount
            if records:
                lines_n += conn.executemany("INSERT INTO undo (version, line) VALUES (?, ?)", records).rowcount
            kept = tuple(p for p in (self.ofs if ofs is None else ofs) if p[0] < covered)
            state: dict[str, Any] = {"version": covered, "live": live - len(drops)}
            if kept:
                state["ofs"] = [list(p) for p in kept]
            if undo_from != covered:
                state["undo"] = undo_from
            conn.execute("UPDATE covered SET line = ? WHERE id = 0", (lines.encode(state)[:-1],))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite rolled it back itself (a full disk or an I/O error ends the transaction)
            raise _error(self.path, exc) from None
        finally:
            if durable:
                self._relax()
            self._begin()
        self.covered, self.live, self.ofs, self.undo_from = covered, live - len(drops), kept, undo_from
        self.undo_lines = lines_n
        self.synced = durable
        return len(drops)

    def undone(self, version: int) -> list[Undo]:
        """The journal's before-images of the entries at or after ``version``, newest first; :class:`MetaDamaged`
        when a line does not verify."""
        if not self.undo_lines:
            return []
        cursor = self._query("SELECT version, line FROM undo WHERE version >= ? ORDER BY version DESC, id DESC",
                             (version,))
        try:
            rows = cursor.fetchall()
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None
        return [decode_undo(v, line) for v, line in rows]

    def undo_to(self, version: int, created: Iterable[str], ofs: Ofs) -> int:
        """The store as it was before the entries at or after ``version`` (an entry's start at or above
        :attr:`undo_from`, at or below :attr:`covered`), in one fsynced transaction covering ``version`` with
        ``ofs``: each row the journal holds a before-image of takes the oldest of those at or after ``version`` (the
        journal's before-images applied newest first), and every row then of a create entry at or after it (among
        them the rows of ``created``, the tables those entries create) is deleted: its before-image is no row.
        Returns the live tables' count. :class:`MetaDamaged` when the journal or a row does not verify,
        StorageUnavailable when the disk refuses; nothing is written when it raises."""
        restored = {u.before.name: u.before for u in self.undone(version)}  # (the oldest last: it is kept)
        names = list(dict.fromkeys([*created, *restored]))
        now = self.get_many(names)
        after = {n: restored.get(n, now.get(n)) for n in names}
        keep = [t for t in after.values() if t is not None and t.version < version]
        live = self.live - sum(not t.dropped for t in now.values()) + sum(not t.dropped for t in keep)
        self.write({}, keep, version, live, durable=True, forget=[n for n in names if n not in {t.name for t in keep}],
                   ofs=ofs)
        return live

    def _relax(self) -> None:
        """Back to unsynced commits after a durable write (a failure leaves FULL: slower, never less safe)."""
        conn = self._conn
        try:
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            if conn is not None:
                conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error:
            pass

    def _begin(self) -> None:
        """Open the transaction reads run in until the next write (one lock and cache check for all of them, not
        one per statement: a lookup takes ~2 us instead of ~7)."""
        conn = self._conn
        if conn is not None and not conn.in_transaction:
            try:
                conn.execute("BEGIN")
            except sqlite3.Error:
                pass  # the next statement runs in a transaction of its own, and write() tries again

    def backup_to(self, path: Path) -> None:
        """A copy of the store as of its last write at ``path`` (SQLite's online backup: one consistent read, whatever
        the store's size; not fsynced), ``path`` a new file; StorageUnavailable (or MetaDamaged) when SQLite
        refuses."""
        try:
            dest = sqlite3.connect(path, isolation_level=None)
            try:
                self._connection().backup(dest)
            finally:
                dest.close()
        except sqlite3.Error as exc:
            raise _error(path, exc) from None

    def close(self) -> None:
        self._stores.closed(self)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _defs(self, sql: str, args: tuple[Any, ...]) -> Iterator[TableDef]:
        cursor = self._query(sql, args)
        self.reading += 1
        try:
            while True:
                try:
                    rows = cursor.fetchmany(4096)
                except sqlite3.Error as exc:
                    raise _error(self.path, exc) from None
                if not rows:
                    return
                for name, raw, version in rows:
                    yield decode_def(name, raw, version)
        finally:
            self.reading -= 1

    def _query(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._connection().execute(sql, args)
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None


def _check_whole(conn: sqlite3.Connection, versioned: bool) -> None:
    """The checks that read the whole store: SQLite's ``quick_check``, every name against the one its ``def``
    starts with, every row found through the name index, which holds no other entry; MetaDamaged naming the first
    problem (sqlite3.Error raised as it is)."""
    problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise MetaDamaged("; ".join(map(str, problems[:3])))
    for name, raw, version in conn.execute(_KEYS_UNLIKE_NAMES.format(version="version" if versioned else "NULL")):
        decode_def(name, raw, version)  # a name JSON escapes, or damage
    [(unfound,)] = conn.execute(_ROWS_NOT_INDEXED).fetchall()
    [(rows_n,)] = conn.execute("SELECT count(*) FROM tables NOT INDEXED").fetchall()
    [(entries,)] = conn.execute("SELECT count(*) FROM tables INDEXED BY tables_name WHERE name >= ''").fetchall()
    if unfound or entries != rows_n:
        raise MetaDamaged(f"the name index finds {rows_n - unfound} of {rows_n} tables and holds {entries}")


def check(path: Path, stopped: Callable[[], bool] = lambda: False) -> str | None:
    """What :meth:`MetaStore.open` without ``whole`` left out, on a read-only connection of its own (safe on
    another thread while the store is used: it reads one snapshot of it): the damage found, None when there is
    none; StorageUnavailable when the file cannot be read, or when ``stopped()`` became true (asked every ~100,000
    SQLite steps)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StorageUnavailable(f"{path}: {exc}") from None
    try:
        conn.set_progress_handler(lambda: int(stopped()), 100_000)
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("BEGIN")
        _check_whole(conn, has_version_column(conn))
        return None
    except MetaDamaged as exc:
        return str(exc)
    except sqlite3.Error as exc:
        error = _error(path, exc)
        if isinstance(error, MetaDamaged):
            return str(error)
        raise error from None
    finally:
        conn.close()


def _name(t: TableDef) -> str:
    return t.name  # rows put in name order: each page of the name index is met once, in order


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or not isinstance(exc, sqlite3.OperationalError)


def _error(path: Path, exc: sqlite3.Error) -> Exception:
    """SQLite's ``exc`` as :class:`MetaDamaged` (corruption) or StorageUnavailable (anything else)."""
    if _is_corrupt(exc):
        return MetaDamaged(str(exc))
    return StorageUnavailable(f"{path}: {exc}")
