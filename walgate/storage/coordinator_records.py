"""A replicated coordinator partition's state as Kafka records: their codec, and their replay into the keyed logs.

In a cluster with ``replication.enable`` a coordinator partition is a partition of the internal topic
``__consumer_offsets`` (docs/plans/replication-wiring.md section 7) holding what a single node keeps in
``coordinator/offsets-<p>.log`` and ``transactions.log``: one Kafka record per line those files hold,

* key: the line's key as canonical JSON, the compact bytes :func:`record_key` writes and :func:`parse_key` alone
  accepts (the partition's log cleaner compares key bytes, so one key must have one encoding):
  ``["o", group, topic, partition]`` an offset commit, ``["g", group]`` a group record, ``["t", transactional id]``
  a transaction's state, ``["h", transactional id]`` the offsets the partition's groups hold for that id's
  transaction (its coordinator may be another partition's leader: Kafka's pending transactional offset commits),
  ``["s", group, topic key, partition]`` a share-partition's delivery state (KIP-932's ``__share_group_state``
  record, which a single node keeps in ``share_groups.log``: :mod:`walgate.storage.share_state_log`);
* value: the checksummed line (:mod:`walgate.storage.lines`, its ``\\n`` included) that the file log writes for
  that key (:func:`~walgate.storage.coordinator_log.record_line`,
  :func:`~walgate.storage.transactions_log.transaction_line`, :func:`~walgate.storage.share_state_log.share_line`), so a partition's values, concatenated, are a file
  log; or null, a tombstone: the key is deleted (``cleanup.policy=compact``: the cleaner drops a tombstone after
  ``delete.retention.ms``).

:func:`encode_records` makes one batch of such records (magic 2, uncompressed, base offset 0: the partition assigns
the offsets; producer id -1: no idempotence, no transaction).

Replay (:func:`replay_records`) reads one partition's batches, in offset order, into a
:class:`~walgate.storage.coordinator_log.CoordinatorLog` (offsets and group records) and a
:class:`~walgate.storage.transactions_log.TransactionLog` (the states, and the held offsets) and a
:class:`~walgate.storage.share_state_log.ShareStateLog` that have no file: a write on either raises before
anything changes; they change only by replay. Each record's line goes through the one replay step that also reads
the files (:meth:`KeyedLog._replay_line <walgate.storage.keyed_log.KeyedLog._replay_line>`: the log's ``_parse``
and ``_apply``), so a record is read as its line is (a tombstone, which has no line, goes to ``_apply`` alone):

* a batch that is truncated, fails its CRC, is not magic 2 or whose records do not parse is reported and skipped
  whole (the fetch path never stores one; a byte flipped on disk can make one), and the batches after it count;
  but a batch whose length runs past its chunk or is below a header's ends that chunk (reported: what follows it
  there cannot be told apart), as the length is not covered by the CRC;
* a record whose key does not parse, whose value is not a checksummed line of its key's log, or whose line records
  another key than its key is reported and skipped, as a damaged line is: its key keeps its previous value;
* a tombstone deletes its key;
* control batches are skipped: transaction markers, which coordinators never write, and lost entries
  (:func:`~walgate.storage.partitions.lost_batch`, a damaged WAL entry), which are reported: their records are gone;
* a transactional batch of data is reported and skipped (coordinator records are never written in a transaction);
* a record whose key is a JSON array tagged with a kind this version does not know (a later version's record) is
  skipped with a warning, as Kafka's coordinators skip an unknown record type while loading (KIP-915), so that a
  node can read a partition a newer node wrote.

A report names the batch's base offset (and the record's offset delta) and goes to the ``damage`` callback, or is
logged as a warning without one. Replay never raises for what the batches hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple, TypeVar

import orjson

from walgate.storage import lines
from walgate.storage.coordinator_log import Committed, CoordinatorLog, record_line
from walgate.storage.keyed_log import KeyedLog
from walgate.storage.partitions import is_lost
from walgate.storage.share_state_log import ShareStateLog, share_line
from walgate.storage.transactions_log import TransactionLog, transaction_line
from walgate.wire.errors import WireError
from walgate.wire.record_batch import BATCH_HEADER_SIZE, BATCH_PREFIX_SIZE, batch_prefix, decode_batch, encode_batch

__all__ = [
    "CoordinatorRecordKey",
    "ReplayedLogs",
    "UnknownRecordKind",
    "coordinator_record",
    "encode_records",
    "parse_key",
    "record_key",
    "replay_records",
]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

CoordinatorRecordKey = (tuple[Literal["o"], str, str, int] | tuple[Literal["g"], str]
                        | tuple[Literal["t"], str] | tuple[Literal["h"], str] | tuple[Literal["s"], str, str, int])
"""A record's key: ``("o", group, topic, partition)``, ``("g", group)``, ``("t", transactional id)``, ``("h",
transactional id)`` or ``("s", group, topic key, partition)``."""

_ARITY: Final = {"o": 4, "g": 2, "t": 2, "h": 2, "s": 4}
_OVERHEAD: Final = 12  # the base offset and batch length fields, which the batch length does not count


class UnknownRecordKind(ValueError):
    """A key that is a JSON array tagged with a kind this version does not know (a later version's record)."""


def record_key(key: CoordinatorRecordKey) -> bytes:
    """The canonical JSON of *key*; ValueError when it is no coordinator record key."""
    if not (isinstance(key, tuple) and _is_key(key)):
        raise ValueError(f"not a coordinator record key: {key!r}")
    try:
        return orjson.dumps(key)
    except orjson.JSONEncodeError as exc:  # a str that is not Unicode text (a lone surrogate), an int beyond 64 bits
        raise ValueError(f"not a coordinator record key: {key!r}: {exc}") from None


def parse_key(raw: bytes) -> CoordinatorRecordKey:
    """The key whose canonical JSON *raw* is; :class:`UnknownRecordKind` for a key of a kind this version does not
    know, ValueError for anything else that is not such a key (including another encoding of one)."""
    try:
        parts = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"key is not JSON: {exc}") from None
    if not (isinstance(parts, list) and parts and isinstance(parts[0], str)):
        raise ValueError(f"key {raw!r} is not a tagged JSON array")
    if parts[0] not in _ARITY:
        raise UnknownRecordKind(f"key of unknown kind {parts[0]!r}")
    if not _is_key(parts):
        raise ValueError(f"not a coordinator record key: {raw!r}")
    if orjson.dumps(parts) != raw:
        raise ValueError(f"key {raw!r} is not the canonical JSON of {parts!r}")
    key: CoordinatorRecordKey = tuple(parts)  # checked: _is_key
    return key


def _is_key(parts: tuple[Any, ...] | list[Any]) -> bool:
    """Whether *parts* are a coordinator record key's: a known tag, its arity, str names, an int partition."""
    arity = _ARITY.get(parts[0]) if parts and isinstance(parts[0], str) else None
    if arity != len(parts) or not isinstance(parts[1], str):
        return False
    return arity == 2 or (isinstance(parts[2], str) and type(parts[3]) is int)


def coordinator_record(key: CoordinatorRecordKey, value: Any) -> tuple[bytes, bytes | None]:
    """The (key, value) record of *value* for *key*: a :class:`~walgate.storage.coordinator_log.Committed` for an
    offset key, the group's JSON value for a group key, the transaction's state (a JSON object) for a transaction
    key, the share-partition's (:meth:`SharePartition.to_record
    <walgate.coordinator.share_partition.SharePartition.to_record>`) for a share key; None, a tombstone (null
    value), deletes the key. ValueError when *key* is no coordinator record key."""
    raw = record_key(key)
    if value is None:
        return raw, None
    if key[0] == "o":
        if not isinstance(value, Committed):
            raise ValueError(f"an offset commit's value is a Committed, not {value!r}")
        return raw, record_line((key[1], key[2], key[3]), value)
    if key[0] == "g":
        return raw, record_line(key[1], value)
    if key[0] == "s":
        return raw, share_line((key[1], key[2], key[3]), value)
    return raw, transaction_line(key[1], value)


def encode_records(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One RecordBatch v2 (uncompressed, base offset 0, producer id -1) of *records* (key, value or None: a
    tombstone), each timestamped *timestamp_ms*; ValueError for no records or a negative timestamp."""
    return encode_batch(0, [timestamp_ms] * len(records), [k for k, _ in records], [v for _, v in records])


class ReplayedLogs(NamedTuple):
    """One coordinator partition's state replayed from its records: the logs have no file (see the module
    docstring)."""

    offsets: CoordinatorLog
    transactions: TransactionLog
    held: TransactionLog
    shares: ShareStateLog


def replay_records(batches: Iterable[bytes], damage: Callable[[str], None] | None = None,
                   into: ReplayedLogs | None = None) -> ReplayedLogs:
    """Replay *batches* (each one or more whole record batches of one coordinator partition, in offset order) into
    *into* (records appended since an earlier replay) or new logs, and return them; what is damaged is reported to
    *damage* (a warning logged without it) and skipped, as the module docstring says. Never raises for their
    bytes."""
    logs = ReplayedLogs(CoordinatorLog(None), TransactionLog(None), TransactionLog(None), ShareStateLog(None)) \
        if into is None else into
    report = damage if damage is not None else _warn
    for chunk in batches:
        for base, batch in _split(chunk, report):
            _replay_batch(logs, base, batch, report)
    return logs


def _warn(message: str) -> None:
    log.warning("coordinator partition: %s", message)


def _split(chunk: bytes, report: Callable[[str], None]) -> Iterable[tuple[int, bytes]]:
    """(base offset, bytes) of each whole batch of *chunk*; what follows the last whole one is reported."""
    pos = 0
    while pos < len(chunk):
        if len(chunk) - pos < BATCH_PREFIX_SIZE:
            report(f"{len(chunk) - pos} bytes after the batches are no batch; skipped")
            return
        base, length, _ = batch_prefix(chunk[pos : pos + BATCH_PREFIX_SIZE])
        end = pos + _OVERHEAD + length
        if length < BATCH_HEADER_SIZE - _OVERHEAD or end > len(chunk):
            what = "truncated" if end > len(chunk) else "shorter than its header"
            report(f"batch at offset {base}: {what} ({len(chunk) - pos} bytes left, its length says "
                   f"{_OVERHEAD + length}); the {len(chunk) - pos} bytes from it are skipped")
            return
        yield base, chunk[pos:end]
        pos = end


def _replay_batch(logs: ReplayedLogs, base: int, batch: bytes, report: Callable[[str], None]) -> None:
    try:
        decoded = decode_batch(batch)
    except WireError as exc:
        report(f"batch at offset {base}: {exc}; its records are skipped")
        return
    if decoded.magic != 2:
        report(f"batch at offset {base}: magic {decoded.magic}, not a record batch v2; skipped")
        return
    if decoded.is_control:
        if is_lost(decoded):
            report(f"batch at offset {base}: records up to offset {base + decoded.last_offset_delta} are lost "
                   "(a damaged WAL entry); their keys keep their previous values")
        return
    if decoded.is_transactional:
        report(f"batch at offset {base}: a transactional batch (producer id {decoded.producer_id}); coordinator "
               "records are never written in a transaction; skipped")
        return
    unknown: set[str] = set()
    for record in decoded.records:
        where = f"batch at offset {base}, record at offset delta {record.offset - base}"
        try:
            _replay_record(logs, record.key, record.value)
        except UnknownRecordKind as exc:
            unknown.add(str(exc))
        except ValueError as exc:
            report(f"{where}: {exc}; skipped, its key keeps its previous value")
    if unknown:
        log.warning("coordinator partition, batch at offset %d: skipped records of a later version (%s)", base,
                    "; ".join(sorted(unknown)))


def _replay_record(logs: ReplayedLogs, raw_key: bytes | None, value: bytes | None) -> None:
    """Apply one record through its log's replay step; ValueError saying why (nothing applied) when it is not a
    coordinator record, :class:`UnknownRecordKind` for one of a later version."""
    if raw_key is None:
        raise ValueError("a record without a key")
    key = parse_key(raw_key)
    if value is not None and not value.endswith(b"\n"):
        raise ValueError("the value is not a whole line (no terminating newline)")
    if key[0] == "t":
        _replay_into(logs.transactions, key[1], value)
    elif key[0] == "h":
        _replay_into(logs.held, key[1], value)
    elif key[0] == "g":
        _replay_into(logs.offsets, key[1], value)
    elif key[0] == "s":
        _replay_into(logs.shares, (key[1], key[2], key[3]), value)
    else:
        _replay_into(logs.offsets, (key[1], key[2], key[3]), value)


def _replay_into(target: KeyedLog[K, Any], key: K, value: bytes | None) -> None:
    """*value* (a whole line, or None: a tombstone) as the newest of *key* in *target*; ValueError as
    :func:`_replay_record`."""
    if value is None:  # no line
        target._apply([(key, None)])
    else:
        target._replay_line(lines.decode(value[:-1]), key)


