"""The compose file's data generator: ``walgate demo``'s data set, written into a running walgate over HTTP.

``walgate demo`` runs its own node, listening where it is told but advertising that listen address to
Kafka clients (in a container: ``0.0.0.0``), with a terminal display; so in compose the node is a plain
``walgate serve`` and this script does the demo's other half against it: it waits for the node
(``/healthz``, bounded by ``--wait``), creates TDengine's ``power`` example exactly as the demo does
(database ``power``, supertable ``meters``, 100 subtables, topics ``topic_meters`` and ``topic_power``;
all ``IF NOT EXISTS``, so a restart is harmless), touches ``--ready-file`` (the compose healthcheck: the
topics exist), then inserts ``--rate`` rows per second until SIGTERM / SIGINT (``docker stop``) or
``--duration`` seconds. A failed insert (the node restarting) is reported and retried a second later. With
``--user``, every request carries HTTP Basic credentials: the password is the content of ``--password-file`` (a
Docker secret; one trailing newline is not part of it), else ``WALGATE_PASSWORD``.

    python docker/generate.py --url http://127.0.0.1:6041 --rate 100 --duration 10
    python docker/generate.py --user root --password-file /run/secrets/walgate_root_password
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from walgate.gateway.cli import ApiClient, ApiError
from walgate.gateway.demo import insert, setup, subtables

TICK = 0.1  # seconds between inserts
REPORT_EVERY = 10.0  # seconds between progress lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="docker/generate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:6041", help="walgate's HTTP API")
    p.add_argument("--rate", type=int, default=100, help="rows inserted per second (default 100)")
    p.add_argument("--duration", type=float, default=0, help="stop after S seconds (default: at SIGTERM)")
    p.add_argument("--wait", type=float, default=120, help="seconds to wait for the node to answer (default 120)")
    p.add_argument("--ready-file", type=Path, help="touched once the data set and its topics exist")
    p.add_argument("--vgroups", type=int, default=4,
                   help="vgroups of database power (default 4; 1 in a cluster, where SQL INSERTs are not forwarded "
                        "between nodes yet: one vgroup is placed on one node, node 1 when it is the first)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--user", help="walgate user for HTTP Basic auth (default: none)")
    p.add_argument("--password-file", type=Path, help="the user's password (default: WALGATE_PASSWORD)")
    return p


def credentials(args: argparse.Namespace) -> tuple[str, str] | None:
    """(user, password) for HTTP Basic auth, None without ``--user`` (module docstring)."""
    if args.user is None:
        return None
    if args.password_file is not None:
        return args.user, args.password_file.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
    return args.user, os.environ.get("WALGATE_PASSWORD", "")


def log(message: str) -> None:
    print(f"generator: {message}", flush=True)


def wait_healthy(url: str, timeout: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=5) as answer:
                answer.read()
                return True
        except OSError:
            stop.wait(1.0)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.rate <= 0:
        parser().error("--rate must be > 0")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # as PID 1 in a container SIGTERM is ignored without a handler
        signal.signal(sig, lambda *_: stop.set())
    if args.ready_file is not None:
        args.ready_file.unlink(missing_ok=True)
    try:
        auth = credentials(args)
    except OSError as e:
        log(f"cannot read the password file: {e.strerror}")
        return 1

    if not wait_healthy(args.url, args.wait, stop):
        log(f"walgate at {args.url} did not answer within {args.wait:.0f} s" if not stop.is_set() else "stopped")
        return 0 if stop.is_set() else 1
    client = ApiClient(args.url, auth)
    try:
        for sql in (*setup(args.vgroups), *subtables()):
            client.sql(sql)
    except ApiError as e:
        log(f"setup failed: {e}")
        return 1
    if args.ready_file is not None:
        args.ready_file.touch()
    log(f"power.meters and topics topic_meters, topic_power ready at {args.url}; inserting {args.rate} rows/s")

    rng = random.Random(args.seed)
    started = time.monotonic()
    deadline = started + args.duration if args.duration > 0 else float("inf")
    base, base_written, written, reported = started, 0, 0, started
    while not stop.is_set() and time.monotonic() < deadline:
        due = int((time.monotonic() - base) * args.rate) - base_written  # a steady rate, whatever a write takes
        if due > 0:
            try:
                client.sql(insert(rng, due, int(time.time() * 1000)))
            except ApiError as e:
                log(f"insert failed, retrying: {e}")
                stop.wait(1.0)
                base, base_written = time.monotonic(), 0  # no burst to catch up after an outage
                continue
            base_written += due
            written += due
        if time.monotonic() - reported >= REPORT_EVERY:
            reported = time.monotonic()
            log(f"{written:,} rows written in {reported - started:,.0f} s")
        stop.wait(TICK)
    log(f"stopped: {written:,} rows written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
