"""Memory and restart time of a node holding many subtables (TDengine's one-table-per-device shape).

``walgate serve`` in another process; line-protocol bodies of 100,000 lines over HTTP, each line a new device
(``meters,device=dN,location=locK,groupid=G current=..,voltage=..``: one supertable, three tags), into a 4-vgroup
database until ``N`` subtables exist. Reported: the node's RSS after the writes, the restart time (SIGTERM, then a new
``walgate serve`` on the same data dir until it is ready and answers ``SHOW STABLES``), its RSS then, and its RSS after
a write to one old subtable of each body. ``python -m bench.subtables [N] [--data-dir DIR]`` runs it alone (default
1,000,000; with ``--data-dir`` the data is kept there and each million's time and RSS is printed while writing); in
``python -m bench`` it is the ``subtables`` scenario (100,000 in quick mode).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import tempfile
import time
from pathlib import Path

from bench.report import Row, print_table
from bench.servers import rss_mb, walgate

BODY_LINES = 100_000
BASE_MS = 1_700_000_000_000


def body(start: int, n: int) -> bytes:
    """``n`` lines, each creating subtable number ``start + i`` (a new device)."""
    return "\n".join(
        f"meters,device=d{k},location=loc{k % 1000},groupid={k % 10} current={10 + k % 7}.3,voltage={200 + k % 30}i32 "
        f"{BASE_MS + k}" for k in range(start, start + n)).encode()


def run(*, quick: bool, repeat: int = 1, total: int | None = None, data_dir: Path | None = None) -> list[Row]:
    """Rows for ``total`` subtables (1,000,000; 100,000 in quick mode); ``repeat`` is not used (one long run).
    With ``data_dir`` the node's data is kept there (for a later restart's profile) and progress is printed."""
    total = total or (100_000 if quick else 1_000_000)
    with contextlib.ExitStack() as stack:
        work = data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="walgate-bench-")))
        with walgate(work) as server:
            server.post("/rest/sql", b"CREATE DATABASE sub VGROUPS 4 PRECISION 'ms' WAL_LEVEL 1 WAL_FSYNC_PERIOD 3000")
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
            start = time.perf_counter()
            for first in range(0, total, BODY_LINES):
                server.post("/influxdb/v1/write?db=sub&precision=ms", body(first, min(BODY_LINES, total - first)), conn)
                if data_dir and (first + BODY_LINES) % 1_000_000 == 0:
                    print(f"{first + BODY_LINES:,} subtables: {time.perf_counter() - start:,.1f} s, RSS "
                          f"{rss_mb(server.pid):,.0f} MB (peak {rss_mb(server.pid, 'VmHWM'):,.0f})", flush=True)
            write_s = time.perf_counter() - start
            rss_written, peak = rss_mb(server.pid), rss_mb(server.pid, "VmHWM")
            conn.close()
        start = time.perf_counter()
        with walgate(work) as server:
            server.post("/rest/sql", b"SHOW sub.STABLES")
            restart_s = time.perf_counter() - start
            rss_restarted = rss_mb(server.pid)
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
            for first in range(0, total, BODY_LINES):  # one old device per body written again
                server.post("/influxdb/v1/write?db=sub&precision=ms", body(first, 1), conn)
            conn.close()
            rss_after = rss_mb(server.pid)
    label = f"{total:,} subtables"
    return [Row(f"{label}: write time ({BODY_LINES:,}-line bodies, HTTP)", write_s, "s"),
            Row(f"  RSS after the writes (peak {peak:,.0f} MB)", rss_written, "MB"),
            Row("  restart until ready and answering", restart_s, "s"),
            Row("  RSS after the restart", rss_restarted, "MB"),
            Row("  RSS after writing one old subtable per body", rss_after, "MB")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("total", nargs="?", type=int, help="subtables to create (1,000,000)")
    parser.add_argument("--data-dir", type=Path, help="keep the node's data here (a new directory)")
    args = parser.parse_args()
    print_table(run(quick=False, total=args.total, data_dir=args.data_dir))
