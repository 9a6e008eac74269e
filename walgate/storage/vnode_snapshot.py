"""A vnode's snapshot: what a follower whose copy ends below its leader's log start needs besides the WAL it then
fetches (docs/plans/vnode-snapshot.md, step 1: TDengine's vnode snapshot, ``vnodeSnapReaderOpen``).

A follower derives its tables (the meta store), each TDengine topic's offset index and its epoch cache from the WAL
it copies (:mod:`walgate.storage.replicated`); started at the leader's log start ``S0`` it lacks the meta entries
below ``S0`` and the offset each topic had reached there. The leader's meta store is its state at its own end ``L``
(drops and tag changes after ``S0`` are applied in place), so the snapshot is taken at ``L``, on the vnode's lane
(no append between its parts: one consistent point), by :func:`write`:

1. the WAL is fsynced and the meta store flushed and fsynced as of ``L`` (:meth:`Vnode.checkpoint
   <walgate.storage.vnode.Vnode.checkpoint>`: ``covered == L``, its ``ofs`` pairs of ALTER/DROP STABLE entries with
   it), so the snapshot never holds an entry a leader's crash could take back;
2. ``meta.db``: SQLite's online backup of the store (``sqlite3.Connection.backup``), its rows, covered line and undo
   journal as of ``L``;
3. ``leader-epoch-checkpoint``: the vnode's epoch cache up to ``L`` (:mod:`walgate.storage.leader_epochs`' format),
   its entries from ``S0`` on, the one in force at ``S0`` moved to start there (as Kafka's
   ``LeaderEpochFileCache.truncateFromStart`` does at a new log start);
4. ``topics/<topic id>.oidx``: each topic's offset index records (:mod:`walgate.storage.offsets`' format) of the
   entries in ``[S0, L)``; the manifest names each topic's log start offset and its end offset at ``L`` (a topic
   with no record in ``[S0, L)`` still numbers on from there);
5. ``manifest``: one checksummed line (:mod:`walgate.storage.lines`) naming the snapshot id, ``S0``, ``L``, each
   file's name, size and CRC-32C, and each topic's offsets.

Sealed WAL segments are immutable and not copied: the follower fetches ``[S0, L)`` with WalFetch. The snapshot lives
in ``snapshots/<id>/`` beside the database's vnodes, without fsyncs (the leader keeps it only while a follower pages
it, in memory: a start removes every snapshot left, :func:`remove_all`).

The stream a follower pages (:func:`read`): the manifest's line, then each file's bytes in the manifest's order;
:attr:`Manifest.total_bytes` long. The follower checks the manifest's checksum, then each file's size and CRC-32C
(:class:`Staging`), so a flipped or missing byte anywhere is found before anything is installed.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import crc32c

from walgate.replication.epochs import EpochEntry
from walgate.storage import fileio, leader_epochs, lines
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE
from walgate.storage.offsets import OffsetIndex, pack_record
from walgate.storage.vnode import Vnode

__all__ = ["MANIFEST", "MANIFEST_MAX", "SNAPSHOTS", "Manifest", "SnapshotFile", "TopicOffsets", "read",
           "remove_all", "write"]

SNAPSHOTS = "snapshots"
"""The directory of a database's snapshots, beside its vnodes."""
MANIFEST = "manifest"
MANIFEST_MAX = 16 << 20
"""The longest manifest line a follower takes (a vnode's topics are few; a hostile or damaged length is refused)."""
_CHUNK = 1 << 20  # bytes read at a time when a file's CRC is computed


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot: its path inside the snapshot's directory, its size and CRC-32C."""

    name: str
    size: int
    crc: int


@dataclass(frozen=True)
class TopicOffsets:
    """A topic over the vnode at the snapshot's end: its log start offset and its end offset (the next to assign)."""

    topic_id: str
    log_start: int
    end_offset: int


@dataclass(frozen=True)
class Manifest:
    """A snapshot of a vnode at ``end_version`` (``L``) whose leader's WAL starts at ``start_version`` (``S0``)."""

    snapshot_id: str
    start_version: int
    end_version: int
    files: tuple[SnapshotFile, ...]
    topics: tuple[TopicOffsets, ...]

    def encode(self) -> bytes:
        """The manifest's line (ending in ``\\n``, none inside)."""
        return lines.encode({"id": self.snapshot_id, "start": self.start_version, "end": self.end_version,
                             "files": [[f.name, f.size, f.crc] for f in self.files],
                             "topics": [[t.topic_id, t.log_start, t.end_offset] for t in self.topics]})

    @property
    def total_bytes(self) -> int:
        """The length of the stream :func:`read` pages."""
        return len(self.encode()) + sum(f.size for f in self.files)

    @classmethod
    def decode(cls, line: bytes) -> Manifest:
        """The manifest of ``line`` (without its ``\\n``); ValueError saying what is wrong: a checksum that does not
        verify, a shape that is not a manifest's, a file name that would leave the snapshot's directory."""
        d = lines.decode(line)
        if not isinstance(d, dict):
            raise ValueError("a manifest is not an object")
        sid, start, end, files, topics = (d.get(k) for k in ("id", "start", "end", "files", "topics"))
        if (not isinstance(sid, str) or not sid.isalnum() or type(start) is not int or type(end) is not int
                or not 0 <= start <= end or not isinstance(files, list) or not isinstance(topics, list)):
            raise ValueError(f"manifest {sid!r} [{start!r}, {end!r})")
        out_files = []
        for f in files:
            if (not isinstance(f, list) or len(f) != 3 or not isinstance(f[0], str) or not _safe(f[0])
                    or any(type(x) is not int or x < 0 for x in f[1:])):
                raise ValueError(f"manifest file {f!r}")
            out_files.append(SnapshotFile(f[0], f[1], f[2]))
        if len({f.name for f in out_files}) != len(out_files):
            raise ValueError("a file named twice")
        out_topics = []
        for t in topics:
            if (not isinstance(t, list) or len(t) != 3 or not isinstance(t[0], str) or not t[0].isalnum()
                    or any(type(x) is not int or x < 0 for x in t[1:]) or t[1] > t[2]):
                raise ValueError(f"manifest topic {t!r}")
            out_topics.append(TopicOffsets(t[0], t[1], t[2]))
        return cls(sid, start, end, tuple(out_files), tuple(out_topics))


def _safe(name: str) -> bool:
    """Whether ``name`` is a snapshot's file (``meta.db``, the epoch file, ``topics/<hex>.oidx``), never a path out."""
    if name in (META_STORE, leader_epochs.EPOCH_FILE):
        return True
    head, _, tail = name.partition("/")
    return head == "topics" and tail.endswith(".oidx") and tail[:-5].isalnum()


def _epochs_from(entries: tuple[EpochEntry, ...], start: int, end: int) -> tuple[EpochEntry, ...]:
    """The epoch cache's entries of the versions ``[start, end)``: the one in force at ``start`` moved to start
    there, the later ones below ``end`` as they are."""
    out: list[EpochEntry] = []
    for e in entries:
        if e.start_offset >= end and out:
            break
        if e.start_offset <= start:
            out = [EpochEntry(e.epoch, start)]
        else:
            out.append(e)
    return tuple(out)


def _write_file(path: Path, data: bytes) -> SnapshotFile:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fileio.write_all(fd, data)
    finally:
        os.close(fd)
    return SnapshotFile("", len(data), crc32c.crc32c(data))


def _crc_of(path: Path) -> SnapshotFile:
    crc, size = 0, 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            crc, size = crc32c.crc32c(chunk, crc), size + len(chunk)
    return SnapshotFile("", size, crc)


def write(vnode: Vnode, topics: Mapping[str, OffsetIndex], root: Path, snapshot_id: str) -> Manifest:
    """Write the snapshot ``snapshot_id`` (hex) of ``vnode`` into ``root / snapshot_id`` (the module docstring),
    ``topics`` the offset index of each topic over the vnode by topic id (hex). On the vnode's lane: nothing is
    appended meanwhile. StorageUnavailable, nothing left behind, when the disk refuses (the WAL's fsync, the meta
    store's checkpoint, a file of the snapshot) or an index is behind the WAL (the caller tries again later)."""
    directory = root / snapshot_id
    vnode.wal.sync()
    vnode.checkpoint()
    start, end = vnode.wal.first_version, vnode.wal.next_version
    behind = [t for t, idx in topics.items() if idx.indexed_to < end]
    if behind:
        raise StorageUnavailable(f"{vnode.dir}: the offset index of topic {behind[0]} is behind the WAL's end {end}")
    try:
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "topics").mkdir(parents=True)
        files = [_backup(vnode, directory / META_STORE)]
        files.append(_write_file(directory / leader_epochs.EPOCH_FILE,
                                 leader_epochs.encode(_epochs_from(vnode.epochs.entries, start, end))))
        files[-1] = SnapshotFile(leader_epochs.EPOCH_FILE, files[-1].size, files[-1].crc)
        offsets = []
        for topic_id, idx in sorted(topics.items()):
            name = f"topics/{topic_id}.oidx"
            records = b"".join(pack_record(o, v, c, r) for o, v, c, r in idx.records_between(start, end))
            written = _write_file(directory / name, records)
            files.append(SnapshotFile(name, written.size, written.crc))
            offsets.append(TopicOffsets(topic_id, idx.start_offset, idx.end_offset))
        manifest = Manifest(snapshot_id, start, end, tuple(files), tuple(offsets))
        _write_file(directory / MANIFEST, manifest.encode())
        return manifest
    except (OSError, sqlite3.Error, StorageUnavailable) as exc:
        shutil.rmtree(directory, ignore_errors=True)
        if isinstance(exc, StorageUnavailable):
            raise
        raise StorageUnavailable(f"{directory}: the snapshot cannot be written: {exc}") from None


def _backup(vnode: Vnode, path: Path) -> SnapshotFile:
    """SQLite's online backup of the vnode's meta store at ``path`` (one consistent read of it)."""
    vnode.store.backup_to(path)
    made = _crc_of(path)
    return SnapshotFile(META_STORE, made.size, made.crc)


def read(directory: Path, manifest: Manifest, offset: int, max_bytes: int) -> bytes:
    """At most ``max_bytes`` (at least 1) of the stream of snapshot ``manifest`` in ``directory`` from ``offset``
    (the module docstring): empty at or past its end. OSError when a file cannot be read (a snapshot removed
    meanwhile: the follower begins again), ValueError when ``offset`` is negative."""
    if offset < 0:
        raise ValueError(f"offset {offset}")
    head = manifest.encode()
    out = bytearray()
    want = max(1, max_bytes)
    if offset < len(head):
        out += head[offset: offset + want]
    at = len(head)
    for f in manifest.files:
        if len(out) >= want:
            break
        begin = max(offset + len(out), at)
        if begin < at + f.size:
            with (directory / f.name).open("rb") as fh:
                fh.seek(begin - at)
                out += fh.read(min(want - len(out), at + f.size - begin))
        at += f.size
    return bytes(out)


def remove_all(db_dir: Path) -> None:
    """Remove every snapshot of the database in ``db_dir`` (a start's: no follower pages one across a restart)."""
    shutil.rmtree(db_dir / SNAPSHOTS, ignore_errors=True)
