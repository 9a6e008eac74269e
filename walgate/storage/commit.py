"""The commit path: what one request appends to each vnode, written all or nothing.

Write protocol (the "nothing partial" rule): a request is parsed, resolved against the catalog and every value
coerced *before* anything is written; what it will append is gathered per vnode in a :class:`Pending` (meta
entries for auto-created or dropped tables, rows per source). :meth:`Commits.commit` then builds every vnode's
entries before the first append, makes one atomic WAL append per vnode, and applies metas and advances topic
offset indexes only after the last one succeeded. A failure while appending is atomic per vnode (see wal.py) and
across vnodes: the appends already made for the request are taken back (``Wal.undo_append``).

Lanes (:mod:`walgate.storage.lanes`): a commit touches only the vnodes of the database it writes (their WALs, meta
stores, topic indexes) and reads the catalog; its ``then`` (a catalog change) runs only in an exclusive call. The
table limit counts every vnode of the database, which a commit creating tables holds whole.

Under group commit (:mod:`~walgate.storage.durability`) a WAL_LEVEL 2 append returns before its fdatasync, and the
request is answered once every vnode it wrote is durable. An fdatasync failing after that refuses the request, but
cannot take back what the other vnodes made durable, nor the failed vnode's bytes (see wal.py): such a request
was refused yet its rows may be seen once durable, as a retried one may be seen twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import led_appends
from walgate.storage.catalog import DatabaseDef
from walgate.storage.entry import Block, DecodedEntry, encode_blocks, encode_meta
from walgate.storage.errors import InvalidValue
from walgate.storage.led_appends import LedAppend
from walgate.storage.schema import Column
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.vnode import TableDef, Vnode
from walgate.storage.wal import KIND_DATA, KIND_META

__all__ = ["Commits", "Pending", "Plan"]


@dataclass
class Pending:
    """What one request will append to one vnode: meta entries, then one data entry of blocks."""

    metas: list[dict[str, Any]] = field(default_factory=list)
    # (source, is_stable) -> (columns, tbname per row, row dicts)
    blocks: dict[tuple[str, bool], tuple[tuple[Column, ...], list[str], list[dict[str, Any]]]] = field(default_factory=dict)
    new_tables: dict[str, TableDef] = field(default_factory=dict)  # created by this request's metas
    # by name, the meta store's row body of the subtables metas create (meta_store.create_body), encoded by the
    # planner so that the vnode's lane does not encode them
    bodies: dict[str, bytes] = field(default_factory=dict)
    # (source, is_stable) -> rows already typed: ``tbname`` then the source's columns in their Arrow types
    batches: dict[tuple[str, bool], list[pa.RecordBatch]] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without ``new_tables``: planning's index of ``metas`` (a TableDef per creation would make a plan
        of 100 k creations seconds slower to unpickle in the node); applying reads ``metas``."""
        return {**self.__dict__, "new_tables": {}}

    def add_rows(self, source: str, is_stable: bool, columns: tuple[Column, ...], table: str, rows: list[dict[str, Any]]) -> None:
        _, names, block_rows = self.blocks.setdefault((source, is_stable), (columns, [], []))
        names += [table] * len(rows)
        block_rows += rows

    def add_batch(self, source: str, is_stable: bool, batch: pa.RecordBatch) -> None:
        """Rows as one Arrow batch (``tbname``, then every column of ``source`` in its Arrow type), after the rows
        and batches added before for ``source``."""
        self.batches.setdefault((source, is_stable), []).append(batch)


Plan = dict[int, Pending]
"""A request's pending entries of one database, by vnode index."""


class Commits:
    """Appends plans (see the module docstring); advances topic indexes through ``views``."""

    def __init__(self, store: Store, views: TopicViews) -> None:
        self.store = store
        self.views = views

    def with_meta(self, db: DatabaseDef, *metas: dict[str, Any]) -> Pending:
        """A Pending of ``metas``, each stamped with the current time."""
        pending = Pending()
        for m in metas:
            pending.metas.append({**m, "ts": self.store.now_ts(db)})
        return pending

    def commit(self, db: DatabaseDef, plan: Plan, then: Callable[[], object] = lambda: None) -> None:
        """Append each vnode's pending entries atomically, then apply and index them: two phases.

        ``then`` is the catalog change the entries belong to (a dropped or altered supertable): it runs once every
        append succeeded and before anything is applied, and when it raises the appends are taken back, so the
        catalog and the vnodes change together or not at all.

        1. Every vnode's entries are built (Arrow blocks, encoding: all that bad data can make fail, raised as
           :class:`InvalidValue`) before anything is appended, so a request refused here writes nothing anywhere.
        2. One WAL append per vnode; metas are applied and offset indexes advanced (consumers woken) only once
           every append succeeded. A plan creating more tables than the database may hold (``max_tables``) is
           refused first (LimitExceeded). An append the disk refuses raises :class:`StorageUnavailable` before anything
           was applied or indexed, and the appends already made for the request's other vnodes are taken back
           (:meth:`~walgate.storage.wal.Wal.undo_append`; a WAL that cannot cut them off is fenced and never serves
           them): a refused request is written nowhere.

        Each append to a replicated vnode (led here: :meth:`Store.written_vnode
        <walgate.storage.store.Store.written_vnode>`) is noted for a caller that waits for the in-sync replicas, with
        the leader epoch it was appended in (:mod:`walgate.storage.led_appends`)."""
        self.store.check_new_tables(db, sum(m["op"] == "create_table" for p in plan.values() for m in p.metas))
        staged: list[tuple[Vnode, Pending, list[Block], list[tuple[int, int, int, bytes]]]] = []
        for i, pending in sorted(plan.items()):
            try:
                entries: list[tuple[int, int, int, bytes]] = [
                    (KIND_META, 1, m["ts"], encode_meta(m)) for m in pending.metas
                ]
                blocks = [_block(db, key, *parts) for key, parts in pending.blocks.items()]
                blocks = _with_batches(blocks, pending.batches)
                if blocks:
                    n = sum(b.batch.num_rows for b in blocks)
                    max_ts = max(pc.max(pc.cast(b.batch.column(1), pa.int64())).as_py() for b in blocks)
                    entries.append((KIND_DATA, n, max_ts, encode_blocks(blocks)))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise InvalidValue(f"rows that do not fit their columns: {exc}") from None
            if entries:
                staged.append((self.store.written_vnode(db.name, i), pending, blocks, entries))
        appended: list[tuple[Vnode, Pending, list[Block], int]] = []
        try:
            for vnode, pending, blocks, entries in staged:
                appended.append((vnode, pending, blocks, vnode.wal.append(entries)))
            then()
        except Exception:
            for vnode, _, _, version in reversed(appended):
                vnode.wal.undo_append(version)
            raise
        for vnode, *_ in appended:  # what the caller waits for the in-sync replicas of (led_appends.py)
            if vnode.wal.leading:  # (one append per vnode: its last entry is the WAL's last)
                led_appends.note(LedAppend((db.name, vnode.index), vnode.epochs.latest_epoch,
                                           vnode.wal.next_version - 1))
        indexed = any(t.db == db.name for t in self.store.catalog.topics.values())  # else no index to advance
        for vnode, pending, blocks, version in appended:
            if all(m["op"] == "create_table" for m in pending.metas):
                vnode.apply_creates(version, [m["name"] for m in pending.metas], pending.metas, pending.bodies)
            else:
                for i, m in enumerate(pending.metas):
                    vnode.apply_meta(m, version + i)
            vnode.end_write()  # meta.db covers every table the write changed (what a planner's reader reads)
            if not indexed:
                continue
            decoded = [DecodedEntry(version + i, KIND_META, meta=m) for i, m in enumerate(pending.metas)]
            version += len(pending.metas)
            if blocks:
                decoded.append(DecodedEntry(version, KIND_DATA, tuple(blocks)))
            self.views.index(vnode, decoded, vnode.wal.next_version)


def _with_batches(blocks: list[Block], batches: dict[tuple[str, bool], list[pa.RecordBatch]]) -> list[Block]:
    """``blocks`` (built from row dicts) joined with the typed batches of each source: one block per source."""
    if not batches:
        return blocks
    merged = {(b.source, b.is_stable): [b.batch] for b in blocks}
    for key, more in batches.items():
        merged.setdefault(key, []).extend(more)
    return [Block(key[0], key[1], parts[0] if len(parts) == 1 else pa.concat_batches(parts))
            for key, parts in merged.items()]


def _block(
    db: DatabaseDef, key: tuple[str, bool], columns: tuple[Column, ...], names: list[str], rows: list[dict[str, Any]]
) -> Block:
    """Rows (dicts; a missing column is NULL) as one Arrow block: ``tbname`` then the columns."""
    struct = pa.array(rows, type=pa.struct([(c.name, c.type.arrow(db.precision)) for c in columns]))
    arrays = [pa.array(names, pa.string()), *struct.flatten()]
    return Block(key[0], key[1], pa.RecordBatch.from_arrays(arrays, names=["tbname", *(c.name for c in columns)]))
