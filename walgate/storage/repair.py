"""``walgate repair``: bring back what a damaged ``catalog.log`` took out of service, from the data dir itself.

When a catalog record does not verify (a flipped byte) or cannot be applied, opening the catalog skips it, keeps its
bytes in ``quarantine/catalog.log.<start>-<end>.<time>`` and rewrites ``catalog.log`` without it
(:mod:`walgate.storage.catalog`); a database or Kafka-native topic whose record went leaves its ``db/<id>``
directory unnamed, kept and not served. Two sources bring them back:

1. **The quarantined record.** A record line is ``<CRC32C> <JSON>``: one damaged byte anywhere in it, its newline
   included, is found and undone by the checksum (:func:`recover`: the CRC's syndrome names the one byte position
   and value that explain it, in one pass over the line). The records are applied again in their old order, each
   only when it *adds* what the catalog lacks (a database, supertable, topic of any kind, user, ACL, quota or
   config) or changes only what the repair itself just restored (the ALTER of a supertable restored before it):
   never when it would change or remove what the catalog holds now (an ALTER, a DROP, a newer value of a user,
   quota or config set since): those are listed for the operator to repeat by hand. Records that failed only because the database
   they name was lost (a supertable, a TDengine topic) come back with it.
2. **The directory's own files** (:func:`attach`): for ``db/<id>`` when no quarantined record names it (more than one
   byte damaged, a lost ``catalog.log``), under the name the operator gives. Its vnodes say how many partitions it
   has; a WAL holding Kafka batches is a Kafka-native topic (its topic id from the files under ``topics/``, so its
   offset indexes are reused), any other is a database (its precision from its data blocks' timestamps, its
   subtables from ``meta.db`` and the WAL's meta entries, checked to hash to the vnodes they are in under
   the given name: a wrong name is refused, as a different name would misplace the tables of a database of more
   than one vgroup). What only the catalog held is not in the files: WAL options other than VGROUPS and
   PRECISION (defaults), a Kafka-native topic's configs (defaults: set them again), supertable schemas and
   TDengine topic definitions (re-created with the same SQL: its offsets are the same as before, since a new
   topic indexes its database's whole WAL).

It runs on a stopped server, holding the data dir's lock (:func:`walgate.storage.datadir.lock`), the simplest safe
choice: nothing else appends to ``catalog.log`` or serves half a repair, and the next start replays the repaired
catalog through the one path every start takes. The repair's only write is one atomic replace of ``catalog.log``
(:meth:`~walgate.storage.catalog.Catalog.rewrite`), so a kill at any point leaves the old catalog or the repaired
one; and it is idempotent: what is in the catalog already is reported as present and left alone.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import orjson

from walgate.storage import datadir, lines
from walgate.storage.catalog import DB_DEFAULTS, Catalog, DatabaseDef
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.damage import DamageLog
from walgate.storage.entry import decode_entry
from walgate.storage.errors import InvalidValue, NotFound
from walgate.storage.names import is_topic_id, validate_database_name
from walgate.storage.topic_configs import backing_database, validate_topic_name
from walgate.storage.vnode import Vnode, vnode_of
from walgate.storage.wal import KIND_DATA, KIND_KAFKA

__all__ = ["Finding", "recover", "findings", "repair", "attach", "ATTACHABLE"]

ATTACHABLE = "attach with --only {source} --as NAME"
_PIECE = re.compile(r"catalog\.log\.(\d+)-(\d+)\.(\d+)(?:\.(\d+))?")  # DamageLog adds .N to a name taken
_MAX_LINE = 1 << 20  # longer quarantined pieces are not searched for a damaged byte


@dataclass(frozen=True)
class Finding:
    """What repair found: ``source`` (a file under ``quarantine/`` or ``db/<id>``), what it is (``what``), its
    ``state`` (``restore``: will be / was restored; ``present``: in the catalog already; ``manual``: the operator
    repeats it by hand; ``waits``: needs a database that is not there; ``attach``: an unnamed directory, brought
    back by :func:`attach`; ``lost``: nothing recoverable) and ``detail``."""

    source: str
    what: str
    state: str
    detail: str


# ------------------------------------------------------------- one damaged line


def _crc_table() -> tuple[list[int], dict[int, int]]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table, {t >> 24: n for n, t in enumerate(table)}  # the top bytes are a permutation


_TABLE, _BY_TOP = _crc_table()
_SYNDROME = {t: n for n, t in enumerate(_TABLE)}


def _record(line: bytes) -> Any | None:
    """The record of a line that verifies and holds a catalog record (an object with an ``op``), else None."""
    try:
        record = lines.decode(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("op"), str) else None


def _one_byte(line: bytes) -> Iterator[bytes]:
    """Lines differing from ``line`` in one byte that make its checksum verify.

    CRC32C is linear: changing byte ``i`` of the JSON by ``d`` (XOR) changes the CRC by ``d``'s table entry
    carried through the ``k`` bytes after it. Walking the syndrome (stored CRC XOR computed CRC) back one byte
    at a time, a position where it equals a table entry names the one change that explains it."""
    if len(line) < 10:
        return
    try:
        stored = int(line[:8], 16)
    except ValueError:
        stored = -1
    body = line[9:]
    actual = crc32c.crc32c(body)
    header = b"%08x " % actual
    if sum(a != b for a, b in zip(line[:9], header)) == 1:  # the byte was in the CRC or its space
        yield header + body
    if stored < 0 or line[8:9] != b" ":
        return
    syndrome = stored ^ actual
    for k in range(len(body)):
        d = _SYNDROME.get(syndrome)
        if d is not None:
            i = 9 + len(body) - 1 - k
            yield line[:i] + bytes([line[i] ^ d]) + line[i + 1:]
        low = _BY_TOP[syndrome >> 24]  # undo one zero byte: r' = (r >> 8) ^ T[r & 0xff]
        syndrome = ((syndrome ^ _TABLE[low]) << 8 & 0xFFFFFFFF) | low


def recover(piece: bytes) -> list[Any]:
    """The catalog records one quarantined piece held before one of its bytes was damaged ([] when none is found,
    or more than one correction would verify: never a guess). A piece is one line (with its ``\\n`` when it had
    one). Besides a changed byte: a line whose ``\\n`` was damaged holds two records run together; a byte that
    became a ``\\n`` at either end of the line left it one byte short (its other part an empty line)."""
    line = piece[:-1] if piece.endswith(b"\n") else piece
    record = _record(line)
    if record is not None or len(line) > _MAX_LINE:
        return [record] if record is not None else []
    found: dict[bytes, list[Any]] = {}
    for fixed in _one_byte(line):
        r = _record(fixed)
        if r is not None:
            found[fixed] = [r]
    for b in range(256):  # a first or last byte that became the newline
        for fixed in (bytes([b]) + line, line + bytes([b])):
            r = _record(fixed)
            if r is not None:
                found[fixed] = [r]
    for m in re.finditer(rb"(?=[^\n][0-9a-f]{8} \{)", line):  # two records whose newline was damaged
        i = m.start()
        first, second = _record(line[:i]), _record(line[i + 1:])
        if first is not None and second is not None:
            found[line[:i] + b"\n" + line[i + 1:]] = [first, second]
    return next(iter(found.values())) if len(found) == 1 else []


def _joined(first: bytes, second: bytes) -> list[Any]:
    """The record of a line cut in two by a byte that became ``\\n`` (``first`` ends with it)."""
    found = [r for b in range(256) if b != 10 and (r := _record(first[:-1] + bytes([b]) + second.rstrip(b"\n")))]
    return found if len(found) == 1 else []


# --------------------------------------------------------------- the quarantine


@dataclass
class _Candidate:
    source: str
    records: list[Any]
    order: tuple[int, int]


def _quarantined(root: Path) -> list[_Candidate]:
    """The catalog records recovered from ``quarantine/``, in the order they had in ``catalog.log``; a piece that
    recovers nothing is a candidate without records (lost)."""
    qdir = root / "quarantine"
    pieces = []
    for path in sorted(qdir.iterdir()) if qdir.is_dir() else []:
        m = _PIECE.fullmatch(path.name)
        if m:
            pieces.append((int(m[3]), int(m[1]), int(m[2]), int(m[4] or 0), path))
    pieces.sort()
    out: list[_Candidate] = []
    used: set[Path] = set()
    for n, (stamp, start, end, _, path) in enumerate(pieces):
        if path in used:
            continue
        data = path.read_bytes()
        records = recover(data)
        source = f"quarantine/{path.name}"
        if not records and n + 1 < len(pieces):
            stamp2, start2, _, _, path2 = pieces[n + 1]
            if stamp2 - stamp <= 1 and start2 == end and data.endswith(b"\n"):
                records = _joined(data, path2.read_bytes())
                if records:
                    used.add(path2)
                    source += f" + {path2.name}"
        out.append(_Candidate(source, records, (stamp, start)))
    return out


def _keys(records: list[dict[str, Any]]) -> set[bytes]:
    """The catalog's records as comparable keys, one per ACL binding (the catalog keeps its ACLs in one record)."""
    out: set[bytes] = set()
    for r in records:
        if r.get("op") == "create_acls":
            out |= {orjson.dumps(["acl", b], option=orjson.OPT_SORT_KEYS) for b in r["acls"]}
        else:
            out.add(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
    return out


def _describe(r: dict[str, Any]) -> str:
    op = r.get("op")
    if op == "create_db":
        return f"database {r.get('name')}"
    if op == "create_kafka_topic":
        return f"Kafka-native topic {r.get('name')}"
    if op == "create_topic":
        return f"topic {r.get('name')} ({r.get('kind')}: {r.get('sql')})"
    if op in ("create_stable", "alter_stable", "drop_stable"):
        return f"{op} {r.get('db')}.{r.get('name')}"
    return f"{op} {r.get('name', '')}".rstrip()


def _try(catalog: Catalog, record: dict[str, Any], added: set[bytes]) -> tuple[str, str]:
    """How ``record`` relates to ``catalog`` (state, detail); applies it (state ``restore``) when it only adds, or
    changes only what this repair ``added`` (an ALTER of a supertable restored just before it); ``added`` grows by
    what it adds."""
    before = catalog.records()
    trial = Catalog(catalog.path)
    for r in before:
        trial.apply(r)
    try:
        trial.apply(record)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # as Catalog.open: the record's refusal
        db = record.get("db")
        if isinstance(db, str) and db not in catalog.databases and record.get("op") != "create_kafka_topic":
            return "waits", f"its database {db} is not in the catalog"
        if _present(catalog, record):
            return "present", "in the catalog already"
        return "manual", f"does not apply to the catalog as it is: {exc}"
    old, new = _keys(before), _keys(trial.records())
    if old == new:
        return "present", "in the catalog already"
    if not old - new <= added:
        return "manual", ("it changes or removes what the catalog holds now (a change made since may have "
                          f"superseded it): repeat it by hand if it is still wanted: {orjson.dumps(record).decode()}")
    catalog.apply(record)
    added |= new - old
    return "restore", "restored"


def _present(catalog: Catalog, r: dict[str, Any]) -> bool:
    """A creation record whose object the catalog holds (same id): restored before, or never lost."""
    if r.get("op") == "create_db":
        d = catalog.databases.get(r.get("name", ""))
        return d is not None and d.id == r.get("id")
    if r.get("op") in ("create_topic", "create_kafka_topic"):
        t = catalog.topics.get(r.get("name", ""))
        return t is not None and t.topic_id == r.get("topic_id")
    if r.get("op") == "create_stable":
        return (r.get("db"), r.get("name")) in catalog.stables
    return False


# ------------------------------------------------------------------ the repair


def findings(root: Path, catalog: Catalog) -> list[Finding]:
    """Everything repair can do on ``root`` (and what it cannot), applying to ``catalog`` in memory what it restores
    from the quarantine (:func:`repair` writes it)."""
    out: list[Finding] = []
    candidates = _quarantined(root)
    pending = [(c, r) for c in candidates for r in c.records]
    for c in candidates:
        if not c.records:
            out.append(Finding(c.source, "catalog bytes", "lost", "no single damaged byte explains them; if they "
                               f"held a database or Kafka-native topic, {ATTACHABLE.format(source='db/<id>')}"))
    results: dict[int, tuple[str, str]] = {}
    added: set[bytes] = set()
    progress = True
    while progress:  # a supertable or topic waits for its database, restored in an earlier round
        progress = False
        for n, (_, record) in enumerate(pending):
            if n in results and results[n][0] != "waits":
                continue
            results[n] = _try(catalog, record, added)
            progress |= results[n][0] == "restore"
    out += [Finding(c.source, _describe(r), *results[n]) for n, (c, r) in enumerate(pending)]
    for orphan in datadir.unnamed_db_dirs(root, {d.id for d in catalog.databases.values()}):
        out.append(Finding(orphan, _inspect(root / orphan), "attach", ATTACHABLE.format(source=orphan)))
    return out


def repair(root: Path, *, only: str | None = None, name: str | None = None, precision: str | None = None,
           dry_run: bool = False, clock: Clock = SYSTEM_CLOCK) -> list[Finding]:
    """Restore from the quarantine what only adds to the catalog, and with ``only`` = ``db/<id>`` and ``name``,
    :func:`attach` that directory; write the catalog (one atomic replace) unless ``dry_run``. The caller holds the
    data dir's lock. ``only`` without ``name`` limits nothing but the directory attached. ``clock``: what the
    quarantine and an attached database's creation time are stamped with."""
    damage = DamageLog(root, clock)
    datadir.prepare(root, damage, clock)  # a format-1 data dir is migrated first, a newer one refused, as a start does
    catalog = Catalog.open(root / datadir.CATALOG, damage)  # a bad line now is quarantined as a start would
    found = findings(root, catalog)
    if only is not None:
        if name is None:
            raise InvalidValue("--only needs --as NAME: the name to attach the directory under")
        attached = attach(root, catalog, only, name, precision, clock)
        again = findings(root, catalog)  # records that waited for the database attached under its old name
        restored = [f for f in found if f.state == "restore"]
        keys = {(f.source, f.what) for f in restored}
        found = restored + [f for f in again if (f.source, f.what) not in keys] + [attached]
    if not dry_run and any(f.state == "restore" for f in found):
        catalog.rewrite()
    return found


# ------------------------------------------------------------ an unnamed directory


@dataclass(frozen=True)
class _Contents:
    vgroups: int
    kafka: bool
    precision: str | None
    tables: tuple[tuple[int, str, str | None], ...]  # (vnode index, table, supertable)
    topic_ids: frozenset[str]


def _read(directory: Path) -> _Contents:
    """What the vnodes of an unnamed database directory hold (opening them as a start would)."""
    indexes = sorted(int(p.name[5:]) for p in directory.glob("vnode*") if p.name[5:].isdigit())
    if indexes != list(range(len(indexes))) or not indexes:
        raise InvalidValue(f"{directory}: its vnode directories are {indexes}, not 0 to n-1: not attachable")
    kafka, precision = False, None
    tables: list[tuple[int, str, str | None]] = []
    topic_ids: set[str] = set()
    db = DatabaseDef(f"repair_{directory.name}", {**DB_DEFAULTS, "VGROUPS": len(indexes)}, 0, directory.name)
    for i in indexes:
        vnode = Vnode.open(db, i, directory / f"vnode{i}")
        try:
            for entry in vnode.wal.read_from(vnode.wal.first_version):
                kafka |= entry.kind == KIND_KAFKA
                if entry.kind == KIND_DATA and precision is None:
                    for block in decode_entry(entry).blocks:
                        unit = getattr(block.batch.schema.field(1).type, "unit", None)
                        precision = unit if unit in ("ms", "us", "ns") else precision
                if kafka or precision is not None:
                    break
            tables += [(i, t.name, t.stable) for t in vnode.tables()]
        finally:
            vnode.close()
        topics = directory / f"vnode{i}" / "topics"
        topic_ids |= {p.stem for p in topics.iterdir() if is_topic_id(p.stem)} if topics.is_dir() else set()
    return _Contents(len(indexes), kafka, precision, tuple(tables), frozenset(topic_ids))


def _inspect(directory: Path) -> str:
    try:
        c = _read(directory)
    except InvalidValue as exc:
        return str(exc)
    if c.kafka:
        return f"a Kafka-native topic of {c.vgroups} partition(s)"
    stables = sorted({s for _, _, s in c.tables if s})
    return (f"a database of {c.vgroups} vgroup(s), {len(c.tables)} table(s)"
            + (f" of supertable(s) {', '.join(stables)}" if stables else ""))


def attach(root: Path, catalog: Catalog, source: str, name: str, precision: str | None = None,
           clock: Clock = SYSTEM_CLOCK) -> Finding:
    """Name the unnamed directory ``source`` (``db/<id>``) ``name`` in ``catalog`` (in memory; see the module
    docstring for what is recovered from its files), created at ``clock``'s now. InvalidValue / NotFound when it
    cannot be."""
    orphans = datadir.unnamed_db_dirs(root, {d.id for d in catalog.databases.values()})
    if source not in orphans:
        d = next((d for d in catalog.databases.values() if f"db/{d.id}" == source), None)
        if d is not None:
            return Finding(source, f"database {d.name}", "present", "in the catalog already")
        raise NotFound(f"{source} is not an unnamed database directory of {root}")
    c = _read(root / source)
    db_id = source.removeprefix("db/")
    now = clock.time_ms()
    if c.kafka:
        validate_topic_name(name)
        if name in catalog.topics:
            raise InvalidValue(f"Topic already exists: {name}: choose another name")
        taken = {t.topic_id for t in catalog.topics.values()}
        ids = sorted(c.topic_ids - taken)
        topic_id = ids[0] if len(ids) == 1 else str(uuid.uuid4())
        db_name = backing_database(name, catalog.databases)
        catalog.apply({"op": "create_kafka_topic", "name": name, "db": db_name, "db_id": db_id,
                       "options": {**DB_DEFAULTS, "VGROUPS": c.vgroups}, "configs": {}, "topic_id": topic_id,
                       "created_ms": now})
        return Finding(source, f"Kafka-native topic {name}", "restore", f"attached: {c.vgroups} partition(s), "
                       "default configs (set its configs again with walgate topic alter-config)")
    validate_database_name(name)
    if name in catalog.databases:
        raise InvalidValue(f"Database already exists: {name}: choose another name")
    misplaced = [(i, t) for i, t, _ in c.tables if vnode_of(name, t, c.vgroups) != i]
    if misplaced:
        i, t = misplaced[0]
        raise InvalidValue(f"{source}: table {t} is in vnode {i}, where the name {name} does not place it "
                           f"({len(misplaced)} of {len(c.tables)} tables misplaced): give the database's old name")
    chosen = precision or c.precision or str(DB_DEFAULTS["PRECISION"])
    if c.precision is not None and precision is not None and precision != c.precision:
        raise InvalidValue(f"{source}: its data has precision {c.precision}, not {precision}")
    catalog.apply({"op": "create_db", "name": name, "id": db_id,
                   "options": {**DB_DEFAULTS, "VGROUPS": c.vgroups, "PRECISION": chosen}, "created_ms": now})
    stables = sorted({s for _, _, s in c.tables if s and (name, s) not in catalog.stables})
    return Finding(source, f"database {name}", "restore", f"attached: {c.vgroups} vgroup(s), precision {chosen}, "
                   f"{len(c.tables)} table(s)" + (f"; re-create supertable(s) {', '.join(stables)} with the same "
                                                 "CREATE STABLE" if stables else ""))
