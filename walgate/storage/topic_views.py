"""Topics as Kafka sees them: dense offsets over WAL entries, per topic-partition (= vnode).

A TDengine topic (``CREATE TOPIC``) is a view: its compiled :class:`TopicEvaluator` turns each WAL entry of its
database's vnodes into records, and its :class:`OffsetIndex` per vnode numbers them densely. A Kafka-native topic's
records are the batches stored in its own database's WAL (:mod:`~walgate.storage.native_topics` writes them); its
index numbers those the same way, so offsets, watermarks and timestamp lookups are the same code for both.

Indexing (:meth:`TopicViews.index`) runs after every commit, and at open over what the WAL holds past an index's
end, so an index always reaches the WAL's end; it tells the store's :class:`RecordsListener` about every
topic-partition that got records. Evaluation is deterministic, so an index rebuilt from the WAL gives the offsets
consumers already saw.
"""

from __future__ import annotations

import logging
import re
import shutil
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow.compute as pc

from walgate.storage import datadir
from walgate.storage.catalog import DatabaseDef, StableDef, TopicDef
from walgate.storage.entry import DecodedEntry, decode_entry
from walgate.storage.entry_check import Undecodable, decode_whole
from walgate.storage.errors import AlreadyExists, InvalidValue, NotFound, NotHere, StorageError
from walgate.storage.group_offsets import GroupOffsets
from walgate.storage.observers import ConsumerRow
from walgate.storage.offsets import OffsetIndex
from walgate.storage.render import KafkaRows, render
from walgate.storage.result import Result, affected
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.store import TICKS_PER_MS, Store
from walgate.storage.topics import NoRowsHere, Records, TopicEvaluator
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_KAFKA, CorruptEntry
from walgate.wire import batch_header, batch_prefix, decode_batches, record_timestamps

__all__ = ["PartitionStats", "TopicViews", "drop_consumer_group", "stored_batch"]

log = logging.getLogger("walgate.engine")



@dataclass(frozen=True)
class PartitionStats:
    """One topic-partition's offsets and the WAL that holds it (a TDengine topic's is its database's vnode WAL)."""

    topic: str
    partition: int
    log_start: int
    high_watermark: int
    size_bytes: int
    segments: int


def _visible_end(idx: OffsetIndex, visible_version: int) -> int:
    """The high watermark: the offset of the first indexed entry at or past ``visible_version``."""
    k = bisect_left(idx.versions, visible_version)
    return idx.offsets[k] if k < len(idx.versions) else idx.end_offset


def stored_batch(vnode: Vnode, topic: str, partition: int, version: int) -> bytes:
    """The stored RecordBatch at WAL ``version`` of a Kafka-native partition (NotFound: none there;
    CorruptEntry: its entry was lost)."""
    entry = vnode.wal.read(version)
    if entry is None or entry.kind != KIND_KAFKA:
        raise NotFound(f"Topic {topic} partition {partition} has no batch at version {version}")
    return entry.body


class TopicViews:
    """Topic definitions, compiled evaluators and offset indexes (see the module docstring)."""

    def __init__(self, store: Store, offsets: GroupOffsets) -> None:
        self.store = store
        self.offsets = offsets

    # ------------------------------------------------------------ indexing

    def index(self, vnode: Vnode, entries: list[DecodedEntry], next_version: int, topics: list[str] | None = None) -> None:
        """Advance the offset indexes of ``topics`` (default: every topic of the vnode's database) over ``entries``;
        ``next_version`` is the WAL version after the last entry.

        Never fails the write that appended ``entries``: an entry a topic cannot evaluate (which compile-time
        validation should make impossible) yields no records for that topic, with one ERROR line per topic and
        call. Evaluation is deterministic, so rebuilding the index from the WAL skips the same entries and the
        topic's offsets stay what consumers saw."""
        store = self.store
        tag_tables = store.tag_tables(vnode)
        if topics is None:
            topics = [t.name for t in store.catalog.topics_of(vnode.db.name)]
        for name in topics:
            ev = store.evaluators.get(name)  # None: a Kafka-native topic, whose records are its batches
            idx = store.indexes[(name, vnode.index)]
            failed: list[tuple[int, Exception]] = []
            for k, entry in enumerate(entries):
                if entry.version < idx.indexed_to:
                    continue
                offset = -1
                if ev is None:
                    count, max_ts, offset = entry.kafka_records, entry.max_ts, entry.kafka_base
                else:
                    try:
                        recs = ev.evaluate(entry, tag_tables)
                        count = sum(len(r) for r in recs)
                        max_ts = max((pc.max(r.timestamps).as_py() for r in recs), default=0)
                    except Exception as exc:  # noqa: BLE001 - the write stands; the topic skips what it cannot read
                        failed.append((entry.version, exc))
                        count, max_ts = 0, 0
                end = entries[k + 1].version if k + 1 < len(entries) else next_version
                idx.append(entry.version, count, max_ts, end, offset)
                if count:
                    store.listener.records_appended(name, vnode.index)
            if failed:
                version, error = failed[0]
                log.error("topic %s, vnode %s/%d: %d WAL entries could not be evaluated and yield no records "
                          "(first: version %d, %s: %s)", name, vnode.db.name, vnode.index, len(failed), version,
                          type(error).__name__, error)

    # ------------------------------------------------------------ compiling

    def evaluator(self, topic: TopicDef, altered: StableDef | None = None) -> TopicEvaluator:
        """Compile a stored topic from its SQL, as every start does (``altered``: see :meth:`compile`)."""
        stmt = parse(topic.sql)
        if not isinstance(stmt, ast.CreateTopic):
            raise InvalidValue(f"Topic {topic.name}: its stored SQL is not a CREATE TOPIC")
        db = self.store.catalog.database(topic.db)
        return self.compile(db, stmt.kind, topic.source, topic.with_meta, stmt.select, stmt.where, altered)

    def compile(
        self,
        db: DatabaseDef,
        kind: str,
        source: str,
        with_meta: bool,
        items: tuple[ast.SelectItem, ...] | None,
        where: ast.Expr | None,
        altered: StableDef | None = None,
    ) -> TopicEvaluator:
        """The evaluator of a topic or query over ``source``, fully validated (every type error is raised here, see
        topics.py); ``altered`` stands in for the catalog's definition of the supertable of its name (a schema
        change being checked before it is written)."""
        if kind == "database":
            return TopicEvaluator("database", "", with_meta=with_meta)
        catalog = self.store.catalog

        def stable(name: str) -> StableDef | None:
            if altered is not None and (altered.db, altered.name) == (db.name, name):
                return altered
            return catalog.stables.get((db.name, name))

        st = stable(source)
        if st is not None:
            return TopicEvaluator(kind, source, with_meta=with_meta, precision=db.precision, stable=st, items=items, where=where)
        if kind == "stable":
            raise NotFound(f"STable not exist: {db.name}.{source}")
        t = self.store.table(db, source)
        if t.stable is not None:
            st = stable(t.stable) or catalog.stable(db.name, t.stable)
            return _of_subtable(db, kind, source, st, with_meta, items, where)
        return TopicEvaluator(kind, source, with_meta=with_meta, precision=db.precision, columns=t.columns, items=items, where=where)

    def _here(self, topic: TopicDef, altered: StableDef | None = None) -> TopicEvaluator:
        """:meth:`evaluator`, or :class:`~walgate.storage.topics.NoRowsHere` for a topic of one table whose vgroup
        is on another node (compiled there). A topic of a subtable of ``altered`` is then checked against it all the
        same, from the catalog alone (:attr:`TopicDef.stable <walgate.storage.catalog.TopicDef.stable>`): every node
        refuses the same ALTER."""
        try:
            return self.evaluator(topic, altered)
        except NotHere:
            if altered is not None and (topic.db, topic.stable) == (altered.db, altered.name):
                stmt = parse(topic.sql)
                assert isinstance(stmt, ast.CreateTopic)  # evaluator parsed it before asking for the table
                _of_subtable(self.store.catalog.database(topic.db), stmt.kind, topic.source, altered, topic.with_meta,
                             stmt.select, stmt.where)
            return NoRowsHere()

    def recompile(self, db: str, altered: StableDef | None = None) -> None:
        """Recompile every TDengine topic of ``db`` after a schema change: each that compiles is replaced, then the
        first that does not is raised (it keeps its old form).

        With ``altered`` (a supertable's definition after a proposed ALTER), only check that every topic still
        compiles with it: call it before writing the change, which a topic that would break then refuses (on every
        node alike: :meth:`_here`)."""
        compiled: dict[str, TopicEvaluator] = {}
        failed: list[StorageError] = []
        for name, topic in self.store.catalog.topics.items():
            if topic.db == db and topic.kind != "kafka":
                try:
                    compiled[name] = self._here(topic, altered)
                except StorageError as exc:
                    failed.append(type(exc)(f"{exc.message} (topic {name} depends on it: drop the topic first)"))
                    if altered is not None:
                        break
        if altered is None:
            self.store.evaluators.update(compiled)
        if failed:
            raise failed[0]

    # ------------------------------------------------------- open, create, drop

    def open_topic(self, topic: TopicDef) -> None:
        """Compile the topic (:meth:`_here`), bring its offset indexes here up to the WAL's end and index its id."""
        if topic.kind != "kafka":
            self.store.evaluators[topic.name] = self._here(topic)
        for vnode in self.store.vnodes[topic.db]:
            self.open_partition(topic, vnode)
        self.store.add_topic_id(topic)

    def open_partition(self, topic: TopicDef, vnode: Vnode) -> None:
        """Open (or rebuild) the topic's offset index on ``vnode`` and index what the WAL holds past its end (of a
        vnode restored from a snapshot, past the snapshot's end: its records up to there are the snapshot's)."""
        path = datadir.topic_file(vnode.dir, topic.topic_id, ".oidx")
        restored = 0 if vnode.restoring is None else vnode.restoring[1]  # (its records up to there: the snapshot's)
        idx = OffsetIndex.open(path, max(vnode.wal.next_version, restored), self.store.damage_log,
                               vnode.wal.has_entries if topic.kind == "kafka" else None, vnode.wal.files,
                               vnode.wal.syncs)
        idx.trim_before(vnode.wal.first_version)
        self.store.indexes[(topic.name, vnode.index)] = idx
        start = max(idx.indexed_to, vnode.wal.first_version, restored)
        if topic.kind == "kafka" and not idx.offsets:  # a rebuilt index numbers on from the offsets the batches carry
            first = next((e for e in vnode.wal.read_from(start) if e.kind == KIND_KAFKA and e.version >= start), None)
            if first is not None:
                idx.start_empty_at(batch_prefix(first.body)[0])
        if start < vnode.wal.next_version:
            batch: list[DecodedEntry] = []
            for entry in vnode.wal.read_from(start):
                if entry.version < start:
                    continue
                try:  # one that does not decode whole (a bug's: its checksums held) is reported and skipped
                    batch.append(decode_whole(entry))
                except Undecodable as exc:
                    vnode.wal.damaged(entry.version, f"an entry that does not decode: {exc}")
                    continue
                if len(batch) >= 256:  # bounded memory; the next entry starts after this one's first version
                    self.index(vnode, batch, batch[-1].version + 1, [topic.name])
                    batch = []
            self.index(vnode, batch, vnode.wal.next_version, [topic.name])

    def forget(self, name: str) -> None:
        """Stop serving a topic that cannot be opened (its files stay)."""
        store = self.store
        store.catalog.forget_topic(name)
        store.evaluators.pop(name, None)
        for key in [k for k in store.indexes if k[0] == name]:
            store.indexes.pop(key).close()
        store.forget_topic_id(name)

    def create(self, s: ast.CreateTopic, session: str | None) -> Result:
        """CREATE TOPIC: validated (compiled) before anything is written; nothing is kept when opening it fails. Offsets
        a dropped topic of the name left behind are deleted first (:meth:`GroupOffsets.clear_left`)."""
        catalog = self.store.catalog
        if s.name in catalog.topics:
            if s.if_not_exists:
                return affected(0)
            raise AlreadyExists(f"Topic already exists: {s.name}")
        self.offsets.clear_left(s.name)
        if s.kind == "database":
            db, source = catalog.database(s.source.name), ""
        else:
            db, source = self.store.resolve_db(s.source.db, session), s.source.name
        compiled = self.compile(db, s.kind, source, s.with_meta, s.select, s.where)  # validated before it is written
        subtable_of = compiled.source if s.kind == "select" and compiled.source != source else ""
        sql = s.sql
        if s.kind != "database" and s.source.db is None:  # make the stored SQL independent of USE
            sql = _qualify(s, db.name)
        topic = catalog.create_topic(s.name, s.kind, db.name, source, s.with_meta, sql, self.store.clock.time_ms(),
                                     subtable_of)
        if catalog.is_cluster_db(db.name):  # staged: compiled where it is applied (walgate.storage.sql_objects)
            return affected(0)
        try:
            self.open_topic(topic)
        except Exception:
            self.drop(topic.name)  # an answered error means nothing was kept
            raise
        return affected(0)

    def drop_statement(self, s: ast.DropTopic, _: str | None) -> Result:
        if s.name not in self.store.catalog.topics:
            if s.if_exists:
                return affected(0)
            raise NotFound(f"Topic not exist: {s.name}")
        self.drop(s.name)
        return affected(0)

    def drop(self, name: str) -> None:
        """Drop a topic, its offset indexes and committed offsets; a Kafka-native one with its database.

        The catalog record first (when the disk refuses it, the topic and its offsets stay), then the topics snapshot
        without it is published and only then are its offsets deleted on the coordinator lane: a commit checked
        against the old snapshot ran before the deletion, one to a topic of the same name created later runs after
        it. A stop in between (or a deletion the disk refuses, logged) leaves offsets of a topic that is gone; the
        next start deletes them (:meth:`GroupOffsets.delete_dropped`)."""
        store = self.store
        topic = store.catalog.topics[name]
        db = store.catalog.database(topic.db)
        if topic.kind != "kafka":
            store.catalog.drop_topic(name)  # before memory and files: when the disk refuses it, the topic stays
            if store.catalog.is_cluster_db(topic.db):  # staged: dropped where it is applied (follow_catalog)
                return
        else:
            store.catalog.drop_database(topic.db)  # one record: the database and its topic go together
            if store.catalog.cluster:  # staged: dropped here when the node applies it (NativeTopics.follow_catalog)
                return
        store.publish_topics()
        self.forget_dropped(name)
        if topic.kind == "kafka":
            for vnode in store.vnodes.pop(topic.db):
                vnode.close()
            shutil.rmtree(store.db_dir(db), ignore_errors=True)

    def forget_dropped(self, name: str) -> None:
        """After topic ``name``'s drop was recorded and the topics published without it: delete its committed
        offsets (a disk refusing it is logged: the next start deletes them), forget its id and compiled form, and
        delete its offset indexes and producer state (its vnodes are the caller's)."""
        store = self.store
        try:
            self.offsets.delete_of_dropped(name)
        except StorageError as exc:
            log.error("topic %r is dropped but its committed offsets could not be deleted (%s); they are deleted at "
                      "the next start, or before a topic of that name is created", name, exc)
        store.forget_topic_id(name)
        store.evaluators.pop(name, None)
        for key in [k for k in store.indexes if k[0] == name]:
            store.producers.pop(key, None)
            store.indexes.pop(key).delete()

    def drop_group(self, s: ast.DropConsumerGroup, _: str | None) -> Result:
        """DROP CONSUMER GROUP (:func:`drop_consumer_group`) from the storage lane (the gateway runs it on the
        coordinator lane instead)."""
        return drop_consumer_group(s, self.store.catalog.topics, self.store.consumers.consumers(),
                                   lambda group, topic: self.offsets.delete(group, topic))

    # ------------------------------------------------------------ lookups

    def is_native(self, topic: str) -> bool:
        t = self.store.catalog.topics.get(topic)
        return t is not None and t.kind == "kafka"

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self.store.catalog.topics.get(topic)
        return t is not None and 0 <= partition < self.store.catalog.database(t.db).vgroups

    def partition_count(self, topic: str) -> int:
        t = self.store.catalog.topics.get(topic)
        if t is None:
            raise NotFound(f"Topic not exist: {topic}")
        return self.store.catalog.database(t.db).vgroups

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.store.topic_names.get(topic_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self.store.topic_uuids.get(name)

    def log_starts(self, db: str, index: int) -> dict[uuid.UUID, int]:
        """Each topic over vnode ``index`` of database ``db`` whose log start offset is past 0: its id -> that offset
        (what a replica of the vnode tells the others: KIP-107's log start, DeleteRecords' or retention's)."""
        out: dict[uuid.UUID, int] = {}
        for name in [t.name for t in self.store.catalog.topics_of(db)]:
            idx, topic_id = self.store.indexes.get((name, index)), self.topic_id(name)
            if idx is not None and topic_id is not None and idx.start_offset > 0:
                out[topic_id] = idx.start_offset
        return out

    def follow_log_starts(self, db: str, index: int, starts: Mapping[uuid.UUID, int]) -> None:
        """A follower of vnode ``index`` of database ``db`` takes its leader's log starts ``starts`` (by topic id,
        :meth:`log_starts`), as Kafka's follower takes the one each fetch answer carries
        (``UnifiedLog.maybeIncrementLogStartOffset``): each topic's log start moves there when that is past its own,
        at most to its own end offset (what it holds), durably (:meth:`OffsetIndex.advance_start`; StorageUnavailable
        when the disk refuses, that topic's and the later ones' taken again with the next answer)."""
        for name in [t.name for t in self.store.catalog.topics_of(db)]:
            idx, topic_id = self.store.indexes.get((name, index)), self.topic_id(name)
            target = None if idx is None or topic_id is None else min(starts.get(topic_id, 0), idx.end_offset)
            if idx is not None and target is not None and target > idx.start_offset:
                idx.advance_start(target)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of a topic-partition: the high watermark stops at the first record not
        visible yet (not durable under group commit, see :attr:`~walgate.storage.wal.Wal.visible_version`)."""
        _, vnode, idx = self.store.partition(topic, partition)
        return idx.start_offset, _visible_end(idx, vnode.wal.visible_version)

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch of a topic-partition, from its vnode's leader-epoch cache (KIP-101): the largest
        epoch ``<= epoch`` the vnode holds and the offset where it ends, the first record at or past the WAL
        version where the next epoch starts (as Kafka answers from its log, also above a high watermark that has
        not caught up yet: a leader just elected must not tell a consumer whose position its predecessor's high
        watermark passed that its log was truncated), the latest epoch at the high watermark; (-1, -1) for an
        undefined, unknown or future epoch."""
        _, vnode, idx = self.store.partition(topic, partition)
        end = vnode.epochs.end_for(epoch, vnode.wal.visible_version)
        if end.end_offset < 0:
            return end.epoch, -1
        return end.epoch, _visible_end(idx, end.end_offset)

    def end_holding(self, topic: str, partition: int, offset: int) -> int:
        """The WAL version a replica's log must end at or past to hold every record of the topic-partition below
        ``offset``: one past the entry of the last batch starting below it (0 when none does)."""
        _, _, idx = self.store.partition(topic, partition)
        k = bisect_left(idx.offsets, offset) - 1
        return idx.versions[k] + 1 if k >= 0 else 0

    def epoch_start_above_hw(self, topic: str, partition: int) -> int | None:
        """The WAL version where the vnode's latest leader epoch starts while its high watermark is below it (a
        replicated partition's leader just elected, not caught up: KIP-207), else None (always on a single node or a
        one-copy vnode, whose high watermark is its log end)."""
        _, vnode, _ = self.store.partition(topic, partition)
        epochs = vnode.epochs
        if epochs.single_node or not epochs.entries:
            return None
        start = epochs.entries[-1].start_offset
        return start if start > vnode.wal.visible_version else None

    def partition_stats(self, keys: Iterable[tuple[str, int]] | None = None) -> list[PartitionStats]:
        """Every partition of every topic (or those of ``keys`` that exist: (topic, partition), in that order):
        offsets, and the size and segment count of the WAL holding it."""
        stats = []
        indexes = self.store.indexes
        pairs = sorted(indexes.items()) if keys is None else [(k, indexes[k]) for k in keys if k in indexes]
        for (topic, partition), idx in pairs:
            wal = self.store.local_vnode(self.store.catalog.topics[topic].db, partition).wal
            stats.append(PartitionStats(topic, partition, idx.start_offset, idx.end_offset, wal.size_bytes,
                                        len(wal.segments)))
        return stats

    def index_entries(self, topic: str, partition: int, offset: int) -> Iterator[tuple[int, int, int]]:
        """(base offset, WAL version, record count) of each visible entry (below the high watermark) from the one
        holding ``offset`` on."""
        _, vnode, idx = self.store.partition(topic, partition)
        visible = vnode.wal.visible_version
        if offset < idx.start_offset or offset >= _visible_end(idx, visible):
            return
        i = bisect_right(idx.offsets, offset) - 1
        if i >= 0 and offset >= idx.offsets[i] + idx.counts[i]:  # in a gap compaction left: the next entry on
            i += 1
        for k in range(i, len(idx.offsets)):
            if idx.versions[k] >= visible:
                return
            yield idx.offsets[k], idx.versions[k], idx.counts[k]

    def topic_records(self, topic: str, partition: int, version: int) -> list[Records]:
        """Records the topic's entry at ``version`` yields on vnode ``partition`` (re-evaluation).

        Raises :class:`~walgate.storage.wal.CorruptEntry` when the entry was lost (quarantined or failing its
        checksum): its records are a gap in the partition's offsets, as after compaction."""
        _, vnode, _ = self.store.partition(topic, partition)
        entry = vnode.wal.read(version)
        if entry is None:
            return []
        return self.store.evaluators[topic].evaluate(decode_entry(entry), self.store.tag_tables(vnode))

    def kafka_rows(self, topic: str, partition: int, version: int) -> KafkaRows:
        """The Kafka records (keys, JSON values, ms timestamps, headers) of one indexed entry (CorruptEntry: lost)."""
        t, vnode, _ = self.store.partition(topic, partition)
        return render(self.topic_records(topic, partition, version), t.db, vnode.db.precision)

    def offset_for_timestamp(self, topic: str, partition: int, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record whose timestamp >= ``ts_ms``; None if none.

        Lost entries (:class:`~walgate.storage.wal.CorruptEntry`) are skipped: their records are a gap."""
        _, vnode, idx = self.store.partition(topic, partition)
        ticks = ts_ms * TICKS_PER_MS[vnode.db.precision]
        found = idx.entry_for_timestamp(ticks)
        if found is None:
            return None
        native = self.is_native(topic)
        for base, version, _count in self.index_entries(topic, partition, max(found[0], idx.start_offset)):
            try:
                if native:
                    records = _offsets_and_timestamps(stored_batch(vnode, topic, partition, version))
                else:
                    records = [(base + k, ms) for k, ms in enumerate(self.kafka_rows(topic, partition, version).timestamps)]
            except CorruptEntry:
                continue
            for offset, ms in records:
                if ms >= ts_ms:
                    return offset, ms
        return None

    def max_timestamp(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(offset, timestamp ms) of the first record holding the partition's largest timestamp."""
        _, vnode, idx = self.store.partition(topic, partition)
        if not idx.offsets:
            return None
        # no record is later than the running max, so the first one reaching it holds it
        return self.offset_for_timestamp(topic, partition, idx.running_max[-1] // TICKS_PER_MS[vnode.db.precision])

    def version_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The WAL version of the record at ``offset`` (None at or past the end, before the log start, or lost)."""
        loc = self.store.indexes[(topic, partition)].locate(offset)
        if loc is None:
            return None
        if self.is_native(topic):  # a stored batch spans one version per record
            return loc[0] + loc[1]
        try:
            records = self.topic_records(topic, partition, loc[0])
        except CorruptEntry:
            return None
        versions: list[int] = [v for r in records for v in r.versions.to_pylist()]
        return versions[loc[1]]

    def trim_to_retention(self, vnode: Vnode) -> None:
        """Move the log start of the topics on ``vnode`` to its WAL's first version (after retention)."""
        for (topic, part), idx in self.store.indexes.items():
            if part == vnode.index and self.store.catalog.topics[topic].db == vnode.db.name:
                idx.trim_before(vnode.wal.first_version)


def _qualify(s: ast.CreateTopic, db: str) -> str:
    """``s.sql`` with its source written ``db.source``, so that the stored SQL does not depend on USE.

    Every ``FROM`` / ``STABLE`` followed by the source's name is a candidate, qualified plainly or back-quoted; the
    first candidate text that parses back to ``s`` with the qualified source is kept, so a string, a back-quoted
    column or an alias that looks alike is never rewritten, and what is stored is what every start re-parses."""
    name = s.source.name
    expected = (s.name, s.kind, ast.Name(name, db), s.with_meta, s.select, s.where)
    for m in re.finditer(rf"(?i)\b(?:from|stable)\s+(`{re.escape(name)}`|{re.escape(name)}\b)", s.sql):
        for qualified in (f"{db}.{name}", f"`{db}`.`{name}`"):
            text = s.sql[: m.start(1)] + qualified + s.sql[m.end(1) :]
            try:
                again = parse(text)
            except StorageError:
                continue
            if isinstance(again, ast.CreateTopic) and (
                again.name, again.kind, again.source, again.with_meta, again.select, again.where
            ) == expected:
                return text
    raise InvalidValue(f"Topic {s.name}: write its source with its database, as {db}.{name}")


def _offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset, timestamp ms) of each record of a stored batch: consecutive from its base offset unless the cleaner
    removed records (then each record's own offset delta says where it is)."""
    header = batch_header(batch)
    if header.record_count == header.last_offset_delta + 1:
        return [(header.base_offset + k, ms) for k, ms in enumerate(record_timestamps(batch))]
    return [(r.offset, r.timestamp) for b in decode_batches(batch) for r in b.records]


def drop_consumer_group(s: ast.DropConsumerGroup, topics: Container[str], members: list[ConsumerRow],
                        delete: Callable[[str, str], int]) -> Result:
    """DROP CONSUMER GROUP: forget a group's committed offsets on a topic (``delete(group, topic)``: how many went),
    refused while the group has ``members`` or when ``topics`` has no such topic."""
    if s.topic not in topics:
        raise NotFound(f"Topic not exist: {s.topic}")
    if any(c.group == s.group for c in members):
        raise InvalidValue(f"Consumer group {s.group} has active members: stop them first")
    if not delete(s.group, s.topic) and not s.if_exists:
        raise NotFound(f"Consumer group {s.group} has no progress on topic {s.topic}")
    return affected(0)


def _of_subtable(db: DatabaseDef, kind: str, source: str, st: StableDef, with_meta: bool,
                 items: tuple[ast.SelectItem, ...] | None, where: ast.Expr | None) -> TopicEvaluator:
    """The evaluator of a topic of subtable ``source`` of ``st``: the supertable's rows, restricted to it."""
    cond: ast.Expr = ast.Binary("=", ast.Col("tbname"), ast.Lit(source))
    where = cond if where is None else ast.Binary("AND", cond, where)
    return TopicEvaluator(kind, st.name, with_meta=with_meta, precision=db.precision, stable=st, items=items,
                          where=where)
