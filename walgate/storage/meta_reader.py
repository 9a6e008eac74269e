"""A read-only view of a vnode's ``meta.db``, for planning a write before it takes the vnode's lane (issue 23).

A write is planned (its tables looked up, its creations decided) away from the thread that owns the vnode, even in
another process, from the store the vnode writes (:mod:`walgate.storage.meta_store`). The vnode keeps the store
current at the end of every write that changed tables (:meth:`~walgate.storage.vnode.Vnode.end_write`), so between
writes its ``covered`` version equals the vnode's
:attr:`~walgate.storage.vnode.Vnode.meta_version` unless the store refused a write (then it is lower).

A :class:`MetaReader` opens the file with SQLite's ``mode=ro`` (it never writes, never creates it, never reports
damage, never migrates it: it reads the rows of a store written before the ``version`` column existed as the vnode
does, and both kinds of row in a migrated one) and answers every lookup from one read transaction: its
:attr:`~MetaReader.covered` version and the rows it finds are one snapshot of the store, whatever the vnode writes
meanwhile. Names are looked up in chunks of
:data:`CHUNK` (``WHERE name IN (...)``). The planner records ``covered``; the vnode's lane then accepts the plan's
lookups at once when its ``meta_version`` still equals it, and checks them again otherwise.

The reader gives up (:class:`ReaderGaveUp`) instead of answering when the store is missing or cannot be read, when
anything it reads does not verify (the covered row, a row's checksum or name: as the vnode's own lookups check
them), or when the store covers a version past the ``meta_version`` the planner was given (a snapshot older than
the store, or a store the vnode does not stand behind). The planner then falls back to the vnode's own lookups on
its lane, which report a damaged store once and rebuild it from the WAL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from walgate.storage.meta_store import CHUNK, MetaDamaged, TableDef, decode_def, has_version_column, read_covered

__all__ = ["CHUNK", "MetaReader", "ReaderGaveUp"]


class ReaderGaveUp(Exception):
    """The reader cannot answer from this store (the message says why): plan with the vnode's own lookups."""


class MetaReader:
    """One read transaction on a vnode's ``meta.db`` (see the module docstring); used from one thread."""

    def __init__(self, path: Path, conn: sqlite3.Connection, covered: int, versioned: bool = True) -> None:
        self.path = path
        self._conn = conn
        self._version = "version" if versioned else "NULL"  # the version column (NULL: a store of the old format)
        self.covered = covered  # every meta entry below this WAL version is in what this reader sees

    @classmethod
    def open(cls, path: Path, meta_version: int) -> MetaReader:
        """A reader of the store at ``path`` as it is now; :class:`ReaderGaveUp` when it is missing, cannot be
        read, does not verify or covers more than ``meta_version``."""
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise ReaderGaveUp(f"{path}: {exc}") from None
        try:
            conn.execute("BEGIN")  # the read transaction starts at the first read and ends at close
            covered, _, _ = read_covered(conn)
            versioned = has_version_column(conn)
        except (sqlite3.Error, MetaDamaged) as exc:
            conn.close()
            raise ReaderGaveUp(f"{path}: {exc}") from None
        if covered > meta_version:
            conn.close()
            raise ReaderGaveUp(f"{path}: the store covers version {covered}, past the vnode's {meta_version}")
        return cls(path, conn, covered, versioned)

    def lookup(self, names: Iterable[str]) -> dict[str, TableDef]:
        """The tables of ``names`` the store holds (dropped ones too), by name; a name it does not hold is left
        out. :class:`ReaderGaveUp` when a row does not verify or the store cannot be read."""
        wanted = list(dict.fromkeys(names))
        found: dict[str, TableDef] = {}
        try:
            for start in range(0, len(wanted), CHUNK):
                chunk = wanted[start:start + CHUNK]
                sql = f"SELECT name, def, {self._version} FROM tables WHERE name IN ({','.join('?' * len(chunk))})"
                for name, raw, version in self._conn.execute(sql, chunk):
                    found[name] = decode_def(name, raw, version)
        except (sqlite3.Error, MetaDamaged) as exc:
            raise ReaderGaveUp(f"{self.path}: {exc}") from None
        return found

    def close(self) -> None:
        """End the read transaction and close the file."""
        self._conn.close()

    def __enter__(self) -> MetaReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()
