"""The `power.meters` data set of the consumer scenarios and the checks on what clients read.

Expected records follow the mapping of docs/architecture.md: partition = vnode of
the subtable (``(crc32c(utf8("db.table")) * VGROUPS) >> 32``, README), key =
subtable name, timestamp = the row's ts in ms, value = the row as JSON (timestamps
as RFC 3339 UTC strings, NULL as null), headers naming db, stable, table and the
WAL version. Every client program prints records as one JSON object per line with
the same fields (see :class:`Rec`); :func:`from_kcat` converts kcat's ``-J`` output.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import crc32c

# Header names walgate puts on every record (values utf-8; the version as decimal digits);
# meta records of WITH META topics also carry H_META = the operation (create_table, ...).
H_DB, H_STABLE, H_TABLE, H_VERSION, H_META = "db", "stable", "table", "version", "meta"

DB = "power"
VGROUPS = 4
STABLE = "meters"
BASE_TS = 1538577485000  # 2018-10-03 14:38:05.000 UTC
STEPS = 6  # rows per subtable
TABLES = {  # subtable -> (location, groupid); two subtables in each of the 4 vnodes of `power`
    "d1001": ("California.SanFrancisco", 2),  # vnode 1
    "d1002": ("California.SanFrancisco", 3),  # vnode 1
    "d1003": ("California.LosAngeles", 2),  # vnode 2
    "d1005": ("California.LosAngeles", 3),  # vnode 2
    "d1008": ("California.SanDiego", 2),  # vnode 0
    "d1018": ("California.SanDiego", 3),  # vnode 0
    "d1009": ("California.Sunnyvale", 2),  # vnode 3
    "d1019": ("California.Sunnyvale", 3),  # vnode 3
}
SELECT_COLUMNS = ("ts", "current", "voltage", "phase", "location")
DATA_COLUMNS = ("ts", "current", "voltage", "phase")
TAG_COLUMNS = ("location", "groupid")


def vnode_of(db: str, table: str, vgroups: int) -> int:
    return (crc32c.crc32c(f"{db}.{table}".encode()) * vgroups) >> 32


def rfc3339_ms(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


@dataclass(frozen=True)
class Row:
    table: str
    ts: int  # ms
    current: float | None
    voltage: int
    phase: float

    def columns(self) -> dict[str, Any]:
        location, groupid = TABLES[self.table]
        return {"ts": rfc3339_ms(self.ts), "current": self.current, "voltage": self.voltage,
                "phase": self.phase, "location": location, "groupid": groupid}

    def sql_values(self) -> str:
        current = "NULL" if self.current is None else repr(self.current)
        return f"({self.ts}, {current}, {self.voltage}, {self.phase!r})"  # epoch ms: no time zone involved


def meter_rows(steps: int = STEPS, base_ts: int = BASE_TS) -> list[Row]:
    """Rows in global ts order; every ts is distinct, so per-partition offset order is ts order.

    Some voltages are <= 200 (filtered out by the AS SELECT topic), one current is NULL.
    """
    rows = []
    for step in range(steps):
        for i, table in enumerate(TABLES):
            voltage = 180 + ((step * 7 + i * 13) % 50)  # 180..229: ~40 % of rows are <= 200
            current = None if (step, i) == (1, 0) else round(10.0 + i + step * 0.25, 2)
            rows.append(Row(table, base_ts + step * 60_000 + i * 1000, current, voltage, round(0.25 + i * 0.01, 2)))
    return rows


def setup_sql(db: str = DB, vgroups: int = VGROUPS, options: str = "") -> list[str]:
    return [
        f"CREATE DATABASE {db} VGROUPS {vgroups} PRECISION 'ms' {options}".strip(),
        f"CREATE STABLE {db}.{STABLE} (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
        "TAGS (location VARCHAR(64), groupid INT)",
        *(f"CREATE TABLE {db}.{t} USING {db}.{STABLE} TAGS ('{loc}', {gid})" for t, (loc, gid) in TABLES.items()),
    ]


def insert_sql(rows: Sequence[Row], db: str = DB, per_statement: int = len(TABLES)) -> list[str]:
    """INSERT statements in row order (several tables per statement)."""
    out = []
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        out.append(f"INSERT INTO {' '.join(f'{db}.{r.table} VALUES {r.sql_values()}' for r in chunk)}")
    return out


@dataclass
class Rec:
    """One record as a client saw it (or as expected; offset -1 = not known in advance)."""

    partition: int
    offset: int
    timestamp: int
    key: str | None
    value: Any  # parsed JSON
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_client(cls, d: dict[str, Any]) -> Rec:
        """A record line printed by one of our client programs (compat-tests/clients, java, node)."""
        return cls(d["partition"], d["offset"], d["timestamp"], d.get("key"), _parse_value(d.get("value")),
                   {k: v for k, v in (d.get("headers") or [])})

    def brief(self) -> str:
        return (f"p{self.partition}@{self.offset} ts={self.timestamp} key={self.key!r} "
                f"value={json.dumps(self.value)} headers={self.headers}")


def _parse_value(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def from_kcat(d: dict[str, Any]) -> Rec:
    """A kcat ``-J`` line: {"partition", "offset", "ts", "key", "payload", "headers": [k, v, ...]}."""
    hdrs = d.get("headers") or []
    return Rec(d["partition"], d["offset"], d["ts"], d.get("key"), _parse_value(d.get("payload")),
               dict(zip(hdrs[0::2], hdrs[1::2], strict=True)))


def records(lines: Iterable[dict[str, Any]]) -> list[Rec]:
    return [Rec.from_client(d) for d in lines if d.get("event") == "record"]


def expected_records(rows: Iterable[Row], columns: Sequence[str], *, db: str = DB, vgroups: int = VGROUPS,
                     where=lambda r: True) -> list[Rec]:
    """The records a topic selecting ``columns`` of the rows passing ``where`` carries, in per-partition order."""
    out = []
    for r in rows:
        if where(r):
            cols = r.columns()
            out.append(Rec(vnode_of(db, r.table, vgroups), -1, r.ts, r.table, {c: cols[c] for c in columns},
                           {H_DB: db, H_STABLE: STABLE, H_TABLE: r.table}))
    return out


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        out[r.partition].append(r)
    return dict(out)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, rel_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return a == b


def record_problems(got: Rec, want: Rec) -> list[str]:
    """Differences between a record read and the expected one (offset not compared)."""
    problems = []
    if got.partition != want.partition:
        problems.append(f"partition {got.partition} != {want.partition}")
    if got.key != want.key:
        problems.append(f"key {got.key!r} != {want.key!r}")
    if got.timestamp != want.timestamp:
        problems.append(f"timestamp {got.timestamp} != {want.timestamp}")
    if not _same_value(got.value, want.value):
        problems.append(f"value {json.dumps(got.value)} != {json.dumps(want.value)}")
    for name, value in want.headers.items():
        if got.headers.get(name) != value:
            problems.append(f"header {name}={got.headers.get(name)!r}, expected {value!r}")
    version = got.headers.get(H_VERSION)
    if version is None or not version.isdigit():
        problems.append(f"header {H_VERSION}={version!r}, expected a WAL version (decimal digits)")
    return problems


def check_exactly(got: Sequence[Rec], want: Sequence[Rec], *, first_offsets: dict[int, int] | None = None,
                  dense: bool = True) -> None:
    """Assert ``got`` is exactly ``want``: each record once, per-partition order, dense offsets.

    Records are matched on (partition, key, timestamp); within a partition the
    sequence must equal the expected one (ts order = insert order), and offsets
    must run consecutively from ``first_offsets[p]`` (default: the first one seen)
    unless ``dense`` is false (data records of a topic that interleaves meta records).
    """
    problems: list[str] = []
    got_p, want_p = by_partition(got), by_partition(want)
    for p in sorted(set(got_p) | set(want_p)):
        g, w = got_p.get(p, []), want_p.get(p, [])
        if [(r.key, r.timestamp) for r in g] != [(r.key, r.timestamp) for r in w]:
            got_ids = {(r.key, r.timestamp) for r in g}
            want_ids = {(r.key, r.timestamp) for r in w}
            dup = len(g) - len(got_ids)
            problems.append(
                f"partition {p}: read {len(g)} records, expected {len(w)}; missing {sorted(want_ids - got_ids)}; "
                f"unexpected {sorted(got_ids - want_ids)}; duplicates {dup}; order read "
                f"{[(r.key, r.timestamp) for r in g]}")
            continue
        for gr, wr in zip(g, w, strict=True):
            problems += [f"{gr.brief()}: {x}" for x in record_problems(gr, wr)]
        if g and dense:
            start = (first_offsets or {}).get(p, g[0].offset)
            offsets = [r.offset for r in g]
            if offsets != list(range(start, start + len(g))):
                problems.append(f"partition {p}: offsets not dense from {start}: {offsets}")
    assert not problems, "records differ from the rows inserted:\n" + "\n".join(problems[:40])


def split_meta(recs: Iterable[Rec]) -> tuple[list[Rec], list[Rec]]:
    """(data records, meta records): meta records carry the H_META header."""
    data, meta = [], []
    for r in recs:
        (meta if H_META in r.headers else data).append(r)
    return data, meta


def check_dense(recs: Sequence[Rec], first_offsets: dict[int, int]) -> None:
    """Offsets of each partition run consecutively from first_offsets[p], each once."""
    for p, rs in by_partition(recs).items():
        offsets = [r.offset for r in rs]
        start = first_offsets.get(p, 0)
        assert offsets == list(range(start, start + len(rs))), f"partition {p}: offsets not dense from {start}: {offsets}"
