"""kcat's balanced consumer (``kcat -G``) with the CLI and JSON lines of the other group member programs.

Usage: kcat_group.py BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--reset earliest] [--timeout 60]

kcat does the Kafka work, unmodified: ``kcat -G GROUP TOPIC -J -u`` (librdkafka's subscribe, auto commit of the
offsets of printed records, commit and LeaveGroup on exit), ``-c N`` for ``--max-records``, ``-e`` for
``--until-end`` (kcat exits once every partition assigned to it reached its end). This program only turns kcat's
output into the common JSON lines: ``assignment`` (the whole assignment after each "% Group ... rebalanced" line),
``record``, ``summary``, ``closed``. SIGTERM is passed on to kcat (it commits and leaves the group).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import threading
import time

from common import emit

REBALANCED = re.compile(r"rebalanced .*: (assigned|revoked): (.*)$")
PARTITION = re.compile(r"\[(\d+)\]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--max-records", type=int)
    ap.add_argument("--until-end", action="store_true")
    ap.add_argument("--reset", default="earliest")
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    argv = [shutil.which("kcat") or "kcat", "-b", args.bootstrap, "-G", args.group, "-J", "-u",
            "-X", f"auto.offset.reset={args.reset}", "-X", "session.timeout.ms=10000"]
    argv += ["-c", str(args.max_records)] if args.max_records else []
    argv += ["-e"] if args.until_end else []
    proc = subprocess.Popen([*argv, args.topic], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        proc.terminate()

    timer = threading.Timer(args.timeout, expire)
    timer.start()
    errors: list[str] = []

    def watch_stderr() -> None:
        mine: set[int] = set()
        for line in proc.stderr:
            if (m := REBALANCED.search(line.strip())) is not None:
                parts = {int(p) for p in PARTITION.findall(m.group(2))}
                mine = mine | parts if m.group(1) == "assigned" else mine - parts
                emit("assignment", after=m.group(1), partitions=sorted(mine))
            elif "ERROR" in line:
                errors.append(line.strip())

    watcher = threading.Thread(target=watch_stderr, daemon=True)
    watcher.start()
    count = 0
    started = time.monotonic()
    try:
        for line in proc.stdout:
            if line.startswith("{"):
                d = json.loads(line)
                hdrs = d.get("headers") or []
                emit("record", partition=d["partition"], offset=d["offset"], timestamp=d["ts"],
                     timestamp_type=d.get("tstype"), key=d.get("key"), value=d.get("payload"),
                     headers=[list(kv) for kv in zip(hdrs[0::2], hdrs[1::2], strict=True)])
                count += 1
        proc.wait()
        watcher.join(5)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    emit("summary", records=count, seconds=round(time.monotonic() - started, 3), kcat_errors=errors)
    emit("closed")
    if timed_out.is_set():
        emit("error", message=f"timed out after {args.timeout} s with {count} records")
        raise SystemExit(2)
    raise SystemExit(0 if proc.returncode in (0, -signal.SIGTERM) else 2)


if __name__ == "__main__":
    main()
