"""The partition interface: all that Kafka's APIs, the web console and the metrics know of a topic-partition.

:class:`Partitions` is addressed by (topic, partition) and answers plain data: it appends produced record batches,
reads record batches from an offset up to a byte limit at an isolation level, answers ListOffsets' lookups, the
offsets every answer carries (log start, high watermark, last stable offset), the producers a partition keeps state
for, and moves a log start (DeleteRecords). Handlers validate the request and translate answers and exceptions into
Kafka's; what a partition holds and how it is stored stays behind this interface, so that a partition served by
another node, or replicated, can implement it (each call touches one partition, except :meth:`Partitions.append`,
which takes one topic's partitions of a Produce request in one call, each answered on its own, and
:meth:`Partitions.stats`, which lists them all).

:class:`LocalPartitions` is the implementation over this node's engine, called on the storage lane as every engine
call is (a call holding a partition's vnode, or an exclusive one: :mod:`walgate.storage.lanes`). What it keeps to itself:

* **Append** (Kafka's ``LogValidator`` and log append): the topic's configs over the node's dynamic broker defaults
  (:mod:`~walgate.storage.topic_configs`) bound a partition's records (``segment.bytes``: :class:`RequestTooLarge`;
  ``max.message.bytes`` and the batch checks of :func:`~walgate.wire.validate_produced`: the wire's errors); a
  compacted topic refuses records without a key (:class:`~walgate.storage.produced_rows.RecordsRefused`, naming
  them); ``message.timestamp.type=LogAppendTime`` stamps each batch with the append time. A Kafka-native topic's
  batches are stored as they came (:meth:`~walgate.storage.native_topics.NativeTopics.append_partitions`: all of a
  partition's batches or none, idempotence and transactions checked); a TDengine topic's records become rows of its
  tables (:mod:`~walgate.storage.produced_rows`) and take no transactional batch
  (:class:`TransactionsUnsupported`). Each appended partition says what it needs to be durable before it is
  answered (group commit, :mod:`~walgate.storage.durability`); a partition's refusal is its own, never its siblings'.
* **Read**: one record batch per WAL entry that contributes records, from the entry holding the offset on; a
  Kafka-native topic's stored batches as they are, as file regions (for ``sendfile``) from
  :data:`SENDFILE_MIN_BYTES` on, a TDengine topic's rows rendered into batches once and kept in the
  :class:`~walgate.storage.batch_cache.BatchCache`. An entry whose WAL bytes were lost (quarantine, a checksum
  failure) is a gap, served as :func:`lost_batch`. ``read_committed`` stops at the last stable offset and lists the
  aborted transactions among what is served.
* **Leader epoch**: every batch served carries the leader epoch its WAL entry was appended under, from the vnode's
  leader-epoch cache (:meth:`LeaderEpochs.epoch_at <walgate.storage.leader_epochs.LeaderEpochs.epoch_at>`; a
  Kafka-native batch has it stored, set as it was appended: :meth:`NativeTopics.append_batches
  <walgate.storage.native_topics.NativeTopics.append_batches>`), as Kafka's ``partitionLeaderEpoch`` (KIP-101), so
  that a consumer validating its position after a leader change (KIP-320) asks for the epoch its records came from;
  OffsetForLeaderEpoch is answered from the same cache. A vnode of one copy holds epoch 0 from version 0
  (:data:`LEADER_EPOCH`); a replicated one the epochs its leaders began (issue 25).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

from walgate.storage import resource_configs
from walgate.storage.batch_cache import BatchCache
from walgate.storage.durability import Need
from walgate.storage.errors import InvalidValue, NotFound, OffsetNotAvailable, RequestTooLarge, Unsupported
from walgate.storage.ingest import Ingest
from walgate.storage.leader_epochs import LeaderEpochs
from walgate.storage.native_topics import NativeTopics
from walgate.storage.produced_rows import RecordsRefused, write_records
from walgate.storage.producers import AbortedTxn, ActiveProducer
from walgate.storage.store import Store
from walgate.storage.topic_configs import TOPIC_CONFIG_DEFAULTS, cleanup_policy
from walgate.storage.topic_views import PartitionStats, TopicViews
from walgate.storage.wal import CorruptEntry, FileRegion
from walgate.wire import DecodedBatch, encode_batch, validate_produced, with_log_append_time
from walgate.wire.record_batch import end_txn_marker

__all__ = [
    "EARLIEST", "EARLIEST_LOCAL", "EARLIEST_PENDING_UPLOAD", "LATEST", "LEADER_EPOCH", "MAX_TIMESTAMP",
    "SENDFILE_MIN_BYTES", "Appended", "LocalPartitions", "PartitionOffsets", "PartitionRead", "PartitionStats",
    "Partitions", "TransactionsUnsupported", "is_lost", "lost_batch",
]

LEADER_EPOCH = 0
"""The leader epoch of a partition of one copy: led by the node it is placed on forever, from version 0 on."""

SENDFILE_MIN_BYTES = 16 << 10
"""Stored batches this big are read as file regions, for ``sendfile``; smaller ones are read into bytes (one syscall
for many small batches beats one sendfile each)."""

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5
"""ListOffsets' special timestamps (Kafka's ``ListOffsetsRequest``): what :meth:`Partitions.list_offset` looks up."""


class TransactionsUnsupported(Unsupported):
    """Transactional records produced to a TDengine topic, whose log cannot hold transactions."""


class PartitionOffsets(NamedTuple):
    """The offsets every answer about a partition carries."""

    log_start: int
    high_watermark: int
    last_stable: int  # the first offset of the earliest unfinished transaction, else the high watermark


class Appended(NamedTuple):
    """One partition's successful append: its base offset (-1: rows of a TDengine topic, which land in the
    partitions of their tables), the append time stamped into its batches (-1: CreateTime), its log start after the
    append, and the syncs that must be done before it is answered (group commit, :mod:`~walgate.storage.durability`;
    empty when it is durable already)."""

    base_offset: int
    log_append_time: int
    log_start: int
    needs: list[Need]


class PartitionRead(NamedTuple):
    """What a read of a partition answers: its offsets; when the offset read from is outside [log start, log end],
    ``out_of_range`` and no batches; otherwise the batches from it below the high watermark (bytes or file regions,
    each whole; none from an offset between the high watermark and the log end, which a leader just elected has
    before its followers' fetches move its high watermark, as Kafka answers it) and, under read_committed, the
    aborted transactions overlapping them (None under read_uncommitted)."""

    offsets: PartitionOffsets
    batches: list[bytes | FileRegion]
    aborted: list[AbortedTxn] | None
    out_of_range: bool = False


class Partitions(Protocol):
    """A node's topic-partitions, as every Kafka API, the web console and the metrics use them (see the module
    docstring). Unknown topics and partitions raise :class:`~walgate.storage.errors.NotFound`."""

    def append(self, topic: str, partitions: Sequence[tuple[int, bytes]], now_ms: int,
               node_id: int) -> list[Appended | Exception]:
        """Append the produced records of each (partition, RecordBatch v2 bytes) of ``topic``; per partition, in
        order, its :class:`Appended` or the exception that refused it (nothing of that partition written).
        ``now_ms`` is the append time (LogAppendTime topics); topic configs apply over node ``node_id``'s dynamic
        broker defaults."""
        ...

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, *, must_one: bool,
             read_committed: bool) -> PartitionRead:
        """Record batches from the one holding ``offset``, at most ``max_bytes`` of them, except that with
        ``must_one`` the first batch is returned whole whatever its size; ``read_committed``: only batches below
        the last stable offset."""
        ...

    def batches(self, topic: str, partition: int, offset: int) -> Iterator[tuple[int, int, bytes | FileRegion]]:
        """(base offset, record count, batch) of each entry from the one holding ``offset`` on, each batch as
        :meth:`read` serves it (a lost entry as :func:`lost_batch`); read lazily, entry by entry (ShareFetch picks
        the batches holding the records it acquired)."""
        ...

    def aborted(self, topic: str, partition: int, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [``start``, ``upper``) of a Kafka-native partition."""
        ...

    def all_batches(self, topic: str, partition: int) -> list[bytes]:
        """Every stored batch of a Kafka-native partition, log start to log end (a coordinator's load)."""
        ...

    def list_offset(self, topic: str, partition: int, spec: int, *, read_committed: bool) -> tuple[int, int]:
        """(offset, timestamp) answering ListOffsets' ``spec``: :data:`EARLIEST` / :data:`EARLIEST_LOCAL` the log
        start, :data:`LATEST` the high watermark (read_committed: the last stable offset), :data:`MAX_TIMESTAMP`
        the first record holding the largest timestamp, :data:`EARLIEST_PENDING_UPLOAD` -1, a timestamp >= 0 the
        first record at or after it; -1 when there is none or it is not fetchable (timestamps of the first three:
        -1). Any other ``spec`` raises :class:`~walgate.storage.errors.InvalidValue`; :data:`LATEST`, and a
        timestamp with no fetchable record at or after it, :class:`~walgate.storage.errors.OffsetNotAvailable` on a
        replicated partition's leader whose high watermark has not reached the start of its leader epoch (KIP-207)."""
        ...

    def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """The partition's log start, high watermark and last stable offset."""
        ...

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest leader epoch ``<= epoch`` the partition's log holds and the offset
        where it ends (the latest epoch: the high watermark); (-1, -1) for an undefined, unknown or future epoch."""
        ...

    def end_holding(self, topic: str, partition: int, offset: int) -> int:
        """The WAL version a replica's log must end at or past to hold every record below ``offset`` (KIP-392: a
        follower a consumer is sent to must hold its fetch offset)."""
        ...

    def producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        """The producers the partition keeps state for (DescribeProducers)."""
        ...

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Move the partition's log start to ``offset`` (-1: the high watermark); the new log start."""
        ...

    def has(self, topic: str, partition: int) -> bool:
        """Whether the partition exists."""
        ...

    def stats(self, keys: Iterable[tuple[str, int]] | None = None) -> list[PartitionStats]:
        """Every partition of every topic (or those of ``keys``, (topic, partition), that exist, in that order): log
        start, high watermark, and the size and segments of its WAL."""
        ...


class _Batches(NamedTuple):
    """A Kafka-native partition's checked batches, to append; its ``log_append_time`` (-1: CreateTime)."""

    partition: int
    batches: list[bytes]
    log_append_time: int


_PENDING = Exception("not appended yet")
"""The place of a Kafka-native partition in :meth:`LocalPartitions.append`'s results until its append's result."""


class LocalPartitions:
    """:class:`Partitions` over this node's engine (storage thread only; see the module docstring)."""

    def __init__(self, store: Store, views: TopicViews, native: NativeTopics, ingest: Ingest,
                 cache: BatchCache) -> None:
        self._store = store
        self._views = views
        self._native = native
        self._ingest = ingest
        self._cache = cache  # TDengine topics' rendered batches (the engine's; the metrics read its counters)

    # ------------------------------------------------------------------ append

    def append(self, topic: str, partitions: Sequence[tuple[int, bytes]], now_ms: int,
               node_id: int) -> list[Appended | Exception]:
        defaults = resource_configs.topic_defaults(self._store.catalog.resource_configs, str(node_id))
        results: list[Appended | Exception] = []
        appends: list[tuple[int, _Batches]] = []  # (position in results, batches)
        for index, records in partitions:
            checked: Appended | _Batches | Exception
            try:
                checked = self._check(topic, index, records, now_ms, defaults)
            except Exception as exc:  # noqa: BLE001 - the partition's own refusal, its siblings unaffected
                checked = exc
            if isinstance(checked, _Batches):
                appends.append((len(results), checked))
                results.append(_PENDING)  # replaced by its append's result
            else:
                results.append(self._with_needs(checked))
        if appends:
            self._append_native(topic, appends, results)
        return results

    def _append_native(self, topic: str, appends: list[tuple[int, _Batches]],
                       results: list[Appended | Exception]) -> None:
        """Append a topic's checked Kafka-native partitions in one call, each one's result into its position."""
        written = self._native.append_partitions(topic, [(a.partition, a.batches) for _, a in appends])
        try:
            needs = self._take_unsynced()  # one take for the topic's one append: a failed fsync refuses them all
        except Exception as exc:  # noqa: BLE001 - answered per partition, as any refusal
            for at, _ in appends:
                results[at] = exc
            return
        for (at, a), result in zip(appends, written):
            results[at] = result if isinstance(result, Exception) else Appended(
                result, a.log_append_time, self._views.watermarks(topic, a.partition)[0], needs)

    def _with_needs(self, result: Appended | Exception) -> Appended | Exception:
        """``result`` of a partition answered on its own, with what its write needs to be durable (an engine failing
        to say refuses it)."""
        try:
            needs = self._take_unsynced()
        except Exception as exc:  # noqa: BLE001 - answered per partition, as any refusal
            return exc
        return result._replace(needs=needs) if isinstance(result, Appended) else result

    def _take_unsynced(self) -> list[Need]:
        return self._store.unsynced.take() if self._store.unsynced is not None else []

    def _check(self, name: str, index: int, records: bytes, now_ms: int,
               defaults: dict[str, str]) -> Appended | _Batches:
        """A TDengine topic's partition written (its rows), or a Kafka-native one's batches checked, to append."""
        topic = self._store.catalog.topics.get(name)
        if topic is None or not self._views.has_partition(name, index):
            raise NotFound(f"unknown topic or partition {name}-{index}")
        configs = {**TOPIC_CONFIG_DEFAULTS, **defaults, **topic.configs}
        if len(records) > int(configs["segment.bytes"]):
            raise RequestTooLarge(f"{len(records)} bytes are above segment.bytes {configs['segment.bytes']}")
        native = topic.kind == "kafka"
        compacted = native and "compact" in cleanup_policy(configs)
        batches = validate_produced(records, int(configs["max.message.bytes"]), with_records=not native or compacted)
        if compacted:
            keyless = [(i, f"Compacted topic cannot accept message without key in topic partition {name}-{index}.")
                       for i, r in enumerate(r for b in batches for r in b.records) if r.key is None]
            if keyless:
                raise RecordsRefused(keyless, keyless[0][1])
        if not native:
            if any(b.is_transactional for b in batches):
                raise TransactionsUnsupported(f"{name} is a TDengine topic: it takes no transactional records")
            write_records(self._store, self._ingest, name, batches)
            return Appended(-1, -1, self._views.watermarks(name, index)[0], [])
        if configs["message.timestamp.type"] == "LogAppendTime":
            return _Batches(index, [with_log_append_time(b.raw, now_ms) for b in batches], now_ms)
        return _Batches(index, [b.raw for b in batches], -1)

    # ------------------------------------------------------------------ reads

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, *, must_one: bool,
             read_committed: bool) -> PartitionRead:
        offsets = self.offsets(topic, partition)
        if offset < offsets.log_start or (offset > offsets.high_watermark
                                          and offset > self._store.partition(topic, partition)[2].end_offset):
            return PartitionRead(offsets, [], None, out_of_range=True)
        out: list[bytes | FileRegion] = []
        size = 0
        upper = offset
        for base, count, batch in self.batches(topic, partition, offset):
            if read_committed and base >= offsets.last_stable:
                break
            if size + len(batch) > max_bytes and (out or not must_one):
                break
            out.append(batch)
            size += len(batch)
            upper = base + count
        aborted = None
        if read_committed:
            aborted = self.aborted(topic, partition, offset, upper) if out else []
        return PartitionRead(offsets, out, aborted)

    def batches(self, topic: str, partition: int, offset: int) -> Iterator[tuple[int, int, bytes | FileRegion]]:
        native = self._views.is_native(topic)
        epochs: LeaderEpochs | None = None  # looked up once there is an entry (a long poll mostly finds none)
        for base, version, count in self._views.index_entries(topic, partition, offset):
            if epochs is None:
                epochs = self._store.partition(topic, partition)[1].epochs
            try:
                batch = self._batch(topic, partition, native, base, version, epochs)
            except CorruptEntry:
                batch = lost_batch(base, count, epochs.epoch_at(version))
            yield base, count, batch

    def aborted(self, topic: str, partition: int, start: int, upper: int) -> list[AbortedTxn]:
        return self._native.aborted_transactions(topic, partition, start, upper)

    def all_batches(self, topic: str, partition: int) -> list[bytes]:
        """Every stored batch of Kafka-native partition ``partition`` of ``topic``, from its log start to its log
        end, past the high watermark too (a new leader's log is the partition's: its coordinator loads it whole); a
        lost entry as the :func:`lost_batch` consumers read for it."""
        _, vnode, idx = self._store.partition(topic, partition)
        out: list[bytes] = []
        for base, version, count in zip(idx.offsets, idx.versions, idx.counts):
            try:
                out.append(self._native.kafka_batch(topic, partition, version))
            except CorruptEntry:
                out.append(lost_batch(base, count, vnode.epochs.epoch_at(version)))
        return out

    def _batch(self, topic: str, partition: int, native: bool, base: int, version: int,
               epochs: LeaderEpochs) -> bytes | FileRegion:
        """The batch of the entry at ``version`` (base offset ``base``): stored (native), or rendered with the leader
        epoch ``epochs`` says it was appended under and cached (a truncation forgets the versions it cut)."""
        if native:
            region = self._native.kafka_region(topic, partition, version)
            return region if len(region) >= SENDFILE_MIN_BYTES else region.read()
        key = (self._views.topic_id(topic), partition, version)
        batch = self._cache.get(key)
        if batch is None:
            rows = self._views.kafka_rows(topic, partition, version)
            batch = encode_batch(base, rows.timestamps, rows.keys, rows.values, rows.headers,
                                 partition_leader_epoch=epochs.epoch_at(version))
            self._cache.put(key, batch)
        return batch

    def list_offset(self, topic: str, partition: int, spec: int, *, read_committed: bool) -> tuple[int, int]:
        if spec < EARLIEST_PENDING_UPLOAD:
            raise InvalidValue(f"ListOffsets timestamp {spec} is neither a timestamp nor one of -1 to -5")
        start, end = self._views.watermarks(topic, partition)
        if spec in (EARLIEST, EARLIEST_LOCAL):
            return start, -1
        if spec == EARLIEST_PENDING_UPLOAD:
            return -1, -1
        fetchable = self._native.last_stable_offset(topic, partition) if read_committed else end
        lagging = self._views.epoch_start_above_hw(topic, partition)
        if spec == LATEST:
            if lagging is not None:
                raise OffsetNotAvailable(_lagging(topic, partition, lagging))
            return fetchable, -1
        found = self._views.max_timestamp(topic, partition) if spec == MAX_TIMESTAMP else (
            self._views.offset_for_timestamp(topic, partition, spec) if spec >= 0 else None
        )
        if found is not None and found[0] < fetchable:
            return found[0], found[1]
        if lagging is not None:  # its record may be in the tail past the high watermark: not known yet
            raise OffsetNotAvailable(_lagging(topic, partition, lagging))
        return -1, -1

    def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        start, end = self._views.watermarks(topic, partition)
        return PartitionOffsets(start, end, self._native.last_stable_offset(topic, partition))

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        return self._views.epoch_end(topic, partition, epoch)

    def end_holding(self, topic: str, partition: int, offset: int) -> int:
        return self._views.end_holding(topic, partition, offset)

    def producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        return self._native.active_producers(topic, partition)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self._native.delete_records(topic, partition, offset)

    def has(self, topic: str, partition: int) -> bool:
        return self._views.has_partition(topic, partition)

    def stats(self, keys: Iterable[tuple[str, int]] | None = None) -> list[PartitionStats]:
        return self._views.partition_stats(keys)


def _lagging(topic: str, partition: int, epoch_start: int) -> str:
    return (f"partition {topic}-{partition}: its high watermark is lagging behind the start of its leader epoch "
            f"(WAL version {epoch_start}): a leader just elected, not caught up yet; ask again")


def lost_batch(base: int, count: int, leader_epoch: int = LEADER_EPOCH) -> bytes:
    """What consumers read for ``count`` lost records from offset ``base``, appended in ``leader_epoch``: a control
    batch (a transaction COMMIT marker) at offset ``base + count - 1``, which clients skip, moving their position to
    ``base + count``. Its producer id is -1, which no transaction marker has (:func:`is_lost`)."""
    return end_txn_marker(-1, -1, 0, True, 0, base_offset=base, offset_delta=count - 1,
                          partition_leader_epoch=leader_epoch)


def is_lost(batch: DecodedBatch) -> bool:
    """Whether a batch :meth:`Partitions.read` served is a :func:`lost_batch` (a gap, no records of its own)."""
    return batch.is_control and batch.producer_id == -1
