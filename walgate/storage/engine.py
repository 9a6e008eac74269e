"""The storage engine facade: one object per data dir, called from its lanes (threading below).

Threading: an Engine is synchronous; the gateway calls it from its storage lane: exclusive calls on one thread,
and calls holding only some vnodes on threads of their own, at once (:mod:`walgate.storage.lanes` states what each
may touch; one thread holds everything when the engine is used alone). The observers passed to :meth:`Engine.open`
are called back on the calling thread. The one exception
is a SELECT: :meth:`Engine.prepare_select` (on that thread) returns a query bound to WAL snapshots, which runs on any
thread or in another process while the engine goes on (:class:`~walgate.storage.select.PreparedSelect`);
:meth:`Engine.parse` is pure.

The work is done by the parts the engine composes, all sharing one :class:`~walgate.storage.store.Store`:
:mod:`~walgate.storage.ddl` (databases, tables, ALTER/DROP), :mod:`~walgate.storage.ingest` (INSERT, line
protocol, CSV, JSON rows through one row planner), :mod:`~walgate.storage.commit` (the all-or-nothing append of a
request, see its docstring for the write protocol), :mod:`~walgate.storage.topic_views` (topics, offsets, Kafka
reads), :mod:`~walgate.storage.native_topics` (Kafka-native topics), :mod:`~walgate.storage.group_offsets`
(committed offsets), :mod:`~walgate.storage.show` (SHOW / DESCRIBE) and :mod:`~walgate.storage.select` (SELECT).

Retention (in bounded steps, :mod:`~walgate.storage.retention`) and periodic fsync run from :meth:`Engine.sync_due`,
which the gateway calls on a timer (running the fsyncs it returns on another thread; at once again while a retention
round has steps left).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from walgate.cluster.placement import Replicas
from walgate.storage import fileio, resource_configs
from walgate.storage.batch_cache import BatchCache
from walgate.storage.catalog import MAX_PARTITIONS, REPAIR_HINT, DatabaseDef, StableDef, TopicDef
from walgate.storage.cleaner import MAP_ENTRIES, Cleaner, CleanStats
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.commit import Commits
from walgate.storage.coordinator_log import Committed, CoordinatorLog, GroupRecord
from walgate.storage.coordinator_partitions import DEFAULT_PARTITIONS
from walgate.storage.damage import Damage
from walgate.storage.ddl import Ddl
from walgate.storage.durability import Need, Syncable
from walgate.storage.errors import StorageError, StorageUnavailable, Unsupported
from walgate.storage.grants import Grants
from walgate.storage.group_offsets import GroupOffsets
from walgate.storage.ingest import Ingest
from walgate.storage.lanes import INLINE, CoordinatorLane
from walgate.storage.lineproto_columns import Measurement
from walgate.storage.meta_checks import MetaCheck, apply_check, pending
from walgate.storage.moved_vnodes import delete_vnode_dir
from walgate.storage.native_topics import NativeTopics
from walgate.storage.observers import NO_CONSUMERS, NO_LISTENER, ConsumerRow, ConsumersView, RecordsListener
from walgate.storage.partitions import LocalPartitions, Partitions
from walgate.storage.render import KafkaRows
from walgate.storage.replicated import append_replicated
from walgate.storage.result import Result
from walgate.storage.retention import Retention
from walgate.storage.select import PreparedSelect, Selects
from walgate.storage.share_state_log import SHARE_GROUPS_LOG, ShareStateLog
from walgate.storage.show import Dnode, Show
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.sql_objects import SqlObjects
from walgate.storage.store import Store
from walgate.storage.sync_schedule import SyncSchedule
from walgate.storage.topic_configs import wal_options
from walgate.storage.topic_views import PartitionStats, TopicViews
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.storage.truncation import truncate_vnode
from walgate.storage.users import Users
from walgate.storage.users_key import USERS_KEY, load_users_key
from walgate.storage.vnode import Vnode
from walgate.storage.vnode_snapshot import SNAPSHOTS, STAGING, Manifest, prepare_install, verify
from walgate.storage.vnode_snapshot import write as write_snapshot
from walgate.storage.wal import PendingSync
from walgate.storage.write_plan import PreparedWrite, WriteRequest, WriteSnapshot

T = TypeVar("T")

__all__ = ["ConsumerRow", "Engine", "PartitionStats", "PreparedSelect", "Result"]

_RETENTION_CHECK_S = 5.0
BATCH_CACHE_BYTES = 256 << 20
"""The default bound of the rendered-batch cache (``--batch-cache-bytes``)."""


class Engine:
    """Catalog + vnodes + topics of one data directory (see the module docstring)."""

    def __init__(self, store: Store, batch_cache_bytes: int = BATCH_CACHE_BYTES) -> None:
        self.store = store
        self._meta_checks: list[MetaCheck] = []  # the stores' checks Engine.open left (whole_stores=False)
        self.clock = store.clock  # what the engine reads time from; the gateway reads sync_due's and clean's now from it
        # the shared state, for callers that inspect it (tests, tools)
        self.data_dir = store.data_dir
        self.damage_log = store.damage_log
        self.files = store.files  # this engine's open segment files (storage/filecache.py), no other engine's
        self.syncs = store.syncs  # how long this engine's fsyncs took (storage/fileio.py), no other engine's
        self.catalog = store.catalog
        self.vnodes = store.vnodes
        self.evaluators = store.evaluators
        self.indexes = store.indexes
        self.producer_ids = store.producer_ids
        self.offsets = GroupOffsets(store)
        self.views = TopicViews(store, self.offsets)
        self.commits = Commits(store, self.views)
        self.ddl = Ddl(store, self.commits, self.views)
        self.ingest = Ingest(store, self.commits, self.ddl, self.views)
        self.native = NativeTopics(store, self.views)
        self.sql_objects = SqlObjects(store, self.commits, self.views)
        self.show = Show(store, self.views, self.offsets)
        self.selects = Selects(store, self.views)
        self.grants = Grants(store)
        self.users = Users(store.catalog, load_users_key(store.data_dir / USERS_KEY, store.damage_log, store.syncs),
                           store.clock)
        self.cleaner = Cleaner(store)
        self.retention = Retention(store, self.views)
        self.batch_cache = BatchCache(batch_cache_bytes)  # TDengine topics' rendered batches (read by the metrics)
        self.partitions: Partitions = LocalPartitions(store, self.views, self.native, self.ingest, self.batch_cache)
        """The partition interface every Kafka API, the console and the metrics use (:mod:`.partitions`)."""
        self._next_retention = 0.0
        self._syncs = SyncSchedule()  # the WALs' periodic fsyncs by due time (sync_due)
        self._publication_deferred = False  # see defer_topics_publication
        self._statements: dict[type, Callable[[Any, str | None], Result]] = {
            ast.CreateDatabase: self.ddl.create_database,
            ast.DropDatabase: self.ddl.drop_database,
            ast.UseDatabase: self.ddl.use_database,
            ast.CreateStable: self.ddl.create_stable,
            ast.CreateTable: self.ddl.create_table,
            ast.CreateSubtable: self.ddl.create_subtable,
            ast.AlterStable: self.ddl.alter_stable_statement,
            ast.DropTable: self.ddl.drop_table,
            ast.DropStable: self.ddl.drop_stable,
            ast.Insert: self.ingest.insert,
            ast.CreateTopic: self.views.create,
            ast.DropTopic: self.views.drop_statement,
            ast.DropConsumerGroup: self.views.drop_group,
            ast.Show: self.show.show,
            ast.Describe: self.show.describe,
            ast.Select: self.selects.select,
            ast.Grant: self.grants.grant,
            ast.ShowUserPrivileges: self.grants.show,
            ast.CreateUser: self.users.create_statement,
            ast.AlterUser: self.users.alter_statement,
            ast.DropUser: self.users.drop_statement,
            ast.ShowUsers: self.users.show_statement,
        }

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        max_request_bytes: int = 16 << 20,
        max_partitions: int = MAX_PARTITIONS,
        max_tables: int = 0,
        listener: RecordsListener = NO_LISTENER,
        consumers: ConsumersView = NO_CONSUMERS,
        group_commit: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        coordinator_partitions: int = DEFAULT_PARTITIONS,
        batch_cache_bytes: int = BATCH_CACHE_BYTES,
        whole_stores: bool = True,
        coordinator_lane: CoordinatorLane = INLINE,
        node_id: int = 0,
    ) -> Engine:
        """Open (creating if needed, migrating an older format) the data directory and recover every vnode and
        topic index. Never refuses because of damage (reported in :meth:`damage`); refuses a data dir of a newer
        format (:class:`~walgate.storage.datadir.UnsupportedFormat`). ``max_partitions`` caps the vnodes of all
        databases together (CREATE DATABASE, Kafka-native topics and their new partitions), never checked on open;
        ``max_tables`` (0: none) the tables of each database (a write creating more is refused whole).
        ``listener`` is told of every topic-partition an append gives records; ``consumers`` lists the consumer-group
        members for SHOW CONSUMERS / SUBSCRIPTIONS (see :mod:`walgate.storage.observers`). With ``group_commit``,
        WAL_LEVEL 2 appends and consumer-group commits return before their fsync, and the caller waits for what
        :meth:`take_unsynced` lists (see :mod:`walgate.storage.durability`). ``clock`` is every time the engine reads
        (:mod:`walgate.storage.clock`: the real clock unless a test passes its own). ``coordinator_partitions``: N of
        a data dir made now (Kafka's ``offsets.topic.num.partitions``); an existing one keeps its own
        (:mod:`walgate.storage.coordinator_partitions`). ``batch_cache_bytes`` bounds the cache of TDengine topics'
        rendered batches (:mod:`walgate.storage.batch_cache`). Without ``whole_stores``, the vnodes' meta stores are
        opened without the checks that read them whole, which :meth:`meta_checks` hands out instead
        (:mod:`walgate.storage.meta_checks`). ``coordinator_lane``: how the coordinator log is reached from the thread
        that opens the engine (:mod:`walgate.storage.lanes`; the gateway's second lane, whose calls read the topics
        this thread publishes: :meth:`publish_topics`). ``node_id``: this node's ``node.id``, the node of every vgroup
        a database's record does not place (:class:`~walgate.storage.catalog.DatabaseDef`)."""
        store = Store(data_dir, max_request_bytes, max_partitions, listener, consumers, group_commit, clock,
                      coordinator_partitions, max_tables, coordinator_lane)
        store.catalog.node_id = node_id
        engine = cls(store, batch_cache_bytes)
        for db in store.catalog.databases.values():
            store.vnodes[db.name] = store.open_database(db, whole_stores=whole_stores)
        engine._meta_checks = [] if whole_stores else pending(store.vnodes)
        for topic in list(store.catalog.topics.values()):
            try:
                if topic.kind == "kafka":
                    engine.native.open_topic(topic)
                else:
                    engine.views.open_topic(topic)
            except StorageError as exc:  # e.g. its source's catalog record was lost: serve everything else
                store.damage_log.report(store.catalog.path, 0, 0, f"topic {topic.name} cannot be opened: "
                                        f"{exc.message}; {REPAIR_HINT}", "not served")
                engine.views.forget(topic.name)
        store.producer_ids.at_least(1 + max((p.max_producer_id() for p in store.producers.values()), default=-1))
        store.publish_topics()
        return engine

    # ------------------------------------------------------------- SQL

    def execute(self, sql: str, db: str | None = None) -> Result:
        """Execute one SQL statement; ``db`` is the session's current database."""
        return self.run(self.parse(sql), db)

    def parse(self, sql: str) -> ast.Statement:
        """One SQL statement, parsed (its size checked first)."""
        self.store.check_size(len(sql.encode("utf-8", "surrogatepass")))  # the parser refuses lone surrogates
        return parse(sql)

    def run(self, stmt: ast.Statement, db: str | None = None) -> Result:
        """Execute a statement :meth:`parse` gave (an authorization check may come in between)."""
        handler = self._statements.get(type(stmt))
        if handler is None:
            raise Unsupported(f"{type(stmt).__name__} statements are not supported")
        return handler(stmt, db)

    def prepare_select(self, stmt: ast.Select, db: str | None = None, here_only: bool = False,
                       scan: bool = False, now_ns: int | None = None,
                       vgroups: Collection[int] | None = None) -> PreparedSelect:
        """A SELECT bound to what its database serves now, to run on another thread or process
        (:class:`PreparedSelect`); ``here_only``: this node's part of a merged SELECT (``vgroups``: those the node
        asked assigned here), ``scan``: as its scanned rows, ``now_ns``: the instant its ``now`` is read at (None:
        :attr:`clock` now) (:meth:`Selects.prepare`)."""
        return self.selects.prepare(stmt, db, here_only, scan, now_ns, vgroups)

    def show_tables_here(self, stmt: ast.Show, db: str | None = None,
                         vgroups: Collection[int] | None = None) -> Result:
        """``SHOW [db.]TABLES`` over the vnodes placed on this node (``vgroups``: those the node asked assigned
        here): its part of the listing of a database spread over nodes, which the node asked merges
        (:meth:`Show.tables <walgate.storage.show.Show.tables>`)."""
        return self.show.tables(stmt, db, here_only=True, vgroups=vgroups)

    def recheck(self, db: str, damaged: list[tuple[int, int]]) -> None:
        """Report the damage a :class:`PreparedSelect` run over ``db`` found (``(vnode index, version)``)."""
        self.selects.recheck(db, damaged)

    # ------------------------------------------------------------- writes

    def write_lines(self, db: str, body: bytes, precision: str = "ns") -> int:
        """InfluxDB line protocol (TDengine schemaless): returns rows written."""
        return self.ingest.write_lines(db, body, precision)

    def database(self, name: str) -> DatabaseDef:
        """Database ``name``'s definition (NotFound: no such database)."""
        return self.catalog.database(name)

    def write_measurements(self, db: str, measurements: list[Measurement], schemas_apart: bool = False) -> int:
        """:meth:`write_lines` of a body :func:`~walgate.storage.lineproto_columns.parse_body` parsed elsewhere (it is
        pure: a large body need not hold this thread while it is parsed); rows written (``schemas_apart``:
        :meth:`Ingest.write`)."""
        return self.ingest.write_measurements(db, measurements, schemas_apart)

    def write_csv(self, db: str, body: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """CSV with a header row into ``table``, or into subtables of ``stable`` named by a ``tbname`` column."""
        return self.ingest.write_csv(db, body, table=table, stable=stable)

    def write_snapshot(self, keys: list[tuple[str, str]]) -> WriteSnapshot:
        """What a write planned in another process is planned against: the catalog now and the tables ``keys``
        names (:meth:`Ingest.worker_snapshot`)."""
        return self.ingest.worker_snapshot(keys)

    def apply_write(self, prepared: PreparedWrite, request: WriteRequest) -> int:
        """Write ``prepared``, planned from ``request`` elsewhere, or ``request`` planned again here when what the
        plan read has changed (:meth:`Ingest.apply`); rows written."""
        return self.ingest.apply(prepared, request)

    def apply_schema_changes(self, prepared: PreparedWrite) -> PreparedWrite | None:
        """The schema changes of ``prepared`` alone (an exclusive call), the rest then applied with
        :meth:`apply_write` holding only its vnodes (:meth:`Ingest.apply_changes`); None: it no longer holds."""
        return self.ingest.apply_changes(prepared)

    def make_schemas(self, changes: list[tuple[StableDef | None, StableDef]]) -> None:
        """The supertables a schemaless write of a cluster database needs
        (:class:`~walgate.storage.write_plan.SchemaChangeNeeded`), made as a staged call: its records go through the
        cluster's stream (:meth:`Ingest.make_schemas`)."""
        self.ingest.make_schemas(changes)

    def write_json_rows(self, db: str, stable: str, rows: list[tuple[str, dict[str, Any], int]]) -> int:
        """Rows as JSON objects into subtables of ``stable`` (see :meth:`Ingest.write_json_rows`); rows written."""
        return self.ingest.write_json_rows(db, stable, rows)

    # ------------------------------------------------------------- topics

    def is_native(self, topic: str) -> bool:
        """Whether ``topic`` is a Kafka-native topic."""
        return self.views.is_native(topic)

    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether ``topic`` has partition ``partition`` (the coordinator's offset store asks)."""
        return self.views.has_partition(topic, partition)

    def partition_count(self, topic: str) -> int:
        """A topic's partitions (NotFound: no such topic)."""
        return self.views.partition_count(topic)

    def topic(self, name: str) -> TopicDef | None:
        """Topic ``name``'s definition now (None: no such topic)."""
        return self.catalog.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with Kafka topic id ``topic_id`` (None: no such topic)."""
        return self.views.topic_name(topic_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The Kafka topic id (the stable UUID the catalog keeps) of topic ``name`` (None: no such topic)."""
        return self.views.topic_id(name)

    def topics_by_id(self) -> Mapping[uuid.UUID, str]:
        """Every topic's name by Kafka topic id (a read-only view of the index storage keeps)."""
        return MappingProxyType(self.store.topic_names)

    def drop_topic(self, name: str) -> None:
        """Drop a topic, its offset indexes and committed offsets; a Kafka-native one with its database."""
        self.views.drop(name)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of a topic-partition."""
        return self.views.watermarks(topic, partition)

    def partition_keys(self) -> list[tuple[str, int]]:
        """(topic, partition) of every partition, sorted: what a caller reading stats a page at a time walks."""
        return sorted(self.store.indexes)

    def index_entries(self, topic: str, partition: int, offset: int) -> Iterator[tuple[int, int, int]]:
        """(base offset, WAL version, record count) of each entry from the one holding ``offset`` on."""
        return self.views.index_entries(topic, partition, offset)

    def kafka_rows(self, topic: str, partition: int, version: int) -> KafkaRows:
        """The Kafka records of one indexed entry of a TDengine topic (CorruptEntry: lost)."""
        return self.views.kafka_rows(topic, partition, version)

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record whose timestamp >= ``ts_ms``; None if none."""
        return self.views.offset_for_timestamp(topic, partition, ts_ms)

    # ------------------------------------------------------------- Kafka-native topics

    def create_kafka_topic(self, name: str, partitions: int, configs: dict[str, str],
                           defaults: Mapping[str, str] = MappingProxyType({}),
                           nodes: tuple[Replicas, ...] | None = None, prepared: str | None = None,
                           replication_factor: int = 1, states: bool = False) -> TopicDef:
        """A Kafka-native topic of ``partitions`` partitions with Kafka ``configs``; ``defaults``: the topic configs
        the dynamic broker configs default (:meth:`topic_defaults`), applied where ``configs`` says nothing;
        ``nodes``: each partition's replicas as a manual assignment names them (cluster mode), else None:
        ``replication_factor`` replicas of each placed;
        ``prepared``: what :meth:`prepare_kafka_topic` returned (its files are only opened here), or None;
        ``states``: every partition has a partition state, also of one copy (``__consumer_offsets``)."""
        return self.native.create(name, partitions, configs, defaults, nodes, prepared, replication_factor, states)

    def prepare_kafka_topic(self, partitions: int) -> str:
        """The files of a new Kafka-native topic's ``partitions`` vnodes made in a new database directory, its id
        returned for :meth:`create_kafka_topic`, then :meth:`discard_prepared` (:meth:`NativeTopics.prepare`). Safe
        on any thread, beside the storage thread's calls: it reads only the data dir's path."""
        return self.native.prepare(partitions)

    def discard_prepared(self, db_id: str) -> None:
        """Remove :meth:`prepare_kafka_topic`'s directory unless a topic was created with it."""
        self.native.discard(db_id)

    def drop_prepared(self, db_id: str) -> None:
        """Remove :meth:`prepare_kafka_topic`'s directory that no :meth:`create_kafka_topic` was given (safe on any
        thread, as the prepare)."""
        self.native.drop(db_id)

    def alter_topic_configs(self, name: str, configs: dict[str, str],
                            defaults: Mapping[str, str] = MappingProxyType({})) -> None:
        """Replace a Kafka-native topic's configs (validated); its WAL settings follow at once (over ``defaults``)."""
        self.native.alter_configs(name, configs, defaults)

    def create_partitions(self, name: str, count: int, nodes: tuple[Replicas, ...] | None = None) -> None:
        """Grow a Kafka-native topic to ``count`` partitions; ``nodes``: each new partition's replicas as a
        manual assignment names them (cluster mode), else None: placed."""
        self.native.create_partitions(name, count, nodes)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move a partition's log start to ``offset`` (-1: the high watermark); the new log start."""
        return self.native.delete_records(name, partition, offset)

    def append_batches(self, topic: str, partition: int, batches: list[bytes]) -> int:
        """Append produced RecordBatch v2 ``batches`` atomically (idempotence checked); their base offset."""
        return self.native.append_batches(topic, partition, batches)

    def kafka_batch(self, topic: str, partition: int, version: int) -> bytes:
        """The stored RecordBatch at WAL ``version`` of a Kafka-native partition (CorruptEntry: lost)."""
        return self.native.kafka_batch(topic, partition, version)

    def truncate_vnode(self, db: str, index: int, version: int, *, high_watermark: int) -> int:
        """Cut vnode ``index`` of ``db`` back to the WAL entry holding ``version``, with every state derived from it,
        never below ``high_watermark`` (a WAL version); the version cut to (:func:`walgate.storage.truncation.
        truncate_vnode`; replication's follower truncation). An exclusive call: it touches the partition's producer
        state, the cleaner and the batch cache besides the vnode."""
        return truncate_vnode(self.store, self.native, self.cleaner, self.batch_cache, db, index, version,
                              high_watermark=high_watermark)

    def append_replicated(self, db: str, index: int, raw: bytes, first_version: int, epoch: int) -> int:
        """A follower's copy of its leader's WAL entries ``raw`` (whole batches from ``first_version``, of leader
        ``epoch``) appended to vnode ``index`` of ``db`` as they are, with what its topics derive from them; the
        vnode's next version (:func:`walgate.storage.replicated.append_replicated`: EntriesRefused or
        StorageUnavailable with nothing written). On the vnode's lane."""
        return append_replicated(self.store, self.views, self.store.local_vnode(db, index), raw, first_version, epoch)

    # ------------------------------------------------------------- committed offsets

    def commit_offsets(
        self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int
    ) -> list[StorageError | None]:
        """Durably commit ``(topic, partition, offset, leader_epoch, metadata)`` entries for ``group``; per entry,
        None or the error that refused it."""
        return self.offsets.commit(group, entries, now_ms)

    def committed(self, group: str, topic: str, partition: int) -> Committed | None:
        """The offset ``group`` committed for a topic-partition (None: none, or no such partition)."""
        return self.offsets.get(group, topic, partition)

    def delete_offsets(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete committed offsets matching the filters (durably); returns how many went."""
        return self.offsets.delete(group, topic, partition)

    def all_committed(self) -> list[tuple[str, str, int, Committed]]:
        """Every committed offset: (group, topic, partition, committed)."""
        return self.offsets.all()

    def delete_dropped_offsets(self) -> list[str]:
        """At start: delete the committed offsets of topics the catalog dropped (a stop came between a topic's drop
        and their deletion); the topics they were of."""
        return self.offsets.delete_dropped()

    # ------------------------------------------------------------ lanes (walgate.storage.lanes)

    def topics(self) -> TopicsSnapshot:
        """The topics as the storage lane last published them (:mod:`walgate.storage.topics_snapshot`; any lane)."""
        return self.store.topics()

    def cluster_mode(self, replication: bool = False) -> None:
        """Cluster mode: the catalog's shared records (users, ACLs, quotas, configs) are the cluster's, changed only
        through its record stream, and new vgroups are placed, recording their node (:mod:`walgate.storage.catalog`);
        producer ids are spread by the node id, unique in the cluster (:class:`~walgate.storage.producers.ProducerIds`).
        ``replication``: ``CREATE DATABASE ... REPLICA n`` above 1 is served (``replication.enable``);
        without it refused."""
        self.catalog.cluster = True
        self.catalog.replication = replication
        self.store.producer_ids.cluster(self.catalog.node_id)
        self.sql_objects.recover()

    def staged(self, fn: Callable[..., T], *args: Any) -> tuple[T, list[dict[str, Any]]]:
        """``fn(*args)`` as a staged call (cluster mode): its result and the shared catalog records it made, which
        are undone here (the gateway has them appended to the cluster's stream; see :meth:`Catalog.stage`)."""
        self.catalog.stage()
        try:
            result = fn(*args)
        finally:
            records = self.catalog.unstage()
        return result, records

    def apply_shared(self, seq: int, record: dict[str, Any]) -> bool:
        """Apply record ``seq`` of the cluster's catalog stream (:meth:`Catalog.apply_shared`, durable), then bring the
        databases and topics served here in line with it: a new database's or topic's vnodes placed on this node
        opened, a dropped one's closed and deleted (:meth:`NativeTopics.follow_catalog`), a new TDengine topic
        compiled, an ALTER/DROP STABLE's meta entry written into the vnodes here (:class:`SqlObjects`). The one
        apply path of every node, the one asked included. False when the record was applied already (what follows it
        is done again: a call the disk refused is retried whole). Raises :class:`StorageUnavailable` when the disk
        refuses."""
        self.sql_objects.before(seq, record)
        applied = self.catalog.apply_shared(seq, record)
        self._follow_catalog(record)
        return applied

    def restore_shared(self, seq: int, records: list[dict[str, Any]]) -> None:
        """Replace the cluster's part of the catalog by its snapshot up to ``seq`` (:meth:`Catalog.restore_shared`),
        then follow it as :meth:`apply_shared` does (the supertables dropped meanwhile:
        :meth:`SqlObjects.dropped_meanwhile`)."""
        before = self.catalog.stables
        self.catalog.restore_shared(seq, records)
        self.sql_objects.dropped_meanwhile(before)
        self._follow_catalog(None)

    def _follow_catalog(self, record: dict[str, Any] | None) -> None:
        """:meth:`NativeTopics.follow_catalog` over this node's topic defaults, then :meth:`SqlObjects.follow` after
        ``record`` (None: a snapshot); a file the disk refuses to make is :class:`StorageUnavailable` (the caller
        retries the whole apply). The meta store checks :meth:`open` left for vnodes it closed (a database or topic
        deleted while the node was down) are dropped."""
        try:
            self.native.follow_catalog(self.topic_defaults(self.catalog.node_id))
            self.sql_objects.follow(record)
        except OSError as exc:
            raise StorageUnavailable(f"the vnodes the catalog places here could not be opened ({exc.strerror or exc})"
                                     "; retried") from None
        finally:
            served = {id(v) for vnodes in self.vnodes.values() for v in vnodes}
            self._meta_checks = [c for c in self._meta_checks if id(c.vnode) in served]

    def moved_away(self) -> list[tuple[str, str, int]]:
        """(database name, database id, vgroup) of each vnode open here that the catalog no longer places here (a
        replica move took it to other nodes): the replica manager lets go of each, then :meth:`drop_moved_vnode`."""
        out = []
        for name, vnodes in self.vnodes.items():
            db = self.catalog.databases.get(name)
            if db is None or db.replicas is None:
                continue
            placed = set(self.store.placed_here(db))
            out += [(name, db.id, v.index) for v in vnodes if v.index not in placed and v.db.id == db.id]
        return out

    def drop_moved_vnode(self, db_name: str, index: int) -> bool:
        """Close vnode ``index`` of ``db_name``, which the catalog no longer places here, and delete its files in the
        crash-safe order of :mod:`walgate.storage.moved_vnodes` (its topics' offset indexes and producer state
        forgotten with it); False (nothing done) when it is placed here or not open. The caller (the replica manager)
        no longer leads or follows it. OSError when the disk refuses the delete: the vnode is closed, the next start
        finishes it."""
        db = self.catalog.databases.get(db_name)
        vnodes = self.vnodes.get(db_name, [])
        vnode = next((v for v in vnodes if v.index == index), None)
        if db is None or vnode is None or index in self.store.placed_here(db):
            return False
        vnodes.remove(vnode)
        self._close_vnode(vnode)
        delete_vnode_dir(vnode.dir, self.syncs)
        return True

    def start_vnode_at(self, db_name: str, index: int, version: int) -> Vnode:
        """Kafka's ``UnifiedLog.truncateFullyAndStartAt`` for a follower whose copy of Kafka-native partition
        ``index`` (of topic database ``db_name``) ends below its leader's log start ``version`` (retention or
        DeleteRecords removed what it lacks, KIP-107): the copy is emptied and starts at WAL version ``version``:
        closed, its topic's offset index and producer state forgotten, its files deleted in the crash-safe order of
        :mod:`walgate.storage.moved_vnodes` and opened again empty, its WAL's first segment made at ``version``; the
        new vnode (its offset index numbers on from the base offset of the first batch it is given, its epoch cache
        from the epoch of the first entries, its producer state from their batches). An exclusive call. Its WAL's
        replication wiring is the caller's (a new :class:`~walgate.storage.wal.Wal`).

        Raises Unsupported, nothing done, for an SQL vgroup (its tables and its TDengine topics' offsets below
        ``version`` are not in the leader's WAL: that needs a copy of its meta store), ValueError when the copy ends
        at or past ``version``; OSError when the disk refuses the delete or the new files: the vnode is then left
        closed (not open here) and a call again, or the next start (which opens it as the disk holds it), goes on.
        """
        db = self.catalog.database(db_name)
        topics = self.catalog.topics_of(db_name)
        if not topics or any(t.kind != "kafka" for t in topics):
            raise Unsupported(f"vnode {index} of database {db_name}: an SQL vgroup's copy cannot start at the leader's "
                              f"log start (version {version}): its tables and topic offsets below it are not in the "
                              "leader's WAL")
        vnodes = self.vnodes[db_name]
        vnode = next((v for v in vnodes if v.index == index), None)
        if vnode is not None:
            if vnode.wal.next_version >= version:
                raise ValueError(f"vnode {index} of database {db_name} ends at version {vnode.wal.next_version}, "
                                 f"not below {version}")
            vnodes.remove(vnode)
            self._close_vnode(vnode)
        directory = self.store.db_dir(db) / f"vnode{index}"
        delete_vnode_dir(directory, self.syncs)
        new = self.store.open_database(db, indices=[index], first_version=version)[0]
        vnodes.append(new)
        vnodes.sort(key=lambda v: v.index)
        for topic in topics:
            self.views.open_partition(topic, new)
            self.native.rebuild_producers(topic, new)
        return new

    def snapshot_vnode(self, db_name: str, index: int, snapshot_id: str) -> tuple[Path, Manifest]:
        """The leader's snapshot of vnode ``index`` of ``db_name`` at its WAL's end, for a follower whose copy ends
        below its log start (:func:`walgate.storage.vnode_snapshot.write`, its meta store, epoch cache and topics'
        offset index records): (its directory, its manifest). On the vnode's lane. NotHere when the vnode is not
        here; StorageUnavailable when the disk refuses (nothing left behind)."""
        vnode = self.store.local_vnode(db_name, index)
        topics = {}
        for t in self.catalog.topics.values():
            idx = self.store.indexes.get((t.name, index))
            if t.db == db_name and idx is not None:
                topics[t.topic_id] = idx
        root = self.store.db_dir(vnode.db) / SNAPSHOTS
        return root / snapshot_id, write_snapshot(vnode, topics, root, snapshot_id)

    def staging_dir(self, db_name: str, index: int) -> Path:
        """Where a follower stages its leader's snapshot of vnode ``index`` of ``db_name``
        (:class:`~walgate.storage.vnode_snapshot.Staging`), beside the vnode."""
        return self.store.db_dir(self.catalog.database(db_name)) / f"vnode{index}{STAGING}"

    def install_vnode_snapshot(self, db_name: str, index: int) -> Vnode:
        """The follower's copy of vnode ``index`` of SQL database ``db_name``, which ends below its leader's log start,
        replaced by the leader's snapshot staged whole in :meth:`staging_dir` (docs/plans/vnode-snapshot.md, step
        2), in an order a crash at any point leaves what the next start serves or removes: the staged files verified
        against the manifest (sizes and CRC-32C read back), each topic's log start and the ``restoring`` marker
        written into the staging directory and fsynced; the old copy closed and deleted in the crash-safe order of
        :mod:`walgate.storage.moved_vnodes` (its topics' offset indexes forgotten with it); the staging directory
        renamed to the vnode's and the database directory fsynced; the vnode opened (its WAL empty from the
        snapshot's log start ``S0``, its tables and topic offsets those of the snapshot's end ``L``: it appends
        ``[S0, L)`` deriving nothing, :mod:`walgate.storage.replicated`) and its topics' indexes opened. An exclusive
        call; the new vnode (its WAL's replication wiring is the caller's).

        ValueError, the staging removed and the old copy as it was, when the staged snapshot does not verify (a
        flipped or cut file: the follower begins again); StorageUnavailable, the staging removed, when the disk
        refuses the marker; OSError when it refuses the delete or the rename: the old copy is then closed (not open
        here) and the next start removes the staging and opens what is left (the old copy, or none: empty)."""
        db = self.catalog.database(db_name)
        staging = self.staging_dir(db_name, index)
        try:
            manifest = verify(staging)
            prepare_install(staging, manifest, self.syncs)
        except ValueError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StorageUnavailable(f"{staging}: the snapshot cannot be installed: {exc}") from None
        vnodes = self.vnodes[db_name]
        vnode = next((v for v in vnodes if v.index == index), None)
        if vnode is not None:
            vnodes.remove(vnode)
            self._close_vnode(vnode)
        directory = self.store.db_dir(db) / f"vnode{index}"
        delete_vnode_dir(directory, self.syncs)
        fileio.rename(staging, directory)
        fileio.fsync_dir(directory.parent, syncs=self.syncs)
        new = self.store.open_database(db, indices=[index])[0]
        vnodes.append(new)
        vnodes.sort(key=lambda v: v.index)
        for topic in [t for t in self.catalog.topics.values() if t.db == db_name]:
            self.views.open_partition(topic, new)
        return new

    def _close_vnode(self, vnode: Vnode) -> None:
        """Close ``vnode`` (removed from the open vnodes by the caller) and forget what is derived from it in memory:
        its topics' offset indexes and producer state, the cleaner's points, its cached batches, its meta checks."""
        topics = [t.name for t in self.catalog.topics_of(vnode.db.name)]
        for topic in topics:
            self.store.producers.pop((topic, vnode.index), None)
            idx = self.store.indexes.pop((topic, vnode.index), None)
            if idx is not None:
                idx.close()
        self.cleaner.forget(vnode)
        self.batch_cache.forget_from({self.views.topic_id(t) for t in topics}, vnode.index, 0)
        vnode.close()
        self._meta_checks = [c for c in self._meta_checks if c.vnode is not vnode]

    def set_dnodes(self, dnodes: tuple[Dnode, ...], live: Mapping[int, str | None] | None = None) -> None:
        """The cluster's nodes as this node knows them (``SHOW DNODES``) and, in cluster mode, the live ones (id ->
        ``broker.rack``) new Kafka-native partitions are placed over: set together by the gateway from the
        membership, on the storage lane."""
        self.show.dnodes = dnodes
        if live is not None:
            self.catalog.live_nodes = dict(live)

    def set_leaders(self, leader_of: Callable[[str, int], int | None]) -> None:
        """Where ``SHOW VGROUPS`` reads a replicated vgroup's leader: (database id, vgroup) -> the node id its
        partition state names (-1: none), None while no state is read (the replica manager's, set once)."""
        self.show.leader_of = leader_of

    def publish_topics(self) -> None:
        """On the storage lane, at the end of each call: publish the topics when the catalog changed, unless the call
        deferred it (:meth:`defer_topics_publication`)."""
        if self._publication_deferred:
            self._publication_deferred = False
            return
        self.store.publish_topics()

    def defer_topics_publication(self) -> None:
        """The end of this call does not publish the topics: the next call's end does (CreateTopics creates one
        topic per call and publishes once, after its last; a request cut short is published by the next call, the
        WAL sync task's at the latest). A drop publishes at once, whatever this says."""
        self._publication_deferred = True

    def on_coordinator_lane(self, fn: Callable[[], T]) -> T:
        """On the storage lane: ``fn()`` on the coordinator lane, waited for (reads of coordinator state: metrics,
        the console)."""
        return self.store.coordinator_lane.run(fn)

    def coordinator_logs(self) -> list[Syncable]:
        """The coordinator log's files (one per coordinator partition), whose group-commit syncs the coordinator
        lane takes."""
        return list(self.store.coordinator.logs)

    def install_coordinator_log(self, partition: int, log: CoordinatorLog) -> None:
        """On the coordinator lane: ``log`` is coordinator partition ``partition`` now (a replicated cluster's, loaded
        from or handed over to its ``__consumer_offsets`` partition: gateway/kafka/coordinator_replicas.py)."""
        self.store.coordinator.logs[partition] = log

    def take_coordinator_unsynced(self) -> list[Need]:
        """Group commit, the coordinator lane's own notes (the coordinator log's writes), taken at the end of its
        calls; empty without group commit."""
        unsynced = self.store.coordinator_unsynced
        return unsynced.take() if unsynced is not None else []

    def share_state_log(self) -> ShareStateLog:
        """On the coordinator lane: ``share_groups.log`` opened (replayed; damage reported), its group-commit notes
        the coordinator lane's own (:meth:`take_coordinator_unsynced`)."""
        return ShareStateLog.open(self.data_dir / SHARE_GROUPS_LOG, self.damage_log, self.syncs,
                                  self.store.coordinator_unsynced)

    # ------------------------------------------------------------ maintenance

    def sync_due(self, now: float) -> tuple[float, list[PendingSync]]:
        """One bounded step of retention when due (``now``: :attr:`clock`'s monotonic seconds; retention by
        :attr:`clock`'s wall time; a round every few seconds, :mod:`~walgate.storage.retention`); (seconds until the
        next call is useful: 0 while a round has steps left, the periodic fsyncs due now, for the caller to run off
        the storage thread and then mark done)."""
        wait, pending = self._syncs.due(now, (self.catalog.generation, self.store.vnodes_opened),
                                        (vnode.wal for vnodes in self.vnodes.values() for vnode in vnodes))
        delay = min(_RETENTION_CHECK_S, wait)
        if not self.retention.in_progress and now >= self._next_retention:
            self._next_retention = now + _RETENTION_CHECK_S
            self.retention.begin()
        if self.retention.in_progress and self.retention.step(self.clock.time()):
            delay = 0.0
        return delay, pending

    def take_unsynced(self) -> list[Need]:
        """Group commit: what the writes since the last call need to be durable before they are answered (empty
        without group commit)."""
        return self.store.unsynced.take() if self.store.unsynced is not None else []

    def apply_retention(self, now_wall: float) -> None:
        """A whole retention round at once: delete the WAL segments retention wants gone at ``now_wall`` (seconds
        since the epoch); the topics' log starts follow (tools and tests; the gateway steps through rounds with
        :meth:`sync_due`)."""
        self.retention.begin()
        while self.retention.step(now_wall):
            pass

    def close(self) -> None:
        """fsync and close every vnode and index."""
        for idx in self.indexes.values():
            idx.close()
        for vnodes in self.vnodes.values():
            for vnode in vnodes:
                vnode.close()

    def damage(self) -> list[Damage]:
        """Every damage found in the data dir since it was opened (see :mod:`walgate.storage.damage`); callable from
        any thread (a copy of a list that is only appended to)."""
        return list(self.damage_log.records)

    # ---------------------------------------------- dynamic broker and group configs (storage/resource_configs.py)

    def resource_configs(self, kind: str, name: str) -> dict[str, str]:
        """The dynamic configs stored for a broker (``name``: node id, or "" for the cluster default) or a group."""
        return dict(self.catalog.resource_configs.get((kind, name), {}))

    def set_resource_configs(self, kind: str, name: str, configs: dict[str, str]) -> None:
        """Replace a broker's or group's dynamic configs (validated by the caller), durably."""
        self.catalog.set_resource_configs(kind, name, configs)

    def topic_defaults(self, node_id: int) -> dict[str, str]:
        """The topic configs this node's dynamic broker configs default (topic key -> value)."""
        return resource_configs.topic_defaults(self.catalog.resource_configs, str(node_id))

    def apply_topic_defaults(self, node_id: int) -> list[str]:
        """Bring every Kafka-native topic's WAL settings in line with its configs over :meth:`topic_defaults` (after
        a change of them, and at start: a crash may have come between the change and this); the topics changed. In
        cluster mode the topics are the cluster's: only their vnodes here follow (:meth:`NativeTopics.follow_catalog`;
        none is answered changed)."""
        defaults = self.topic_defaults(node_id)
        if self.catalog.cluster:
            self.native.follow_catalog(defaults)
            return []
        changed = []
        for topic in [t for t in self.catalog.topics.values() if t.kind == "kafka"]:
            options = self.catalog.database(topic.db).options
            wanted = wal_options({**defaults, **topic.configs})  # as create and alter_configs compute them
            if any(options.get(k) != v for k, v in wanted.items()):
                self.native.alter_configs(topic.name, topic.configs, defaults)
                changed.append(topic.name)
        return changed

    # ------------------------------------------------------------------------ consumer-group state

    @property
    def coordinator_partitions(self) -> int:
        """N: the group coordinator's partitions in this data dir, fixed when it was made."""
        return len(self.store.coordinator.logs)

    def write_group_records(self, records: Sequence[GroupRecord]) -> None:
        """Durably record consumer-group state: (group id, value or None to delete), fsynced before this returns
        (:mod:`walgate.storage.coordinator_log`, the group's coordinator partition); StorageUnavailable when the disk
        refuses (a partition that refused records nothing; writing again is safe)."""
        self.store.coordinator.write_groups(records)

    def group_records(self) -> Mapping[str, Any]:
        """Every recorded group's last value (group id -> value), as written by :meth:`write_group_records`."""
        return self.store.coordinator.groups()

    # ------------------------------------------------------------- transactions (partition side)

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          partitions: list[tuple[str, int]]) -> list[Exception | None]:
        """Append an EndTransactionMarker (COMMIT when ``commit``, else ABORT) to each Kafka-native ``(topic,
        partition)``, ending the producer's ongoing transaction there (the last stable offset moves once the marker is
        visible; an abort enters the aborted-transaction list); a partition where it has none still gets the marker.
        Per partition: None, or the exception (NotFound: no such topic or partition; InvalidValue: a TDengine topic;
        SequenceError ``invalid_producer_epoch`` / ``transaction_coordinator_fenced``; StorageUnavailable). Stamped
        with :attr:`clock`'s wall time, as Kafka stamps its markers. Durable whatever the WAL level (fsynced here; under group
        commit once :meth:`take_unsynced`'s needs are: the gateway's storage-thread call waits for them)."""
        return self.native.write_markers(producer_id, producer_epoch, coordinator_epoch, commit, partitions,
                                         self.clock.time_ms())

    def ongoing_transactions(self) -> dict[int, list[tuple[str, int, int]]]:
        """Producer id -> (topic, partition, first offset) of every partition where it has a transaction open (rebuilt
        from the WALs at open)."""
        return self.native.ongoing_transactions()

    def meta_checks(self) -> list[MetaCheck]:
        """The meta stores' whole-file checks :meth:`open` left (once: an empty list after): run each
        (:meth:`MetaCheck.run <walgate.storage.meta_checks.MetaCheck.run>`) off this thread, then hand its result to
        :meth:`meta_checked`."""
        checks, self._meta_checks = self._meta_checks, []
        return checks

    def meta_checked(self, meta_check: MetaCheck, problem: str | None) -> None:
        """A store's check found ``problem`` (None: nothing): reported and rebuilt from the WAL
        (:func:`walgate.storage.meta_checks.apply_check`)."""
        apply_check(self.store.vnodes, meta_check, problem)

    def clean(self, now_wall: float, node_id: int, max_keys: int = MAP_ENTRIES,
              start: bool = True) -> CleanStats | None:
        """One bounded step of log compaction (see :mod:`walgate.storage.cleaner`), topics' configs over node
        *node_id*'s dynamic broker defaults, a pass's key map bounded to *max_keys* keys: what the pass in progress
        did so far (``finished`` once whole), None when no partition is due. The caller calls again while it gets
        stats. Without *start* only the pass in progress goes on (:meth:`cleaning`'s vnode alone is touched: the
        call may hold only that vnode; a new pass needs an exclusive call)."""
        return self.cleaner.clean(now_wall, self.topic_defaults(node_id), max_keys, start)

    def cleaning(self) -> tuple[str, int] | None:
        """The vnode key (database, vgroup index) of the log cleaner's pass in progress; None: none is."""
        return self.cleaner.in_progress()

    def clean_sync(self) -> Callable[[], None] | None:
        """The fsyncs the last cleaning step left (:meth:`Cleaner.staged_sync
        <walgate.storage.cleaner.Cleaner.staged_sync>`), to run off this thread before the next step; None: none."""
        return self.cleaner.staged_sync()
