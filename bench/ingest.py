"""Ingestion and WAL read benchmarks (issue: foundation).

* line-protocol rows/s into a 4-vgroup database at WAL_LEVEL 1 and at
  WAL_LEVEL 2 (fsync before acknowledging), in-process through the engine and
  end to end over HTTP (``walgate serve`` in another process); the same rows
  as CSV and as multi-row SQL INSERTs over HTTP at WAL_LEVEL 1 (5,000 rows over
  100 subtables per request), each beside issue 15's target;
* the physical limit beside each, measured in the same run on the same disk:
  raw ``os.write`` of the same bytes per request and vnode (level 1), and the
  same plus ``fsync`` (level 2), expressed in rows/s via the WAL bytes per row;
* WAL read throughput from a cold start (entries/s and MB/s, after dropping
  the page cache where the kernel allows it), beside a raw sequential read of
  the same segment files.
"""

from __future__ import annotations

import http.client
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from bench.limits import FILES, raw_writes
from bench.report import Row, Target, median_rate
from bench.servers import walgate
from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.wal import Wal, WalOptions

VGROUPS = FILES
TABLES = 100
BASE_MS = 1_700_000_000_000


def lines(batch: int, start: int) -> bytes:
    """``batch`` lines over TABLES subtables, TDengine's meters shape, ms timestamps."""
    return "\n".join(
        f"meters,location=loc{(start + i) % TABLES},groupid={(start + i) % 10} "
        f"current={10 + i % 7}.3,voltage={200 + i % 30}i32,phase=0.{i % 9}1 {BASE_MS + start + i}"
        for i in range(batch)
    ).encode()


def _engine_ingest(root: Path, level: int, batches: int, batch: int) -> tuple[int, float, int]:
    """(rows, seconds, WAL bytes) for ``batches`` write_lines calls into a fresh database."""
    engine = Engine.open(root)
    engine.execute(f"CREATE DATABASE b VGROUPS {VGROUPS} WAL_LEVEL {level} WAL_FSYNC_PERIOD {0 if level == 2 else 3000}")
    engine.write_lines("b", lines(batch, 0), "ms")  # creates the supertable and subtables
    bodies = [lines(batch, (k + 1) * batch) for k in range(batches)]
    wal_before = sum(v.wal.size_bytes for v in engine.vnodes["b"])
    start = time.perf_counter()
    for body in bodies:
        engine.write_lines("b", body, "ms")
    seconds = time.perf_counter() - start
    wal_bytes = sum(v.wal.size_bytes for v in engine.vnodes["b"]) - wal_before
    engine.close()
    return batches * batch, seconds, wal_bytes


def _meters(batch: int, start: int) -> Iterator[tuple[int, int, str]]:
    """:func:`lines`' rows as (subtable number, timestamp, "current, voltage, phase" values)."""
    for i in range(batch):
        yield (start + i) % TABLES, BASE_MS + start + i, f"{10 + i % 7}.3,{200 + i % 30},0.{i % 9}1"


def csv_rows(batch: int, start: int) -> bytes:
    """:func:`lines`' rows as CSV for ``/csv/v1/write?stable=meters`` (header row, ``tbname`` and tag columns)."""
    return "\n".join(["tbname,_ts,current,voltage,phase,location,groupid"] + [
        f"t{t},{ts},{values},loc{t},{t % 10}" for t, ts, values in _meters(batch, start)]).encode()


def insert_sql(batch: int, start: int) -> bytes:
    """:func:`lines`' rows as one multi-row, multi-table SQL INSERT (``USING ... TAGS`` creates the subtables)."""
    by_table: dict[int, list[str]] = {}
    for t, ts, values in _meters(batch, start):
        by_table.setdefault(t, []).append(f"({ts},{values})")
    return ("INSERT INTO " + " ".join(
        f"b.t{t} USING b.meters (location, groupid) TAGS ('loc{t}', '{t % 10}') VALUES {' '.join(rows)}"
        for t, rows in by_table.items())).encode()


HTTP_FORMATS: dict[str, tuple[str, Callable[[int, int], bytes], Target | None]] = {
    "line protocol": ("/influxdb/v1/write?db=b&precision=ms", lines, Target(1_000_000)),
    "CSV": ("/csv/v1/write?db=b&stable=meters", csv_rows, Target(1_000_000)),
    "multi-row SQL INSERT": ("/rest/sql", insert_sql, Target(200_000)),
}
"""Each way rows come in over HTTP: (path, the body of ``batch`` rows from row ``start``, issue 15's target at
WAL_LEVEL 1)."""


def _http_ingest(tmpdir: Path, level: int, fmt: str, batches: int, batch: int) -> tuple[int, float]:
    """(rows, seconds) posting ``batches`` bodies of HTTP_FORMATS[``fmt``] to a fresh ``walgate serve`` subprocess
    (its data in a new directory under ``tmpdir``) over one keep-alive connection; the supertable and the
    subtables exist before the clock starts."""
    path, body_of, _ = HTTP_FORMATS[fmt]
    with walgate(Path(tempfile.mkdtemp(dir=tmpdir))) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=120)
        fsync = 0 if level == 2 else 3000
        server.post("/rest/sql", f"CREATE DATABASE b VGROUPS {VGROUPS} WAL_LEVEL {level} WAL_FSYNC_PERIOD {fsync}".encode(), conn)
        server.post("/influxdb/v1/write?db=b&precision=ms", lines(batch, 0), conn)
        server.post(path, body_of(batch, 0), conn)
        bodies = [body_of(batch, (k + 1) * batch) for k in range(batches)]
        start = time.perf_counter()
        for body in bodies:
            server.post(path, body, conn)
        seconds = time.perf_counter() - start
        conn.close()
        return batches * batch, seconds


def _drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def _wal_read(root: Path) -> tuple[int, int, int, float, float]:
    """(entries, bytes, rows, seconds to read+verify, seconds to also decode) over every vnode WAL under ``root``."""
    dirs = sorted(root.glob("db/*/vnode*/wal"))
    entries = nbytes = rows = 0
    start = time.perf_counter()
    for d in dirs:
        wal = Wal.open(d, WalOptions())
        for e in wal.read_from(0):
            entries += 1
            nbytes += len(e.body) + 36
        wal.close()
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    for d in dirs:
        wal = Wal.open(d, WalOptions())
        for e in wal.read_from(0):
            rows += decode_entry(e).rows
        wal.close()
    return entries, nbytes, rows, read_s, time.perf_counter() - start + read_s


def _raw_read(root: Path) -> tuple[int, float]:
    files = sorted(root.glob("db/*/vnode*/wal/*.log"))
    start = time.perf_counter()
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    return total, time.perf_counter() - start


def run(*, quick: bool, repeat: int) -> list[Row]:
    batch = 5000
    batches = {1: 20 if quick else 200, 2: 10 if quick else 60}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-", dir=os.environ.get("WALGATE_BENCH_DIR")) as tmp:
        tmpdir = Path(tmp)
        for level in (1, 2):
            n = 0
            wal_bytes = 0

            def once() -> tuple[int, float]:
                nonlocal n, wal_bytes
                n += 1
                count, seconds, wal_bytes = _engine_ingest(tmpdir / f"e{level}-{n}", level, batches[level], batch)
                return count, seconds

            rate = median_rate(repeat, once)
            per_row = wal_bytes / (batches[level] * batch)
            chunk = int(per_row * batch / VGROUPS)  # one request's append to one vnode
            writes = batches[level] * VGROUPS
            raw = median_rate(repeat, lambda: raw_writes(tmpdir / f"raw{level}", chunk, writes, fsync=level == 2))
            limit = ("os.write+fsync" if level == 2 else "os.write", raw / per_row)
            rows.append(Row(f"line protocol -> engine, WAL_LEVEL {level}", rate, "rows/s", *limit,
                            target=Target(1_000_000) if level == 1 else None))
            for fmt, (_, _, target) in HTTP_FORMATS.items():
                if level == 1 or fmt == "line protocol":
                    rate = median_rate(repeat, partial(_http_ingest, tmpdir, level, fmt, batches[level], batch))
                    rows.append(Row(f"{fmt} -> HTTP, WAL_LEVEL {level}", rate, "rows/s", *limit,
                                    target=target if level == 1 else None))
        source = tmpdir / "e1-1"
        results = []
        for _ in range(repeat):
            cold = _drop_page_cache()
            results.append(_wal_read(source))
        results.sort(key=lambda r: r[3])
        entries, nbytes, nrows, read_s, decode_s = results[len(results) // 2]
        raw_bytes = median_rate(repeat, lambda: (_drop_page_cache(), _raw_read(source))[1])
        note = "cold" if cold else "warm (page cache not droppable)"
        rows.append(Row(f"WAL read+CRC, entries ({note})", entries / read_s, "entries/s"))
        rows.append(Row(f"WAL read+CRC, bytes ({note})", nbytes / read_s / 1e6, "MB/s", "sequential read", raw_bytes / 1e6))
        rows.append(Row(f"WAL read+CRC+Arrow decode ({note})", nrows / decode_s, "rows/s"))
    return rows
