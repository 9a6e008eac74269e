"""kcat as a reader with the CLI and JSON lines of the other reader programs (ck_assign.py, Assign.java, ...).

Usage: kcat_read.py BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>] [--reset earliest|latest|none]
[--follow N] [--timeout 30]

kcat does the Kafka work, unmodified: ``kcat -L -J`` (metadata), ``kcat -Q -J`` with the logical offsets -2 / -1
(watermarks), ``kcat -C -J -o <start>`` (``-e`` to stop at the end; ``-c N`` with ``--follow N``). This program
only turns kcat's output into the common JSON lines: ``metadata``, ``watermarks``, ``ready`` (``--follow``: once kcat
reported the end of every partition, so a fetch is waiting), ``record``, ``summary``; a consume error kcat prints
(``% ERROR: ...``, e.g. with ``--reset none`` below the log start) becomes an ``error`` event and ends the run (exit 0).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from common import emit, fail, parse_args

BINARY = shutil.which("kcat") or "kcat"
END = re.compile(r"Reached end of topic .* \[(\d+)\]")
RESET = {"none": "error", "error": "error"}


def emit_kcat_record(line: str) -> bool:
    """Print a ``kcat -J`` message line as a ``record`` event; False for any other line."""
    if not line.startswith("{"):
        return False
    d = json.loads(line)
    hdrs = d.get("headers") or []
    emit("record", partition=d["partition"], offset=d["offset"], timestamp=d["ts"], timestamp_type=d.get("tstype"),
         key=d.get("key"), value=d.get("payload"),
         headers=[list(kv) for kv in zip(hdrs[0::2], hdrs[1::2], strict=True)])
    return True


def consume(argv: list[str], timeout: float, on_stderr: Callable[[str, subprocess.Popen[str]], None]
            ) -> tuple[int, int, bool]:
    """Run a consuming kcat: its ``-J`` messages become record events, each stderr line goes to
    ``on_stderr(line, proc)`` (in a thread); SIGTERM to this program and the timeout terminate kcat.
    Returns (records, kcat's exit code, whether it timed out)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        proc.terminate()

    timer = threading.Timer(timeout, expire)
    timer.start()
    watcher = threading.Thread(target=lambda: [on_stderr(line, proc) for line in proc.stderr], daemon=True)
    watcher.start()
    count = 0
    try:
        for line in proc.stdout:
            count += emit_kcat_record(line)
        proc.wait()
        watcher.join(5)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    return count, proc.returncode, timed_out.is_set()


def kcat(*args: str, timeout: float) -> str:
    try:
        done = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"kcat {' '.join(args)} did not finish within {timeout} s")
    if done.returncode != 0:
        fail(f"kcat {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def main() -> None:
    args = parse_args(__doc__)
    deadline = time.monotonic() + args.timeout
    md = json.loads(kcat("-L", "-J", "-b", args.bootstrap, "-t", args.topic, timeout=args.timeout))
    (topic,) = md["topics"]
    if "error" in topic:
        fail(f"metadata error for {args.topic}: {topic['error']}")
    parts = sorted(p["partition"] for p in topic["partitions"])
    emit("metadata", brokers=sorted(b["name"] for b in md["brokers"]), partitions=parts)
    marks = {}
    for logical in (-2, -1):
        queried = json.loads(kcat("-Q", "-J", "-b", args.bootstrap,
                                  *(a for p in parts for a in ("-t", f"{args.topic}:{p}:{logical}")),
                                  timeout=args.timeout))[args.topic]
        marks[logical] = {p: queried[str(p)]["offset"] for p in parts}
    for p in parts:
        emit("watermarks", partition=p, low=marks[-2][p], high=marks[-1][p])
    start = {"beginning": "beginning", "end": "end"}.get(args.start) or (
        f"s@{args.start[3:]}" if args.start.startswith("ts:") else str(int(args.start)))
    argv = [BINARY, "-C", "-J", "-u", "-b", args.bootstrap, "-t", args.topic, "-o", start,
            "-X", f"auto.offset.reset={RESET.get(args.reset, args.reset)}"]
    argv += ["-c", str(args.follow)] if args.follow else ["-e"]
    errors: list[str] = []
    at_end: set[int] = set()

    def on_stderr(line: str, proc: subprocess.Popen[str]) -> None:
        if (m := END.search(line)) is not None:
            if args.follow and len(at_end) == len(parts) - 1 and int(m.group(1)) not in at_end:
                emit("ready")
            at_end.add(int(m.group(1)))
        elif "ERROR" in line:
            errors.append(line.strip())
            proc.terminate()

    count, code, timed_out = consume(argv, max(0.0, deadline - time.monotonic()), on_stderr)
    if errors:
        emit("error", name=errors[0].split(":")[-1].strip(), message=" | ".join(errors))
    elif code != 0 or timed_out:
        fail(f"kcat exited {code} after {count} records" + (f" (timeout {args.timeout} s)" if timed_out else ""))
    emit("summary", records=count)


if __name__ == "__main__":
    main()
