"""Checking WAL entries a follower copies from its leader, before :meth:`Wal.append_verbatim` writes them as they are.

A follower's WAL holds the leader's entries byte for byte (docs/plans/replication-wiring.md, step 4): the same
36-byte headers (:mod:`walgate.storage.wal_format`), the same bodies, the same versions. What it is handed is a
run of whole entries read from the leader's segments, which the network or the leader's disk may have damaged, and
which must continue the follower's WAL exactly. :func:`parse` accepts such a run only when

* every header's CRC32C and every body's CRC32C hold;
* every entry is of a kind this release knows, with no flag or reserved bit it does not know (an entry of a newer
  format is refused, never written as if understood);
* the first entry's version is the follower's ``next_version`` and each next entry's is the previous one's
  version plus its count (no gap, no overlap), each count at least 1;
* the bytes end exactly at an entry's end (no partial entry), and that entry ends a batch (its "more" flag clear):
  one local :meth:`Wal.append` is one batch, which recovery keeps whole or drops whole, so a follower is never
  handed, nor serves, part of one.

Otherwise it raises :class:`EntriesRefused` naming the byte and the rule, and nothing is written. What it accepts
is a :class:`VerbatimRun` (walgate makes one nowhere else): every byte of it checksummed once, here; what takes a run
(:func:`walgate.storage.entry_check.checked_entries`, :meth:`Wal.append_verbatim`) checks no checksum again. Pure:
no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import crc32c

from walgate.storage.errors import BadEntries
from walgate.storage.wal_format import FLAG_MORE, HEADER, HEADER_SIZE, KINDS

__all__ = ["EntriesRefused", "VerbatimEntry", "VerbatimRun", "parse"]


class EntriesRefused(BadEntries, ValueError):
    """Entries handed to :meth:`Wal.append_verbatim` that it must not write (the message names the byte and the
    rule); nothing of them was written."""


@dataclass(frozen=True, slots=True)
class VerbatimEntry:
    """One checked entry of a run: where it starts in the run, and its header's fields."""

    start: int  # byte position of its header in the run
    kind: int
    flags: int
    version: int
    count: int
    max_ts: int
    body_len: int


@dataclass(frozen=True, slots=True)
class VerbatimRun:
    """A run of whole entries :func:`parse` accepted: its bytes, the version it starts at and its entries (none for
    empty bytes)."""

    raw: bytes
    first_version: int
    entries: tuple[VerbatimEntry, ...]


def parse(raw: bytes, first_version: int) -> VerbatimRun:
    """The run ``raw``, which must be whole entries continuing a WAL whose next version is ``first_version`` (see
    the module docstring: every header's and body's CRC32C is checked here); EntriesRefused otherwise."""
    view = memoryview(raw)
    entries: list[VerbatimEntry] = []
    pos = 0
    expected = first_version
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            raise EntriesRefused(f"a partial entry at byte {pos}: {len(view) - pos} bytes, less than a header")
        header_crc, body_len, body_crc, kind, flags, reserved, version, count, max_ts = HEADER.unpack_from(view, pos)
        if crc32c.crc32c(view[pos + 4 : pos + HEADER_SIZE]) != header_crc:
            raise EntriesRefused(f"the entry at byte {pos}: header checksum mismatch")
        if kind not in KINDS or flags & ~FLAG_MORE or reserved:
            raise EntriesRefused(f"the entry at byte {pos} (version {version}) is of a newer format (kind {kind}, "
                                 f"flags {flags:#x}, reserved {reserved:#x}) than this walgate writes")
        if version != expected:
            what = "a gap" if version > expected else "an overlap"
            raise EntriesRefused(f"the entry at byte {pos} has version {version} where {expected} continues the "
                                 f"WAL ({what})")
        if count < 1:
            raise EntriesRefused(f"the entry at byte {pos} (version {version}) spans {count} versions")
        body = pos + HEADER_SIZE
        if len(view) - body < body_len:
            raise EntriesRefused(f"a partial entry at byte {pos} (version {version}): {len(view) - body} of its "
                                 f"{body_len} body bytes")
        if crc32c.crc32c(view[body : body + body_len]) != body_crc:
            raise EntriesRefused(f"the entry at byte {pos} (version {version}): body checksum mismatch")
        entries.append(VerbatimEntry(pos, kind, flags, version, count, max_ts, body_len))
        pos = body + body_len
        expected = version + count
    if entries and entries[-1].flags & FLAG_MORE:
        raise EntriesRefused(f"the entries end inside a batch: the entry at byte {entries[-1].start} (version "
                             f"{entries[-1].version}) says more of its batch follow")
    return VerbatimRun(raw, first_version, tuple(entries))
