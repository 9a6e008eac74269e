"""Kafka-native topics: produced RecordBatches stored as they came, one database (and WAL) per topic.

A Kafka-native topic owns a database whose vgroups are its partitions and whose WAL options follow its Kafka
configs. :meth:`NativeTopics.append_batches` re-bases each batch to the partition's next offset and appends the
request's batches in one WAL append (one entry per batch, spanning one version per record), after the idempotent
producer checks (:mod:`walgate.storage.producers`), whose state is rebuilt from the batch headers at open. Fetch
serves the stored bytes as they are (:meth:`NativeTopics.kafka_region`, for ``sendfile``).

Transactions (partition side): transactional batches open their producer's transaction; the coordinator ends it
with :meth:`NativeTopics.write_markers`, one EndTransactionMarker control batch per partition, stored and indexed
like any batch (it takes one offset, as in Kafka). The ongoing transactions, the last stable offset and the aborted
list live in :class:`~walgate.storage.producers.PartitionProducers`, rebuilt at open from the WAL's batches (a
restart keeps them: a transaction whose marker never reached the WAL is still open). TDengine topics have no
transactions: their last stable offset is the high watermark and they abort nothing.
"""

from __future__ import annotations

import logging
import shutil
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Final

from walgate.cluster.placement import Replicas
from walgate.storage import datadir, led_appends
from walgate.storage.catalog import TopicDef
from walgate.storage.entry import DecodedEntry
from walgate.storage.errors import (
    AlreadyExists,
    CorruptEntry,
    InvalidValue,
    NotFound,
    OffsetOutOfRange,
    StorageError,
    StorageUnavailable,
)
from walgate.storage.led_appends import LedAppend
from walgate.storage.names import new_db_id
from walgate.storage.offsets import OffsetIndex
from walgate.storage.producers import (
    BATCHES_KEPT,
    AbortedTxn,
    ActiveProducer,
    DuplicateBatch,
    EarlierBatch,
    PartitionProducers,
    SequenceError,
)
from walgate.storage.store import Store
from walgate.storage.topic_configs import backing_database, validate_topic_name, wal_options
from walgate.storage.topic_views import TopicViews, stored_batch
from walgate.storage.vnode import Vnode, prepare
from walgate.storage.wal import KIND_KAFKA, FileRegion, Wal
from walgate.wire import BATCH_PREFIX_SIZE, batch_header, batch_prefix, rebase
from walgate.wire.errors import ErrorCode, WireError
from walgate.wire.record_batch import CONTROL_BIT, CONTROL_COMMIT, TRANSACTIONAL_BIT, end_txn_marker, txn_marker

__all__ = ["NativeTopics", "replay_batch"]

log = logging.getLogger("walgate.producers")



def replay_batch(producers: PartitionProducers, batch: bytes) -> None:
    """Take one stored batch of a Kafka-native partition into its producer and transaction state, as it was when
    appended: a data batch's producer sequence (and transaction), or a transaction marker (one that cannot be
    decoded ends nothing: its transaction stays open, for the coordinator to end again)."""
    info = batch_header(batch)
    if info.attributes & CONTROL_BIT:
        try:
            marker = txn_marker(batch)
        except WireError:
            marker = None
        if marker is not None:
            producers.record_marker(info.producer_id, info.producer_epoch, marker[1], marker[0] == CONTROL_COMMIT,
                                    info.base_offset, info.max_timestamp)
    else:
        producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.last_offset_delta + 1,
                         info.base_offset, bool(info.attributes & TRANSACTIONAL_BIT), info.max_timestamp)


_LOOKUP_ENTRIES: Final = 10_000
"""How many entries :func:`_original` reads at most, back from the oldest batch a producer's state keeps."""


def _original(vnode: Vnode, idx: OffsetIndex, earlier: EarlierBatch) -> DuplicateBatch:
    """The batch ``earlier`` repeats, looked up in the partition's log from below the oldest batch its producer's state
    keeps, newest first, until a batch of that producer of an older epoch or an earlier sequence. Raises
    SequenceError: DUPLICATE_SEQUENCE_NUMBER when it is not found within :data:`_LOOKUP_ENTRIES` entries (or below
    the log start now, or its entry lost): written before (its sequences lie within those this partition took of the
    epoch), at an offset not known, Kafka's answer for it, which clients take as delivered (the Java client's
    ``Sender.completeBatch``); OUT_OF_ORDER_SEQUENCE_NUMBER when its first sequence starts a batch of other sequences
    (not a retry of it)."""
    kept = bisect_left(idx.offsets, earlier.before)  # the index entry of the oldest batch kept
    for k in range(kept - 1, max(kept - 1 - _LOOKUP_ENTRIES, -1), -1):
        if idx.offsets[k] < idx.start_offset:
            break
        try:
            entry = vnode.wal.read(idx.versions[k])
        except CorruptEntry:
            continue
        if entry is None or entry.kind != KIND_KAFKA:
            continue
        info = batch_header(entry.body)
        if info.producer_id != earlier.producer_id or info.attributes & CONTROL_BIT:
            continue
        if info.producer_epoch != earlier.epoch or info.base_sequence < earlier.first_seq:
            break
        if info.base_sequence == earlier.first_seq:
            if info.base_sequence + info.last_offset_delta == earlier.last_seq:
                log.info("producer %d: a retry of sequences %d-%d (epoch %d), older than the %d batches kept, answered "
                         "with its offset %d in %s", earlier.producer_id, earlier.first_seq, earlier.last_seq,
                         earlier.epoch, BATCHES_KEPT, idx.offsets[k], vnode.dir)
                return DuplicateBatch(idx.offsets[k])
            raise SequenceError(ErrorCode.out_of_order_sequence_number,
                                f"producer {earlier.producer_id}: sequences {earlier.first_seq}-{earlier.last_seq} "
                                f"are not a batch it wrote (its batch at offset {idx.offsets[k]} holds "
                                f"{info.base_sequence}-{info.base_sequence + info.last_offset_delta})")
    raise SequenceError(ErrorCode.duplicate_sequence_number,
                        f"producer {earlier.producer_id}: sequences {earlier.first_seq}-{earlier.last_seq} of epoch "
                        f"{earlier.epoch} were written before, at an offset no longer found")


class NativeTopics:
    def __init__(self, store: Store, views: TopicViews) -> None:
        self.store = store
        self.views = views

    def open_topic(self, topic: TopicDef) -> None:
        """Serve an existing Kafka-native topic: its offset indexes and producer state."""
        self.views.open_topic(topic)
        for vnode in self.store.vnodes[topic.db]:
            self._open_producers(topic, vnode)

    def rebuild_producers(self, topic: TopicDef, vnode: Vnode) -> None:
        """A partition's WAL was cut back (:func:`walgate.storage.truncation.truncate_vnode`): its producer and
        transaction state is rebuilt from the batches it keeps, as an open does."""
        self._open_producers(topic, vnode)

    def _open_producers(self, topic: TopicDef, vnode: Vnode) -> None:
        """Rebuild a partition's producer and transaction state from the batches in its WAL (lost entries are
        skipped: a lost marker leaves its transaction open, for the coordinator to end again)."""
        producers = self.store.producers[(topic.name, vnode.index)] = PartitionProducers()
        for entry in vnode.wal.read_from(vnode.wal.first_version):
            if entry.kind == KIND_KAFKA:
                replay_batch(producers, entry.body)

    def prepare(self, partitions: int) -> str:
        """A new database id whose directory holds *partitions* new vnodes' files (:func:`~walgate.storage.vnode.
        prepare`), for :meth:`create`'s *prepared*, which then only opens them. It reads nothing but the data dir's
        path: it may run on any thread, beside the storage thread's calls. A single node's (in cluster mode a topic's
        vnodes open where they are placed). Raises StorageUnavailable, the directory removed; otherwise it is the
        caller's to pass to :meth:`create` and then :meth:`discard`."""
        db_id = new_db_id()
        directory = datadir.db_dir(self.store.data_dir, db_id)
        try:
            for i in range(partitions):
                prepare(directory / f"vnode{i}")
        except (OSError, StorageError) as exc:
            shutil.rmtree(directory, ignore_errors=True)
            reason = exc.strerror or exc if isinstance(exc, OSError) else exc
            raise StorageUnavailable(f"the topic's vnodes could not be created ({reason}); nothing was kept") from None
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return db_id

    def discard(self, db_id: str) -> None:
        """Remove the directory :meth:`prepare` made for ``db_id`` unless a database has that id by now (its topic was
        created with it)."""
        if not self.store.catalog.has_db_id(db_id):
            self.drop(db_id)

    def drop(self, db_id: str) -> None:
        """Remove the directory :meth:`prepare` made for ``db_id``, which no :meth:`create` was given: like
        :meth:`prepare`, on any thread."""
        shutil.rmtree(datadir.db_dir(self.store.data_dir, db_id), ignore_errors=True)

    def create(self, name: str, partitions: int, configs: dict[str, str],
               defaults: Mapping[str, str] = MappingProxyType({}), nodes: tuple[Replicas, ...] | None = None,
               prepared: str | None = None, replication_factor: int = 1, states: bool = False) -> TopicDef:
        """A Kafka-native topic of *partitions* partitions (its database's vgroups) with Kafka *configs*; its WAL
        settings follow *configs* over *defaults* (the dynamic broker defaults, not stored with the topic). Offsets a
        dropped topic of the name left behind are deleted first (:meth:`GroupOffsets.clear_left`). *nodes*: each
        partition's replicas as a manual assignment names them (:meth:`Catalog.new_kafka_topic`), else None:
        *replication_factor* replicas of each placed. *prepared*: a database id from :meth:`prepare` (single node),
        whose vnodes' files are then only opened here. *states*: every partition has a partition state, also of one
        copy (:attr:`DatabaseDef.states <walgate.storage.catalog.DatabaseDef.states>`)."""
        catalog = self.store.catalog
        validate_topic_name(name)
        if name in catalog.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        self.views.offsets.clear_left(name)
        options: dict[str, int | str] = {"VGROUPS": partitions, **wal_options({**defaults, **configs})}
        db, topic = catalog.new_kafka_topic(name, backing_database(name, catalog.databases), options,
                                            dict(configs), self.store.clock.time_ms(), nodes,
                                            None if catalog.cluster else prepared, replication_factor, states)
        if catalog.cluster:  # staged: its vnodes open when the node applies the record (follow_catalog)
            catalog.add_kafka_topic(db, topic)
            return topic
        self.store.vnodes[db.name] = self.store.open_database(db, lambda: catalog.add_kafka_topic(db, topic))
        self.open_topic(topic)
        return topic

    def _native(self, name: str) -> TopicDef:
        topic = self.store.catalog.topics.get(name)
        if topic is None:
            raise NotFound(f"Topic not exist: {name}")
        if topic.kind != "kafka":
            raise InvalidValue(f"Topic {name} is a TDengine topic: its partitions and configs follow its database")
        return topic

    def alter_configs(self, name: str, configs: dict[str, str],
                      defaults: Mapping[str, str] = MappingProxyType({})) -> None:
        """Replace a Kafka-native topic's configs (validated); its database's WAL settings follow at once (*configs*
        over *defaults*, as :meth:`create`)."""
        catalog = self.store.catalog
        topic = self._native(name)
        options = {**catalog.database(topic.db).options, **wal_options({**defaults, **configs})}
        catalog.alter_kafka_topic(name, options, dict(configs))
        if catalog.cluster:  # staged: the vnodes follow when the node applies the record (follow_catalog)
            return
        db = catalog.database(topic.db)
        for vnode in self.store.vnodes[db.name]:
            vnode.reconfigure(db)

    def create_partitions(self, name: str, count: int, nodes: tuple[Replicas, ...] | None = None) -> None:
        """Grow a Kafka-native topic to *count* partitions (new vgroups of its database); *nodes*: each new
        partition's replicas as a manual assignment names them (:meth:`Catalog.grown`), else None: placed."""
        store, catalog = self.store, self.store.catalog
        topic = self._native(name)
        db = catalog.database(topic.db)
        old = db.vgroups
        if count <= old:
            raise InvalidValue(f"Topic {name} has {old} partitions: the new count must be larger, not {count}")
        catalog.check_partitions(count - old, f"topic {name}")
        grown = catalog.grown(db, count, nodes)
        if catalog.cluster:  # staged: the new vnodes placed here open when the node applies it (follow_catalog)
            catalog.alter_kafka_topic(name, grown.options, topic.configs, grown.replicas)
            return
        new = store.open_database(grown, lambda: catalog.alter_kafka_topic(name, grown.options, topic.configs,
                                                                           grown.replicas), first=old)
        db = catalog.database(topic.db)
        for vnode in store.vnodes[db.name]:
            vnode.reconfigure(db)
        for vnode in new:
            vnode.reconfigure(db)
            store.vnodes[db.name].append(vnode)
            self.views.open_partition(catalog.topics[name], vnode)
            self._open_producers(catalog.topics[name], vnode)

    def follow_catalog(self, defaults: Mapping[str, str]) -> None:
        """Cluster mode, after a record of the cluster's stream (or its snapshot) was applied: bring the Kafka-native
        topics served here in line with the catalog. A topic the catalog no longer has is dropped here (its offset
        indexes, committed offsets, vnodes and files), any database's vnodes and files too (an SQL database's as
        well, or its old ones when a snapshot holds one made again under its name); a new one's vnodes placed on this
        node are created and opened; a grown one's new vnodes placed here too, and those a replica move places here
        (empty; a move's vnodes no longer placed here are the replica manager's to let go:
        :meth:`Engine.drop_moved_vnode`); every one's vnodes take the WAL settings of its configs over ``defaults``
        (the dynamic broker defaults, :meth:`Engine.topic_defaults`: this node's, as on a single node, so in cluster
        mode never written back to the shared record). Idempotent: a call the disk refused (raised) is made again,
        and a restart opens whatever the catalog places here."""
        store, catalog = self.store, self.store.catalog
        gone = [n for n in store.topic_uuids if n not in catalog.topics]
        if gone:
            store.publish_topics()  # commits checked against the old topics run before the offsets go
        for name in gone:
            self.views.forget_dropped(name)
        for db_name in [d for d, vnodes in store.vnodes.items() if d not in catalog.databases
                        or any(v.db.id != catalog.databases[d].id for v in vnodes)]:  # gone, or made again meanwhile
            for vnode in store.vnodes.pop(db_name):
                vnode.close()
                shutil.rmtree(vnode.dir.parent, ignore_errors=True)
        for topic in [t for t in catalog.topics.values() if t.kind == "kafka"]:
            stored = catalog.database(topic.db)
            db = replace(stored, options={**stored.options, **wal_options({**defaults, **topic.configs})})
            if topic.db not in store.vnodes:
                self.views.offsets.clear_left(topic.name)
                store.vnodes[db.name] = store.open_database(db)
                self.open_topic(topic)
                continue
            for vnode in store.vnodes[db.name]:
                vnode.reconfigure(db)
            for vnode in store.open_placed(db):  # a grown topic's, or a replica move's to this node (empty)
                self.views.open_partition(topic, vnode)
                self._open_producers(topic, vnode)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move a partition's log start to *offset* (-1: the high watermark), which may not pass the high watermark
        (Kafka's OFFSET_OUT_OF_RANGE: records not committed yet are not deleted); the new log start."""
        _, _, idx = self.store.partition(name, partition)
        high_watermark = self.views.watermarks(name, partition)[1]
        target = high_watermark if offset == -1 else offset
        if not 0 <= target <= high_watermark:
            raise OffsetOutOfRange(f"offset {offset} is outside [0, {high_watermark}] of {name}-{partition} (up to "
                                   "its high watermark)")
        idx.advance_start(target)
        return idx.start_offset

    def append_batches(self, topic: str, partition: int, batches: list[bytes]) -> int:
        """Append produced RecordBatch v2 *batches* (validated by the caller) atomically; their base offset.

        Idempotence (see :mod:`walgate.storage.producers`): a partition request
        whose batches were all appended before answers the original base offset
        and writes nothing (one older than the five batches its producer state keeps is looked up in the log,
        :func:`_original`); a sequence error refuses the whole request
        (:class:`~walgate.storage.producers.SequenceError`). Durable per the
        database's WAL level when this returns.
        """
        t, vnode, idx = self.store.partition(topic, partition)
        if t.kind != "kafka":
            raise InvalidValue(f"Topic {topic} is a TDengine topic: produce to Kafka-native topics only")
        producers = self.store.producers[(topic, partition)]
        infos = [batch_header(b) for b in batches]
        # later batches follow earlier ones: checked against a scratch copy of their producers
        scratch = producers.copy_for({i.producer_id for i in infos}) if len(infos) > 1 else producers
        verdicts = []
        at = idx.end_offset  # where each batch would go
        for k, i in enumerate(infos):
            transactional = bool(i.attributes & TRANSACTIONAL_BIT)
            verdict = scratch.check(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count, transactional)
            verdicts.append(_original(vnode, idx, verdict) if isinstance(verdict, EarlierBatch) else verdict)
            if k + 1 < len(infos):
                scratch.record(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count, at, transactional)
            at += i.record_count
        duplicates = [v for v in verdicts if isinstance(v, DuplicateBatch)]
        if duplicates:
            if len(duplicates) < len(verdicts):
                raise InvalidValue("a produce request mixing retried and new batches of one partition")
            vnode.wal.note_end()  # the original may not be durable yet: the answer waits for it (group commit)
            return duplicates[0].base_offset
        self.store.check_size(sum(map(len, batches)))
        offset = base = idx.end_offset
        epoch = vnode.epochs.epoch_at(vnode.wal.next_version)  # (the leader's, KIP-101's partitionLeaderEpoch)
        entries: list[tuple[int, int, int, bytes]] = []
        for batch, info in zip(batches, infos):
            entries.append((KIND_KAFKA, info.record_count, info.max_timestamp, rebase(batch, offset, epoch)))
            offset += info.record_count
        version = vnode.wal.append(entries)
        decoded = []
        offset = base
        for info in infos:
            decoded.append(DecodedEntry(version, KIND_KAFKA, kafka_records=info.record_count, max_ts=info.max_timestamp))
            producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.record_count, offset,
                             bool(info.attributes & TRANSACTIONAL_BIT), info.max_timestamp)
            version += info.record_count
            offset += info.record_count
        self.views.index(vnode, decoded, vnode.wal.next_version, [topic])
        return base

    def append_partitions(self, topic: str, partitions: list[tuple[int, list[bytes]]]) -> list[int | Exception]:
        """:meth:`append_batches` for each (partition, batches) of *topic*, in one call: per partition, its base
        offset or the exception that refused it (nothing of that partition written; the others as usual)."""
        results: list[int | Exception] = []
        for partition, batches in partitions:
            try:
                results.append(self.append_batches(topic, partition, batches))
            except Exception as exc:  # noqa: BLE001 - one partition's refusal is its own answer, not its siblings'
                results.append(exc)
        return results

    def kafka_batch(self, topic: str, partition: int, version: int) -> bytes:
        """The stored RecordBatch at WAL *version* of a Kafka-native partition (its base offset is its offset);
        :class:`~walgate.storage.wal.CorruptEntry` when its entry was lost."""
        _, vnode, _ = self.store.partition(topic, partition)
        return stored_batch(vnode, topic, partition, version)

    def kafka_region(self, topic: str, partition: int, version: int) -> FileRegion:
        """:meth:`kafka_batch` as a region of its WAL segment, for ``sendfile`` (the body's CRC is checked the first
        time it is served, see :meth:`Wal.region`; CorruptEntry when the entry is lost or damaged). The batch's first
        16 bytes, which its own CRC does not cover (base offset, length, partition leader epoch), come with the WAL
        entry's header (the same read) and must be what the offset index, the WAL and :meth:`append_batches` say
        (the leader epoch: the vnode's epoch cache's for the version, or 0, which batches stored before they carried
        it have), or the entry is reported damaged: a client cannot tell a batch served at the wrong offset."""
        _, vnode, idx = self.store.partition(topic, partition)
        region = vnode.wal.region(version, KIND_KAFKA, head=BATCH_PREFIX_SIZE)
        if region is None:
            raise NotFound(f"Topic {topic} partition {partition} has no batch at version {version}")
        base, length, epoch = batch_prefix(region.head.ljust(BATCH_PREFIX_SIZE, b"\0"))
        k = bisect_right(idx.versions, version) - 1
        want = idx.offsets[k] if k >= 0 and idx.versions[k] == version else base
        stored = vnode.epochs.epoch_at(version)
        if (base, length) != (want, len(region) - 12) or epoch not in (stored, 0):
            raise vnode.wal.damaged(version, f"Kafka batch header (base offset {base}, length {length}, leader epoch "
                                             f"{epoch}) is not the stored one (base offset {want}, length "
                                             f"{len(region) - 12}, leader epoch {stored})")
        return region

    # ------------------------------------------------------------ transactions

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      partitions: list[tuple[str, int]], now_ms: int) -> list[Exception | None]:
        """Append an EndTransactionMarker (COMMIT or ABORT, timestamp ``now_ms``) to each Kafka-native (topic,
        partition), ending the producer's transaction there (if it has one); per partition None or the exception
        that refused it: NotFound, InvalidValue (a TDengine topic),
        :class:`~walgate.storage.producers.SequenceError` (``invalid_producer_epoch``,
        ``transaction_coordinator_fenced``), StorageUnavailable (not written, or not durable).

        Durable whatever the WAL level when this returns (under group commit: once :meth:`Engine.take_unsynced`'s
        needs are; otherwise each WAL written is fsynced here, with all that was appended before its marker): the
        coordinator records a transaction complete only after its markers, so a crash never leaves a transaction
        open in a partition that the coordinator has ended."""
        results: list[Exception | None] = []
        to_sync: dict[Wal, list[int]] = {}  # a WAL -> the partitions it holds markers of
        for i, (topic, partition) in enumerate(partitions):
            try:
                wal = self._write_marker(topic, partition, producer_id, producer_epoch, coordinator_epoch, commit,
                                         now_ms)
            except Exception as exc:  # noqa: BLE001 - one partition's refusal is its own answer, not its siblings'
                results.append(exc)
                continue
            results.append(None)
            if not (wal.options.level >= 2 and wal.options.fsync_period_ms == 0):  # else synced as appended
                to_sync.setdefault(wal, []).append(i)
        for wal, indexes in to_sync.items():
            try:
                wal.sync()
            except StorageUnavailable as exc:
                for i in indexes:
                    results[i] = exc
        return results

    def _write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, now_ms: int) -> Wal:
        """Append one marker; the WAL that holds it. A replicated partition's only on its leader
        (:meth:`Store.written_vnode`: a follower's copy is its leader's WAL, NotLedNow otherwise), the append noted
        for a caller waiting for its in-sync replicas (:mod:`walgate.storage.led_appends`, as Kafka writes markers
        with acks=all)."""
        t = self._native(topic)
        _, _, idx = self.store.partition(topic, partition)
        vnode = self.store.written_vnode(t.db, partition)
        producers = self.store.producers[(topic, partition)]
        producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        offset = idx.end_offset
        batch = end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms, base_offset=offset,
                               partition_leader_epoch=vnode.epochs.epoch_at(vnode.wal.next_version))
        version = vnode.wal.append([(KIND_KAFKA, 1, now_ms, batch)])
        producers.record_marker(producer_id, producer_epoch, coordinator_epoch, commit, offset, now_ms)
        self.views.index(vnode, [DecodedEntry(version, KIND_KAFKA, kafka_records=1, max_ts=now_ms)],
                         vnode.wal.next_version, [topic])
        if vnode.wal.leading:
            led_appends.note(LedAppend((t.db, partition), vnode.epochs.latest_epoch, vnode.wal.next_version - 1))
        return vnode.wal

    def ongoing_transactions(self) -> dict[int, list[tuple[str, int, int]]]:
        """Producer id -> (topic, partition, first offset) of each of its open transactions' partitions."""
        out: dict[int, list[tuple[str, int, int]]] = {}
        for (topic, partition), producers in sorted(self.store.producers.items()):
            for pid, first in producers.ongoing().items():
                out.setdefault(pid, []).append((topic, partition, first))
        return out

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's last stable offset (a TDengine topic's is its high watermark)."""
        start, end = self.views.watermarks(topic, partition)
        producers = self.store.producers.get((topic, partition))
        return end if producers is None else producers.last_stable(start, end)

    def aborted_transactions(self, topic: str, partition: int, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, upper) of a partition (none for TDengine topics)."""
        _, _, idx = self.store.partition(topic, partition)
        producers = self.store.producers.get((topic, partition))
        return [] if producers is None else producers.aborted_between(start, upper, idx.start_offset)

    def active_producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        """The producers with state in a partition (none for TDengine topics; NotFound: no such partition)."""
        self.store.partition(topic, partition)
        producers = self.store.producers.get((topic, partition))
        return [] if producers is None else producers.active()
