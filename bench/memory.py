"""Peak memory of the server while 100 consumers fetch 1 MiB at once.

A 4-partition Kafka-native topic holds 1 KiB records (64 MiB per partition, 4 MiB in quick mode); 100
confluent-kafka consumers (10 processes of 10) read all of it from offset 0 at the same time with
``fetch.max.bytes`` = ``max.partition.fetch.bytes`` = 1 MiB, so up to 100 MiB of answers are wanted at
once, over and over. Reported: the server's RSS before, and its peak RSS (VmHWM) after, beside Tansu (when its
binary is installed).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from bench.produce import PARTITIONS, create, produce
from bench.report import Row
from bench.servers import rss_mb, tansu_process, walgate

CONSUMERS, PER_PROCESS = 100, 10

READERS = """
import sys, threading
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, partitions, per_process, expected = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
def read():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-memory", "enable.auto.commit": False,
                  "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 20,
                  "queued.max.messages.kbytes": 2048})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n = 0
    while n < expected:
        n += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    c.close()
threads = [threading.Thread(target=read) for _ in range(per_process)]
for t in threads: t.start()
for t in threads: t.join()
"""


def fetch_storm(bootstrap: str, topic: str, expected: int) -> None:
    """100 consumers reading the whole topic at once; returns when all have read ``expected`` records."""
    readers = [subprocess.Popen([sys.executable, "-c", READERS, bootstrap, topic, str(PARTITIONS), str(PER_PROCESS),
                                 str(expected)]) for _ in range(CONSUMERS // PER_PROCESS)]
    try:
        for r in readers:
            if r.wait(600) != 0:
                raise RuntimeError(f"a reader process failed with exit code {r.returncode}")
    finally:
        for r in readers:
            r.kill()


def run(*, quick: bool, repeat: int) -> list[Row]:
    count = (4 if quick else 64) * 1024 * PARTITIONS  # 1 KiB records
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp:
        with walgate(Path(tmp)) as server:
            create(server.bootstrap, "storm")
            produce(server.bootstrap, "storm", count, 1024, "1")
            before = rss_mb(server.pid)
            fetch_storm(server.bootstrap, "storm", count)
            rows += [Row("RSS before 100 consumers fetch 1 MiB at once", before, "MB"),
                     Row("  peak RSS while they read", rss_mb(server.pid, "VmHWM"), "MB")]
        with tansu_process() as tansu:
            if tansu is None:
                return rows
            peer, pid = tansu
            create(peer, "storm")
            produce(peer, "storm", count, 1024, "1")
            before = rss_mb(pid)
            fetch_storm(peer, "storm", count)
            rows += [Row("  Tansu: RSS before", before, "MB"), Row("  Tansu: peak RSS while they read", rss_mb(pid, "VmHWM"), "MB")]
    return rows
