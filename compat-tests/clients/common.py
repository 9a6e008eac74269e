"""Shared bits of the Python client programs: arguments and the JSON line format.

Every client prints one JSON object per line: ``{"event": "record", "partition", "offset",
"timestamp", "timestamp_type", "key", "value", "headers": [[k, v], ...]}`` (key, value and
header values decoded as UTF-8), plus ``metadata`` / ``watermarks`` / ``start`` / ``error`` /
``summary`` events. It reads every assigned partition from its start offset up to the high
watermark it saw when it started, then exits (or stops at the first error event).

With ``--follow N`` a reader instead prints ``ready`` once consuming has started (assigned, start
offsets resolved, first poll issued), then reads until N records arrived in total, ignoring the high
watermarks: records written after ``ready`` reach it. ``--reset none`` (or ``error``) means no reset
policy: a start offset out of range is an ``error`` event named by the client, no record, exit 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any


def parse_args(description: str, *, isolation: bool = False) -> argparse.Namespace:
    """The reader's command line; ``isolation``: it also takes ``--isolation`` (its consumer's isolation.level)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("--start", default="beginning", help="beginning | end | <offset> | ts:<ms>")
    ap.add_argument("--reset", default="earliest", help="auto.offset.reset: earliest | latest | error/none")
    ap.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    ap.add_argument("--follow", type=int, metavar="N",
                    help="print `ready` once consuming started, then read until N records arrived")
    ap.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds")
    if isolation:
        ap.add_argument("--isolation", default="read_uncommitted", help="read_uncommitted | read_committed")
    return ap.parse_args()


def group_parser(description: str) -> argparse.ArgumentParser:
    """The command line every group member program accepts (a program may add its own options)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--reset", default="earliest", help="earliest | latest | none (error: the same as none)")
    ap.add_argument("--max-records", type=int, help="stop (commit, leave) after N records")
    ap.add_argument("--until-end", action="store_true",
                    help="stop once every partition was read to the high watermark seen at start")
    ap.add_argument("--timeout", type=float, default=60.0, help="give up (error event, exit 2) after this many seconds")
    return ap


def text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


_OUT = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Print one JSON line, whole even when several threads emit (print() writes the newline separately)."""
    line = json.dumps({"event": event, **fields}) + "\n"
    with _OUT:
        sys.stdout.write(line)
        sys.stdout.flush()


def emit_record(partition: int, offset: int, timestamp: int, timestamp_type: Any, key: bytes | None,
                value: bytes | None, headers: Any) -> None:
    emit("record", partition=partition, offset=offset, timestamp=timestamp, timestamp_type=timestamp_type,
         key=text(key), value=text(value), headers=[[k, text(v)] for k, v in (headers or [])])


def fail(message: str) -> None:
    emit("error", message=message)
    sys.exit(2)
