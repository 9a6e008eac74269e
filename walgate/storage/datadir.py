"""The data dir: its layout, its format version, and the migrations from older formats.

Layout of format 3 (the current one; ``docs/data-dir.md`` has the full description)::

    walgate.json                    {"format": 3, "coordinator_partitions": N}: one checksummed line, replaced
                                    atomically
    walgate.lock                    locked (POSIX record lock, :func:`lock`) by the server and ``walgate repair``
    catalog.log                     the catalog (catalog.py): checksummed JSON lines
    producer_ids.log                next producer id block (producers.py): one checksummed line, from creation on
    users.key                       the secret of unknown users' mock credentials (users_key.py): one checksummed
                                    line, made by the engine's first open that finds none
    coordinator/offsets-<p>.log     the group coordinator's partitions p = 0 .. N-1 (coordinator_log.py, Kafka's
                                    ``__consumer_offsets``): committed offsets and group records, checksummed JSON
                                    lines; a group's records are in partition hash(group id) % N
                                    (coordinator_partitions.py); N is fixed when the data dir is made
    transactions.log                transaction coordinator state (transactions_log.py): checksummed JSON lines
    quarantine/                     copies of damaged bytes (damage.py)
    db/<database id>/vnode<i>/      one vnode (vnode.py)
        wal/<first version>.log     WAL segments and their indexes (wal.py)
        wal/<first version>.idx
        meta.db                     the vnode's tables (meta_store.py, SQLite), derived from its meta entries
        tables.ckpt                 (format 2 before the meta store) table map: one checksummed line, read once
        topics/<topic id>.oidx      offset index of one topic-partition (offsets.py): derived, rebuilt when bad
        topics/<topic id>.start     log start set by DeleteRecords: one checksummed line

No path holds a name a user chose: a database's directory is its id (32 hex digits, checked by
:func:`db_dir`), a topic's files are named by its topic id (a UUID, checked by :func:`topic_file`).

:func:`prepare` runs before anything else opens the data dir: it creates a new one (version file first, then
``producer_ids.log``, so that a data dir missing it has lost it, then ``coordinator/``), opens a current one,
refuses one written by a newer release (:class:`UnsupportedFormat`, one clear line for the CLI), and migrates
formats 1 and 2 once, crash-safely: every step is idempotent and the version file is written last, so a kill at
any point leaves a data dir that the next start migrates again from where it stopped.

Format 2 -> 3 (:func:`_migrate_2`): format 2 kept committed offsets in each vnode's ``commits.log`` and group
records in ``groups.log`` (the same line formats as the coordinator log's two record kinds).

1. Unless ``coordinator/`` exists: ``coordinator.tmp/`` is (re)made with the N partition files, each holding the
   live records of its groups folded from every ``db/*/vnode*/commits.log`` (a key in two of them: the newest
   commit wins) and ``groups.log`` (damage in them is reported, bytes kept, and skipped), fsynced, then renamed
   ``coordinator/`` (atomic: ``coordinator/`` exists only whole);
2. every ``commits.log`` and ``groups.log`` is removed (only once ``coordinator/`` holds what they held);
3. ``walgate.json`` is written, with N.

Format 1 -> 2 (:func:`_migrate_1`; walgate before the version file: ``catalog.jsonl`` of plain JSON lines,
``db/<name>/``, ``topics/<topic name>.oidx`` and ``.start`` (a plain integer), ``offsets.jsonl``, ``tables.json``,
``producer_ids.json``), then 2 -> 3:

1. ``catalog.log`` is built from ``catalog.jsonl`` (ids given to the databases), unless it exists already
   (written atomically, so it is whole);
2. each ``db/<name>`` is renamed ``db/<id>`` (skipped when already done; a name that is not one plain path
   component, e.g. ``../../x``, is never followed: reported, the database opens empty);
3. in each vnode, ``topics/<name>.oidx`` is removed (derived, of the old record format: rebuilt from the WAL),
   and ``topics/<name>.start``, ``offsets.jsonl``, ``tables.json`` are rewritten in the checksummed format under
   their new names, then the old file is removed (an existing new file is whole, so the old one is only removed);
4. ``producer_ids.json`` becomes ``producer_ids.log`` the same way (none: ids start at 0, as format 1 did);
5. ``catalog.jsonl`` is removed (with no format-1 file left, a data dir without ``walgate.json`` whose
   ``catalog.log`` exists has been migrated to format 2).

Old records that cannot be read are reported to the DamageLog (bytes kept) and skipped, never fatal.

``walgate.json`` is trusted only when its checksum verifies: one that does not (a flipped bit could otherwise read
as a newer format and refuse to start) is reported (bytes kept), the format is found from the layout as for a
missing file (format-1 files: 1; ``catalog.log`` or ``producer_ids.log``: 2 or 3, migrated to 3 when
``coordinator/`` is missing; nothing: a new data dir), N from the partition files (they are all made with
``coordinator/``), and the file is written again. Only a verified newer format is refused.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from walgate.storage import fileio, lines
from walgate.storage.catalog import Catalog
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.coordinator_log import Committed, CoordinatorLog, OffsetKey, record_line
from walgate.storage.coordinator_partitions import COORDINATOR_DIR, DEFAULT_PARTITIONS, partition_file, partition_for
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageError
from walgate.storage.fileio import SyncLatency
from walgate.storage.names import is_db_id, is_topic_id, new_db_id
from walgate.storage.producers import ProducerIds
from walgate.storage.vnode import CHECKPOINT

__all__ = ["FORMAT", "UnsupportedFormat", "DataDirLocked", "prepare", "lock", "db_dir", "topic_file",
           "unnamed_db_dirs", "CATALOG", "PRODUCER_IDS", "LOCK_FILE", "coordinator_partitions_made"]

log = logging.getLogger("walgate.datadir")

FORMAT: Final = 3
VERSION_FILE: Final = "walgate.json"
CATALOG: Final = "catalog.log"
PRODUCER_IDS: Final = "producer_ids.log"
LOCK_FILE: Final = "walgate.lock"
_OLD_GROUPS: Final = "groups.log"  # format 2's group records
_OLD_COMMITS: Final = "commits.log"  # format 2's committed offsets, in each vnode
_COORDINATOR_TMP: Final = "coordinator.tmp"
_PARTITION_NAME = re.compile(r"offsets-(0|[1-9][0-9]{0,5})\.log")
_OLD_CATALOG: Final = "catalog.jsonl"
_OLD_PRODUCER_IDS: Final = "producer_ids.json"


class UnsupportedFormat(StorageError):
    """The data dir was written by a newer walgate (or says a format this release does not know)."""


class DataDirLocked(StorageError):
    """Another process (a running server, a repair) holds the data dir's lock."""


def lock(root: Path) -> int:
    """Take the data dir's lock (``walgate.lock``, an exclusive POSIX record lock, created if missing) and return
    its file descriptor: the lock lasts until the descriptor is closed or the process ends (a kill -9 included).
    :class:`DataDirLocked` when another process holds it. The lock is per process, as POSIX record locks are: a
    process that opens the same data dir twice (tests) is not refused."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise DataDirLocked(f"The data dir {root} is in use by another process (a running walgate server?): "
                            f"stop it first ({exc.strerror or exc})") from None
    return fd


def db_dir(root: Path, db_id: str) -> Path:
    """``db/<id>`` of a database: never outside ``root/db`` (the id is checked)."""
    if not is_db_id(db_id):
        raise ValueError(f"not a database id: {db_id!r}")
    return root / "db" / db_id


def topic_file(vnode_dir: Path, topic_id: str, suffix: str) -> Path:
    """``topics/<topic id><suffix>`` of a topic-partition: never outside the vnode's ``topics/`` (the id is checked)."""
    if not is_topic_id(topic_id):
        raise ValueError(f"not a topic id: {topic_id!r}")
    return vnode_dir / "topics" / f"{topic_id}{suffix}"


def unnamed_db_dirs(root: Path, ids: set[str]) -> list[str]:
    """``db/<id>`` directories whose id is not in ``ids`` (no catalog record names them), sorted."""
    db = root / "db"
    return sorted(f"db/{p.name}" for p in db.iterdir() if p.is_dir() and p.name not in ids) if db.is_dir() else []


def prepare(root: Path, damage: DamageLog, clock: Clock = SYSTEM_CLOCK,
            coordinator_partitions: int = DEFAULT_PARTITIONS, syncs: SyncLatency | None = None) -> int:
    """Make ``root`` a data dir of the current format: create, open, migrate or refuse (see the module docstring);
    the number of its coordinator partitions (``coordinator_partitions`` for a data dir made or migrated now).
    ``clock``: where producer ids go on when a format-1 ``producer_ids.json`` cannot be read; ``syncs``: what its
    fsyncs are timed into (the engine's)."""
    syncs = SyncLatency() if syncs is None else syncs
    root.mkdir(parents=True, exist_ok=True)
    version = root / VERSION_FILE
    found = _read_format(version, damage)
    if found is None:  # no (verified) version file: the layout tells
        old = (root / _OLD_CATALOG).exists() or (root / _OLD_PRODUCER_IDS).exists()
        if old or ((root / "db").exists() and not (root / CATALOG).exists()):
            log.info("%s: migrating the data dir from format 1 to format %d", root, FORMAT)
            _migrate_1(root, damage, clock, syncs)
        if (root / CATALOG).exists() or (root / PRODUCER_IDS).exists() or (root / COORDINATOR_DIR).exists():
            partitions = _migrate_2(root, damage, coordinator_partitions, syncs)
            _write_format(version, partitions, syncs)
            return partitions
        _write_format(version, coordinator_partitions, syncs)  # a new data dir
        ProducerIds.create(root / PRODUCER_IDS, syncs)
        _make_coordinator(root, [b""] * coordinator_partitions, syncs)
        return coordinator_partitions
    fmt, partitions = found
    if fmt > FORMAT:
        raise UnsupportedFormat(f"The data dir {root} has format {fmt}, written by a newer walgate; this release "
                                f"reads formats 1 to {FORMAT}: run the newer release")
    if fmt < FORMAT:
        if fmt < 2:
            _migrate_1(root, damage, clock, syncs)
        partitions = _migrate_2(root, damage, coordinator_partitions, syncs)
        _write_format(version, partitions, syncs)
    return partitions


def coordinator_partitions_made(root: Path) -> int | None:
    """N as ``root``'s version file records it, read without changing or reporting anything (before the data dir is
    opened: a cluster's first node makes the cluster's N from it); None when it records none (a new data dir, an older
    format, a file that does not verify: :func:`prepare` decides then)."""
    try:
        raw = (root / VERSION_FILE).read_bytes()
        return lines.decode_int(raw, "coordinator_partitions", 1) if lines.decode_int(raw, "format", 1) == 3 else None
    except (OSError, ValueError):
        return None


def _read_format(path: Path, damage: DamageLog) -> tuple[int, int] | None:
    """The verified (format, coordinator partitions) of the version file (partitions 0 before format 3); None when
    it is missing or does not verify (reported)."""
    if not path.exists():
        return None
    raw = path.read_bytes()
    try:
        fmt = lines.decode_int(raw, "format", 1)
        return fmt, lines.decode_int(raw, "coordinator_partitions", 1) if fmt == 3 else 0
    except ValueError as exc:
        damage.report(path, 0, len(raw), f"format version: {exc}; the format is found from the files", "rebuilt", raw)
        return None


def _write_format(path: Path, coordinator_partitions: int, syncs: SyncLatency) -> None:
    fileio.replace_file(path, lines.encode({"format": FORMAT, "coordinator_partitions": coordinator_partitions}),
                        syncs=syncs)


# ------------------------------------------------------------------ format 2 -> 3


def _migrate_2(root: Path, damage: DamageLog, partitions: int, syncs: SyncLatency) -> int:
    """Fold every ``commits.log`` and ``groups.log`` into ``coordinator/`` (unless it exists), then remove them;
    the number of coordinator partitions."""
    if not (root / COORDINATOR_DIR).is_dir():
        log.info("%s: moving committed offsets and group records into %s/ (format 3)", root, COORDINATOR_DIR)
        _make_coordinator(root, _fold(root, damage, partitions), syncs)
    for old in sorted((root / "db").glob(f"*/vnode*/{_OLD_COMMITS}")):
        fileio.unlink(old)
        fileio.fsync_dir(old.parent, syncs=syncs)
    fileio.unlink(root / _OLD_GROUPS, missing_ok=True)
    fileio.fsync_dir(root, syncs=syncs)
    return _partitions_found(root) or partitions


def _fold(root: Path, damage: DamageLog, partitions: int) -> list[bytes]:
    """The contents of each coordinator partition: the live records of the format-2 files."""
    offsets: dict[OffsetKey, Committed] = {}
    for path in sorted((root / "db").glob(f"*/vnode*/{_OLD_COMMITS}")):
        for key, c in CoordinatorLog.read(path, damage).items():
            if key not in offsets or c.commit_ms >= offsets[key].commit_ms:
                offsets[key] = c
    groups = CoordinatorLog.read(root / _OLD_GROUPS, damage).groups()
    records: list[list[tuple[OffsetKey | str, Any]]] = [[] for _ in range(partitions)]
    for g, value in groups.items():
        records[partition_for(g, partitions)].append((g, value))
    for key, c in offsets.items():
        records[partition_for(key[0], partitions)].append((key, c))
    return [b"".join(record_line(k, v) for k, v in rs) for rs in records]


def _make_coordinator(root: Path, contents: list[bytes], syncs: SyncLatency) -> None:
    """Make ``coordinator/`` with one partition file per item of ``contents``, atomically (built whole in
    ``coordinator.tmp/``, then renamed)."""
    tmp = root / _COORDINATOR_TMP
    shutil.rmtree(tmp, ignore_errors=True)  # a previous try's, cut short
    tmp.mkdir()
    for p, data in enumerate(contents):
        fileio.replace_file(tmp / partition_file(root, p).name, data, syncs=syncs)
    fileio.fsync_dir(tmp, syncs=syncs)
    fileio.rename(tmp, root / COORDINATOR_DIR)
    fileio.fsync_dir(root, syncs=syncs)


def _partitions_found(root: Path) -> int:
    """N as the partition files of ``coordinator/`` say (the highest p + 1; 0: none)."""
    found = [int(m.group(1)) for p in (root / COORDINATOR_DIR).glob("offsets-*.log")
             if (m := _PARTITION_NAME.fullmatch(p.name))]
    return max(found) + 1 if found else 0


# ------------------------------------------------------------------ format 1 -> 2


def _migrate_1(root: Path, damage: DamageLog, clock: Clock, syncs: SyncLatency) -> None:
    if not (root / CATALOG).exists():
        _convert_catalog(root, damage, syncs)
    catalog = Catalog.open(root / CATALOG, damage, syncs=syncs)
    (root / "db").mkdir(exist_ok=True)
    for db in catalog.databases.values():
        new = db_dir(root, db.id)
        if not _plain(db.name):
            damage.report(root / "db", 0, 0, f"database {db.name!r}: its format-1 directory db/{db.name} is not a "
                          "plain name inside db/ and is not followed; the database opens empty", "not migrated")
            continue
        old = root / "db" / db.name
        if old.is_dir() and not new.exists():
            os.rename(old, new)
    fileio.fsync_dir(root / "db", syncs=syncs)
    for db in catalog.databases.values():
        topics = [t for t in catalog.topics.values() if t.db == db.name]
        for vnode_dir in sorted(db_dir(root, db.id).glob("vnode*")):
            _migrate_vnode(vnode_dir, topics, damage, syncs)
    _convert(root / _OLD_PRODUCER_IDS, root / PRODUCER_IDS, damage,
             lambda raw, path, damage: _producer_ids(raw, path, damage, clock), syncs)
    if not (root / PRODUCER_IDS).exists():
        ProducerIds.create(root / PRODUCER_IDS, syncs)
    (root / _OLD_CATALOG).unlink(missing_ok=True)
    fileio.fsync_dir(root, syncs=syncs)


def _plain(name: str) -> bool:
    """A name that is one ordinary path component (format 1 used it as one)."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def _convert_catalog(root: Path, damage: DamageLog, syncs: SyncLatency) -> None:
    """``catalog.jsonl`` (plain JSON lines, no ids) -> ``catalog.log``, replaying it with the current rules."""
    old = root / _OLD_CATALOG
    data = old.read_bytes() if old.exists() else b""
    catalog = Catalog(root / CATALOG, damage, syncs=syncs)

    def apply(record: Any) -> None:
        if record.get("op") == "create_db":
            record["id"] = new_db_id()
        elif record.get("op") == "create_kafka_topic":
            record["db_id"] = new_db_id()
        catalog.apply(record)

    _replay(old, data, damage, "catalog record", apply)
    catalog.rewrite()


def _migrate_vnode(vnode: Path, topics: list[Any], damage: DamageLog, syncs: SyncLatency) -> None:
    for t in topics:
        if not _plain(t.name):
            continue  # format 1 put its files outside topics/: the index is rebuilt, a log start is lost
        (vnode / "topics" / f"{t.name}.oidx").unlink(missing_ok=True)  # derived, of the old record format
        _convert(vnode / "topics" / f"{t.name}.start", topic_file(vnode, t.topic_id, ".start"), damage, _log_start,
                 syncs)
    if (vnode / "topics").is_dir():
        fileio.fsync_dir(vnode / "topics", syncs=syncs)
    _convert(vnode / "offsets.jsonl", vnode / _OLD_COMMITS, damage, _commits, syncs)
    _convert(vnode / "tables.json", vnode / CHECKPOINT, damage, _checkpoint, syncs)


def _convert(old: Path, new: Path, damage: DamageLog, convert: Any, syncs: SyncLatency) -> None:
    """Write ``new`` from the format-1 ``old`` (unless ``new`` exists: then it is whole), then remove ``old``."""
    if not old.exists():
        return
    if not new.exists():
        raw = old.read_bytes()
        try:
            data = convert(raw, old, damage)
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            damage.report(old, 0, len(raw), f"format-1 file: {exc}", "not migrated", raw)
            data = None
        if data is not None:
            fileio.replace_file(new, data, syncs=syncs)
    old.unlink()
    fileio.fsync_dir(old.parent, syncs=syncs)


def _log_start(raw: bytes, path: Path, damage: DamageLog) -> bytes:
    return lines.encode({"log_start": int(raw)})


def _producer_ids(raw: bytes, path: Path, damage: DamageLog, clock: Clock) -> bytes:
    """The next block, or (unreadable: reported) the value ProducerIds recovers to, so no id is handed out twice."""
    try:
        return lines.encode({"next_block": int(orjson.loads(raw)["next_block"])})
    except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
        recovered = ProducerIds.recovered_next(clock)
        damage.report(path, 0, len(raw), f"format-1 producer ids: {exc}; ids go on from {recovered}", "reset", raw)
        return lines.encode({"next_block": recovered})


def _checkpoint(raw: bytes, path: Path, damage: DamageLog) -> bytes:
    snap = orjson.loads(raw)
    if type(snap["version"]) is not int or not isinstance(snap["tables"], list):
        raise ValueError("not a table checkpoint")
    return lines.encode(snap)


def _commits(raw: bytes, path: Path, damage: DamageLog) -> bytes:
    """Format 1 committed offsets: JSON lines, replayed (bad lines reported), written compacted."""
    live: dict[tuple[Any, Any, Any], dict[str, Any]] = {}

    def apply(r: Any) -> None:
        key = (r["g"], r["t"], r["p"])
        if r["o"] is None:
            live.pop(key, None)
        else:
            live[key] = {"g": r["g"], "t": r["t"], "p": r["p"], "o": r["o"], "e": r["e"], "m": r["m"], "ts": r["ts"]}

    _replay(path, raw, damage, "committed offset", apply)
    return b"".join(lines.encode(r) for r in live.values())


def _replay(path: Path, data: bytes, damage: DamageLog, what: str, apply: Callable[[Any], None]) -> None:
    """``apply`` each record of a format-1 file of plain JSON lines, in order; a line that is not JSON or that
    ``apply`` refuses is reported and skipped. The piece after the last newline is a torn record."""
    pos = 0
    for line in data.split(b"\n")[:-1]:
        start, pos = pos, pos + len(line) + 1
        if not line:
            continue
        try:
            apply(orjson.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            damage.report(path, start, pos, f"format-1 {what}: {exc}", "skipped", line + b"\n")
