"""The log cleaner of compacted topics (issue 17): its throughput, and what it costs a consumer meanwhile.

* In process: a compacted Kafka-native partition of 1 KiB records over :data:`KEYS` keys, in 1 MiB segments, each
  key written :data:`VERSIONS` times; one pass of :meth:`Engine.clean` steps over it. MB/s compacted = the bytes of
  the segments it rewrote / the steps' seconds, beside the disk's write rate (no fsync: the limit a rewrite can
  reach), and the longest step (how long requests wait behind the cleaner at most), also for one segment of
  :data:`BIG_SEGMENT` bytes (Kafka's default ``segment.bytes`` is 1 GiB: a step must not grow with the segment).
* Live: the end-to-end latency of a consumer tailing a plain topic (bench/latency.py's measure) while a producer
  keeps rewriting the keys of a compacted topic (``segment.ms`` 200: the cleaner always has work), with the cleaner
  on, then with ``log.cleaner.enable=false`` (the same writes, no cleaning): the p99 ratio is the cleaner's effect.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.latency import measure, percentiles, produced, quantile
from bench.limits import write_mb_s
from bench.produce import create
from bench.report import Row
from bench.servers import walgate
from walgate.storage.engine import Engine
from walgate.wire import encode_batch

KEYS = 1000
VERSIONS = 8
BIG_SEGMENT = 64 << 20
RECORD = 1024
PER_BATCH = 50
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
           "segment.ms": "200"}


def pass_seconds(root: Path, versions: int, segment_bytes: int = 1 << 20) -> tuple[int, float, float]:
    """(bytes of the segments one cleaning pass rewrote, its seconds, its longest step's seconds: the longest the
    storage thread is busy with it at once) over ``versions`` writes of every key, in segments of
    ``segment_bytes``."""
    engine = Engine.open(root)
    try:
        engine.create_kafka_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})
        vnode = engine.vnodes[engine.catalog.topics["c"].db][0]
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_bytes=segment_bytes)
        value = b"v" * RECORD
        keys = [b"key-%06d" % k for k in range(KEYS)]
        for _ in range(versions):
            for first in range(0, KEYS, PER_BATCH):
                chunk = keys[first:first + PER_BATCH]
                engine.append_batches("c", 0, [encode_batch(0, [1] * len(chunk), chunk, [value] * len(chunk))])
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_ms=0)  # the next append rolls:
        engine.append_batches("c", 0, [encode_batch(0, [1], [b"seal"], [b"x"])])  # alone in the active segment
        seconds, longest, stats = 0.0, 0.0, None
        while stats is None or not stats.finished:  # the steps the gateway runs one by one
            start = time.perf_counter()
            stats = engine.clean(time.time() + 3600, 1)
            step = time.perf_counter() - start
            seconds, longest = seconds + step, max(longest, step)
            assert stats is not None
        assert stats.records_removed == KEYS * (versions - 1), stats
        return stats.bytes_before, seconds, longest
    finally:
        engine.close()


def _churn(bootstrap: str, stop: threading.Event) -> None:
    """Rewrite every key of the compacted topic ``churn``, 1 KiB values, until ``stop``."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"c" * RECORD
    while not stop.is_set():
        for k in range(KEYS):
            p.produce("churn", value, b"key-%06d" % k)
            p.poll(0)
        p.flush(30)


def _latency_beside_cleaning(root: Path, cleaner: bool, samples: int) -> list[float]:
    flags = ("--override", "log.cleaner.backoff.ms=50") + (() if cleaner else ("--override", "log.cleaner.enable=false"))
    with walgate(root, *flags) as server:
        create(server.bootstrap, "churn", COMPACT)
        create(server.bootstrap, "lat")
        stop = threading.Event()
        churn = threading.Thread(target=_churn, args=(server.bootstrap, stop), daemon=True)
        churn.start()
        try:
            time.sleep(1)  # segments roll and the cleaner starts
            return measure(server.bootstrap, "lat", produced(server.bootstrap, "lat"), samples)
        finally:
            stop.set()
            churn.join(60)


def run(*, quick: bool, repeat: int) -> list[Row]:
    versions = 3 if quick else VERSIONS
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp:
        root = Path(tmp)
        passes = [pass_seconds(root / f"pass{i}", versions) for i in range(repeat)]
        mb_s = statistics.median(n / s for n, s, _ in passes) / 1e6
        disk = write_mb_s(root / "raw", 1 << 20, 64, fsync=False)
        rows = [Row(f"cleaner pass, {KEYS} keys x {versions} versions of 1 KiB, 1 MiB segments", mb_s, "MB/s",
                    "disk write (no fsync)", disk),
                Row("cleaner: longest step (the storage thread busy at once)",
                    statistics.median(longest for _, _, longest in passes) * 1000, "ms")]
        big = BIG_SEGMENT >> (2 if quick else 0)
        big_versions = big // (KEYS * (RECORD + 80))  # (80: a record's and its batch's share of overhead)
        _, _, longest = pass_seconds(root / "big", big_versions, big)
        rows.append(Row(f"cleaner: longest step, one {big >> 20} MiB segment", longest * 1000, "ms"))
        samples = 200 if quick else 1000
        with_cleaner = _latency_beside_cleaning(root / "on", True, samples)
        without = _latency_beside_cleaning(root / "off", False, samples)
        rows += percentiles("latency, Kafka-native topic, while the cleaner compacts another", with_cleaner,
                            (0.5, 0.99))
        rows += percentiles("latency, same writes, log.cleaner.enable=false", without, (0.5, 0.99))
        if with_cleaner and without:
            rows.append(Row("p99 with the cleaner / without", quantile(with_cleaner, 0.99) / quantile(without, 0.99),
                            "x"))
    return rows
