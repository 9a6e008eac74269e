"""Consumer-group benchmarks: confluent-kafka (librdkafka) members, beside noida-db (Tansu's groups hang).

* join: one member consumes a 4-partition topic a producer keeps writing to; a second member
  subscribes; seconds until both received a record after their assignments changed.
* dead member: two members (one in a child process) consume; kill -9 the child; seconds until the
  survivor received records from all 4 partitions. Session timeout 6 s on both brokers and protocols
  (classic: ``session.timeout.ms``; consumer protocol: walgate's ``--group-consumer-session-timeout-ms``),
  heartbeats every 2 s: the time is the session timeout plus what detection and the rebalance add.
* idle members: 100 groups of 10 members with librdkafka's defaults (classic protocol) on one broker:
  the server's RSS and CPU while they sit idle (heartbeats, long-poll fetches of the 4 assigned members),
  measured once every member has joined and every group is stable (or after 60 s more: noida-db leaves
  groups rebalancing until max.poll.interval.ms, 5 minutes, expires).

Noida-db does not speak the KIP-848 consumer protocol: those rows are walgate only. A dead member's
partitions that have not moved after 60 s are reported as "timed out" (noida-db never expires it). Without the
noida-db binary its rows are left out, with a message (bench/tools.py).
"""

from __future__ import annotations

import contextlib
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer

from bench.produce import PARTITIONS, create
from bench.report import Row
from bench.servers import cpu_seconds, noida, rss_mb, walgate
from coordinator_admin import described_groups

SESSION_MS, HEARTBEAT_MS = 6000, 2000
WALGATE_FLAGS = ("--group-consumer-session-timeout-ms", str(SESSION_MS),
                 "--group-consumer-heartbeat-interval-ms", str(HEARTBEAT_MS))
DEADLINE = 90.0  # seconds any one wait may take before the run fails


def member_config(bootstrap: str, group: str, protocol: str) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                               "auto.offset.reset": "latest"}
    if protocol == "classic":  # the consumer protocol takes both from the server
        conf |= {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    return conf


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = DEADLINE, every: float = 0.005) -> float:
    """Seconds until ``predicate()`` (checked every ``every`` s); raises TimeoutError after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(every)
    return time.monotonic() - start


class Member:
    """A group member polling in a thread: its assignment, when it last changed, when each partition last delivered."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        self.consumer = Consumer(member_config(bootstrap, group, protocol))
        self.assignment: frozenset[int] = frozenset()
        self.changed = 0.0  # monotonic time of the last assignment change
        self.received: dict[int, float] = {}  # partition -> monotonic time of its latest record
        self.stopping = threading.Event()
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.05)
            now = time.monotonic()
            if msg is not None and msg.error() is None:
                self.received[msg.partition()] = now
            current = frozenset(tp.partition for tp in self.consumer.assignment())
            if current != self.assignment:
                self.assignment, self.changed = current, now

    def consuming(self, size: int, since: float) -> bool:
        """Owns ``size`` partitions since after ``since`` and received from each of them since the change."""
        changed = self.changed
        return (len(self.assignment) == size and changed > since
                and all(self.received.get(p, 0) > changed for p in self.assignment))

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


@contextmanager
def writing(bootstrap: str, topic: str) -> Iterator[None]:
    """A producer thread writing ~1,000 records/s round-robin over the partitions until the block ends."""
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def loop() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, b"x" * 100, partition=i % PARTITIONS)
            producer.poll(0)
            i += 1
            time.sleep(0.001)
        producer.flush(10)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def join_seconds(bootstrap: str, topic: str, protocol: str) -> float:
    group = f"join-{uuid.uuid4().hex[:8]}"
    first = Member(bootstrap, topic, group, protocol)
    try:
        wait_for(lambda: first.consuming(PARTITIONS, 0), "the first member consuming")
        start = time.monotonic()
        second = Member(bootstrap, topic, group, protocol)
        try:
            wait_for(lambda: first.consuming(PARTITIONS // 2, start) and second.consuming(PARTITIONS // 2, start),
                     "both members consuming")
            return max(max(m.received[p] for p in m.assignment) for m in (first, second)) - start
        finally:
            second.close()
    finally:
        first.close()


CHILD = """
import sys
from confluent_kafka import Consumer
from bench.groups import member_config
c = Consumer(member_config(sys.argv[1], sys.argv[3], sys.argv[4]))
c.subscribe([sys.argv[2]])
owned = -1
while True:
    c.poll(0.05)
    if len(c.assignment()) != owned:
        owned = len(c.assignment())
        print(owned, flush=True)
"""


def dead_member_seconds(bootstrap: str, topic: str, protocol: str, patience: float) -> float:
    """Seconds from SIGKILL of one of two members to the survivor consuming every partition (inf after
    ``patience`` s)."""
    group = f"dead-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen([sys.executable, "-c", CHILD, bootstrap, topic, group, protocol],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    owned: list[int] = []
    threading.Thread(target=lambda: [owned.append(int(line)) for line in child.stdout], daemon=True).start()
    survivor = Member(bootstrap, topic, group, protocol)
    try:
        wait_for(lambda: survivor.consuming(PARTITIONS // 2, 0) and owned[-1:] == [PARTITIONS // 2], "two members")
        start = time.monotonic()
        child.send_signal(signal.SIGKILL)
        try:
            wait_for(lambda: survivor.consuming(PARTITIONS, start), "the survivor owning every partition", patience)
        except TimeoutError:  # noida-db never moves them (it does not expire the dead member)
            return math.inf
        return max(survivor.received.values()) - start
    finally:
        survivor.close()
        child.kill()
        child.wait(10)


IDLE_CHILD = """
import sys, time
from confluent_kafka import Consumer
bootstrap, topic, first, count, per_group = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
members = []
for i in range(first, first + count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"idle-{i // per_group}"})
    c.subscribe([topic])
    members.append(c)
while True:
    for c in members:
        c.poll(0)
    time.sleep(0.2)
"""


def idle_members(bootstrap: str, pid: int, topic: str, members: int, windows: int, window: float,
                 patience: float) -> tuple[float, float, float]:
    """(RSS MB before, RSS MB with ``members`` idle members in groups of 10, median CPU % over ``windows`` of
    ``window`` s, measured once every group is stable or after ``patience`` s)."""
    per_group, per_process = 10, 100
    before = rss_mb(pid)
    children = [subprocess.Popen([sys.executable, "-c", IDLE_CHILD, bootstrap, topic, str(first),
                                  str(min(per_process, members - first)), str(per_group)])
                for first in range(0, members, per_process)]
    groups = [f"idle-{g}" for g in range(members // per_group)]

    def described() -> list:  # (coordinator_admin: no librdkafka timeout that could abort the bench)
        answers = described_groups(bootstrap, groups, 30)
        if len(answers) < len(groups):
            raise TimeoutError(f"{len(groups) - len(answers)} groups not described within 30 s")
        for answer in answers.values():
            if isinstance(answer, KafkaException):
                raise answer
        return list(answers.values())

    try:
        wait_for(lambda: sum(len(d.members) for d in described()) == members, f"{members} members joined", 300, 1)
        with contextlib.suppress(TimeoutError):  # noida-db leaves groups rebalancing for max.poll.interval.ms
            wait_for(lambda: all(d.state.name == "STABLE" for d in described()), "every group stable", patience, 1)
        cpu = []
        for _ in range(windows):
            c0, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(window)
            cpu.append(100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0))
        return before, rss_mb(pid), statistics.median(cpu)
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait(30)


def run(*, quick: bool, repeat: int) -> list[Row]:
    topic, idle = "g", 100 if quick else 1000
    patience = 60.0  # for what noida-db never does (expire a dead member, settle a group); quick runs skip it
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp:
        brokers = {"walgate": lambda: walgate(Path(tmp) / "walgate", *WALGATE_FLAGS),
                   "noida-db": lambda: noida(Path(tmp) / "noida")}
        results: dict[tuple[str, str], float] = {}
        for name, start in brokers.items():
            with start() as server:
                if server is None:  # the peer is not installed (message printed): walgate's rows only
                    continue
                bootstrap, pid = (server.bootstrap, server.pid) if name == "walgate" else server
                create(bootstrap, topic)
                protocols = ("classic", "consumer") if name == "walgate" else ("classic",)
                with writing(bootstrap, topic):
                    for protocol in protocols:
                        results[name, f"join {protocol}"] = statistics.median(
                            join_seconds(bootstrap, topic, protocol) for _ in range(repeat))
                        if name == "walgate" or not quick:  # quick: not the peer's wait for what it never does
                            results[name, f"dead {protocol}"] = statistics.median(
                                dead_member_seconds(bootstrap, topic, protocol, patience) for _ in range(repeat))
                if name == "walgate" or not quick:
                    before, after, cpu = idle_members(bootstrap, pid, topic, idle, 1 if quick else 3,
                                                      5 if quick else 10, patience)
                    results[name, "rss before"], results[name, "rss idle"], results[name, "cpu idle"] = before, after, cpu

    def side_by_side(label: str, key: str, unit: str, *, limit: tuple[str, float] = ("", 0.0)) -> None:
        rows.append(Row(label, results["walgate", key], unit, *limit))
        if ("noida-db", key) in results:
            rows.append(Row("  noida-db, same client", results["noida-db", key], unit))

    for protocol in ("classic", "consumer"):
        side_by_side(f"2nd member joins ({protocol}): both consuming", f"join {protocol}", "s")
        side_by_side(f"member killed ({protocol}, session {SESSION_MS // 1000} s): moved", f"dead {protocol}", "s")
    side_by_side("RSS, no members", "rss before", "MB")
    side_by_side(f"RSS, {idle} idle members", "rss idle", "MB")
    side_by_side(f"CPU, {idle} idle members", "cpu idle", "% of a core")
    return rows
