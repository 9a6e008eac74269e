"""kcat's balanced consumer (``kcat -G``) with the CLI and JSON lines of the other group member programs.

Usage: kcat_group.py BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--reset earliest] [--timeout 60]

kcat does the Kafka work, unmodified: ``kcat -G GROUP TOPIC -J -u`` (librdkafka's subscribe, auto commit of the
offsets of printed records, commit and LeaveGroup on exit), ``-c N`` for ``--max-records``, ``-e`` for
``--until-end`` (kcat exits once every partition assigned to it reached its end). This program only turns kcat's
output into the common JSON lines: ``assignment`` (the whole assignment after each "% Group ... rebalanced" line),
``record``, ``summary``, ``closed``. SIGTERM is passed on to kcat (it commits and leaves the group).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

from common import emit, group_parser
from kcat_read import BINARY, RESET, consume

REBALANCED = re.compile(r"rebalanced .*: (assigned|revoked): (.*)$")
PARTITION = re.compile(r"\[(\d+)\]")


def main() -> None:
    args = group_parser(__doc__).parse_args()
    argv = [BINARY, "-b", args.bootstrap, "-G", args.group, "-J", "-u",
            "-X", f"auto.offset.reset={RESET.get(args.reset, args.reset)}", "-X", "session.timeout.ms=10000"]
    argv += ["-c", str(args.max_records)] if args.max_records else []
    argv += ["-e"] if args.until_end else []
    mine: set[int] = set()
    errors: list[str] = []

    def on_stderr(line: str, proc: subprocess.Popen[str]) -> None:
        nonlocal mine
        if (m := REBALANCED.search(line.strip())) is not None:
            parts = {int(p) for p in PARTITION.findall(m.group(2))}
            mine = mine | parts if m.group(1) == "assigned" else mine - parts
            emit("assignment", after=m.group(1), partitions=sorted(mine))
        elif "ERROR" in line:
            errors.append(line.strip())

    started = time.monotonic()
    count, code, timed_out = consume([*argv, args.topic], args.timeout, on_stderr)
    emit("summary", records=count, seconds=round(time.monotonic() - started, 3), kcat_errors=errors)
    emit("closed")
    if timed_out:
        emit("error", message=f"timed out after {args.timeout} s with {count} records")
        raise SystemExit(2)
    raise SystemExit(0 if code in (0, -signal.SIGTERM) else 2)


if __name__ == "__main__":
    main()
