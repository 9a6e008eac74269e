"""Decoding WAL entries whole: a follower's copy of its leader's entries before anything of them is written, and
what a restart replays.

:func:`walgate.storage.wal_verbatim.parse` checks what the WAL itself needs (checksums, a known format, versions
continuing the WAL, whole batches) and hands the run on: nothing here checks a checksum again. What a vnode derives
from its entries needs more: their bodies must decode the way a restart replays them
(:meth:`~walgate.storage.vnode.Vnode.apply_meta`, the topics' offset indexes, a Kafka-native partition's producer
state), or an entry would be written and then fail what follows it, leaving a WAL that the next open cannot replay.
:func:`decode_whole` decodes one entry when

* a meta entry's body is a JSON object with a string ``op``, and the fields :meth:`Vnode.apply_meta` reads for
  ``create_table`` (``name``, an integer ``ts``, ``columns`` absent or a list of columns), ``drop_table``
  (``name``) and ``drop_stable`` (``stable``) are there and of their types, and an ``alter_stable`` or
  ``drop_stable``'s ``of`` (its cluster catalog record) is absent or a non-negative integer;
* a data entry's body decodes into its blocks (:func:`~walgate.storage.entry.decode_entry`) holding exactly as
  many rows as the entry spans versions;
* a Kafka entry's body is one RecordBatch v2 (magic 2, its length field its size) spanning as many offsets as the
  entry counts (``lastOffsetDelta + 1``: a compacted batch keeps both);

and raises :class:`Undecodable` otherwise. :func:`checked_entries` accepts a follower's run only when, besides
``parse``'s checks, every entry decodes whole and every Kafka batch starts at or after the offset the partition's
next batch takes (``kafka_end``, then each batch's end: later only where the leader's cleaner removed whole
batches, a gap clients skip), since a follower serves the stored batch as it is, never rebased; otherwise it
raises :class:`~walgate.storage.wal_verbatim.EntriesRefused` naming the entry and the rule, and nothing is
written. A restart that finds an entry that does not decode whole in its WAL (a bug's: its checksums held)
reports it damaged and skips it (:meth:`Wal.damaged`), as it does an entry whose checksum fails. Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from walgate.storage.catalog import column_from_json
from walgate.storage.entry import DecodedEntry, decode_entry
from walgate.storage.errors import BadEntries
from walgate.storage.wal import KIND_DATA, KIND_KAFKA, KIND_META, WalEntry
from walgate.storage.wal_format import HEADER_SIZE
from walgate.storage.wal_verbatim import EntriesRefused, VerbatimRun
from walgate.wire import batch_header
from walgate.wire.errors import WireError

__all__ = ["CheckedEntry", "Undecodable", "checked_entries", "decode_whole"]

_BATCH_MAGIC = 2
_BATCH_LENGTH_START = 12  # a RecordBatch's length field counts the bytes after its base offset and itself
_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, OSError, struct.error, pa.ArrowException)  # OSError: a cut Arrow stream


class Undecodable(BadEntries, ValueError):
    """A WAL entry whose body does not decode whole (the message says why)."""


@dataclass(frozen=True, slots=True)
class CheckedEntry:
    """One entry of a checked run: as :meth:`Wal.read_from` gives it, and decoded."""

    entry: WalEntry
    decoded: DecodedEntry


def checked_entries(run: VerbatimRun, kafka_end: int | None) -> list[CheckedEntry]:
    """The entries of ``run`` (:func:`~walgate.storage.wal_verbatim.parse` checked their checksums and versions),
    each decoded, when every other check of the module docstring holds; EntriesRefused otherwise. ``kafka_end``:
    the offset the vnode's Kafka-native partition numbers its next batch (None: the vnode holds no such partition,
    whose offsets are then not checked)."""
    view = memoryview(run.raw)
    out: list[CheckedEntry] = []
    for e in run.entries:
        body = bytes(view[e.start + HEADER_SIZE : e.start + HEADER_SIZE + e.body_len])
        entry = WalEntry(e.version, e.count, e.kind, e.max_ts, body)
        where = f"the entry of version {e.version} (byte {e.start})"
        try:
            decoded = decode_whole(entry)
        except Undecodable as exc:
            raise EntriesRefused(f"{where}: {exc}") from None
        if e.kind == KIND_KAFKA and kafka_end is not None:
            if decoded.kafka_base < kafka_end:
                raise EntriesRefused(f"{where}: its batch's base offset {decoded.kafka_base} is below {kafka_end}, "
                                     "the partition's next offset")
            kafka_end = decoded.kafka_base + e.count
        out.append(CheckedEntry(entry, decoded))
    return out


def decode_whole(entry: WalEntry) -> DecodedEntry:
    """``entry`` decoded (:func:`~walgate.storage.entry.decode_entry`) when it decodes whole (the module
    docstring); Undecodable otherwise."""
    if entry.kind == KIND_KAFKA:
        _check_batch(entry.body, entry.count)
    try:
        decoded = decode_entry(entry)
        if entry.kind == KIND_META:
            _check_meta(decoded.meta)
    except _DECODE_ERRORS as exc:
        raise Undecodable(f"its body does not decode: {type(exc).__name__}: {exc}") from None
    if entry.kind == KIND_DATA and decoded.rows != entry.count:
        raise Undecodable(f"it spans {entry.count} versions but holds {decoded.rows} rows")
    return decoded


def _check_batch(body: bytes, count: int) -> None:
    """Undecodable unless ``body`` is one RecordBatch v2 spanning ``count`` offsets."""
    try:
        info = batch_header(body)
    except WireError as exc:
        raise Undecodable(f"not a record batch: {exc}") from None
    if info.magic != _BATCH_MAGIC or info.length != len(body) - _BATCH_LENGTH_START:
        raise Undecodable(f"not a record batch v2 of its {len(body)} bytes (magic {info.magic}, length "
                          f"{info.length})")
    if info.last_offset_delta + 1 != count:
        raise Undecodable(f"it spans {count} offsets but its batch's last offset delta is {info.last_offset_delta}")


def _check_meta(meta: Any) -> None:
    """Raise ValueError unless ``meta`` holds what :meth:`Vnode.apply_meta` reads of it."""
    if not isinstance(meta, dict) or not isinstance(meta.get("op"), str):
        raise ValueError("not a JSON object with a string op")
    op = meta["op"]
    if op in ("create_table", "drop_table") and not isinstance(meta.get("name"), str):
        raise ValueError(f"{op} without a string name")
    if op == "drop_stable" and not isinstance(meta.get("stable"), str):
        raise ValueError("drop_stable without a string stable")
    of = meta.get("of", 0)  # an ALTER/DROP STABLE's cluster catalog record (entries written before it have none)
    if op in ("alter_stable", "drop_stable") and (type(of) is not int or of < 0):
        raise ValueError(f"{op} whose record 'of' is {of!r}")
    if op == "create_table":
        ts = meta.get("ts")
        if not isinstance(ts, int) or isinstance(ts, bool):
            raise ValueError("create_table without an integer ts")
        columns = meta.get("columns")
        if columns is not None:
            if not isinstance(columns, list):
                raise ValueError("create_table whose columns are not a list")
            for column in columns:
                column_from_json(column)
