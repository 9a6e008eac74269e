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
3. ``topics/<topic id>.oidx``: each topic's offset index records (:mod:`walgate.storage.offsets`' format) of the
   entries in ``[S0, L)``; the manifest names each topic's log start offset and its end offset at ``L`` (a topic
   with no record in ``[S0, L)`` still numbers on from there);
4. ``manifest``: one checksummed line (:mod:`walgate.storage.lines`) naming the snapshot id, ``S0``, ``L``, each
   file's name, size and CRC-32C, and each topic's offsets.

Sealed WAL segments are immutable and not copied: the follower fetches ``[S0, L)`` with WalFetch, and its
leader-epoch cache is built from those entries (each answer's epoch) as a Kafka-native copy started at the log start
builds its own: the epoch cache is not part of the snapshot. The snapshot lives
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
from typing import TYPE_CHECKING

import crc32c

from walgate.storage import fileio, lines
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE
from walgate.storage.names import is_topic_id
from walgate.storage.offsets import OffsetIndex, pack_record

if TYPE_CHECKING:
    from walgate.storage.vnode import Vnode

__all__ = ["MANIFEST", "MANIFEST_MAX", "RESTORING", "SNAPSHOTS", "STAGING", "Manifest", "SnapshotFile", "Staging",
           "TopicOffsets", "finish_restoring", "prepare_install", "read", "read_restoring", "remove_all", "verify",
           "write"]

SNAPSHOTS = "snapshots"
"""The directory of a database's snapshots, beside its vnodes."""
MANIFEST = "manifest"
STAGING = ".snapshot"
"""The suffix of the directory a follower stages a vnode's snapshot in (``vnode<i>.snapshot/``): a crash leaves it,
the vnode's next open removes it (:meth:`Store.open_database <walgate.storage.store.Store.open_database>`)."""
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
            if (not isinstance(t, list) or len(t) != 3 or not is_topic_id(t[0])
                    or any(type(x) is not int or x < 0 for x in t[1:]) or t[1] > t[2]):
                raise ValueError(f"manifest topic {t!r}")
            out_topics.append(TopicOffsets(t[0], t[1], t[2]))
        return cls(sid, start, end, tuple(out_files), tuple(out_topics))


def _safe(name: str) -> bool:
    """Whether ``name`` is a snapshot's file (``meta.db``, ``topics/<topic id>.oidx``), never a path out."""
    if name == META_STORE:
        return True
    head, _, tail = name.partition("/")
    return head == "topics" and tail.endswith(".oidx") and is_topic_id(tail[:-5])


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
    ``topics`` the offset index of each topic over the vnode by topic id. On the vnode's lane: nothing is
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


RESTORING = "restoring"
"""The marker in a vnode's directory while it is restored from a snapshot: one checksummed line ``{"start": S0,
"end": L}``, written (fsynced) in the staging directory before it becomes the vnode's, removed (the directory
fsynced) once the vnode's WAL reaches ``L`` and its entries from there are derived (:func:`finish_restoring`)."""


class Staging:
    """A snapshot's stream paged, in order, into ``directory`` (emptied first): its manifest as ``manifest``, then
    each file it names, each fsynced once whole. :meth:`take` refuses a page that does not continue the stream
    (ValueError) or a manifest that does not verify (ValueError: the follower begins again); StorageUnavailable when
    the disk refuses (what was staged stays, to be removed). Whole once :attr:`position` reaches ``size``; what it
    holds is checked again by :func:`verify` before it is installed."""

    def __init__(self, directory: Path, size: int, syncs: fileio.SyncLatency) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        self.directory = directory
        self.size = size
        self.syncs = syncs
        self.position = 0
        self.manifest: Manifest | None = None
        self._head = bytearray()
        self._file = 0  # the index of the file being written in the manifest's list
        self._written = 0  # of that file, the bytes written

    @property
    def done(self) -> bool:
        return self.position == self.size and self.manifest is not None and self._file == len(self.manifest.files)

    def take(self, position: int, data: bytes) -> None:
        """Stage the page ``data`` that starts at byte ``position`` of the stream (see the class docstring)."""
        if position != self.position or position + len(data) > self.size:
            raise ValueError(f"a page of {len(data)} bytes at {position}: the staged stream is at {self.position} "
                             f"of {self.size}")
        try:
            self._take(memoryview(data))
        except OSError as exc:
            raise StorageUnavailable(f"{self.directory}: the snapshot cannot be staged: {exc}") from None
        self.position += len(data)

    def _take(self, data: memoryview) -> None:
        if self.manifest is None:
            end = bytes(data).find(b"\n")
            self._head += data if end < 0 else data[:end + 1]
            if end < 0:
                if len(self._head) > MANIFEST_MAX:
                    raise ValueError(f"a manifest longer than {MANIFEST_MAX} bytes")
                return
            self.manifest = Manifest.decode(bytes(self._head[:-1]))
            if len(self._head) + sum(f.size for f in self.manifest.files) != self.size:
                raise ValueError(f"a manifest of {self.manifest.total_bytes} bytes of stream, told {self.size}")
            (self.directory / "topics").mkdir()
            self._write(MANIFEST, bytes(self._head), 0)
            data = data[end + 1:]
            self._skip_empty()
        files = self.manifest.files
        while data:
            f = files[self._file]
            n = min(len(data), f.size - self._written)
            self._write(f.name, bytes(data[:n]), self._written)
            self._written += n
            data = data[n:]
            self._skip_empty()

    def _skip_empty(self) -> None:
        """Past every file written whole (an empty one is made at once)."""
        assert self.manifest is not None
        files = self.manifest.files
        while self._file < len(files) and self._written == files[self._file].size:
            if not files[self._file].size:
                self._write(files[self._file].name, b"", 0)
            self._file, self._written = self._file + 1, 0

    def _write(self, name: str, data: bytes, at: int) -> None:
        """``data`` at byte ``at`` of staged file ``name``, fsynced when the file is then whole."""
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if at == 0 else 0), 0o644)
        try:
            if data:
                fileio.pwrite_all(fd, data, at)
            whole = self.manifest is None or name == MANIFEST or at + len(data) == next(
                f.size for f in self.manifest.files if f.name == name)
            if whole:
                fileio.fsync(fd, syncs=self.syncs)
        finally:
            os.close(fd)


def verify(directory: Path) -> Manifest:
    """The manifest of the snapshot staged in ``directory`` once every file it names has its size and CRC-32C
    (read back from the disk); ValueError naming the first that does not (a flipped byte, a cut file, a missing
    one), or a manifest that does not verify."""
    try:
        raw = (directory / MANIFEST).read_bytes()
        if not raw.endswith(b"\n"):
            raise ValueError(f"{directory / MANIFEST}: a cut manifest")
        manifest = Manifest.decode(raw[:-1])
        for f in manifest.files:
            got = _crc_of(directory / f.name)
            if (got.size, got.crc) != (f.size, f.crc):
                raise ValueError(f"{f.name}: {got.size} bytes of CRC {got.crc:08x}, not {f.size} of {f.crc:08x}")
    except OSError as exc:
        raise ValueError(f"{directory}: {exc}") from None
    return manifest


def read_restoring(vnode_dir: Path) -> tuple[int, int] | None:
    """``(S0, L)`` of the vnode's :data:`RESTORING` marker, None without one; ValueError when it does not verify."""
    path = vnode_dir / RESTORING
    if not path.exists():
        return None
    d = lines.decode(path.read_bytes().rstrip(b"\n"))
    start, end = (d.get("start"), d.get("end")) if isinstance(d, dict) else (None, None)
    if type(start) is not int or type(end) is not int or not 0 <= start <= end:
        raise ValueError(f"{path}: restoring [{start!r}, {end!r})")
    return start, end


def prepare_install(directory: Path, manifest: Manifest, syncs: fileio.SyncLatency) -> None:
    """Make the verified staged snapshot ``directory`` a vnode's directory to be: each topic's log start beside its
    offset index (:mod:`walgate.storage.offsets`' ``.start``), the :data:`RESTORING` marker naming ``(S0, L)``, all
    fsynced with the directories. OSError when the disk refuses (the staging is removed by the caller)."""
    for t in manifest.topics:
        fileio.replace_file(directory / "topics" / f"{t.topic_id}.start", lines.encode({"log_start": t.log_start}),
                            syncs=syncs)
    fileio.fsync_dir(directory / "topics", syncs=syncs)
    fileio.replace_file(directory / RESTORING, lines.encode({"start": manifest.start_version,
                                                              "end": manifest.end_version}), syncs=syncs)


def finish_restoring(vnode_dir: Path, syncs: fileio.SyncLatency) -> None:
    """Remove the vnode's :data:`RESTORING` marker, durably; OSError when the disk refuses (it stays: the next
    append or open removes it)."""
    fileio.unlink(vnode_dir / RESTORING, missing_ok=True)
    fileio.fsync_dir(vnode_dir, syncs=syncs)
