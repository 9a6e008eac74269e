"""One vnode: its WAL and the tables that live in it.

Tables are placed by a stable, documented hash: ``vnode = (crc32c(utf8("db.table")) * vgroups) >> 32``,
i.e. the 32-bit hash space is split into ``vgroups`` equal ranges as TDengine
splits it among vgroups. The placement never changes for a database.

Table definitions are created by meta entries of this vnode's WAL (the WAL
is their source of truth, as in TDengine). ``tables.ckpt`` is a checkpoint of
the table map and the WAL version it covers, one checksummed line
(:mod:`walgate.storage.lines`) replaced atomically
(:func:`walgate.storage.fileio.replace_file`); opening the vnode loads it and
replays the meta entries after it. A checkpoint is written on close and
before retention deletes segments (no segment is deleted when it cannot be
written), so the meta entries it would need are never gone. A checkpoint
that does not verify is reported to the DamageLog and the table map is
rebuilt from every meta entry still in the WAL (the report says so when
retention already deleted some). Dropped tables are kept (marked) so that
older entries stay evaluable. Consumer groups' committed offsets are not
kept here but in the group coordinator's log (coordinator_log.py).

Directory: ``db/<database id>/vnode<index>/`` holding ``wal/``, ``tables.ckpt``
and ``topics/`` (offsets.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa

from walgate.storage import fileio, lines
from walgate.storage.catalog import DatabaseDef, StableDef, column_from_json
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.entry import decode_entry
from walgate.storage.errors import StorageUnavailable
from walgate.storage.filecache import FileCache
from walgate.storage.fileio import SyncLatency
from walgate.storage.schema import Column
from walgate.storage.wal import KIND_META, Wal, WalOptions

__all__ = ["Vnode", "TableDef", "vnode_of"]

log = logging.getLogger("walgate.vnode")

CHECKPOINT = "tables.ckpt"


def vnode_of(db: str, table: str, vgroups: int) -> int:
    """The vnode index of ``db.table`` (see the module docstring)."""
    return (crc32c.crc32c(f"{db}.{table}".encode()) * vgroups) >> 32


@dataclass
class TableDef:
    name: str
    stable: str | None  # None for a normal table
    tags: dict[str, Any]
    columns: tuple[Column, ...] | None  # normal tables only
    version: int  # WAL version of the create entry
    created_ts: int  # creation time, database precision
    dropped: bool = False


def wal_options(db: DatabaseDef) -> WalOptions:
    o = db.options
    return WalOptions(
        level=int(o["WAL_LEVEL"]),
        fsync_period_ms=int(o["WAL_FSYNC_PERIOD"]),
        segment_bytes=max(int(o["WAL_SEGMENT_SIZE"]), 1) << 20,
        retention_period_s=int(o["WAL_RETENTION_PERIOD"]),
        retention_bytes=int(o["WAL_RETENTION_SIZE"]) << 20 if int(o["WAL_RETENTION_SIZE"]) >= 0 else -1,
        segment_ms=int(o.get("WAL_SEGMENT_MS", -1)),  # Kafka-native topics only (segment.ms)
    )


class Vnode:
    def __init__(self, db: DatabaseDef, index: int, directory: Path, wal: Wal, damage: DamageLog | None = None
                 ) -> None:
        self.db = db
        self.index = index
        self.dir = directory
        self.wal = wal
        self.damage = damage
        self.tables: dict[str, TableDef] = {}
        self._tag_tables: dict[str, pa.Table] = {}
        self._checkpointed = 0

    @classmethod
    def open(cls, db: DatabaseDef, index: int, directory: Path, damage: DamageLog | None = None,
             unsynced: Unsynced | None = None, clock: Clock = SYSTEM_CLOCK, files: FileCache | None = None,
             syncs: SyncLatency | None = None) -> Vnode:
        """Open (creating if needed) vnode ``index`` of ``db``; with ``unsynced``, its WAL (at level 2, period 0)
        leaves its fsyncs to group commit (:mod:`walgate.storage.durability`); its WAL ages segments and times fsync
        periods by ``clock``; its files are opened through ``files`` (the engine's cache) and its fsyncs timed into
        ``syncs`` (the engine's)."""
        directory.mkdir(parents=True, exist_ok=True)
        wal = Wal.open(directory / "wal", wal_options(db), damage=damage, unsynced=unsynced, owner=(db.name, index),
                       clock=clock, files=files, syncs=syncs)
        vnode = cls(db, index, directory, wal, damage)
        start = vnode._load_checkpoint()
        for entry in vnode.wal.read_from(start):
            if entry.kind == KIND_META and entry.version >= start:
                vnode.apply_meta(decode_entry(entry).meta or {}, entry.version)
        vnode._checkpointed = start
        return vnode

    def _load_checkpoint(self) -> int:
        """Load ``tables.ckpt``; the WAL version to replay meta entries from (0 without a valid checkpoint)."""
        path = self.dir / CHECKPOINT
        if not path.exists():
            return 0
        raw = path.read_bytes()
        try:
            snap = lines.decode(raw.rstrip(b"\n"))
            version = snap["version"]
            if type(version) is not int or version < 0:
                raise ValueError(f"version {version!r}")
            for t in snap["tables"]:
                cols = tuple(column_from_json(c) for c in t["columns"]) if t["columns"] is not None else None
                self.tables[t["name"]] = TableDef(
                    t["name"], t["stable"], t["tags"], cols, t["version"], t["created_ts"], t["dropped"]
                )
            return version
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            self.tables.clear()
            reason = f"table checkpoint: {exc}; the tables are rebuilt from the WAL's meta entries"
            if self.wal.first_version > 0:
                reason += (f", but retention deleted versions below {self.wal.first_version}: tables created "
                           "there are missing")
            if self.damage is None:
                log.warning("%s: %s", path, reason)
            else:
                self.damage.report(path, 0, len(raw), reason, "rebuilt", raw)
            return 0

    def reconfigure(self, db: DatabaseDef) -> None:
        """The database's options changed (a Kafka-native topic's configs): apply its WAL settings."""
        self.db = db
        self.wal.options = wal_options(db)

    # ------------------------------------------------------------------ meta

    def apply_meta(self, meta: dict[str, Any], version: int) -> None:
        """Apply one meta operation (live and on replay)."""
        op = meta["op"]
        if op == "create_table":
            cols = tuple(column_from_json(c) for c in meta["columns"]) if meta.get("columns") else None
            self.tables[meta["name"]] = TableDef(
                meta["name"], meta.get("stable"), meta.get("tags") or {}, cols, version, meta["ts"]
            )
        elif op == "drop_table" and meta["name"] in self.tables:
            self.tables[meta["name"]].dropped = True
        elif op == "drop_stable":
            for t in self.tables.values():
                if t.stable == meta["stable"]:
                    t.dropped = True
        stable = meta.get("stable")
        if stable is not None:
            self._tag_tables.pop(stable, None)

    def live(self, name: str) -> TableDef | None:
        t = self.tables.get(name)
        return t if t is not None and not t.dropped else None

    def tag_table(self, stable: StableDef) -> pa.Table:
        """``tbname`` + tag columns of every subtable of ``stable`` here (dropped ones too), cached."""
        cached = self._tag_tables.get(stable.name)
        if cached is not None:
            return cached
        subs = [t for t in self.tables.values() if t.stable == stable.name]
        cols: dict[str, pa.Array] = {"tbname": pa.array([t.name for t in subs], pa.string())}
        for tag in stable.tags:
            values = [t.tags.get(tag.name) for t in subs]
            cols[tag.name] = pa.array(values, tag.type.arrow(self.db.precision))
        table = pa.table(cols)
        self._tag_tables[stable.name] = table
        return table

    def forget_tag_tables(self) -> None:
        """Drop cached tag tables (after ALTER STABLE changes the tag schema)."""
        self._tag_tables.clear()

    # ---------------------------------------------------------- checkpoints

    def checkpoint(self) -> None:
        """Write the table map (atomically) as of the WAL's current end; OSError when the disk refuses it."""
        version = self.wal.next_version
        if version == self._checkpointed:
            return
        snap = {
            "version": version,
            "tables": [
                {
                    "name": t.name,
                    "stable": t.stable,
                    "tags": t.tags,
                    "columns": [[c.name, c.type.name, c.type.length] for c in t.columns] if t.columns else None,
                    "version": t.version,
                    "created_ts": t.created_ts,
                    "dropped": t.dropped,
                }
                for t in self.tables.values()
            ],
        }
        fileio.replace_file(self.dir / CHECKPOINT, lines.encode(snap), syncs=self.wal.syncs)
        self._checkpointed = version

    def apply_retention(self, now_wall: float, limit: int | None = None) -> int:
        """Delete expired segments (``now_wall``: seconds since the epoch; checkpointing first), at most ``limit`` of
        them (None: every one): how many were deleted (the log start moved when any was)."""
        n = self.wal.expired_segments(now_wall, limit)
        if not n:
            return 0
        try:
            self.wal.sync()
            self.checkpoint()
        except (OSError, StorageUnavailable) as exc:  # the segments keep the meta entries the old checkpoint needs
            log.warning("%s: no checkpoint (%s): retention waits", self.dir, exc)
            return 0
        before = len(self.wal.segments)
        self.wal.delete_oldest(n)
        return before - len(self.wal.segments)

    def close(self) -> None:
        """Checkpoint the table map once the WAL is durable (never a checkpoint ahead of the WAL), then close."""
        try:
            self.wal.sync()
            self.checkpoint()
        except (OSError, StorageUnavailable) as exc:  # the WAL still holds every meta entry after the last checkpoint
            log.error("%s: could not write the table checkpoint: %s", self.dir, exc)
        self.wal.close()
