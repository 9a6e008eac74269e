"""The planner's table lookup in a worker process: each vnode's ``meta.db`` read through a
:class:`~walgate.storage.meta_reader.MetaReader` (issue 23, plan step 3).

The node's snapshot names, per database, the directory of its vnodes and each vnode's
:attr:`~walgate.storage.vnode.Vnode.meta_version` as the node saw it. :class:`StoredTables` opens a vnode's reader at
its first lookup there and answers every lookup of that vnode from the reader's one read transaction, so the plan's
tables of that vnode are exactly those of the store as of the reader's ``covered`` version: a table it does not
find is absent as of that version (not a candidate). :meth:`StoredTables.versions` gives that version per vnode
consulted, which :meth:`~walgate.storage.ingest.Ingest.apply` compares with the vnode's ``meta_version``.

A vnode whose reader gave up (a store missing, damaged or ahead of the snapshot) is answered from the tables the
node looked up for this plan (what :class:`~walgate.storage.write_plan.NeedTables` asked for), else as a candidate
creation (its version is None, so the lane checks its names itself, after
:meth:`~walgate.storage.vnode.Vnode.check_store`, which reports the damage). The readers are closed by :meth:`StoredTables.close` (their read
transactions would keep the vnodes' store files from checkpointing) and are never pickled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from walgate.storage.catalog import DatabaseDef
from walgate.storage.meta_reader import MetaReader, ReaderGaveUp
from walgate.storage.meta_store import META_STORE, TableDef
from walgate.storage.vnode import vnode_of
from walgate.storage.write_plan import NeedTables

__all__ = ["StoredTables", "vnode_store"]


def vnode_store(db_dir: Path, index: int) -> Path:
    """The ``meta.db`` of vnode ``index`` of the database in ``db_dir`` (where the store opens its vnodes)."""
    return db_dir / f"vnode{index}" / META_STORE


class StoredTables:
    """A :class:`~walgate.storage.write_plan.TableLookup` reading each vnode's ``meta.db`` (see the module
    docstring): ``stores`` maps a database to its directory and its vnodes' meta versions, ``known`` holds the
    tables the node looked up (None: absent), asked for when a reader gave up."""

    def __init__(self, stores: Mapping[str, tuple[str, tuple[int, ...]]],
                 known: Mapping[tuple[str, str], TableDef | None] | None = None) -> None:
        self.stores = dict(stores)
        self.known = dict(known or {})
        self._readers: dict[tuple[str, int], MetaReader | None] = {}  # None: gave up
        self._found: dict[tuple[str, int], dict[str, TableDef | None]] = {}  # per vnode: the names looked up

    def __getstate__(self) -> dict[str, Any]:
        return {"stores": self.stores, "known": self.known}  # readers are opened where the lookups are made

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["stores"], state["known"])  # type: ignore[misc]

    def _reader(self, db: str, vnode: int) -> MetaReader | None:
        """The reader of vnode ``vnode`` of ``db``, opened at its first use; None when it gave up."""
        key = (db, vnode)
        if key not in self._readers:
            root, versions = self.stores[db]
            try:
                self._readers[key] = MetaReader.open(vnode_store(Path(root), vnode), versions[vnode])
            except ReaderGaveUp:
                self._readers[key] = None
            self._found[key] = {}
        return self._readers[key]

    def _look_up(self, db: str, vnode: int, names: Iterable[str]) -> None:
        """Read the names of ``names`` not yet looked up on vnode ``vnode`` of ``db`` (in chunks); a reader that
        gives up on a row gives up the whole vnode."""
        reader = self._reader(db, vnode)
        if reader is None:
            return
        found = self._found[(db, vnode)]
        wanted = [n for n in names if n not in found]
        if not wanted:
            return
        try:
            rows = reader.lookup(wanted)
        except ReaderGaveUp:
            reader.close()
            self._readers[(db, vnode)] = None
            found.clear()
            return
        for name in wanted:
            found[name] = rows.get(name)

    def prefetch(self, db: DatabaseDef, names: Iterable[str]) -> None:
        by_vnode: dict[int, list[str]] = {}
        for name in names:
            by_vnode.setdefault(vnode_of(db.name, name, db.vgroups), []).append(name)
        for vnode, some in by_vnode.items():
            self._look_up(db.name, vnode, some)

    def find(self, db: str, vnode: int, name: str) -> TableDef | None:
        if (db, name) in self.known or db not in self.stores:
            return self.known.get((db, name))  # as the node found it (the lane checks it against its version)
        self._look_up(db, vnode, (name,))
        if self._readers[(db, vnode)] is None:
            return None  # a candidate: the lane looks it up
        t = self._found[(db, vnode)][name]
        return None if t is None or t.dropped else t

    def require(self, keys: Iterable[tuple[str, str]]) -> None:
        missing = []
        for db, name in dict.fromkeys(keys):
            if (db, name) in self.known:
                continue
            if db in self.stores:
                versions = self.stores[db][1]
                vnode = vnode_of(db, name, len(versions))
                self._look_up(db, vnode, (name,))  # (a reader may give up on the row itself)
                reader = self._readers[(db, vnode)]
                if reader is not None and reader.covered == versions[vnode]:
                    continue  # a store behind the vnode (a write it refused) may lack the table: asked for
            missing.append((db, name))
        if missing:
            raise NeedTables(missing)

    def check_new_tables(self, db: DatabaseDef, more: int) -> None:
        pass  # the commit counts what is created

    def versions(self) -> dict[tuple[str, int], int | None]:
        return {key: None if reader is None else reader.covered for key, reader in self._readers.items()}

    def maybe_stored(self) -> set[tuple[str, str]]:
        dropped = {(db, name) for (db, _), found in self._found.items() for name, t in found.items()
                   if t is not None and t.dropped}
        return dropped | {key for key, t in self.known.items() if t is None}

    def close(self) -> None:
        """Close every reader opened (the lookups made stay answered)."""
        for reader in self._readers.values():
            if reader is not None:
                reader.close()
