"""One vnode: its WAL and the tables that live in it.

Tables are placed by a stable, documented hash: ``vnode = (crc32c(utf8("db.table")) * vgroups) >> 32``,
i.e. the 32-bit hash space is split into ``vgroups`` equal ranges as TDengine
splits it among vgroups. The placement never changes for a database.

Table definitions are created by meta entries of this vnode's WAL (the WAL
is their source of truth, as in TDengine). They live on disk in the vnode's
meta store (``meta.db``, :mod:`walgate.storage.meta_store`), which records the
WAL version it covers; memory holds only the tables changed since the store was
last written (at most FLUSH_TABLES, more only while the disk refuses the
store's writes) and the CACHE_TABLES most recently used, so a vnode's memory
does not grow with its subtables. Opening the vnode replays the meta entries
after the covered version. The store is written (and the covered version
advanced) every FLUSH_TABLES changed tables, at a DROP STABLE and at
``Vnode.end_write`` (the end of a write that changed tables, so that a reader of
``meta.db`` planning the next write sees them: :mod:`walgate.storage.meta_reader`;
after a refused write, only at the next of the others), without an
fsync (a store a power loss takes back covers an earlier version, and the
WAL's meta entries after it are replayed at open); it is written and fsynced
on close, before retention deletes segments (no segment is deleted when it
cannot be) and before ``tables.ckpt`` is removed, so the meta entries it would
need are never gone. A store that is
damaged (reported to the DamageLog, its first bytes kept), missing, or ahead of
the WAL (a WAL_LEVEL 1 tail lost with the machine) is rebuilt from every meta
entry still in the WAL (the report says so when retention already deleted
some); a vnode of a data dir written before the meta store starts from its
``tables.ckpt``, removed once the store covers it. Dropped tables are kept
(marked) so that older entries stay evaluable. Consumer groups' committed
offsets are not kept here but in the group coordinator's log (coordinator_log.py).

The meta store also keeps an undo journal: the before-images of the rows each meta entry above the high watermark
changed (:mod:`walgate.storage.meta_store`), so that a follower's cut (:meth:`Vnode.truncate_to`) takes the tables
back without the WAL below it, which retention may have deleted. It loses what the high watermark passed at each
store write (:attr:`Wal.visible_version`: a single node's, what it serves); a replica's (of a replicated database,
or with a high watermark checkpoint) keeps all until a replica manager gives it its high watermark.

The meta store also keeps, with its covered version, ``(WAL version, of)`` of each ALTER/DROP STABLE meta entry that
names its cluster catalog record ``of`` (:attr:`Vnode.stable_ofs`): cut with the WAL, recomputed from the WAL when the
store is rebuilt, so a new leader knows which of its database's changes its WAL lacks (:attr:`Vnode.latest_of`).

Each vnode keeps its leader-epoch cache, ``epoch -> first WAL version``, in ``leader-epoch-checkpoint``
(:mod:`walgate.storage.leader_epochs`), opened after the WAL's recovery and cut back to its end; without replicas
the vnode leads epoch 0 from version 0; a vnode of a replicated database (``REPLICA n`` above 1) answers from the
cache its leaders began.

Directory: ``db/<database id>/vnode<index>/`` holding ``wal/``, ``meta.db``, ``leader-epoch-checkpoint``
and ``topics/`` (offsets.py).
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import fileio, hw_checkpoint, lines
from walgate.storage.catalog import DatabaseDef, StableDef, column_from_json
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.entry_check import CheckedEntry, Undecodable, checked_entries, decode_whole
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.filecache import FileCache
from walgate.storage.fileio import SyncLatency
from walgate.storage.leader_epochs import SINGLE_NODE_EPOCHS, LeaderEpochs, write_new
from walgate.storage.meta_store import META_STORE, MetaDamaged, MetaStore, OpenStores, TableDef, Undo
from walgate.storage.moved_vnodes import delete_vnode_dir
from walgate.storage.vnode_snapshot import finish_restoring, read_restoring
from walgate.storage.wal import KIND_META, Wal, WalEntry, WalOptions
from walgate.storage.wal_verbatim import EntriesRefused, parse

__all__ = ["Vnode", "TableDef", "vnode_of"]

_TOKENS = itertools.count()  # (each Vnode object's own: tables_version)

log = logging.getLogger("walgate.vnode")

CHECKPOINT = "tables.ckpt"  # the table map of walgate before the meta store: read once, then removed
CACHE_TABLES = 16_384  # table definitions a vnode keeps in memory (most recently used), besides those not yet flushed
FLUSH_TABLES = 10_000  # changed tables a vnode keeps in memory before it writes them to its meta store
ABSENT_NAMES = 262_144  # names a vnode remembers it does not hold (a request's new tables, until created)
QUARANTINE_BYTES = 64 << 20  # of a damaged meta store, the first bytes kept in quarantine
T = TypeVar("T")


def vnode_of(db: str, table: str, vgroups: int) -> int:
    """The vnode index of ``db.table`` (see the module docstring)."""
    return (crc32c.crc32c(f"{db}.{table}".encode()) * vgroups) >> 32


def _new_store(path: Path) -> MetaStore:
    """An empty store at ``path`` in place of the one there (and SQLite's files beside it); StorageUnavailable when
    the disk refuses."""
    try:
        for p in (path, *(path.with_name(path.name + s) for s in ("-journal", "-wal", "-shm"))):
            if p.exists():
                fileio.unlink(p)
    except OSError as exc:
        raise StorageUnavailable(f"{path}: cannot replace the table meta store: {exc}") from None
    return MetaStore.open(path)


def prepare(directory: Path) -> None:
    """Make a new vnode's files in ``directory``, which no catalog record names yet, so that :meth:`Vnode.open` then
    only opens them: the WAL's first segment, the meta store's schema and the leader-epoch cache, each made and
    fsynced as that open would make them. It touches nothing but ``directory`` (its own descriptors and store
    connection, closed before it returns), so it may run on any thread: a CreateTopics makes its vnodes' files,
    SQLite's schema and their fsyncs off the storage thread (issue 23). Raises OSError or StorageUnavailable; the caller removes the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    wal = Wal.open(directory / "wal", WalOptions())
    try:
        if wal.fenced:  # (logged by the open: its first segment was not made)
            raise StorageUnavailable(f"{directory}: the WAL's first segment could not be made")
    finally:
        wal.close()
    MetaStore.open(directory / META_STORE, OpenStores()).close()
    write_new(directory, SINGLE_NODE_EPOCHS, syncs=SyncLatency())


class HalfRestored(StorageError):
    """A vnode restored from a snapshot whose store does not hold the snapshot's tables (see :meth:`Vnode.open`)."""


def _half_restored(directory: Path, reason: str, syncs: SyncLatency | None) -> None:
    """A vnode restored from a snapshot that cannot be served (its marker or its store damaged): deleted whole
    (:func:`~walgate.storage.moved_vnodes.delete_vnode_dir`), so that it opens empty and its follower copies it
    again (logged)."""
    log.warning("%s: %s: the copy is deleted and copied from its leader again", directory, reason)
    delete_vnode_dir(directory, syncs or SyncLatency())


def wal_options(db: DatabaseDef, index: int) -> WalOptions:
    """The WAL options of ``db``'s vnode ``index``. A replicated vgroup's (issue 25; ``DatabaseDef.replicated``)
    commit in groups whatever its
    WAL_LEVEL and WAL_FSYNC_PERIOD (level 2, period 0: each append synced at once, with the appends beside it): its
    high watermark counts only what every in-sync replica holds durably, so a periodic fsync would hold every
    acknowledged write (acks=all, SQL) until the leader's and the followers' next one (~3 s at the defaults)."""
    o = db.options
    replicated = db.replicated(index)
    return WalOptions(
        level=2 if replicated else int(o["WAL_LEVEL"]),
        fsync_period_ms=0 if replicated else int(o["WAL_FSYNC_PERIOD"]),
        segment_bytes=max(int(o["WAL_SEGMENT_SIZE"]), 1) << 20,
        retention_period_s=int(o["WAL_RETENTION_PERIOD"]),
        retention_bytes=int(o["WAL_RETENTION_SIZE"]) << 20 if int(o["WAL_RETENTION_SIZE"]) >= 0 else -1,
        segment_ms=int(o.get("WAL_SEGMENT_MS", -1)),  # Kafka-native topics only (segment.ms)
    )


class Vnode:
    def __init__(self, db: DatabaseDef, index: int, directory: Path, wal: Wal, damage: DamageLog | None = None,
                 whole_store: bool = True) -> None:
        self.db = db
        self.index = index
        self.dir = directory
        self.wal = wal
        self.damage = damage
        # a replica's (its high watermark checkpointed by a replica manager: walgate.gateway.replicas) before it opened
        self._replica = (directory / hw_checkpoint.HW_FILE).exists()
        # the high watermark this process last wrote to that checkpoint (None: none written since the open)
        self.hw_checkpointed: int | None = None
        self._store = self._open_store(whole_store)
        # (WAL version, cluster catalog record) of each ALTER/DROP STABLE meta entry applied that names its record
        # (``of``), in WAL order: the store's (``ofs``) and those applied since (see latest_of)
        self.stable_ofs: list[tuple[int, int]] = list(self._store.ofs)
        self._cache: OrderedDict[str, TableDef] = OrderedDict()  # rows as the store holds them, most recent last
        self._dirty: dict[str, TableDef] = {}  # tables changed since the last flush, as they are now
        self._bodies: dict[str, bytes] = {}  # of _dirty's creations, their def_body already encoded (by a planner)
        self._dropped_stables: dict[str, int] = {}  # supertables dropped since the last flush: their first drop's version
        self._undo: list[Undo] = []  # the before-images of the entries applied since the last flush, in WAL order
        self._absent: set[str] = set()  # names looked up and not found since (a request's new tables, then created)
        self._applied = 0  # every meta entry below this WAL version is applied (see meta_version)
        self._cuts = 0  # the times its tables were cut back or rebuilt (see tables_version)
        self._token = next(_TOKENS)
        self._flush_at = FLUSH_TABLES
        self._refused = False  # the store refused the last flush tried (a full disk, an I/O error)
        self._rebuild_pending = False  # a truncation's rebuild of the store was refused (truncate_to retries it)
        self.live_count = 0  # tables not dropped (kept by apply_meta, counted at open)
        # (S0, L) while restored from a snapshot and its WAL not past L (the restoring marker: vnode_snapshot)
        self.restoring: tuple[int, int] | None = None
        self.epochs = LeaderEpochs.open(directory, wal.next_version, damage=damage, syncs=wal.syncs)
        # each writes open's cut of the epoch file, if any, before the WAL can grow (leader_epochs' module docstring);
        # the catalog knows a database's replicas before its vnodes open (its CREATE record places them)
        if db.replicated(index):
            self.epochs.lead_replicated()
        else:
            self.epochs.lead_single_node(new=wal.next_version == 0)

    @classmethod
    def open(cls, db: DatabaseDef, index: int, directory: Path, damage: DamageLog | None = None,
             unsynced: Unsynced | None = None, clock: Clock = SYSTEM_CLOCK, files: FileCache | None = None,
             syncs: SyncLatency | None = None, whole_store: bool = True, first_version: int = 0) -> Vnode:
        """Open (creating if needed) vnode ``index`` of ``db``; with ``unsynced``, its WAL (at level 2, period 0)
        leaves its fsyncs to group commit (:mod:`walgate.storage.durability`); its WAL ages segments and times fsync
        periods by ``clock``; its files are opened through ``files`` (the engine's cache) and its fsyncs timed into
        ``syncs`` (the engine's). Without ``whole_store``, the meta store's checks that read all of it are the
        caller's (:func:`~walgate.storage.meta_store.check` of :attr:`store`, then :meth:`rebuild_store`). A WAL
        with no segment yet starts at ``first_version``."""
        try:
            restoring = read_restoring(directory)
        except ValueError as exc:
            _half_restored(directory, str(exc), syncs)
            restoring = None
        directory.mkdir(parents=True, exist_ok=True)
        wal = Wal.open(directory / "wal", wal_options(db, index), first_version=first_version if restoring is None
                       else restoring[0], damage=damage, unsynced=unsynced, owner=(db.name, index), clock=clock,
                       files=files, syncs=syncs)
        vnode = cls(db, index, directory, wal, damage, whole_store)
        vnode.restoring = restoring
        try:
            vnode._catch_up()
        except HalfRestored as exc:
            vnode.close()
            _half_restored(directory, str(exc), syncs)
            return cls.open(db, index, directory, damage, unsynced, clock, files, syncs, whole_store, first_version)
        return vnode

    @property
    def store(self) -> MetaStore:
        """The meta store (another object once rebuilt)."""
        return self._store

    def _open_store(self, whole: bool) -> MetaStore:
        """The meta store, rebuilt empty (reported) when it is damaged."""
        path = self.dir / META_STORE
        try:
            return MetaStore.open(path, whole=whole)
        except MetaDamaged as exc:
            return self._replace_store(path, str(exc))

    def _replace_store(self, path: Path, reason: str) -> MetaStore:
        """A new, empty store in place of the damaged one at ``path`` (reported, its bytes kept in quarantine)."""
        raw = path.read_bytes() if path.exists() else b""
        self._report_rebuilt(path, f"table meta store: {reason}", len(raw), raw[:QUARANTINE_BYTES])
        return _new_store(path)

    def _report_rebuilt(self, path: Path, reason: str, size: int, kept: bytes) -> None:
        """Report ``path`` damaged (``kept``: the bytes to quarantine) and its tables rebuilt from the WAL."""
        reason += "; the tables are rebuilt from the WAL's meta entries"
        if self.wal.first_version > 0:
            reason += (f", but retention deleted versions below {self.wal.first_version}: tables created "
                       "there are missing")
        if self.damage is None:
            log.warning("%s: %s", path, reason)
        else:
            self.damage.report(path, 0, size, reason, "rebuilt", kept)

    def _catch_up(self) -> None:
        """Apply the WAL's meta entries the store does not cover (a store ahead of the WAL, as after a power loss
        at WAL_LEVEL 1, is rebuilt; a vnode of an older data dir starts from ``tables.ckpt``), then flush. A vnode
        restored from a snapshot whose WAL has not reached the snapshot's end ``L`` yet (:attr:`restoring`) holds in
        its store the tables as of ``L``, which its WAL's entries are part of: none is applied, and a store that
        does not cover ``L`` (a damaged one, rebuilt empty) is :class:`HalfRestored`."""
        if self.restoring is not None and self.wal.next_version < self.restoring[1]:
            if self._store.covered != self.restoring[1]:
                raise HalfRestored(f"{self.dir}: restoring to version {self.restoring[1]}, its table meta store "
                                   f"covers {self._store.covered}")
            self.live_count = self._store.live
            self._applied = self._store.covered
            return
        if self._store.covered > self.wal.next_version:
            log.warning("%s: the table meta store covers version %d, past the WAL's end %d: rebuilt from the WAL",
                        self.dir, self._store.covered, self.wal.next_version)
            self._store.close()
            self._store = _new_store(self._store.path)
            self.stable_ofs = []
        start = self._store.covered
        self.live_count = self._store.live  # then counted through the entries replayed (which may flush it)
        legacy = self.dir / CHECKPOINT
        if start == 0 and legacy.exists():
            start = self._load_checkpoint(legacy)
            self.live_count += sum(not t.dropped for t in self._dirty.values())
        for entry in self.wal.read_from(start):
            if entry.kind == KIND_META and entry.version >= start:
                self._replay_meta(entry)
        self._applied = max(self._applied, self.wal.next_version)  # every meta entry in the WAL is applied
        try:
            self._flush(self.wal.next_version, durable=legacy.exists())
            if legacy.exists():
                fileio.unlink(legacy)  # the store covers it, on disk
        except (OSError, StorageUnavailable) as exc:  # the tables stay in memory; the WAL still holds every meta entry
            log.warning("%s: %s: the table meta store is written later", self.dir, exc)

    def _replay_meta(self, entry: WalEntry) -> None:
        """Apply the WAL's meta entry ``entry`` again (an open, a rebuilt store). One that does not decode whole
        (:func:`~walgate.storage.entry_check.decode_whole`: a bug's, since its checksums held) is reported damaged,
        its bytes quarantined, and skipped, as an entry whose checksum fails: every read of the WAL skips it."""
        try:
            meta = decode_whole(entry).meta
        except Undecodable as exc:
            self.wal.damaged(entry.version, f"a meta entry that does not decode: {exc}")
            return
        self.apply_meta(meta or {}, entry.version)

    def _load_checkpoint(self, path: Path) -> int:
        """Take the tables of ``tables.ckpt`` (written by walgate before the meta store); the WAL version to replay
        meta entries from (0 without a valid checkpoint)."""
        raw = path.read_bytes()
        try:
            snap = lines.decode(raw.rstrip(b"\n"))
            version = snap["version"]
            if type(version) is not int or version < 0:
                raise ValueError(f"version {version!r}")
            for t in snap["tables"]:
                cols = tuple(column_from_json(c) for c in t["columns"]) if t["columns"] is not None else None
                self._dirty[t["name"]] = TableDef(
                    t["name"], t["stable"], t["tags"], cols, t["version"], t["created_ts"], t["dropped"]
                )
            return version
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            self._dirty.clear()
            self._report_rebuilt(path, f"table checkpoint: {exc}", len(raw), raw)
            return 0

    def reconfigure(self, db: DatabaseDef) -> None:
        """The database's options changed (a Kafka-native topic's configs), or its placement (a vgroup of one copy
        moved, now replicated: its WAL commits in groups from then on, issue 26): apply its WAL settings. Under group
        commit what was appended and not synced yet is noted for the next group sync at once: the visible version is
        then the durable one, and must not wait for the next write to catch up with what was served before."""
        self.db = db
        self.wal.options = wal_options(db, self.index)
        self.wal.note_end()

    # ------------------------------------------------------------------ meta

    @property
    def meta_version(self) -> int:
        """The WAL version every meta entry below which is applied (the version of the tables :meth:`get` answers
        from). Between writes that ended with :meth:`end_write`, the store's ``covered`` version equals it unless
        the store refused its last write (then ``covered`` is lower); ``covered`` is never higher."""
        return self._applied

    @property
    def tables_version(self) -> tuple[int, int, int]:
        """Changes whenever the tables :meth:`get` and :meth:`tag_table` answer from may have changed: with every
        meta entry applied (:attr:`meta_version` rises) and every cut or rebuild of the tables (which may lower it);
        unique to this vnode object in the process (:class:`~walgate.storage.tag_cache.TagTableCache`'s key)."""
        return self._token, self._cuts, self._applied

    def _forget_tables(self) -> None:
        """The tables are cut back or rebuilt: the rows remembered are forgotten, :attr:`tables_version` changes."""
        self._cache.clear()
        self._cuts += 1

    def apply_meta(self, meta: dict[str, Any], version: int) -> None:
        """Apply one meta operation (live and on replay); the store is written every FLUSH_TABLES changed tables
        (a store that refuses keeps them in memory until a later flush succeeds)."""
        op = meta["op"]
        if op == "create_table":
            self._create(meta["name"], meta, version)
        elif op == "drop_table":
            t = self._known(meta["name"])
            if t is not None and not t.dropped:
                self._undo.append(Undo(version, t))
                self._dirty[t.name] = replace(t, dropped=True)
                self._bodies.pop(t.name, None)
                self.live_count -= 1
        elif op == "drop_stable":
            stable = meta["stable"]
            for name, t in self._dirty.items():
                if t.stable == stable and not t.dropped:
                    self._undo.append(Undo(version, t))
                    self._dirty[name] = replace(t, dropped=True)
                    self._bodies.pop(name, None)
                    self.live_count -= 1
            self._dropped_stables.setdefault(stable, version)
        if op in ("alter_stable", "drop_stable") and "of" in meta:  # (a replay past the store's: none at or after)
            self.stable_ofs = [p for p in self.stable_ofs if p[0] < version] + [(version, meta["of"])]
        self._applied = max(self._applied, version + 1)
        if len(self._dirty) >= self._flush_at or op == "drop_stable":
            self._try_flush()

    @property
    def latest_of(self) -> int | None:
        """The latest cluster catalog record (its sequence number) of the ALTER/DROP STABLE meta entries in this
        vnode's WAL that name theirs; None when none does. Every such change of the database after it lacks its
        entry here, and every one up to it has it (written in the records' order:
        :class:`~walgate.storage.sql_objects.SqlObjects`) but an ALTER folded into a catalog snapshot this node
        restored (docs/cluster.md)."""
        return max((of for _, of in self.stable_ofs), default=None)

    def apply_creates(self, version: int, names: Sequence[str], metas: Sequence[dict[str, Any]],
                      bodies: Mapping[str, bytes] | None = None) -> None:
        """Apply the ``create_table`` metas ``metas`` (named ``names``, in that order) of WAL versions ``version``,
        ``version + 1``, ...: the same tables, counts, store writes and covered versions as ``apply_meta`` of each
        in turn, without its per-entry dispatch (a request creating many tables). ``bodies``: by name, the
        :func:`~walgate.storage.meta_store.create_body` of some of ``metas``, encoded by the planner (the store
        writes them instead of encoding those tables again; unused when a name is created twice, as a body is
        known by name only)."""
        if len(names) != len(metas):
            raise ValueError(f"{len(names)} names for {len(metas)} metas")
        if bodies and len(set(names)) != len(names):
            bodies = None
        start = 0
        while start < len(names):  # in runs ending where apply_meta's flushes would fall
            end = min(len(names), start + max(self._flush_at - len(self._dirty), 1))
            create = self._create
            for i in range(start, end):
                create(names[i], metas[i], version + i)
            if bodies:
                self._bodies.update((n, b) for n in names[start:end] if (b := bodies.get(n)) is not None)
            self._applied = max(self._applied, version + end)
            if len(self._dirty) >= self._flush_at:
                self._try_flush()
            start = end

    def append_replicated(self, raw: bytes, first_version: int, epoch: int,
                          kafka_end: int | None = None) -> list[CheckedEntry]:
        """A follower's copy of its leader's WAL entries ``raw`` (whole batches from version ``first_version``,
        written in leader epoch ``epoch``; ``kafka_end``: the offset the vnode's Kafka-native partition numbers its
        next batch, None when it holds none). Every check comes first: the epoch no older than the cache's latest,
        ``first_version`` this WAL's next version, every entry's checksums, format and version
        (:func:`~walgate.storage.wal_verbatim.parse`, the only check of the checksums on this path) and body
        (:func:`~walgate.storage.entry_check.checked_entries`); EntriesRefused, with nothing written and the
        cache as it was, when one fails. Then the epoch is begun in the leader-epoch cache when it is newer than the
        cache's latest (so a crash after it leaves an epoch starting at the WAL's end, which the next open drops),
        the bytes appended as they are (:meth:`Wal.append_verbatim`; StorageUnavailable, nothing appended and the
        begun epoch cut back, when the disk refuses), then their meta entries applied as a local write applies its
        own (:meth:`apply_meta`, :meth:`end_write`): the tables a restart would replay. Returns the entries,
        decoded, for the caller to advance what the vnode's topics derive from them
        (:func:`walgate.storage.replicated.append_replicated`)."""
        if epoch < self.epochs.latest_epoch:
            raise EntriesRefused(f"{self.dir}: entries of leader epoch {epoch}, older than the latest one here "
                                 f"({self.epochs.latest_epoch})")
        if first_version != self.wal.next_version:
            raise EntriesRefused(f"{self.dir}: entries from version {first_version} do not continue the WAL, "
                                 f"whose next version is {self.wal.next_version}")
        run = parse(raw, first_version)
        checked = checked_entries(run, kafka_end)
        if not checked:
            return []
        begun = epoch > self.epochs.latest_epoch
        if begun:
            self.epochs.begin(epoch, first_version)
        try:
            self.wal.append_verbatim(run)
        except (StorageUnavailable, EntriesRefused):
            if begun:
                self.epochs.truncate_from_end(first_version)
            raise
        below = -1 if self.restoring is None else self.restoring[1]  # (the snapshot's store holds their effect)
        for c in checked:
            if c.decoded.meta is not None and c.entry.version >= below:
                self.apply_meta(c.decoded.meta, c.entry.version)
        self.end_write()
        return checked

    def restored(self) -> None:
        """The vnode's WAL reached the end of the snapshot it was restored from, and what its entries from there
        derive is derived: the :data:`~walgate.storage.vnode_snapshot.RESTORING` marker is removed (when the disk
        refuses, it stays, logged: the next append tries again)."""
        try:
            finish_restoring(self.dir, self.wal.syncs)
        except OSError as exc:
            log.warning("%s: the restoring marker is not removed yet: %s", self.dir, exc)
            return
        self.restoring = None

    def _create(self, name: str, meta: dict[str, Any], version: int) -> None:
        """The table of create meta ``meta`` (named ``name``) of WAL ``version`` in the changed tables, counted."""
        cols = tuple(column_from_json(c) for c in meta["columns"]) if meta.get("columns") else None
        old = None if name in self._absent else self._known(name)  # (which may remember the name as absent)
        self._absent.discard(name)
        if old is not None:  # (a new name's before-image is no row: its row's version says so, see truncate_to)
            self._undo.append(Undo(version, old))
        if self._bodies:
            self._bodies.pop(name, None)
        self._dirty[name] = TableDef(name, meta.get("stable"), meta.get("tags") or {}, cols, version, meta["ts"])
        self.live_count += old is None or old.dropped

    def end_write(self) -> None:
        """The end of a committing write: the store takes the tables it changed (one transaction, not fsynced), so
        that ``covered`` equals :attr:`meta_version` for readers of ``meta.db`` (:mod:`walgate.storage.meta_reader`);
        nothing to do for a write that changed no table. Once the store refused a write, the tables stay in memory
        and ``covered`` behind until a flush of :meth:`apply_meta` (every FLUSH_TABLES changed tables) or a
        checkpoint succeeds: a full disk is not tried again by every request."""
        if not self._refused and (self._dirty or self._dropped_stables or self._store.covered != self._applied):
            self._try_flush()

    def _try_flush(self) -> None:
        """Flush as of :attr:`meta_version`; a store that refuses keeps the changed tables in memory (logged once
        until a flush succeeds again), for FLUSH_TABLES more before the next try of :meth:`apply_meta`."""
        try:
            self._flush(self._applied)
        except StorageUnavailable as exc:  # live_count counts the stored subtables of a dropped stable till then
            if not self._refused:
                log.warning("%s: %s: the tables changed stay in memory until the table meta store takes them",
                            self.dir, exc)
            self._refused = True
            self._flush_at = len(self._dirty) + FLUSH_TABLES

    def _known(self, name: str) -> TableDef | None:
        """:meth:`get` for a meta entry already appended, which must be applied: a store that cannot be read (an I/O
        error) counts as not knowing the table (logged; a drop then waits for the next open's replay)."""
        try:
            return self.get(name)
        except StorageUnavailable as exc:
            log.error("%s: %s: table %s taken as unknown until the vnode is opened again", self.dir, exc, name)
            return None

    def _flush(self, covered: int, durable: bool = False) -> None:
        """Write the tables changed since the last flush to the store, covering WAL version ``covered``; with
        ``durable``, fsynced with every earlier write of the store when it returns."""
        if not self._dirty and not self._dropped_stables and covered == self._store.covered and (
                self._store.synced or not durable):
            return
        dropped = self._checked(lambda: self._store.write(
            self._dropped_stables, self._dirty.values(), covered, self.live_count, durable, bodies=self._bodies,
            ofs=tuple(self.stable_ofs), undo=self._undo, trim=self._undo_trim()))
        self._applied = max(self._applied, covered)  # (called with every meta entry below ``covered`` applied)
        self.live_count -= dropped
        if self._dropped_stables:
            self._cache.clear()
        # the last CACHE_TABLES (distinct names): all that remembering each in turn leaves in the cache
        for name, t in list(self._dirty.items())[-CACHE_TABLES:]:
            self._remember(name, t)
        self._dirty.clear()
        self._bodies.clear()
        self._dropped_stables.clear()
        self._undo.clear()
        self._flush_at = FLUSH_TABLES
        if self._refused:
            log.info("%s: the table meta store takes writes again", self.dir)
            self._refused = False

    def _checked(self, read: Callable[[], T]) -> T:
        """``read()`` of the store; a store found damaged is reported, rebuilt from the WAL and read again."""
        try:
            return read()
        except MetaDamaged as exc:
            self.rebuild_store(str(exc))
            return read()

    def rebuild_store(self, reason: str) -> None:
        """Report the meta store damaged (``reason``) and rebuild it from every meta entry in the WAL."""
        self._store.close()
        self._store = self._replace_store(self._store.path, reason)
        self.stable_ofs = []
        self._forget_tables()
        self._dirty.clear()
        self._bodies.clear()
        self._dropped_stables.clear()
        self._undo.clear()
        self._absent.clear()
        self.live_count = 0
        for entry in self.wal.read_from(0):
            if entry.kind == KIND_META:
                self._replay_meta(entry)
        self._flush(self.wal.next_version)

    def truncate_to(self, version: int) -> int:
        """Cut this vnode back to the WAL entry holding ``version`` (:meth:`Wal.truncate_to`), and what it derives
        from the WAL with it; the version it was cut to. The leader-epoch cache forgets the epochs starting at or
        after it (a single node's leads epoch 0 again, from version 0 when it was emptied; a replicated vnode's
        cache emptied stays empty until the next leader begins), and the tables are those of the meta entries below
        it. How the tables follow, by what the cut entries hold:

        * no meta entry: the meta store is first written (fsynced) as covering the cut (its rows are all of entries
          below it), so a crash at any point after finds it consistent with the WAL, cut or not;
        * meta entries that create or drop tables (``create_table``, ``drop_table``, ``drop_stable``), when the
          store's undo journal keeps the before-images from the cut on (:mod:`walgate.storage.meta_store`: it
          keeps those above the high watermark the vnode was given, and no cut goes below it): the store first
          takes every applied table, then, in one fsynced transaction, takes the rows' before-images, forgets the
          rows created at or after the cut and covers it, as above; no WAL entry below the cut is read, so it holds
          after retention deleted versions. A ``drop_stable``'s dropped subtables are alive again, a re-created
          table has its earlier (dropped) definition back;
        * ``create_table`` entries only, the journal not keeping the cut's before-images (a store from before it,
          one damaged), once retention deleted versions (a rebuild is then impossible): as above with what the
          journal holds; a table re-created in the cut whose before-image it lacks is forgotten, not dropped again;
        * otherwise (drops the journal does not serve, ``create_table`` entries it does not serve while the WAL is
          whole, or an entry that cannot be read: its kind unknown): the store is rebuilt from the WAL's meta
          entries after the cut (a crash before that finds it covering a version past the WAL's end, which the open
          rebuilds the same way); StorageError, nothing cut, when retention deleted versions (their tables could not
          be rebuilt);
        * an ``alter_stable`` changes no table here (cut as an entry without tables). The catalog stays as it is
          (it applied the supertable's change, and is the truth): these entries are a replicated database's
          leader's only, and a cut is a follower's, taking its leader's WAL (docs/plans/replication-wiring.md step
          6), whose tables are then the vnode's.

        ValueError for a version outside the WAL; StorageUnavailable, nothing cut, when the disk refuses the store's
        write or the WAL's intent. StorageUnavailable after the cut: the meta store's rebuild refused (a retry of the
        cut, or the vnode's next open, rebuilds it), or the epoch cache's rewrite refused (a retry of the cut
        writes it; until then the file may hold epochs past the WAL's end, which an open cuts). HalfRestored,
        nothing cut, while :attr:`restoring`: the tables of its store are the snapshot's end's, which no cut below
        it can undo (the leader that took it lost that end: the copy is taken anew)."""
        if self.restoring is not None:
            raise HalfRestored(f"{self.dir}: a cut to version {version} while restoring to {self.restoring[1]}")
        if not self.wal.first_version <= version <= self.wal.next_version:
            raise ValueError(f"{self.dir}: version {version} is outside the WAL [{self.wal.first_version}, "
                             f"{self.wal.next_version}]")
        version = self.wal.entry_start(version)
        if version < self.wal.next_version:
            self._cut_wal(version)
        elif self._rebuild_pending:
            self._rebuild_after_cut()
        single = self.epochs.single_node
        self.epochs.truncate_from_end(version)
        if single:
            self.epochs.lead_single_node(new=version == 0)  # (as a new vnode's, see __init__)
        if self.epochs.write_refused:
            raise StorageUnavailable(f"{self.dir}: the leader-epoch cache could not be cut back to version {version}")
        return version

    def _cut_wal(self, version: int) -> None:
        """The WAL and the tables cut back to ``version``, an entry's start below the end (see :meth:`truncate_to`)."""
        created, other, unreadable = self._cut_meta(version)
        undone = not unreadable and bool(created or other) and self._undo_to(version, created, other)
        rebuild = unreadable or bool(created or other) and not undone
        if rebuild and self.wal.first_version > 0:
            raise StorageError(f"{self.dir}: truncating to version {version} would undo tables dropped or created "
                               f"there that the meta store's undo journal does not keep, and retention deleted the "
                               f"versions below {self.wal.first_version} a rebuild needs")
        if not rebuild and not undone and self._store.covered > version:
            self._flush(version, durable=True)  # (_applied is then max(_applied, version): lowered below)
        try:
            self.wal.truncate_to(version)
        except StorageUnavailable:
            if undone:  # the store covers the cut: take the kept entries' tables again
                for entry in self.wal.read_from(version):
                    if entry.kind == KIND_META:
                        self._replay_meta(entry)
                self.end_write()
            raise
        self._applied = min(self._applied, version)
        self._cuts += 1  # (a meta entry appended again at a version below the old one: another tables_version)
        self.stable_ofs = [p for p in self.stable_ofs if p[0] < version]
        if rebuild:
            self._rebuild_pending = True
            self._rebuild_after_cut()

    def _cut_meta(self, version: int) -> tuple[list[str], bool, bool]:
        """What the WAL's entries from ``version`` on hold of tables: the names their ``create_table`` entries
        create, whether any other meta entry changing tables (a drop) is among them, and whether an entry among
        them cannot be read (a version skipped: :meth:`Wal.read_from` passes over damaged entries, whose kind is
        unknown); an ``alter_stable`` counts as neither (it changes no table here, see :meth:`truncate_to`)."""
        created: list[str] = []
        other = False
        expected = version
        for entry in self.wal.read_from(version):
            if entry.version != expected:
                return created, other, True
            expected = entry.next_version
            if entry.kind != KIND_META:
                continue
            try:
                meta = decode_whole(entry).meta or {}
            except Undecodable:
                return created, other, True
            op = meta.get("op")
            if op == "create_table":
                created.append(meta["name"])
            elif op != "alter_stable":
                other = True
        return created, other, expected != self.wal.next_version

    def _undo_to(self, version: int, created: list[str], other: bool) -> bool:
        """The store as before the entries from ``version`` on, by its undo journal, covering ``version``, fsynced
        (every table applied written first); whether the journal could serve the cut: it keeps the before-images
        from ``version`` on, or the cut entries only create tables and retention deleted versions (a rebuild is
        impossible: a table re-created in the cut whose before-image was trimmed is forgotten, not dropped again).
        StorageUnavailable, the store covering what it did, when the disk refuses; a journal found damaged serves
        nothing (logged)."""
        self._flush(self._applied)
        store = self._store
        if not (store.journaled and store.undo_from <= version) and (other or self.wal.first_version == 0):
            return False
        try:
            self.live_count = store.undo_to(version, created, tuple(p for p in self.stable_ofs if p[0] < version))
        except MetaDamaged as exc:
            log.error("%s: the table meta store cannot be cut back to version %d by its undo journal: %s", self.dir,
                      version, exc)
            return False
        self._forget_tables()
        self._absent.clear()
        return True

    def write_hw_checkpoint(self, hw: int) -> None:
        """Record ``hw`` as the vnode's high watermark checkpoint (:mod:`~walgate.storage.hw_checkpoint`, durably),
        what a replica restarted after a crash starts from. OSError when the disk refuses (the file then holds the
        old value or ``hw``; the undo journal keeps trimming at the old one)."""
        hw_checkpoint.write(self.dir, hw, syncs=self.wal.syncs)
        self.hw_checkpointed = hw

    def _undo_trim(self) -> int | None:
        """The WAL version below which no cut goes from now on, so the undo journal need not keep the before-images
        of entries below it: a single node's high watermark (:attr:`Wal.visible_version`, what it serves). For a
        replica (of a replicated database, or one whose high watermark a replica manager checkpointed): the high
        watermark it was given, but not above the one this process last checkpointed (a replica killed and
        restarted starts from its checkpoint, and may cut any version above it: KIP-101), None when either is not
        known yet (just opened: its visible version would include a divergent tail, and nothing was checkpointed
        since)."""
        if self.db.replicated(self.index) or self._replica:
            if self.wal.replication is None or self.hw_checkpointed is None:
                return None
            return min(self.wal.visible_version, self.hw_checkpointed)
        return self.wal.visible_version

    def _rebuild_after_cut(self) -> None:
        """The meta store rebuilt from every meta entry of the WAL, just cut (see :meth:`truncate_to`)."""
        self._store.close()
        self._forget_tables()
        self._dirty.clear()
        self._bodies.clear()
        self._dropped_stables.clear()
        self._undo.clear()
        self._absent.clear()
        self._applied = 0
        self.live_count = 0
        self._refused = False
        self._flush_at = FLUSH_TABLES
        self._store = _new_store(self._store.path)
        self.stable_ofs = []
        for entry in self.wal.read_from(0):
            if entry.kind == KIND_META:
                self._replay_meta(entry)
        self._flush(self.wal.next_version, durable=True)
        self._rebuild_pending = False

    def _remember(self, name: str, t: TableDef) -> None:
        self._cache[name] = t
        self._cache.move_to_end(name)
        if len(self._cache) > CACHE_TABLES:
            self._cache.popitem(last=False)

    def get(self, name: str) -> TableDef | None:
        """Table ``name`` of this vnode, dropped ones too (None: never created here)."""
        t = self._dirty.get(name)
        if t is not None:
            return t
        t = self._cache.get(name)
        if t is None:
            if name in self._absent:
                return None
            t = self._checked(lambda: self._store.get(name))
            if t is None:
                if len(self._absent) >= ABSENT_NAMES:
                    self._absent.clear()
                self._absent.add(name)
                return None
            self._remember(name, t)
        else:
            self._cache.move_to_end(name)
        return replace(t, dropped=True) if t.stable in self._dropped_stables and not t.dropped else t

    def get_many(self, names: Iterable[str]) -> dict[str, TableDef]:
        """:meth:`get` of each of ``names`` at once (the store read in chunks, not one name at a time), by name; a
        name never created here is left out. Unlike :meth:`get`, it leaves the cache as it is."""
        found: dict[str, TableDef] = {}
        stored: list[str] = []
        for name in dict.fromkeys(names):
            t = self._dirty.get(name) or self._cache.get(name)
            if t is not None:
                found[name] = t
            elif name not in self._absent:
                stored.append(name)
        if stored:
            found.update(self._checked(lambda: self._store.get_many(stored)))
        gone = self._dropped_stables
        return {n: replace(t, dropped=True) if gone and t.stable in gone and not t.dropped and n not in self._dirty
                else t for n, t in found.items()}

    def note_absent(self, names: Iterable[str], version: int) -> None:
        """Remember ``names`` as never created here, as :meth:`get` remembers a name it did not find: a caller that
        read the store as of ``version`` (a :class:`~walgate.storage.meta_reader.MetaReader`) and found no row for
        them, so that creating them need not read the store again. Taken only while ``version`` is still
        :attr:`meta_version` and what the store covers (nothing changed since)."""
        if version != self._applied or version != self._store.covered:
            return
        absent = self._absent
        for name in names:
            if len(absent) >= ABSENT_NAMES:
                absent.clear()
            absent.add(name)

    def check_store(self, names: Iterable[str]) -> None:
        """Read the rows of ``names`` from the store itself, not from memory: the lane's answer to a
        :class:`~walgate.storage.meta_reader.MetaReader` that gave up, so that damage the reader met is reported
        (once: the store is rebuilt from the WAL, as by any read of it that finds damage) even when the tables it
        read are cached here. StorageUnavailable when the store cannot be read."""
        for name in names:
            self._checked(lambda: self._store.get(name))  # (called at once: the name of this turn)

    def live(self, name: str) -> TableDef | None:
        t = self.get(name)
        return t if t is not None and not t.dropped else None

    def tables(self, stable: str | None = None) -> list[TableDef]:
        """Every table of this vnode (of ``stable`` only, when given), dropped ones too, in name order."""
        stored = self._checked(lambda: list(self._store.all() if stable is None else self._store.of_stable(stable)))
        out = {t.name: replace(t, dropped=True) if t.stable in self._dropped_stables and not t.dropped else t
               for t in stored}
        out.update((n, t) for n, t in self._dirty.items() if stable is None or t.stable == stable)
        return sorted(out.values(), key=lambda t: t.name)

    def tag_table(self, stable: StableDef, names: pa.Array | None = None) -> pa.Table:
        """``tbname`` + tag columns of the subtables of ``stable`` here (dropped ones too): those named in
        ``names`` (unknown names left out), or every one; built from the store, not kept."""
        if names is None:
            subs = self.tables(stable.name)
        else:
            found = (self.get(n) for n in pc.unique(names).to_pylist() if n is not None)
            subs = [t for t in found if t is not None and t.stable == stable.name]
        cols: dict[str, pa.Array] = {"tbname": pa.array([t.name for t in subs], pa.string())}
        for tag in stable.tags:
            values = [t.tags.get(tag.name) for t in subs]
            cols[tag.name] = pa.array(values, tag.type.arrow(self.db.precision))
        return pa.table(cols)

    # ---------------------------------------------------------- checkpoints

    def checkpoint(self) -> None:
        """Flush the table meta store as of the WAL's current end, fsynced; StorageUnavailable when it cannot be
        written. While :attr:`restoring`, as of the snapshot's end (the store's tables are those)."""
        end = self.wal.next_version
        self._flush(end if self.restoring is None else max(end, self.restoring[1]), durable=True)

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
        self._store.close()
        self.wal.close()
