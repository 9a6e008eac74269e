"""Domain errors of the storage engine.

Every error the engine raises for bad input is a :class:`StorageError` carrying
a TDengine-style numeric ``code`` (the REST API returns it as ``code``) and a
message that names the offending statement, line or row. The gateway maps
these to HTTP/Kafka errors at its edge; nothing here knows about either.

    StorageError
    ├── SqlSyntaxError        statement does not parse
    ├── InvalidValue          value / type mismatch, bad timestamp, bad option
    │   └── BatchDropStable   a DROP TABLE naming a supertable among other names
    ├── NotFound              unknown database / table / stable / topic
    ├── AlreadyExists         object exists (and no IF NOT EXISTS)
    ├── LineProtocolError     InfluxDB line protocol that does not parse or fit
    ├── CsvError              CSV row with wrong arity or bad value
    ├── RequestTooLarge       request above the configured maximum
    ├── Unsupported           valid SQL that walgate does not do (e.g. aggregates in a topic)
    ├── OffsetOutOfRange      an offset outside a partition's log
    ├── OffsetNotAvailable    a replicated partition's leader just elected, its high watermark not yet past the
    │                         start of its leader epoch, asked for its latest offset (KIP-207); retriable
    ├── LimitExceeded         a configured limit (partitions, open files, sizes) would be exceeded
    ├── QueryCancelled        a running query stopped (its client went away, or it ran past its time limit)
    ├── NotHere               (cluster mode) a vgroup the request needs is placed on another node; ``node`` names it
    │   └── NotLedNow         a replicated vgroup this node holds but does not lead now (no leader, or mid-failover)
    ├── StorageUnavailable    the disk refused a write (ENOSPC, EIO, failed fsync): nothing of the request was
    │   │                     kept (unless ``maybe_applied``); retriable, and service resumes by itself once the disk
    │   │                     accepts writes again
    │   ├── ClusterUnavailable  (cluster mode) the cluster's catalog did not take a change: no controller or no etcd
    │   │                     quorum answered in time; retriable
    │   ├── NotAcknowledged   a write appended to a replicated vnode its in-sync replicas did not acknowledge in time
    │   │                     (acks=all): it may be kept or lost; retriable
    │   └── NotEnoughReplicas  a replicated vnode's ISR is below ``min.insync.replicas``: nothing written; retriable
    ├── SequenceError         (producers.py) a produced batch the idempotence rules refuse; ``error_code`` is
    │                         the Kafka error (Produce answers it)
    └── UnsupportedFormat     (datadir.py) a data dir written by a newer walgate

Outside the tree, :class:`CorruptEntry` (an ``Exception``, also importable from :mod:`walgate.storage.wal`) says a WAL
entry was lost or is damaged: readers skip it as a gap in the offsets, never answer it as an error of the request.

:data:`ERROR_CODES` is this domain's table (exception class -> Kafka error code, most specific first along an
exception's MRO), merged with the other domains' at the gateway's edge (``gateway/kafka/handlers/common.py``), where
the APIs that answer differently override it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from walgate.wire.errors import ErrorCode

__all__ = [
    "ERROR_CODES",
    "BadEntries",
    "CorruptEntry",
    "MetaDamaged",
    "StorageError",
    "SqlSyntaxError",
    "InvalidValue",
    "NotFound",
    "AlreadyExists",
    "LineProtocolError",
    "CsvError",
    "RequestTooLarge",
    "Unsupported",
    "TopicCollision",
    "OffsetOutOfRange",
    "OffsetNotAvailable",
    "LimitExceeded",
    "StorageUnavailable",
    "ClusterUnavailable",
    "NotAcknowledged",
    "QueryCancelled",
    "NotHere",
    "NotLedNow",
    "NotEnoughReplicas",
    "BatchDropStable",
    "table_not_found",
]


class StorageError(Exception):
    """Base of all engine errors; ``code`` is TDengine-style."""

    code = 0x2600

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SqlSyntaxError(StorageError):
    code = 0x2600  # TSDB_CODE_PAR_SYNTAX_ERROR


class InvalidValue(StorageError):
    code = 0x2608  # TSDB_CODE_PAR_WRONG_VALUE_TYPE


class TopicCollision(InvalidValue):
    """A new topic's name differs from an existing one's only in ``.`` against ``_`` (Kafka's
    INVALID_TOPIC_EXCEPTION: their metric names would be the same)."""


class BatchDropStable(InvalidValue):
    """A DROP TABLE naming a supertable among other names (TDengine refuses it too): nothing is dropped."""

    code = 0x263A  # TSDB_CODE_PAR_INVALID_DROP_STABLE ("Cannot drop super table in batch")


class NotFound(StorageError):
    code = 0x2662  # TSDB_CODE_PAR_TABLE_NOT_EXIST (also used for db/topic)


def table_not_found(db: str, table: str) -> NotFound:
    """The error of table ``table`` of database ``db`` not existing, worded alike wherever it is found missing."""
    return NotFound(f"Table does not exist: {db}.{table}")


class AlreadyExists(StorageError):
    code = 0x0602  # TSDB_CODE_TDB_TABLE_ALREADY_EXIST


class LineProtocolError(StorageError):
    code = 0x3000  # TSDB_CODE_SML_INVALID_DATA


class CsvError(StorageError):
    code = 0x3001


class RequestTooLarge(StorageError):
    code = 0x2609


class Unsupported(StorageError):
    code = 0x2610


class OffsetOutOfRange(StorageError):
    """An offset outside a partition's log (DeleteRecords beyond the high watermark)."""


class LimitExceeded(StorageError):
    """A configured limit would be exceeded (partitions, open files, expression depth, statement size)."""

    code = 0x0388  # TSDB_CODE_MND_TOO_MANY_VGROUPS-style: the request is valid but over a limit


class StorageUnavailable(StorageError):
    """The disk refused a durable write (ENOSPC, EIO, a failed fsync): nothing of the request was kept.

    Retriable: the gateway answers KAFKA_STORAGE_ERROR (Produce), NOT_COORDINATOR (OffsetCommit, as Kafka's group
    coordinator maps a failed offsets append) and HTTP 503; the vnode resumes by itself once writes succeed again."""

    code = 0x0021  # "No enough disk space" (TDengine's TSDB_CODE_NO_ENOUGH_DISKSPACE message)
    maybe_applied = False
    """Whether the request may have been done all the same (the HTTP answer's ``outcome`` is then ``unknown``, and a
    part of a write spanning nodes is reported "outcome unknown", not "NOT written")."""


class NoLeader(StorageUnavailable):
    """A replicated vgroup (``REPLICA n``, issue 25) has no leader now (its partition state not made yet, or no
    replica eligible: an election waits for one): nothing was done. Retriable (HTTP 503), as TDengine's
    TSDB_CODE_SYN_NOT_LEADER, whose message the text begins with."""

    code = 0x090C  # TDengine's TSDB_CODE_SYN_NOT_LEADER ("Sync leader is unreachable")


class ClusterUnavailable(StorageUnavailable):
    """Cluster mode: the cluster's catalog did not take a change (no controller elected, or etcd has no quorum, within
    the time allowed); the message says whether it may still be applied, and so does ``maybe_applied`` (then the
    HTTP answer's ``outcome`` is ``unknown``). Retriable: HTTP 503; Kafka's admin APIs answer REQUEST_TIMED_OUT, as
    Kafka's when its controller does not answer."""

    code = 0x0021  # walgate answers it as StorageUnavailable's code: the change could not be made durable

    def __init__(self, message: str, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class OffsetNotAvailable(StorageError):
    """ListOffsets of a replicated partition's latest offset (or of a timestamp past its last fetchable record) asked
    of a leader just elected whose high watermark has not reached the start of its leader epoch yet: its high
    watermark may be below its predecessor's, and offsets answered must not go back across a leader change (KIP-207,
    Kafka's ``Partition.fetchOffsetForTimestamp``). Retriable: the client asks again."""

    code = 0x0903  # TDengine's TSDB_CODE_SYN_TIMEOUT: the replicas have not agreed on it yet


class QueryCancelled(StorageError):
    """A running query was stopped: its client went away, or it ran past the statement time limit."""

    code = 0x022D  # TDengine's TSDB_CODE_TSC_QUERY_KILLED ("Query killed")


class NotHere(StorageError):
    """A vgroup the request needs is placed on node ``node``, not on this one (cluster mode, docs/cluster.md):
    nothing of the request was done here. Kafka answers it as NOT_LEADER_OR_FOLLOWER."""

    code = 0x090C  # TDengine's TSDB_CODE_SYN_NOT_LEADER

    def __init__(self, message: str, node: int) -> None:
        super().__init__(message)
        self.node = node


class NotLedNow(NotHere):
    """A write to replicated vgroup ``vgroup`` of database ``db`` (id ``db_id``), held here but not led by this node
    now: no leader is elected, or its leadership is moving (issue 25). Retriable: the gateway sends it to the leader
    when there is one, else answers HTTP 503 (a client retries it; a 4xx would make many drop it); Kafka answers
    NOT_LEADER_OR_FOLLOWER, as for any :class:`NotHere`."""

    def __init__(self, message: str, node: int, db: str, db_id: str, vgroup: int) -> None:
        super().__init__(message, node)
        self.db, self.db_id, self.vgroup = db, db_id, vgroup


class NotAcknowledged(StorageUnavailable):
    """A write appended to the replicated vnodes this node leads that their in-sync replicas did not acknowledge
    (acks=all, issue 25): the high watermark did not pass it in time, or this node stopped leading the vnode first.
    It may be kept or lost (``maybe_applied``: in the leader's log, usually kept by the next leader too), as a Kafka
    producer's timed-out acks=all write. Retriable (HTTP 503)."""

    code = 0x0021  # answered as StorageUnavailable's code, as before it had a class of its own
    maybe_applied = True


class NotEnoughReplicas(StorageUnavailable):
    """A write whose caller waits for the in-sync replicas (acks=all) refused before its append: the vnode's ISR has
    fewer than ``min.insync.replicas`` members (Kafka's NOT_ENOUGH_REPLICAS, checked first by
    ``Partition.appendRecordsToLeader``). Nothing written; retriable (HTTP 503)."""

    code = 0x0903  # TDengine's TSDB_CODE_SYN_TIMEOUT ("Sync timeout": its write would not be agreed on)


class CorruptEntry(Exception):
    """An entry failed its CRC check, or the version asked for lies in a lost range (a gap)."""


class BadEntries(Exception):
    """WAL entries that are not what a WAL may hold, whatever their checksums say: a follower's copy of its leader's
    entries refused before anything of it is written (:class:`walgate.storage.wal_verbatim.EntriesRefused`), or an
    entry whose body does not decode (:class:`walgate.storage.entry_check.Undecodable`)."""


class MetaDamaged(Exception):
    """A vnode's meta store is not what it should be (the message says how); the vnode reports it and rebuilds the
    store from the WAL (:mod:`walgate.storage.meta_store`), so it never reaches a client."""


ERROR_CODES: Final[Mapping[type[BaseException], ErrorCode]] = {
    NotFound: ErrorCode.unknown_topic_or_partition,
    NotHere: ErrorCode.not_leader_or_follower,
    NotEnoughReplicas: ErrorCode.not_enough_replicas,
    TopicCollision: ErrorCode.invalid_topic_exception,  # Kafka refuses the name, also when auto-creating it
    OffsetOutOfRange: ErrorCode.offset_out_of_range,
    OffsetNotAvailable: ErrorCode.offset_not_available,
    ClusterUnavailable: ErrorCode.request_timed_out,
    NotAcknowledged: ErrorCode.request_timed_out,  # as Kafka answers an acks=all write its ISR did not take in time
    StorageUnavailable: ErrorCode.kafka_storage_error,
    LimitExceeded: ErrorCode.policy_violation,
    StorageError: ErrorCode.invalid_request,  # input the engine refused
    CorruptEntry: ErrorCode.corrupt_message,  # stored data that fails its checksum
    BadEntries: ErrorCode.corrupt_message,  # entries that are not a WAL's, as Kafka answers records that are not valid
    MetaDamaged: ErrorCode.kafka_storage_error,  # (caught by the vnode, which rebuilds the store)
    OSError: ErrorCode.kafka_storage_error,  # as Kafka answers an IOException of its log
}
"""The storage domain's errors as Kafka answers them (see the module docstring)."""
