"""Kafka-native topics: produced RecordBatches stored as they came, one database (and WAL) per topic.

A Kafka-native topic owns a database whose vgroups are its partitions and whose WAL options follow its Kafka
configs. :meth:`NativeTopics.append_batches` re-bases each batch to the partition's next offset and appends the
request's batches in one WAL append (one entry per batch, spanning one version per record), after the idempotent
producer checks (:mod:`walgate.storage.producers`), whose state is rebuilt from the batch headers at open. Fetch
serves the stored bytes as they are (:meth:`NativeTopics.kafka_region`, for ``sendfile``).
"""

from __future__ import annotations

import copy
import time
from bisect import bisect_right

from walgate.storage.catalog import DatabaseDef, TopicDef
from walgate.storage.entry import DecodedEntry
from walgate.storage.errors import (
    AlreadyExists,
    InvalidValue,
    NotFound,
    OffsetOutOfRange,
)
from walgate.storage.producers import DuplicateBatch, PartitionProducers
from walgate.storage.store import Store
from walgate.storage.topic_configs import backing_database, validate_topic_name, wal_options
from walgate.storage.topic_views import TopicViews, stored_batch
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_KAFKA, FileRegion
from walgate.wire import BATCH_PREFIX_SIZE, batch_header, batch_prefix, rebase

__all__ = ["NativeTopics"]



class NativeTopics:
    def __init__(self, store: Store, views: TopicViews) -> None:
        self.store = store
        self.views = views

    def open_topic(self, topic: TopicDef) -> None:
        """Serve an existing Kafka-native topic: its offset indexes and producer state."""
        self.views.open_topic(topic)
        for vnode in self.store.vnodes[topic.db]:
            self._open_producers(topic, vnode)

    def _open_producers(self, topic: TopicDef, vnode: Vnode) -> None:
        """Rebuild a partition's idempotent-producer state from the batch headers in its WAL."""
        producers = self.store.producers[(topic.name, vnode.index)] = PartitionProducers()
        for entry in vnode.wal.read_from(vnode.wal.first_version):
            if entry.kind == KIND_KAFKA:
                info = batch_header(entry.body)
                producers.record(info.producer_id, info.producer_epoch, info.base_sequence,
                                 info.last_offset_delta + 1, info.base_offset)  # (the cleaner may remove records)

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicDef:
        """A Kafka-native topic of *partitions* partitions (its database's vgroups) with Kafka *configs*."""
        catalog = self.store.catalog
        validate_topic_name(name)
        if name in catalog.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        options: dict[str, int | str] = {"VGROUPS": partitions, **wal_options(configs)}
        db, topic = catalog.new_kafka_topic(name, backing_database(name, catalog.databases), options,
                                            dict(configs), int(time.time() * 1000))
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

    def alter_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a Kafka-native topic's configs (validated); its database's WAL settings follow at once."""
        catalog = self.store.catalog
        topic = self._native(name)
        options = {**catalog.database(topic.db).options, **wal_options(configs)}
        catalog.alter_kafka_topic(name, options, dict(configs))
        db = catalog.database(topic.db)
        for vnode in self.store.vnodes[db.name]:
            vnode.reconfigure(db)

    def create_partitions(self, name: str, count: int) -> None:
        """Grow a Kafka-native topic to *count* partitions (new vgroups of its database)."""
        store, catalog = self.store, self.store.catalog
        topic = self._native(name)
        old = len(store.vnodes[topic.db])
        if count <= old:
            raise InvalidValue(f"Topic {name} has {old} partitions: the new count must be larger, not {count}")
        db = catalog.database(topic.db)
        catalog.check_partitions(count - old, f"topic {name}")
        options = {**db.options, "VGROUPS": count}
        new = store.open_database(DatabaseDef(db.name, options, db.created_ms, db.id),
                                  lambda: catalog.alter_kafka_topic(name, options, topic.configs), first=old)
        db = catalog.database(topic.db)
        for vnode in store.vnodes[db.name]:
            vnode.reconfigure(db)
        for vnode in new:
            vnode.reconfigure(db)
            store.vnodes[db.name].append(vnode)
            self.views.open_partition(catalog.topics[name], vnode)
            self._open_producers(catalog.topics[name], vnode)

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """Move a partition's log start to *offset* (-1: the high watermark); the new log start."""
        _, _, idx = self.store.partition(name, partition)
        target = idx.end_offset if offset == -1 else offset
        if not 0 <= target <= idx.end_offset:
            raise OffsetOutOfRange(f"offset {offset} is outside [0, {idx.end_offset}] of {name}-{partition}")
        idx.advance_start(target)
        return idx.start_offset

    def append_batches(self, topic: str, partition: int, batches: list[bytes]) -> int:
        """Append produced RecordBatch v2 *batches* (validated by the caller) atomically; their base offset.

        Idempotence (see :mod:`walgate.storage.producers`): a partition request
        whose batches were all appended before answers the original base offset
        and writes nothing; a sequence error refuses the whole request
        (:class:`~walgate.storage.producers.SequenceError`). Durable per the
        database's WAL level when this returns.
        """
        t, vnode, idx = self.store.partition(topic, partition)
        if t.kind != "kafka":
            raise InvalidValue(f"Topic {topic} is a TDengine topic: produce to Kafka-native topics only")
        producers = self.store.producers[(topic, partition)]
        infos = [batch_header(b) for b in batches]
        scratch = copy.deepcopy(producers) if len(infos) > 1 else producers  # later batches follow earlier ones
        verdicts = []
        for k, i in enumerate(infos):
            verdicts.append(scratch.check(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count))
            if k + 1 < len(infos):
                scratch.record(i.producer_id, i.producer_epoch, i.base_sequence, i.record_count, -1)
        duplicates = [v for v in verdicts if isinstance(v, DuplicateBatch)]
        if duplicates:
            if len(duplicates) < len(verdicts):
                raise InvalidValue("a produce request mixing retried and new batches of one partition")
            vnode.wal.note_end()  # the original may not be durable yet: the answer waits for it (group commit)
            return duplicates[0].base_offset
        self.store.check_size(sum(map(len, batches)))
        offset = base = idx.end_offset
        entries: list[tuple[int, int, int, bytes]] = []
        for batch, info in zip(batches, infos):
            entries.append((KIND_KAFKA, info.record_count, info.max_timestamp, rebase(batch, offset, 0)))
            offset += info.record_count
        version = vnode.wal.append(entries)
        decoded = []
        offset = base
        for info in infos:
            decoded.append(DecodedEntry(version, KIND_KAFKA, kafka_records=info.record_count, max_ts=info.max_timestamp))
            producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.record_count, offset)
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
        entry's header (the same read) and must be what the offset index, the WAL and :meth:`append_batches` say,
        or the entry is reported damaged: a client cannot tell a batch served at the wrong offset."""
        _, vnode, idx = self.store.partition(topic, partition)
        region = vnode.wal.region(version, KIND_KAFKA, head=BATCH_PREFIX_SIZE)
        if region is None:
            raise NotFound(f"Topic {topic} partition {partition} has no batch at version {version}")
        base, length, epoch = batch_prefix(region.head.ljust(BATCH_PREFIX_SIZE, b"\0"))
        k = bisect_right(idx.versions, version) - 1
        want = idx.offsets[k] if k >= 0 and idx.versions[k] == version else base
        if (base, length, epoch) != (want, len(region) - 12, 0):
            raise vnode.wal.damaged(version, f"Kafka batch header (base offset {base}, length {length}, leader epoch "
                                             f"{epoch}) is not the stored one (base offset {want}, length "
                                             f"{len(region) - 12}, leader epoch 0)")
        return region
