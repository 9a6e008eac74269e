"""The state every part of the engine shares, and the lookups they all need.

One :class:`Store` per open data dir: the catalog, the open vnodes of every database, each topic's compiled
evaluator (TDengine topics), offset indexes and idempotent-producer state (Kafka-native topics) per partition, the
topic-id index, the observers the gateway passed in, the clock (:mod:`~walgate.storage.clock`) and the cache of open
segment files every WAL and offset index of this data dir shares (:mod:`~walgate.storage.filecache`) and the
fsync latency counters every component of it times its fsyncs into (:class:`~walgate.storage.fileio.SyncLatency`). The engine's parts (:mod:`~walgate.storage.ddl`,
:mod:`~walgate.storage.ingest`, :mod:`~walgate.storage.commit`, :mod:`~walgate.storage.topic_views`,
:mod:`~walgate.storage.native_topics`, :mod:`~walgate.storage.show`) each hold the one Store and change it only
through their own operations. Creating a Store prepares the data dir (:func:`~walgate.storage.datadir.prepare`:
create, migrate or refuse), loads the catalog and replays the group coordinator's partitions (:attr:`Store.coordinator`,
written through :mod:`~walgate.storage.group_offsets` and the engine's group records); after that nothing else here
writes to disk but :meth:`Store.open_database`, which creates vnodes.

Invariants: ``vnodes`` has an entry per database of the catalog (Kafka-native topics' own databases included):
the vnodes the catalog places on this node, in vgroup order (every one on a single node; :meth:`Store.local_vnode`
answers :class:`~walgate.storage.errors.NotHere` for the others); ``indexes`` has an entry per (topic, partition)
of every served topic whose vnode is here; ``topic_names`` / ``topic_uuids`` name
exactly the topics of ``catalog.topics`` (kept by :meth:`add_topic_id` / :meth:`forget_topic_id`).
"""

from __future__ import annotations

import functools
import logging
import shutil
import uuid
from collections.abc import Callable, Collection
from pathlib import Path

import pyarrow as pa

from walgate.storage import datadir, led_appends
from walgate.storage.catalog import MAX_PARTITIONS, REPAIR_HINT, Catalog, DatabaseDef, StableDef, TopicDef
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.coordinator_partitions import DEFAULT_PARTITIONS, CoordinatorPartitions
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.errors import (
    InvalidValue,
    LimitExceeded,
    NotEnoughReplicas,
    NotFound,
    NotHere,
    NotLedNow,
    RequestTooLarge,
    StorageError,
    StorageUnavailable,
    table_not_found,
)
from walgate.storage.filecache import FileCache
from walgate.storage.fileio import SyncLatency
from walgate.storage.lanes import INLINE, CoordinatorLane, check_vnode
from walgate.storage.moved_vnodes import remove_leftovers
from walgate.storage.observers import (
    NO_CONSUMERS,
    NO_LISTENER,
    ConsumersView,
    RecordsListener,
)
from walgate.storage.offsets import OffsetIndex
from walgate.storage.producers import PartitionProducers, ProducerIds
from walgate.storage.schema import Column
from walgate.storage.tag_cache import TagTableCache
from walgate.storage.topics import TopicEvaluator
from walgate.storage.topics_snapshot import EMPTY, TopicsSnapshot
from walgate.storage.vnode import TableDef, Vnode, vnode_of
from walgate.storage.vnode_snapshot import STAGING
from walgate.storage.vnode_snapshot import remove_all as remove_snapshots

__all__ = ["TICKS", "TICKS_PER_MS", "Store"]

log = logging.getLogger("walgate.storage")

TAG_CACHE_BYTES = 64 << 20
"""The most bytes of whole tag tables :attr:`Store.tag_cache` keeps (a supertable of a million subtables with two
short tags: ~40 MB)."""
TICKS = {"ms": 1_000_000, "us": 1_000, "ns": 1}  # ns per tick of a database precision
TICKS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


def _no_wake(_: tuple[str, int]) -> None:
    """Coordinator logs hold no records that readers wait to see."""


class Store:
    """Catalog, vnodes, topic state and observers of one data dir (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        max_request_bytes: int,
        max_partitions: int = MAX_PARTITIONS,
        listener: RecordsListener = NO_LISTENER,
        consumers: ConsumersView = NO_CONSUMERS,
        group_commit: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        coordinator_partitions: int = DEFAULT_PARTITIONS,
        max_tables: int = 0,
        coordinator_lane: CoordinatorLane = INLINE,
    ) -> None:
        self.data_dir = data_dir
        self.max_tables = max_tables  # tables one database may hold (0: no limit)
        self.clock = clock  # every time the engine's parts stamp or age anything by (see storage/clock.py)
        self.files = FileCache()  # this engine's open segment files, bounded (another engine has its own)
        self.syncs = SyncLatency()  # how long this engine's fsyncs took (another engine counts its own)
        self.tag_cache = TagTableCache(TAG_CACHE_BYTES)  # supertables' whole tag tables, per vnode (a SELECT's)
        self.max_request_bytes = max_request_bytes
        self.listener = listener
        self.consumers = consumers
        self.damage_log = DamageLog(data_dir, clock, self.syncs)  # every component opened here reports damage to it
        # create, migrate, or refuse a data dir of a newer format; how many coordinator partitions it has (those
        # asked for when it is made now)
        coordinator_partitions = datadir.prepare(data_dir, self.damage_log, clock, coordinator_partitions, self.syncs)
        self.catalog = Catalog.open(data_dir / datadir.CATALOG, self.damage_log, max_partitions=max_partitions,
                                    syncs=self.syncs)
        for orphan in datadir.unnamed_db_dirs(data_dir, {d.id for d in self.catalog.databases.values()}):
            self.damage_log.report(self.catalog.path, 0, 0, f"{orphan} is named by no catalog record (the record was "
                                   "lost, or a crash came between creating the directory and recording it); the "
                                   f"directory is kept; {REPAIR_HINT}", "not served")
        self.vnodes: dict[str, list[Vnode]] = {}
        self.vnodes_opened = 0  # vnodes open_database opened, ever: with the catalog's generation, when WALs came
        self.evaluators: dict[str, TopicEvaluator] = {}
        self.indexes: dict[tuple[str, int], OffsetIndex] = {}
        self.producers: dict[tuple[str, int], PartitionProducers] = {}  # Kafka-native partitions
        self.producer_ids = ProducerIds(data_dir / datadir.PRODUCER_IDS, self.damage_log, clock, self.syncs)
        self.topic_names: dict[uuid.UUID, str] = {}
        self.topic_uuids: dict[str, uuid.UUID] = {}
        # group commit (:mod:`~walgate.storage.durability`): what appends and commits left to be fsynced
        self.unsynced = Unsynced(self.records_visible) if group_commit else None
        # the coordinator lane's own notes (taken at the end of its calls, never by the storage lane's)
        self.coordinator_unsynced = Unsynced(_no_wake) if group_commit else None
        # the group coordinator's partitions: committed offsets and group records (owned by the coordinator lane)
        self.coordinator = CoordinatorPartitions.open(data_dir, coordinator_partitions, self.damage_log,
                                                      self.coordinator_unsynced, self.syncs)
        self.coordinator_lane = coordinator_lane  # how the coordinator log is reached (walgate.storage.lanes)
        self._published: TopicsSnapshot = EMPTY

    # ------------------------------------------------------------ the topics snapshot (walgate.storage.topics_snapshot)

    def publish_topics(self) -> None:
        """On the storage lane: publish the catalog's topics for the coordinator lane, unless already published at
        this generation."""
        if self._published.generation != self.catalog.generation:
            catalog = self.catalog
            self._published = TopicsSnapshot(catalog.generation, catalog.topics, catalog.databases,
                                             frozenset(self.vnodes), catalog.resource_configs, catalog.replication)

    def topics(self) -> TopicsSnapshot:
        """The topics as last published (any lane); with no separate coordinator lane, the current ones."""
        if not self.coordinator_lane.separate:
            self.publish_topics()
        return self._published

    # ------------------------------------------------------------ databases

    def records_visible(self, owner: tuple[str, int]) -> None:
        """Versions of vnode ``owner`` (database, index) became visible (durable under group commit, or under a
        replicated vnode's higher high watermark): wake its topics' long polls."""
        db, index = owner
        for name, topic in self.catalog.topics.items():
            if topic.db == db:
                self.listener.records_appended(name, index)

    def db_dir(self, db: DatabaseDef) -> Path:
        return datadir.db_dir(self.data_dir, db.id)

    def open_database(self, db: DatabaseDef, commit: Callable[[], object] | None = None, first: int = 0, *,
                      whole_stores: bool = True, indices: Collection[int] | None = None,
                      first_version: int = 0) -> list[Vnode]:
        """Open the vnodes ``first ..`` of ``db`` placed here (``indices``: those alone, a replica move's, created
        empty; ``first_version``: the WAL version new vnodes' WALs start at). New vnodes (a new database, new
        partitions) are created *before* ``commit`` (their catalog record) runs: when either fails, the new directories are removed and nothing is kept (:class:`StorageUnavailable`,
        or the catalog's error). Without ``whole_stores``, the meta stores' checks that read all of them are the
        caller's (:meth:`Vnode.open <walgate.storage.vnode.Vnode.open>`). A whole database of the cluster's catalog
        opened without ``commit`` (a start, a record applied) first finishes the deletes of moved vnodes a crash
        left (:func:`~walgate.storage.moved_vnodes.remove_leftovers`) and removes the snapshots of its vnodes a
        leader wrote (:func:`~walgate.storage.vnode_snapshot.remove_all`). Each vnode opened is first rid of the
        snapshot a follower was staging for it (:data:`~walgate.storage.vnode_snapshot.STAGING`: a crash's)."""
        if commit is None and first == 0 and indices is None and db.replicas is not None:
            try:
                for name in remove_leftovers(self.db_dir(db), self.placed_here(db), self.syncs):
                    log.info("database %s: %s deleted (a replica moved away, a crash before its delete ended)",
                             db.name, name)
            except OSError as exc:
                log.warning("database %s: the copies of replicas moved away not deleted yet: %s", db.name, exc)
            remove_snapshots(self.db_dir(db))  # (a leader's snapshots are paged by followers of this run only)
        vnodes: list[Vnode] = []
        try:
            for i in self.placed_here(db, first) if indices is None else indices:
                shutil.rmtree(self.db_dir(db) / f"vnode{i}{STAGING}", ignore_errors=True)  # (a crash's: vnode_snapshot)
                vnodes.append(Vnode.open(db, i, self.db_dir(db) / f"vnode{i}", self.damage_log, self.unsynced,
                                         self.clock, self.files, self.syncs, whole_stores, first_version))
                vnodes[-1].wal.appended = functools.partial(self.listener.vnode_appended, db.name, i)
            if commit is not None:
                commit()
        except (OSError, StorageError) as exc:
            for vnode in vnodes:
                vnode.wal.close()
            if commit is None:
                raise
            for i in range(first, db.vgroups):
                shutil.rmtree(self.db_dir(db) / f"vnode{i}", ignore_errors=True)
            if first == 0:
                shutil.rmtree(self.db_dir(db), ignore_errors=True)
            if isinstance(exc, StorageError):
                raise
            raise StorageUnavailable(f"Database {db.name}: vnodes could not be created ({exc.strerror or exc}); "
                                     "nothing was kept") from None
        self.vnodes_opened += len(vnodes)
        return vnodes

    def open_placed(self, db: DatabaseDef) -> list[Vnode]:
        """Open the vnodes of ``db`` (open here already) that the catalog places here and are not open: a replica
        move's adding node's (created empty: it follows its leader from the log start) or a grown topic's; the ones
        opened, kept in index order."""
        vnodes = self.vnodes[db.name]
        present = {v.index for v in vnodes}
        missing = [i for i in self.placed_here(db) if i not in present]
        if not missing:
            return []
        opened = self.open_database(db, indices=missing)
        vnodes.extend(opened)
        vnodes.sort(key=lambda v: v.index)
        return opened

    def placed_here(self, db: DatabaseDef, first: int = 0) -> list[int]:
        """The vgroups ``first ..`` of ``db`` of which the catalog places a replica on this node (every one on a
        single node): each is open here, led or followed (issue 25, walgate.gateway.replicas)."""
        local = self.catalog.node_id
        return [i for i in range(first, db.vgroups) if local in db.replicas_of(i, local)]

    def local_vnode(self, db: str, index: int) -> Vnode:
        """Vnode ``index`` of database ``db``; :class:`NotHere` naming its node when it is placed on another,
        :class:`StorageUnavailable` while the vnodes of a database the cluster's catalog just gave are not open yet
        (the disk refused them: the apply is retried)."""
        check_vnode(db, index)
        vnodes = self._opened(db)
        if index < len(vnodes) and vnodes[index].index == index:
            return vnodes[index]  # every vgroup of the database is here
        found = next((v for v in vnodes if v.index == index), None)
        if found is None:
            node = self.catalog.database(db).node_of(index, self.catalog.node_id)
            raise NotHere(f"vgroup {index} of database {db} is on node {node}, not on this node "
                          f"({self.catalog.node_id}): send it there (docs/cluster.md)", node)
        return found

    def written_vnode(self, db: str, index: int) -> Vnode:
        """Vnode ``index`` of database ``db`` when this node takes its writes: the node it is placed on, or for a
        replicated vgroup (issue 25) the replica that leads it now (:attr:`Wal.leading
        <walgate.storage.wal.Wal.leading>`; a follower's copy is written by replication only, or its WAL would part
        from its leader's). Otherwise :class:`NotHere`, :class:`NotLedNow` for a replicated vgroup held here but not
        led now (the gateway sends the write to the leader; a replicated vgroup with no leader elected yet is refused
        there, so nothing is answered before a replica holds it). A write whose caller waits for the in-sync
        replicas (:func:`led_appends.recording <walgate.storage.led_appends.recording>`) is refused with
        :class:`NotEnoughReplicas` while the vgroup's ISR is below ``min.insync.replicas``
        (:attr:`Wal.acks_all_refused <walgate.storage.wal.Wal.acks_all_refused>`)."""
        vnode = self.local_vnode(db, index)
        dbdef = self.catalog.database(db)
        wal = vnode.wal
        if dbdef.replicated(index) and not wal.leading:
            raise NotLedNow(f"vgroup {index} of database {db} is not led by this node ({self.catalog.node_id}) now: "
                            "send it to its leader (docs/cluster.md)", dbdef.node_of(index, self.catalog.node_id), db,
                            dbdef.id, index)
        refused = wal.acks_all_refused() if wal.leading and led_appends.waited_for() else None
        if refused is not None:
            raise NotEnoughReplicas(f"Sync timeout: vgroup {index} of database {db}: {refused}; nothing was written, "
                                    "retry it")
        node = dbdef.node_of(index, self.catalog.node_id)
        if not dbdef.replicated(index) and node != self.catalog.node_id:
            raise NotHere(f"vgroup {index} of database {db} is written on node {node}, not on this node "
                          f"({self.catalog.node_id}): send it there (docs/cluster.md)", node)
        return vnode

    def all_vnodes(self, db: DatabaseDef) -> list[Vnode]:
        """Every vnode of ``db`` (for what reads them all); :class:`NotHere` naming the first other node one is on,
        a vgroup this node holds a follower's copy of included (read on its first replica, which has every
        acknowledged write)."""
        vnodes = self.vnodes_here(db)
        if len(vnodes) < db.vgroups:
            missing = next(i for i in range(db.vgroups) if all(v.index != i for v in vnodes))
            self.written_vnode(db.name, missing)
        return vnodes

    def vnodes_here(self, db: DatabaseDef, vgroups: Collection[int] | None = None) -> list[Vnode]:
        """The vnodes of ``db`` this node serves reads of (StorageUnavailable while they are not open yet): those
        placed here, or of a replicated vgroup those it leads now (never a follower's copy, behind the high
        watermark): what a query merged over the nodes reads here, each vgroup on one node only.

        ``vgroups``: exactly those, as the node asked assigned them from the leaders it read; each must be one this
        node serves now, else :class:`NotLedNow` (replicated: its leadership moved since, or is moving) or
        :class:`NotHere` (one copy, placed elsewhere), never fewer rows: a node that no longer leads a vgroup the
        node asked counts on it would otherwise leave the vgroup's rows out of the merged answer, and one that
        leads it already while its predecessor still does would count them twice (None: every vnode served here,
        a node of the version before asking)."""
        local = self.catalog.node_id
        opened = self._opened(db.name)
        if vgroups is None:
            return [v for v in opened if (v.wal.leading if db.replicated(v.index)
                                          else db.node_of(v.index, local) == local)]
        by_index = {v.index: v for v in opened}
        served = []
        for index in sorted(vgroups):
            if not 0 <= index < db.vgroups:
                raise InvalidValue(f"database {db.name} has no vgroup {index} (it has {db.vgroups})")
            vnode = by_index.get(index)
            if db.replicated(index) and (vnode is None or not vnode.wal.leading):
                raise NotLedNow(f"Sync leader is unreachable: vgroup {index} of database {db.name} is not led by "
                                f"this node ({local}) now (its leadership is moving): retry the query",
                                db.node_of(index, local), db.name, db.id, index)
            if vnode is None or (not db.replicated(index) and db.node_of(index, local) != local):
                node = db.node_of(index, local)
                raise NotHere(f"vgroup {index} of database {db.name} is on node {node}, not on this node ({local})",
                              node)
            served.append(vnode)
        return served

    def _opened(self, db: str) -> list[Vnode]:
        vnodes = self.vnodes.get(db)
        if vnodes is None:
            raise StorageUnavailable(f"the vnodes of database {db} are not open yet (the disk refused them; retried)")
        return vnodes

    def resolve_db(self, name: str | None, session: str | None) -> DatabaseDef:
        """The database a statement names, else the session's (``USE``); InvalidValue when neither is given."""
        db = name or session
        if db is None:
            raise InvalidValue("Database not specified: use db.name or USE db")
        return self.catalog.database(db)

    def check_size(self, n: int) -> None:
        if n > self.max_request_bytes:
            raise RequestTooLarge(f"Request of {n} bytes exceeds the maximum of {self.max_request_bytes} bytes")

    def now_ts(self, db: DatabaseDef) -> int:
        """Now (the store's clock), in ticks of the database's precision."""
        return self.clock.time_ns() // TICKS[db.precision]

    # --------------------------------------------------------------- tables

    def vnode(self, db: str, table: str) -> Vnode:
        """The vnode of table ``table`` of ``db``; :class:`NotHere` when it is placed on another node."""
        return self.local_vnode(db, vnode_of(db, table, self.catalog.database(db).vgroups))

    def tables_exist(self, tables: list[tuple[str, str]]) -> list[bool]:
        """Whether each ``(database, table)`` of ``tables`` exists (a normal table or a subtable); :class:`NotHere`
        when a table's vgroup is placed on another node, NotFound for an unknown database."""
        return [self.vnode(db, name).live(name) is not None for db, name in tables]

    def table(self, db: DatabaseDef, name: str) -> TableDef:
        t = self.vnode(db.name, name).live(name)
        if t is None:
            raise table_not_found(db.name, name)
        return t

    def check_new_tables(self, db: DatabaseDef, more: int) -> None:
        """Raise :class:`LimitExceeded` if ``more`` new tables would take ``db`` past ``max_tables``."""
        if self.max_tables and more > 0:
            held = sum(v.live_count for v in self.vnodes[db.name])
            if held + more > self.max_tables:
                raise LimitExceeded(f"Too many tables in database {db.name}: {held} exist and the request creates "
                                    f"{more}, over the limit of {self.max_tables} (max_tables_per_database)")

    def columns_of(self, db: DatabaseDef, t: TableDef) -> tuple[Column, ...]:
        if t.stable is None:
            assert t.columns is not None
            return t.columns
        return self.catalog.stable(db.name, t.stable).columns

    def tag_tables(self, vnode: Vnode) -> Callable[[str, pa.Array | None], pa.Table]:
        """Tag tables of ``vnode``'s supertables: ``lookup(stable, names)`` is the tag table of the subtables named
        in ``names`` (every one when None: kept in :attr:`tag_cache` while the vnode's tables stay as they are); a
        stable dropped since keeps its subtables' names, no tags."""
        db = vnode.db.name

        def lookup(stable: str, names: pa.Array | None) -> pa.Table:
            st = self.catalog.stables.get((db, stable))
            if st is None:
                st = StableDef(db, stable, (), (), 0)
            if names is not None:
                return vnode.tag_table(st, names)
            return self.tag_cache.get((vnode.tables_version, st), lambda: vnode.tag_table(st))

        return lookup

    # --------------------------------------------------------------- topics

    def partition(self, topic: str, partition: int) -> tuple[TopicDef, Vnode, OffsetIndex]:
        """A served topic-partition's definition, vnode and offset index; NotFound when there is none."""
        t = self.catalog.topics.get(topic)
        if t is None:
            raise NotFound(f"Topic not exist: {topic}")
        if not 0 <= partition < self.catalog.database(t.db).vgroups:
            raise NotFound(f"Topic {topic} has no partition {partition}")
        return t, self.local_vnode(t.db, partition), self.indexes[(topic, partition)]

    def add_topic_id(self, topic: TopicDef) -> None:
        topic_id = uuid.UUID(topic.topic_id)
        self.topic_names[topic_id] = topic.name
        self.topic_uuids[topic.name] = topic_id

    def forget_topic_id(self, name: str) -> None:
        topic_id = self.topic_uuids.pop(name, None)
        if topic_id is not None:
            self.topic_names.pop(topic_id, None)
